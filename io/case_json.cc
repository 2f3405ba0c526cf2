#include "io/case_json.h"

#include <cstdint>
#include <string>
#include <variant>

#include "io/infer_io.h"
#include "rules/error.h"

namespace spmd::io {

checker::Case CaseFromJson(const nlohmann::json& j, std::vector<DistAttr>* claims) {
  const RuleRequest r = ParseRuleRequest(j);
  checker::Case c;
  c.op = r.op;
  c.mesh = r.mesh;
  c.attrs = r.attrs;
  for (const TensorArg& t : r.inputs) {
    c.shapes.push_back(t.shape);
    c.inputs.push_back(t.dist);
  }
  if (j.contains("seed")) {
    if (!j["seed"].is_number_unsigned() && !j["seed"].is_number_integer()) ThrowInvalid("seed", "expected an integer");
    c.seed = j["seed"].get<uint64_t>();
  }
  if (claims != nullptr) {
    if (!j.contains("claim_outputs")) ThrowInvalid("claim_outputs", "is missing");
    nlohmann::json list = j["claim_outputs"];
    for (nlohmann::json& t : list) {
      if (t.is_object() && !t.contains("shape") && t.contains("dims_mapping")) {
        t["shape"] = std::vector<int64_t>(t["dims_mapping"].size(), 1);  // shape is not needed
      }
    }
    for (const TensorArg& t : ParseTensorList(nlohmann::json{{"claim_outputs", list}}, "claim_outputs")) {
      claims->push_back(t.dist);
    }
  }
  return c;
}

std::string CaseToJson(const checker::Case& c) {
  nlohmann::json j;
  j["op"] = c.op->name;
  j["mesh_shape"] = c.mesh.shape();
  j["process_ids"] = c.mesh.process_ids();
  nlohmann::json attrs = nlohmann::json::object();
  for (const auto& [name, value] : c.attrs.values()) {
    std::visit([&](const auto& v) { attrs[name] = v; }, value);
  }
  j["attrs"] = attrs;
  j["inputs"] = nlohmann::json::array();
  for (size_t i = 0; i < c.shapes.size(); ++i) {
    nlohmann::json t = DistAttrToJson(c.inputs[i]);
    t["shape"] = c.shapes[i];
    j["inputs"].push_back(t);
  }
  j["seed"] = c.seed;
  return j.dump();
}

std::string ReplayCommand(const checker::Case& c) {
  return "build/bin/spmd check --case '" + CaseToJson(c) + "'";
}

}  // namespace spmd::io
