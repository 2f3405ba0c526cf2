// Runs every rule golden (golden/rules/*.jsonl) through InferLine, the code path of
// `spmd infer`, and compares the answer with the case's "expect".
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "io/infer_io.h"
#include "rules/engine/op_list.h"

namespace spmd::io {
namespace {

using nlohmann::json;

struct GoldenCase {
  std::string file;
  int line = 0;
  json request;  // the line without "name", "why" and "expect"
  json expect;
  std::string name;
};

std::vector<GoldenCase> LoadCases() {
  std::vector<GoldenCase> cases;
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(SPMD_RULE_GOLDEN_DIR)) {
    if (entry.path().extension() == ".jsonl") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& path : files) {
    std::ifstream in(path);
    std::string text;
    int line = 0;
    while (std::getline(in, text)) {
      ++line;
      if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
      GoldenCase c;
      c.file = path.filename().string();
      c.line = line;
      const json golden = json::parse(text);
      c.name = golden.value("name", "");
      c.expect = golden.at("expect");
      c.request = StripGoldenFields(golden);
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

const std::vector<GoldenCase>& Cases() {
  static const std::vector<GoldenCase> kCases = LoadCases();
  return kCases;
}

class RuleGolden : public ::testing::TestWithParam<size_t> {};

TEST_P(RuleGolden, AnswersAsTheGoldenSays) {
  const GoldenCase& c = Cases()[GetParam()];
  SCOPED_TRACE(c.file + ":" + std::to_string(c.line) + " " + c.name);
  const json answer = json::parse(InferLine(c.request.dump()));
  EXPECT_EQ(CompareWithExpect(answer, c.expect), "");
}

std::string CaseName(const ::testing::TestParamInfo<size_t>& info) {
  std::string name = Cases()[info.param].name;
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return std::to_string(info.param) + "_" + name;
}

INSTANTIATE_TEST_SUITE_P(Goldens, RuleGolden, ::testing::Range<size_t>(0, Cases().size()),
                         CaseName);

TEST(RuleGoldenCoverage, AtLeastThreeCasesPerOpAndTwoHundredInAll) {
  std::map<std::string, int> per_op;
  for (const GoldenCase& c : Cases()) per_op[c.request.value("op", "")]++;
  EXPECT_GE(Cases().size(), 200u);
#define SPMD_CHECK_OP(name) EXPECT_GE(per_op[#name], 3) << #name;
  SPMD_FOR_EACH_OP(SPMD_CHECK_OP)
#undef SPMD_CHECK_OP
}

}  // namespace
}  // namespace spmd::io
