#include "io/cost_model_json.h"

#include <fstream>
#include <sstream>

#include "rules/model/error.h"

namespace spmd::io {

using nlohmann::json;

json ToJson(const CostModel& model) {
  json j{{"source", model.source}};
  CostModel copy = model;
  for (const std::string& kind : CostModelKinds()) {
    const StepCost& c = *CostOf(copy, kind);
    j[kind] = json{{"alpha_us", c.alpha_us}, {"beta_ns_per_byte", c.beta_ns_per_byte}};
  }
  return j;
}

CostModel CostModelFromJson(const json& j, const std::string& field) {
  if (!j.is_object()) ThrowInvalid(field, "expected an object");
  CostModel model = CostModel::Default();
  model.source = "file";
  for (const auto& [key, value] : j.items()) {
    const std::string here = field + "." + key;
    if (key == "source") {
      if (!value.is_string()) ThrowInvalid(here, "expected a string");
      model.source = value.get<std::string>();
      continue;
    }
    StepCost* cost = CostOf(model, key);
    if (cost == nullptr) ThrowInvalid(here, "unknown key (expected source or a step kind)");
    if (!value.is_object()) ThrowInvalid(here, "expected an object");
    for (const auto& [name, number] : value.items()) {
      double* target = name == "alpha_us"           ? &cost->alpha_us
                       : name == "beta_ns_per_byte" ? &cost->beta_ns_per_byte
                                                    : nullptr;
      if (target == nullptr)
        ThrowInvalid(here + "." + name, "unknown key (expected alpha_us or beta_ns_per_byte)");
      if (!number.is_number()) ThrowInvalid(here + "." + name, "expected a number");
      *target = number.get<double>();
    }
  }
  ValidateCostModel(model, field);
  return model;
}

CostModel LoadCostModel(const std::string& path, const std::string& field) {
  std::ifstream in(path);
  if (!in) ThrowInvalid(field, "cannot read '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  const json j = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) ThrowInvalid(field, "'" + path + "' is not valid JSON");
  return CostModelFromJson(j, field);
}

}  // namespace spmd::io
