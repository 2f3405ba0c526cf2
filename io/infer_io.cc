#include "io/infer_io.h"

#include <cstdint>
#include <istream>
#include <limits>
#include <ostream>

#include "rules/error.h"
#include "rules/registry.h"

namespace spmd::io {
namespace {

using nlohmann::json;

// Every integer of a request goes through here. nlohmann keeps an integer above 2^63-1 as
// an unsigned number, which get<int64_t>() would wrap to a negative one (2^64-1 to -1, a
// valid "replicated" or "last axis"): it is rejected instead.
int64_t ToInt(const json& value, const std::string& field) {
  if (!value.is_number_integer()) ThrowInvalid(field, "expected an integer");
  if (value.is_number_unsigned() &&
      value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    ThrowInvalid(field, "integer " + std::to_string(value.get<uint64_t>()) +
                            " is out of range (the largest is 2^63-1)");
  }
  return value.get<int64_t>();
}

std::vector<int64_t> ToInts(const json& value, const std::string& field) {
  if (!value.is_array()) ThrowInvalid(field, "expected a list of integers");
  std::vector<int64_t> result;
  for (size_t i = 0; i < value.size(); ++i) {
    result.push_back(ToInt(value[i], field + "[" + std::to_string(i) + "]"));
  }
  return result;
}

int ToAxis(const json& value, const std::string& field) {
  const int64_t axis = ToInt(value, field);
  if (axis < 0 || axis >= kMaxMeshAxes) {
    ThrowInvalid(field, "mesh axis " + std::to_string(axis) + " is out of range");
  }
  return static_cast<int>(axis);
}

// dims_mapping entries: -1, an axis, or a list of axes (co-shard, major to minor).
std::vector<AxisList> ParseDimsMapping(const json& value, const std::string& field) {
  if (!value.is_array()) ThrowInvalid(field, "expected a list");
  std::vector<AxisList> dims(value.size());
  for (size_t d = 0; d < value.size(); ++d) {
    const std::string at = field + "[" + std::to_string(d) + "]";
    if (value[d].is_array()) {
      for (size_t k = 0; k < value[d].size(); ++k) {
        dims[d].push_back(ToAxis(value[d][k], at + "[" + std::to_string(k) + "]"));
      }
    } else if (ToInt(value[d], at) != -1) {
      dims[d].push_back(ToAxis(value[d], at));
    }
  }
  return dims;
}

PartialMap ParsePartial(const json& tensor, const std::string& field) {
  PartialMap partial;
  if (tensor.contains("partial_dims")) {
    for (int64_t axis : ToInts(tensor["partial_dims"], field + ".partial_dims")) {
      partial[ToAxis(axis, field + ".partial_dims")] = ReduceOp::kSum;
    }
  }
  if (tensor.contains("partial")) {
    const json& map = tensor["partial"];
    if (!map.is_object()) ThrowInvalid(field + ".partial", "expected an object");
    for (const auto& [key, op] : map.items()) {
      const std::string at = field + ".partial." + key;
      // The key is a mesh axis written in decimal digits only (no sign, no spaces).
      const bool digits = !key.empty() && key.size() <= 2 &&
                          key.find_first_not_of("0123456789") == std::string::npos;
      const int axis = digits ? std::stoi(key) : -1;
      if (axis < 0 || axis >= kMaxMeshAxes) ThrowInvalid(at, "not a mesh axis");
      if (!op.is_string() || !ParseReduceOp(op.get<std::string>())) {
        ThrowInvalid(at, "expected a reduce op (sum, avg, max, min, prod, any, all)");
      }
      const ReduceOp reduce = *ParseReduceOp(op.get<std::string>());
      auto [it, added] = partial.emplace(axis, reduce);
      if (!added && it->second != reduce) ThrowInvalid(at, "disagrees with partial_dims");
    }
  }
  return partial;
}

TensorArg ParseTensor(const json& tensor, const std::string& field, bool with_dist) {
  if (!tensor.is_object()) ThrowInvalid(field, "expected an object");
  if (!tensor.contains("shape")) ThrowInvalid(field + ".shape", "is missing");
  TensorArg arg;
  arg.shape = ToInts(tensor["shape"], field + ".shape");
  if (!with_dist) return arg;
  if (tensor.contains("dims_mapping")) {
    arg.dist.dims = ParseDimsMapping(tensor["dims_mapping"], field + ".dims_mapping");
  } else {
    arg.dist.dims.resize(arg.shape.size());
  }
  arg.dist.partial = ParsePartial(tensor, field);
  return arg;
}

std::vector<TensorArg> ParseTensors(const json& request, const char* key, bool with_dist) {
  std::vector<TensorArg> result;
  if (!request.contains(key)) return result;
  const json& list = request[key];
  if (!list.is_array()) ThrowInvalid(key, "expected a list");
  for (size_t i = 0; i < list.size(); ++i) {
    result.push_back(ParseTensor(list[i], std::string(key) + "[" + std::to_string(i) + "]", with_dist));
  }
  return result;
}

Attrs ParseAttrs(const json& request) {
  Attrs attrs;
  if (!request.contains("attrs")) return attrs;
  const json& map = request["attrs"];
  if (!map.is_object()) ThrowInvalid("attrs", "expected an object");
  for (const auto& [name, value] : map.items()) {
    const std::string field = "attrs." + name;
    if (value.is_boolean()) {
      attrs.Set(name, value.get<bool>());
    } else if (value.is_number_integer()) {
      attrs.Set(name, ToInt(value, field));
    } else if (value.is_number_float()) {
      attrs.Set(name, value.get<double>());
    } else if (value.is_string()) {
      attrs.Set(name, value.get<std::string>());
    } else if (value.is_array()) {
      bool all_int = true;
      for (const json& v : value) {
        if (!v.is_number()) ThrowInvalid(field, "expected a list of numbers");
        all_int = all_int && v.is_number_integer();
      }
      if (all_int) {
        attrs.Set(name, ToInts(value, field));
      } else {
        attrs.Set(name, value.get<std::vector<double>>());
      }
    } else {
      ThrowInvalid(field, "unsupported value");
    }
  }
  return attrs;
}

Mesh ParseMesh(const json& request) {
  if (!request.contains("mesh_shape")) ThrowInvalid("mesh_shape", "is missing");
  std::vector<int64_t> shape = ToInts(request["mesh_shape"], "mesh_shape");
  std::vector<int64_t> ids;
  if (request.contains("process_ids")) ids = ToInts(request["process_ids"], "process_ids");
  std::vector<std::string> names;
  if (request.contains("axis_names")) {
    const json& list = request["axis_names"];
    if (!list.is_array()) ThrowInvalid("axis_names", "expected a list of strings");
    for (const json& n : list) {
      if (!n.is_string()) ThrowInvalid("axis_names", "expected a list of strings");
      names.push_back(n.get<std::string>());
    }
  }
  return Mesh(std::move(shape), std::move(ids), std::move(names));
}

json ResultToJson(const InferResult& result) {
  json answer = json::object();
  answer["inputs"] = json::array();
  answer["outputs"] = json::array();
  for (const DistAttr& d : result.inputs) answer["inputs"].push_back(DistAttrToJson(d));
  for (const DistAttr& d : result.outputs) answer["outputs"].push_back(DistAttrToJson(d));
  return answer;
}

// The message goes through EscapeForText: an SpmdError's text already has, but a
// library's exception text may quote raw input bytes, which JSON cannot carry.
json ErrorJson(ErrorType type, const std::string& message) {
  return json{
      {"error", {{"type", std::string(ToString(type))}, {"message", EscapeForText(message)}}}};
}

// One answer line. Every string in an answer is valid UTF-8 (error texts are escaped); the
// replace handler is the second guard, so that dumping can never throw and end the stream.
std::string DumpLine(const json& answer) {
  return answer.dump(-1, ' ', /*ensure_ascii=*/false, json::error_handler_t::replace);
}

bool Blank(const std::string& line) {
  return line.find_first_not_of(" \t\r") == std::string::npos;
}

}  // namespace

json DistAttrToJson(const DistAttr& attr) {
  bool flat = true;
  for (const AxisList& axes : attr.dims) flat = flat && axes.size() <= 1;
  json mapping = json::array();
  for (const AxisList& axes : attr.dims) {
    if (!flat) {
      mapping.push_back(axes);
    } else {
      mapping.push_back(axes.empty() ? -1 : axes[0]);
    }
  }
  json partial = json::object();
  for (const auto& [axis, op] : attr.partial) partial[std::to_string(axis)] = std::string(ToString(op));
  return json{{"dims_mapping", mapping}, {"partial", partial}};
}

RuleRequest ParseRuleRequest(const json& request) {
  if (!request.is_object()) ThrowInvalid("line", "expected a JSON object");
  if (!request.contains("op") || !request["op"].is_string()) ThrowInvalid("op", "expected a string");
  const std::string name = request["op"].get<std::string>();
  RuleRequest parsed;
  parsed.op = FindOp(name);
  if (parsed.op == nullptr) throw SpmdError(ErrorType::kUnknownOp, "op", "unknown op '" + name + "'");
  std::string direction = "forward";
  if (request.contains("direction")) {
    if (!request["direction"].is_string()) ThrowInvalid("direction", "expected a string");
    direction = request["direction"].get<std::string>();
  }
  if (direction != "forward" && direction != "reverse") {
    ThrowInvalid("direction", "expected 'forward' or 'reverse', got '" + direction + "'");
  }
  parsed.reverse = direction == "reverse";
  parsed.mesh = ParseMesh(request);
  parsed.attrs = ParseAttrs(request);
  parsed.inputs = ParseTensors(request, "inputs", !parsed.reverse);
  if (parsed.reverse) parsed.outputs = ParseTensors(request, "outputs", true);
  return parsed;
}

std::vector<TensorArg> ParseTensorList(const json& request, const char* key) {
  return ParseTensors(request, key, true);
}

json InferJson(const json& request) {
  try {
    const RuleRequest r = ParseRuleRequest(request);
    if (!r.reverse) return ResultToJson(InferForward(*r.op, r.mesh, r.inputs, r.attrs));
    std::vector<Shape> input_shapes;
    for (const TensorArg& t : r.inputs) input_shapes.push_back(t.shape);
    return ResultToJson(InferReverse(*r.op, r.mesh, input_shapes, r.outputs, r.attrs));
  } catch (const SpmdError& e) {
    return ErrorJson(e.type(), e.what());
  } catch (const std::exception& e) {
    return ErrorJson(ErrorType::kInvalidArgument, std::string("line: ") + e.what());
  }
}

json StripGoldenFields(const json& golden_case) {
  json request = golden_case;
  for (const char* key : {"name", "why", "expect"}) request.erase(key);
  return request;
}

std::string CompareWithExpect(const json& answer, const json& expect) {
  if (expect.contains("error")) {
    if (!answer.contains("error")) return "expected an error, got " + answer.dump();
    if (answer["error"]["type"] != expect["error"]["type"]) {
      return "expected error type " + expect["error"]["type"].dump() + ", got " + answer.dump();
    }
    if (expect["error"].contains("field")) {
      const std::string field = expect["error"]["field"].get<std::string>();
      if (answer["error"]["message"].get<std::string>().find(field) == std::string::npos) {
        return "the message does not name " + field + ": " + answer.dump();
      }
    }
    return "";
  }
  if (answer.contains("error")) return "expected an answer, got " + answer.dump();
  for (const char* key : {"inputs", "outputs"}) {
    if (answer[key] != expect[key]) {
      return std::string(key) + ": expected " + expect[key].dump() + ", got " + answer[key].dump();
    }
  }
  return "";
}

std::string InferLine(std::string_view line) {
  // Parsing, answering and dumping all happen inside the try: whatever one line holds, it
  // gets one answer line and the stream goes on.
  try {
    const json request =
        json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
    if (request.is_discarded()) {
      return DumpLine(ErrorJson(ErrorType::kInvalidArgument, "line: not valid JSON"));
    }
    return DumpLine(InferJson(request));
  } catch (const std::exception& e) {
    return DumpLine(ErrorJson(ErrorType::kInvalidArgument, std::string("line: ") + e.what()));
  }
}

void InferStream(std::istream& in, std::ostream& out) {
  std::string line;
  while (std::getline(in, line)) {
    if (!Blank(line)) out << InferLine(line) << '\n';
  }
  out.flush();
}

}  // namespace spmd::io
