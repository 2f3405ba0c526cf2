// Checks every reference against the numeric goldens of golden/numeric/*.jsonl, which
// golden/numeric/gen_numeric.py computes with numpy, independently of this code.
//
// A line is a value case
//   {"op", "name", "attrs", "inputs": [tensor], "outputs": [tensor]}
// or an error case
//   {"op", "name", "attrs", "inputs", "error_field", "error_type"?}
// where a tensor is {"shape", "dtype", "data"} and a non-finite value is written as the
// string "inf", "-inf" or "nan". error_type defaults to "InvalidArgument"; error_field is
// the error's field exactly (SpmdError::field(), what its message starts with).
#include "reference/reference.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "rules/model/error.h"

namespace spmd::reference {
namespace {

using nlohmann::json;

struct GoldenCase {
  std::string where;      // file:line
  std::string test_name;  // unique, [A-Za-z0-9_]
  json line;
};

std::vector<GoldenCase> LoadCases() {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(SPMD_GOLDEN_DIR)) {
    if (entry.path().extension() == ".jsonl") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<GoldenCase> cases;
  std::set<std::string> names;
  for (const auto& path : files) {
    std::ifstream in(path);
    std::string text;
    int line_no = 0;
    while (std::getline(in, text)) {
      ++line_no;
      if (text.empty()) continue;
      GoldenCase c;
      c.where = path.filename().string() + ":" + std::to_string(line_no);
      c.line = json::parse(text);
      std::string name = c.line.value("op", "unknown") + "_" + c.line.value("name", "case");
      for (char& ch : name) {
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      }
      std::string unique = name;
      for (int k = 2; names.count(unique) != 0; ++k) unique = name + "_" + std::to_string(k);
      names.insert(unique);
      c.test_name = unique;
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

// gtest prints a parameter on failure: the file and line, not its bytes.
void PrintTo(const GoldenCase& c, std::ostream* os) { *os << c.where; }

const std::vector<GoldenCase>& AllCases() {
  static const std::vector<GoldenCase> cases = LoadCases();
  return cases;
}

double ParseValue(const json& v) {
  if (v.is_string()) {
    std::string s = v.get<std::string>();
    if (s == "inf") return INFINITY;
    if (s == "-inf") return -INFINITY;
    if (s == "nan") return NAN;
    throw std::runtime_error("bad value string '" + s + "'");
  }
  if (v.is_boolean()) return v.get<bool>() ? 1.0 : 0.0;
  return v.get<double>();
}

Tensor ParseTensor(const json& j) {
  Tensor t;
  t.shape = j.at("shape").get<std::vector<int64_t>>();
  std::optional<DType> dtype = ParseDType(j.at("dtype").get<std::string>());
  if (!dtype) throw std::runtime_error("bad dtype " + j.at("dtype").dump());
  t.dtype = *dtype;
  for (const json& v : j.at("data")) t.data.push_back(ParseValue(v));
  return t;
}

// Attr kinds follow the JSON types: a list with any float is floats, else ints.
Attrs ParseAttrs(const json& j) {
  Attrs attrs;
  for (const auto& [name, v] : j.items()) {
    if (v.is_boolean()) {
      attrs.Set(name, v.get<bool>());
    } else if (v.is_number_integer()) {
      attrs.Set(name, v.get<int64_t>());
    } else if (v.is_number_float()) {
      attrs.Set(name, v.get<double>());
    } else if (v.is_string()) {
      attrs.Set(name, v.get<std::string>());
    } else if (v.is_array()) {
      bool any_float = false;
      for (const json& e : v) any_float = any_float || e.is_number_float();
      if (any_float) {
        attrs.Set(name, v.get<std::vector<double>>());
      } else {
        attrs.Set(name, v.get<std::vector<int64_t>>());
      }
    } else {
      throw std::runtime_error("bad attr " + name + ": " + v.dump());
    }
  }
  return attrs;
}

// A case's "local": the localized part a localizer would set (rules/model/attrs.h).
Localized ParseLocal(const json& j) {
  Localized local;
  for (const auto& [name, v] : j.items()) {
    if (name == "count") {
      local.count = v.get<int64_t>();
    } else if (name == "vocab_start") {
      local.vocab_start = v.get<int64_t>();
    } else if (name == "exact") {
      local.exact = v.get<bool>();
    } else if (name == "offset") {
      local.offset = v.get<std::vector<int64_t>>();
    } else if (name == "global_shape") {
      local.global_shape = v.get<std::vector<int64_t>>();
    } else {
      throw std::runtime_error("bad localized field " + name);
    }
  }
  return local;
}

std::string ShapeString(const Shape& s) { return json(s).dump(); }

class ReferenceGolden : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(ReferenceGolden, Matches) {
  const GoldenCase& c = GetParam();
  SCOPED_TRACE(c.where + " " + c.line.dump());
  const std::string op = c.line.at("op").get<std::string>();
  ReferenceFn fn = FindReference(op);
  ASSERT_NE(fn, nullptr) << "no reference for op " << op;
  Attrs attrs = ParseAttrs(c.line.at("attrs"));
  if (c.line.contains("local")) attrs = attrs.WithLocal(ParseLocal(c.line.at("local")));
  Tensors inputs;
  for (const json& t : c.line.at("inputs")) inputs.push_back(ParseTensor(t));

  if (c.line.contains("error_field")) {
    const std::string field = c.line.at("error_field").get<std::string>();
    const std::string type = c.line.value("error_type", "InvalidArgument");
    try {
      fn(inputs, attrs);
      ADD_FAILURE() << "expected " << type << " naming " << field << ", got a result";
    } catch (const SpmdError& e) {
      EXPECT_EQ(ToString(e.type()), type) << e.what();
      // The field the error names, whole: not a substring of the message (an error naming
      // "attrs.axis" must not pass for a golden "axis", nor one quoting it mid-message).
      EXPECT_EQ(e.field(), field) << "message '" << e.what() << "' does not name " << field;
    }
    return;
  }

  Tensors expected;
  for (const json& t : c.line.at("outputs")) expected.push_back(ParseTensor(t));
  Tensors actual;
  try {
    actual = fn(inputs, attrs);
  } catch (const SpmdError& e) {
    FAIL() << "threw " << ToString(e.type()) << ": " << e.what();
  }
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t o = 0; o < expected.size(); ++o) {
    SCOPED_TRACE("outputs[" + std::to_string(o) + "]");
    const Tensor& a = actual[o];
    const Tensor& e = expected[o];
    ASSERT_EQ(ShapeString(a.shape), ShapeString(e.shape));
    ASSERT_EQ(ToString(a.dtype), ToString(e.dtype));
    ASSERT_EQ(a.data.size(), e.data.size());
    for (size_t i = 0; i < e.data.size(); ++i) {
      double av = a.data[i];
      double ev = e.data[i];
      ASSERT_FALSE(std::isnan(ev)) << "golden holds NaN at " << i;
      ASSERT_FALSE(std::isnan(av)) << "NaN at " << i << ", expected " << ev;
      if (e.dtype == DType::kInt64 || e.dtype == DType::kBool || !std::isfinite(ev)) {
        EXPECT_EQ(av, ev) << "at " << i;
      } else {
        double tol = std::max(1e-12 * std::fabs(ev), 1e-12);
        EXPECT_LE(std::fabs(av - ev), tol) << "at " << i << ": got " << av << ", expected " << ev;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Numeric, ReferenceGolden, ::testing::ValuesIn(AllCases()),
                         [](const ::testing::TestParamInfo<GoldenCase>& info) {
                           return info.param.test_name;
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(ReferenceGolden);

// An op that loses its goldens fails here, not silently.
TEST(ReferenceGoldenCoverage, EveryOpHasThreeValueCases) {
  std::map<std::string, int> value_cases;
  for (const GoldenCase& c : AllCases()) {
    const std::string op = c.line.at("op").get<std::string>();
    EXPECT_NE(FindReference(op), nullptr) << c.where << ": unknown op " << op;
    if (!c.line.contains("error_field")) ++value_cases[op];
  }
#define SPMD_CHECK_GOLDENS(name) \
  EXPECT_GE(value_cases[#name], 3) << "op " #name " has too few numeric goldens";
  SPMD_FOR_EACH_OP(SPMD_CHECK_GOLDENS)
#undef SPMD_CHECK_GOLDENS
}

}  // namespace
}  // namespace spmd::reference
