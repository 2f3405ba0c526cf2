#include "io/case_json.h"

#include <cstdint>
#include <string>
#include <variant>

#include "io/infer_io.h"
#include "rules/model/error.h"

namespace spmd::io {
namespace {

std::string ShapeText(const Shape& shape) {
  std::string text = "[";
  for (size_t d = 0; d < shape.size(); ++d) text += (d ? "," : "") + std::to_string(shape[d]);
  return text + "]";
}

}  // namespace

checker::Case CaseFromJson(const nlohmann::json& j, std::vector<DistAttr>* claims) {
  // Besides a request's keys: the case's own, `spmd check --grad-case`'s, and the claims
  // goldens' name / why / expect (golden/claims/).
  const RuleRequest r = ParseRuleRequest(
      j, {"seed", "claim_outputs", "shard_seed", "cotangents", "name", "why", "expect"});
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
  // As `spmd infer` validates a request: the arity, every shape, the attrs against the
  // shapes (the declaration's output shapes), every input dist attr against the mesh and
  // its tensor's rank.
  const std::vector<Shape> out_shapes = InferOutputShapes(*c.op, c.shapes, c.op->NormalizeAttrs(c.attrs));
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    Validate(c.inputs[i], c.mesh, static_cast<int>(c.shapes[i].size()), "inputs[" + std::to_string(i) + "]");
  }
  if (claims != nullptr) {
    if (!j.contains("claim_outputs")) ThrowInvalid("claim_outputs", "is missing");
    nlohmann::json list = j["claim_outputs"];
    if (!list.is_array()) ThrowInvalid("claim_outputs", "expected a list");
    if (list.size() != out_shapes.size()) {
      ThrowInvalid("claim_outputs", "has " + std::to_string(list.size()) + " entries, " + c.op->name +
                                        " has " + std::to_string(out_shapes.size()) + " outputs here");
    }
    std::vector<bool> shape_given(list.size(), false);
    for (size_t o = 0; o < list.size(); ++o) {
      nlohmann::json& t = list[o];
      shape_given[o] = t.is_object() && t.contains("shape");
      if (t.is_object() && !shape_given[o]) t["shape"] = out_shapes[o];  // the shape is optional
    }
    const std::vector<TensorArg> parsed = ParseTensorList(nlohmann::json{{"claim_outputs", list}}, "claim_outputs");
    for (size_t o = 0; o < parsed.size(); ++o) {
      const std::string field = "claim_outputs[" + std::to_string(o) + "]";
      if (shape_given[o] && parsed[o].shape != out_shapes[o]) {
        ThrowInvalid(field + ".shape", "is " + ShapeText(parsed[o].shape) + ", the op's output " +
                                           std::to_string(o) + " has shape " + ShapeText(out_shapes[o]));
      }
      Validate(parsed[o].dist, c.mesh, static_cast<int>(out_shapes[o].size()), field);
      claims->push_back(parsed[o].dist);
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
    const std::string& key = name;  // clang 14 cannot capture a structured binding
    std::visit([&](const auto& v) { attrs[key] = v; }, value);
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
