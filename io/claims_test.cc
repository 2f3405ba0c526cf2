// The checker must reject every known-unsound claim with a counterexample and accept the
// sound ones next to them (golden/claims/claims.jsonl). This is how the checker itself is
// tested: a checker that passes everything fails here.
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "checker/simulate.h"
#include "io/case_json.h"

namespace spmd::checker {
namespace {

std::vector<nlohmann::json> Claims() {
  std::vector<nlohmann::json> claims;
  std::ifstream in(SPMD_CLAIMS_FILE);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) claims.push_back(nlohmann::json::parse(line));
  }
  return claims;
}

class Claim : public ::testing::TestWithParam<nlohmann::json> {};

TEST_P(Claim, VerdictMatches) {
  const nlohmann::json& j = GetParam();
  std::vector<DistAttr> claimed;
  Case c = io::CaseFromJson(j, &claimed);
  const bool sound = j["expect"] == "SOUND";
  Outcome outcome;
  for (int k = 0; k < 4; ++k, ++c.seed) {  // a sound claim must hold on every seed tried
    outcome = CheckClaim(c, c.inputs, claimed);
    if (outcome.verdict != Verdict::kSound) break;
  }
  if (sound) {
    EXPECT_EQ(outcome.verdict, Verdict::kSound)
        << (outcome.counterexample ? outcome.counterexample->message : outcome.note);
  } else {
    ASSERT_EQ(outcome.verdict, Verdict::kUnsound) << outcome.note;
    ASSERT_TRUE(outcome.counterexample.has_value());
    EXPECT_FALSE(outcome.counterexample->message.empty());
  }
}

std::string Name(const ::testing::TestParamInfo<nlohmann::json>& info) {
  std::string name = info.param["name"].get<std::string>();
  std::string out;
  for (char ch : name) out.push_back(std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_');
  return out;
}

INSTANTIATE_TEST_SUITE_P(Golden, Claim, ::testing::ValuesIn(Claims()), Name);

TEST(Claims, TheListHasBothVerdicts) {
  int sound = 0, unsound = 0;
  for (const auto& j : Claims()) (j["expect"] == "SOUND" ? sound : unsound)++;
  EXPECT_GE(unsound, 20);
  EXPECT_GE(sound, 8);
}

}  // namespace
}  // namespace spmd::checker
