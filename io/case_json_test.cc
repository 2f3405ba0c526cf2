// `spmd check --claim` / `--case` input: validated as `spmd infer` validates a request
// (typed errors naming the field), and a case too large to simulate is refused with a typed
// error instead of an allocation failure.
#include "io/case_json.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "checker/simulate.h"
#include "rules/model/error.h"

namespace spmd::io {
namespace {

using nlohmann::json;

json Relu(json shape, json dims_mapping) {
  return json{{"op", "relu"},
              {"mesh_shape", {2}},
              {"inputs", {{{"shape", shape}, {"dims_mapping", dims_mapping}}}},
              {"claim_outputs", {{{"dims_mapping", dims_mapping}}}}};
}

// Runs fn, which must throw SpmdError of `type` whose field starts with `field`.
template <typename Fn>
void ExpectError(Fn&& fn, ErrorType type, const std::string& field) {
  try {
    fn();
    ADD_FAILURE() << "no error, expected " << field;
  } catch (const SpmdError& e) {
    EXPECT_EQ(e.type(), type) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind(field, 0), 0u) << e.what();
  }
}

TEST(CaseJson, AValidClaimReads) {
  std::vector<DistAttr> claims;
  const checker::Case c = CaseFromJson(Relu({4, 6}, {0, -1}), &claims);
  ASSERT_EQ(claims.size(), 1u);
  EXPECT_EQ(c.shapes, std::vector<Shape>{Shape({4, 6})});
  EXPECT_EQ(checker::CheckClaim(c, c.inputs, claims).verdict, checker::Verdict::kSound);
}

TEST(CaseJson, AnInputDimsMappingOfTheWrongRankIsRefused) {
  // As a case (no claim) too: the rule refusing it is not a verdict, the input is bad.
  ExpectError([] { CaseFromJson(Relu({4, 6}, {0}), nullptr); }, ErrorType::kInvalidArgument,
              "inputs[0].dims_mapping");
  std::vector<DistAttr> claims;
  ExpectError([&] { CaseFromJson(Relu({4, 6}, {0}), &claims); }, ErrorType::kInvalidArgument,
              "inputs[0].dims_mapping");
}

TEST(CaseJson, AClaimOfTheWrongRankOrCountIsRefused) {
  json j = Relu({4, 6}, {0, -1});
  j["claim_outputs"][0]["dims_mapping"] = {0, -1, -1};
  std::vector<DistAttr> claims;
  ExpectError([&] { CaseFromJson(j, &claims); }, ErrorType::kInvalidArgument, "claim_outputs[0].dims_mapping");
  j["claim_outputs"][0] = {{"shape", {4, 7}}, {"dims_mapping", {0, -1}}};
  ExpectError([&] { CaseFromJson(j, &claims); }, ErrorType::kInvalidArgument, "claim_outputs[0].shape");
  j["claim_outputs"] = {{{"dims_mapping", {0, -1}}}, {{"dims_mapping", {0, -1}}}};
  ExpectError([&] { CaseFromJson(j, &claims); }, ErrorType::kInvalidArgument, "claim_outputs");
  j["claim_outputs"] = {{{"dims_mapping", {2, -1}}}};  // mesh axis 2 on a 1-axis mesh
  ExpectError([&] { CaseFromJson(j, &claims); }, ErrorType::kInvalidArgument, "claim_outputs[0]");
}

TEST(CaseJson, ShapesBeyondTwoToTheSixtyTwoElementsAreRefused) {
  std::vector<DistAttr> claims;
  const int64_t big = int64_t{3037000499};  // big^2 is just under 2^63: the product must not wrap
  ExpectError([&] { CaseFromJson(Relu({big, big}, {0, -1}), &claims); }, ErrorType::kInvalidArgument,
              "inputs[0].shape");
  ExpectError([&] { CaseFromJson(Relu({int64_t{1} << 62, 4}, {0, -1}), &claims); },
              ErrorType::kInvalidArgument, "inputs[0].shape");
}

TEST(CaseJson, ACaseTooLargeToSimulateIsATypedError) {
  // 2^40 and 2^62 elements are valid requests (the rule answers them) but cannot be
  // simulated: a typed error, never an allocation failure.
  for (const int64_t size : {int64_t{1} << 40, int64_t{1} << 62, int64_t{1} << 24}) {
    SCOPED_TRACE(size);
    std::vector<DistAttr> claims;
    const checker::Case c = CaseFromJson(Relu({size}, {0}), &claims);
    ExpectError([&] { checker::CheckClaim(c, c.inputs, claims); }, ErrorType::kUnsupported, "inputs[0].shape");
    ExpectError([&] { checker::CheckForward(c); }, ErrorType::kUnsupported, "inputs[0].shape");
  }
}

}  // namespace
}  // namespace spmd::io
