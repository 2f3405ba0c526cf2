#include "io/cost_model_json.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <limits>
#include <string>

#include "rules/model/error.h"

namespace spmd::io {
namespace {

using nlohmann::json;

// The field a refused model names (the message starts with it).
std::string FieldOf(const json& j) {
  try {
    CostModelFromJson(j);
  } catch (const SpmdError& e) {
    EXPECT_EQ(e.type(), ErrorType::kInvalidArgument);
    EXPECT_EQ(std::string(e.what()).rfind(e.field() + ": ", 0), 0u) << e.what();
    return e.field();
  }
  return "(accepted)";
}

TEST(CostModelJsonTest, RoundTripsEveryField) {
  CostModel m = CostModel::Default();
  double v = 0.5;
  for (const std::string& kind : CostModelKinds()) {
    *CostOf(m, kind) = StepCost{v, v / 7};
    v += 1.25;
  }
  m.source = "test machine";
  EXPECT_EQ(CostModelFromJson(ToJson(m)), m);
}

TEST(CostModelJsonTest, MissingKindsKeepTheDefaults) {
  const CostModel m = CostModelFromJson(json::parse(R"({"send_recv": {"alpha_us": 3}})"));
  CostModel want = CostModel::Default();
  want.send_recv.alpha_us = 3;
  want.source = "file";
  EXPECT_EQ(m, want);
}

TEST(CostModelJsonTest, BadValuesNameTheirField) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const std::string& kind : CostModelKinds()) {
    for (const char* name : {"alpha_us", "beta_ns_per_byte"}) {
      const std::string field = "cost_model." + kind + "." + name;
      for (const json& bad : {json(-1.0), json(2e9), json(nan), json("fast"), json(nullptr)}) {
        EXPECT_EQ(FieldOf(json{{kind, {{name, bad}}}}), field) << bad.dump();
      }
      EXPECT_EQ(FieldOf(json{{kind, {{name, 0.0}}}}), "(accepted)");
    }
    EXPECT_EQ(FieldOf(json{{kind, {{"alpha", 1}}}}), "cost_model." + kind + ".alpha");
    EXPECT_EQ(FieldOf(json{{kind, 3}}), "cost_model." + kind);
  }
  EXPECT_EQ(FieldOf(json{{"gather", {{"alpha_us", 1}}}}), "cost_model.gather");
  EXPECT_EQ(FieldOf(json{{"source", 1}}), "cost_model.source");
  EXPECT_EQ(FieldOf(json::array()), "cost_model");
}

TEST(CostModelJsonTest, FilesThatCannotBeReadAreTypedErrors) {
  EXPECT_THROW(LoadCostModel("/nonexistent/model.json"), SpmdError);
  const std::string path = ::testing::TempDir() + "cost_model_test.json";
  {
    std::ofstream(path) << "{\"all_gather\": ";
  }
  try {
    LoadCostModel(path, "--cost-model");
    ADD_FAILURE() << "accepted a truncated file";
  } catch (const SpmdError& e) {
    EXPECT_EQ(e.field(), "--cost-model");
  }
  {
    std::ofstream(path) << ToJson(CostModel::Default()).dump();
  }
  EXPECT_EQ(LoadCostModel(path), CostModel::Default());
  std::remove(path.c_str());
}

}  // namespace
}  // namespace spmd::io
