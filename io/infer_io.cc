#include "io/infer_io.h"

#include <algorithm>
#include <cstring>
#include <cstdint>
#include <istream>
#include <iterator>
#include <limits>
#include <optional>
#include <ostream>
#include <string_view>
#include <utility>

#include "rules/model/error.h"
#include "rules/engine/registry.h"

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

// The integer `value` holds when ToInt would accept it, else nothing (no field is built:
// the callers below name the field only when they go on to ToInt for its error).
std::optional<int64_t> IntIfValid(const json& value) {
  if (value.is_number_integer() && !value.is_number_unsigned()) return value.get<int64_t>();
  if (value.is_number_unsigned() &&
      value.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return value.get<int64_t>();
  }
  return std::nullopt;
}

std::string Indexed(const std::string& field, size_t i) {
  return field + "[" + std::to_string(i) + "]";
}

std::vector<int64_t> ToInts(const json& value, const std::string& field) {
  if (!value.is_array()) ThrowInvalid(field, "expected a list of integers");
  std::vector<int64_t> result;
  result.reserve(value.size());
  for (size_t i = 0; i < value.size(); ++i) {
    const std::optional<int64_t> v = IntIfValid(value[i]);
    result.push_back(v ? *v : ToInt(value[i], Indexed(field, i)));
  }
  return result;
}

bool IsAxis(int64_t axis) { return axis >= 0 && axis < kMaxMeshAxes; }

int ToAxis(const json& value, const std::string& field) {
  const int64_t axis = ToInt(value, field);
  if (!IsAxis(axis)) {
    ThrowInvalid(field, "mesh axis " + std::to_string(axis) + " is out of range");
  }
  return static_cast<int>(axis);
}

// ToAxis, naming `field()` only on failure.
template <typename Field>
int ToAxisLazy(const json& value, Field field) {
  const std::optional<int64_t> axis = IntIfValid(value);
  if (axis && IsAxis(*axis)) return static_cast<int>(*axis);
  return ToAxis(value, field());
}

// dims_mapping entries: -1, an axis, or a list of axes (co-shard, major to minor).
std::vector<AxisList> ParseDimsMapping(const json& value, const std::string& field) {
  if (!value.is_array()) ThrowInvalid(field, "expected a list");
  std::vector<AxisList> dims(value.size());
  for (size_t d = 0; d < value.size(); ++d) {
    const json& entry = value[d];
    if (entry.is_array()) {
      for (size_t k = 0; k < entry.size(); ++k) {
        dims[d].push_back(ToAxisLazy(entry[k], [&] { return Indexed(Indexed(field, d), k); }));
      }
      continue;
    }
    const std::optional<int64_t> axis = IntIfValid(entry);
    if ((axis ? *axis : ToInt(entry, Indexed(field, d))) == -1) continue;
    dims[d].push_back(ToAxisLazy(entry, [&] { return Indexed(field, d); }));
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

// A key of `object` that is not one of `known`: InvalidArgument naming it (`at.key`), so
// that a misspelt key is never silently ignored.
void RefuseUnknownKeys(const json& object, const std::string& at,
                       std::initializer_list<std::string_view> known,
                       std::initializer_list<std::string_view> extra = {}) {
  for (const auto& item : object.items()) {
    const std::string& key = item.key();  // a plain reference: clang's lambdas cannot capture a structured binding
    const auto is = [&](std::string_view k) { return k == key; };
    if (std::any_of(known.begin(), known.end(), is) || std::any_of(extra.begin(), extra.end(), is)) {
      continue;
    }
    std::string expected;
    for (std::string_view k : known) expected += (expected.empty() ? "" : ", ") + std::string(k);
    ThrowInvalid(at.empty() ? key : at + "." + key, "unknown key (expected " + expected + ")");
  }
}

TensorArg ParseTensor(const json& tensor, const std::string& field, bool with_dist) {
  if (!tensor.is_object()) ThrowInvalid(field, "expected an object");
  RefuseUnknownKeys(tensor, field, {"shape", "dims_mapping", "partial_dims", "partial"});
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

// Appends the integers as a JSON list.
template <typename Ints>
void AppendList(std::string& out, const Ints& values) {
  out += '[';
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(values[i]);
  }
  out += ']';
}

// Appends DistAttrToJson(attr) as DumpLine prints it (no spaces, object keys sorted as
// text: "dims_mapping" before "partial", partial axis "10" before "2").
void AppendDistAttr(std::string& out, const DistAttr& attr) {
  bool flat = true;
  for (const AxisList& axes : attr.dims) flat = flat && axes.size() <= 1;
  out += "{\"dims_mapping\":[";
  for (size_t d = 0; d < attr.dims.size(); ++d) {
    if (d > 0) out += ',';
    const AxisList& axes = attr.dims[d];
    if (!flat) {
      AppendList(out, axes);
    } else {
      out += axes.empty() ? std::string("-1") : std::to_string(axes[0]);
    }
  }
  out += "],\"partial\":{";
  std::vector<std::pair<std::string, ReduceOp>> partial;
  partial.reserve(attr.partial.size());
  for (const auto& [axis, op] : attr.partial) partial.emplace_back(std::to_string(axis), op);
  std::sort(partial.begin(), partial.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 0; i < partial.size(); ++i) {
    if (i > 0) out += ',';
    out += '"';
    out += partial[i].first;
    out += "\":\"";
    out += ToString(partial[i].second);
    out += '"';
  }
  out += "}}";
}

// The rule of a parsed request (forward or reverse); throws SpmdError naming the field.
InferResult Answer(const json& request) {
  const RuleRequest r = ParseRuleRequest(request);
  if (!r.reverse) return InferForward(*r.op, r.mesh, r.inputs, r.attrs);
  std::vector<Shape> input_shapes;
  for (const TensorArg& t : r.inputs) input_shapes.push_back(t.shape);
  return InferReverse(*r.op, r.mesh, input_shapes, r.outputs, r.attrs);
}

// A quick reader for the usual request line: a forward request written with only what
// requests normally hold (strings without escapes or non-ASCII bytes, integers of at most
// 18 digits, true/false, lists and objects; no floats, nulls, repeated or unknown keys).
// It returns the same RuleRequest that ParseRuleRequest gives for the nlohmann parse of
// the line, or nothing: for any other line, and for any line that would be refused, so
// that InferLine then takes the nlohmann path, which answers exactly as it always has.
class QuickReader {
 public:
  explicit QuickReader(std::string_view text) : text_(text) {}

  std::optional<RuleRequest> Read() {
    RuleRequest r;
    std::string_view op_name;
    std::vector<int64_t> mesh_shape, process_ids;
    std::vector<std::string> axis_names;
    unsigned seen = 0;
    bool ok = Object([&](std::string_view key) {
      static constexpr std::string_view kKeys[] = {"op",     "direction", "mesh_shape",
                                                   "process_ids", "axis_names", "attrs",
                                                   "inputs", "outputs"};
      size_t k = 0;
      while (k < std::size(kKeys) && kKeys[k] != key) ++k;
      if (k == std::size(kKeys) || (seen >> k & 1) != 0) return false;
      seen |= 1u << k;
      switch (k) {
        case 0: return String(op_name);
        case 1: {
          std::string_view direction;
          return String(direction) && direction == "forward";
        }
        case 2: return Ints(mesh_shape);
        case 3: return Ints(process_ids);
        case 4: return List([&] {
            std::string_view name;
            if (!String(name)) return false;
            axis_names.emplace_back(name);
            return true;
          });
        case 5: return AttrsObject(r.attrs);
        case 6: return List([&] {
            r.inputs.emplace_back();
            return Tensor(r.inputs.back());
          });
        default: return Skip(0);  // a forward request's outputs are not read
      }
    });
    Space();
    if (!ok || pos_ != text_.size() || (seen & 1u) == 0 || (seen & 4u) == 0) {
      return std::nullopt;
    }
    r.op = FindOp(op_name);
    if (r.op == nullptr) return std::nullopt;
    try {
      r.mesh = Mesh(std::move(mesh_shape), std::move(process_ids), std::move(axis_names));
    } catch (const SpmdError&) {
      return std::nullopt;
    }
    return r;
  }

 private:
  void Space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool Eat(char c) {
    Space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool Peek(char c) {
    Space();
    return pos_ < text_.size() && text_[pos_] == c;
  }
  bool Word(std::string_view word) {
    Space();
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }
  bool String(std::string_view& out) {
    if (!Eat('"')) return false;
    const size_t start = pos_;
    for (; pos_ < text_.size(); ++pos_) {
      const unsigned char c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') {
        out = text_.substr(start, pos_ - start);
        ++pos_;
        return true;
      }
      if (c == '\\' || c < 0x20 || c >= 0x80) return false;
    }
    return false;
  }
  bool Int(int64_t& out) {
    Space();
    const bool negative = pos_ < text_.size() && text_[pos_] == '-';
    if (negative) ++pos_;
    const size_t start = pos_;
    int64_t value = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      if (pos_ - start == 18) return false;  // checked first: 18 digits cannot overflow
      value = value * 10 + (text_[pos_++] - '0');
    }
    const size_t digits = pos_ - start;
    if (digits == 0 || (digits > 1 && text_[start] == '0')) return false;
    if (pos_ < text_.size() && (text_[pos_] == '.' || text_[pos_] == 'e' || text_[pos_] == 'E')) {
      return false;
    }
    out = negative ? -value : value;
    return true;
  }
  // `item()` reads one element; false ends the read.
  template <typename Item>
  bool List(Item item) {
    if (!Eat('[')) return false;
    if (Eat(']')) return true;
    do {
      if (!item()) return false;
    } while (Eat(','));
    return Eat(']');
  }
  // `member(key)` reads the value of one member.
  template <typename Member>
  bool Object(Member member) {
    if (!Eat('{')) return false;
    if (Eat('}')) return true;
    do {
      std::string_view key;
      if (!String(key) || !Eat(':') || !member(key)) return false;
    } while (Eat(','));
    return Eat('}');
  }
  bool Ints(std::vector<int64_t>& out) {
    return List([&] {
      int64_t v = 0;
      if (!Int(v)) return false;
      out.push_back(v);
      return true;
    });
  }
  bool Axis(int64_t v, AxisList& out) {
    if (v < 0 || v >= kMaxMeshAxes) return false;
    out.push_back(static_cast<int>(v));
    return true;
  }
  // Any value of the subset above, read and dropped.
  bool Skip(int depth) {
    if (depth > 32) return false;
    if (Peek('"')) {
      std::string_view s;
      return String(s);
    }
    if (Peek('[')) return List([&] { return Skip(depth + 1); });
    if (Peek('{')) return Object([&](std::string_view) { return Skip(depth + 1); });
    if (Word("true") || Word("false")) return true;
    int64_t v = 0;
    return Int(v);
  }
  bool AttrsObject(Attrs& attrs) {
    return Object([&](std::string_view key) {
      const std::string name(key);
      if (attrs.Has(name)) return false;
      if (Word("true")) {
        attrs.Set(name, true);
      } else if (Word("false")) {
        attrs.Set(name, false);
      } else if (Peek('"')) {
        std::string_view value;
        if (!String(value)) return false;
        attrs.Set(name, std::string(value));
      } else if (Peek('[')) {
        std::vector<int64_t> values;
        if (!Ints(values)) return false;
        attrs.Set(name, std::move(values));
      } else {
        int64_t value = 0;
        if (!Int(value)) return false;
        attrs.Set(name, value);
      }
      return true;
    });
  }
  bool Tensor(TensorArg& t) {
    bool has_shape = false, has_dims = false, has_partial_dims = false, has_partial = false;
    const bool ok = Object([&](std::string_view key) {
      if (key == "shape" && !has_shape) {
        has_shape = true;
        return Ints(t.shape);
      }
      if (key == "dims_mapping" && !has_dims) {
        has_dims = true;
        return List([&] {
          t.dist.dims.emplace_back();
          AxisList& axes = t.dist.dims.back();
          if (Peek('[')) {
            return List([&] {
              int64_t v = 0;
              return Int(v) && Axis(v, axes);
            });
          }
          int64_t v = 0;
          return Int(v) && (v == -1 || Axis(v, axes));
        });
      }
      if (key == "partial_dims" && !has_partial_dims) {
        has_partial_dims = true;
        return List([&] {
          int64_t v = 0;
          if (!Int(v) || v < 0 || v >= kMaxMeshAxes) return false;
          const auto [it, added] = t.dist.partial.emplace(static_cast<int>(v), ReduceOp::kSum);
          return added || it->second == ReduceOp::kSum;
        });
      }
      if (key == "partial" && !has_partial) {
        has_partial = true;
        return Object([&](std::string_view axis_text) {
          std::string_view op_text;
          const bool digits = !axis_text.empty() && axis_text.size() <= 2 &&
                              axis_text.find_first_not_of("0123456789") == std::string_view::npos;
          if (!digits || !String(op_text)) return false;
          const int axis = std::stoi(std::string(axis_text));
          const std::optional<ReduceOp> op = ParseReduceOp(op_text);
          if (axis >= kMaxMeshAxes || !op) return false;
          // As the full path: an axis given again ("0" and "00", or in partial_dims) must
          // name the same op; a disagreement is left to the full path to refuse.
          const auto [it, added] = t.dist.partial.emplace(axis, *op);
          return added || it->second == *op;
        });
      }
      return false;
    });
    if (!ok || !has_shape) return false;
    if (!has_dims) t.dist.dims.resize(t.shape.size());
    return true;
  }

  std::string_view text_;
  size_t pos_ = 0;
};

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

RuleRequest ParseRuleRequest(const json& request,
                             std::initializer_list<std::string_view> extra_keys) {
  if (!request.is_object()) ThrowInvalid("line", "expected a JSON object");
  RefuseUnknownKeys(request, "",
                    {"op", "direction", "mesh_shape", "process_ids", "axis_names", "attrs",
                     "inputs", "outputs"},
                    extra_keys);
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

std::string ResultLine(const InferResult& result) {
  std::string out = "{\"inputs\":[";
  for (size_t i = 0; i < result.inputs.size(); ++i) {
    if (i > 0) out += ',';
    AppendDistAttr(out, result.inputs[i]);
  }
  out += "],\"outputs\":[";
  for (size_t o = 0; o < result.outputs.size(); ++o) {
    if (o > 0) out += ',';
    AppendDistAttr(out, result.outputs[o]);
  }
  out += "]}";
  return out;
}

json InferJson(const json& request) {
  try {
    return ResultToJson(Answer(request));
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

void ValidateExpect(const json& expect) {
  if (!expect.is_object()) {
    ThrowInvalid("expect", "expected an object ({\"inputs\": [...], \"outputs\": [...]} or "
                           "{\"error\": {\"type\": ..., \"field\": ...}})");
  }
  if (expect.contains("error")) {
    RefuseUnknownKeys(expect, "expect", {"error"});
    const json& error = expect["error"];
    if (!error.is_object()) ThrowInvalid("expect.error", "expected an object");
    RefuseUnknownKeys(error, "expect.error", {"type", "field"});
    if (!error.contains("type")) ThrowInvalid("expect.error.type", "is missing");
    if (!error["type"].is_string()) ThrowInvalid("expect.error.type", "expected a string");
    if (error.contains("field") && !error["field"].is_string()) {
      ThrowInvalid("expect.error.field", "expected a string");
    }
    return;
  }
  RefuseUnknownKeys(expect, "expect", {"inputs", "outputs"});
  for (const char* key : {"inputs", "outputs"}) {
    const std::string at = std::string("expect.") + key;
    if (!expect.contains(key)) ThrowInvalid(at, "is missing");
    if (!expect[key].is_array()) ThrowInvalid(at, "expected a list");
  }
}

std::string CompareWithExpect(const json& answer, const json& expect) {
  ValidateExpect(expect);
  const bool answer_is_error = answer.is_object() && answer.contains("error");
  if (expect.contains("error")) {
    if (!answer_is_error) return "expected an error, got " + answer.dump();
    if (answer["error"].value("type", json()) != expect["error"]["type"]) {
      return "expected error type " + expect["error"]["type"].dump() + ", got " + answer.dump();
    }
    if (expect["error"].contains("field")) {
      const std::string field = expect["error"]["field"].get<std::string>();
      const json message = answer["error"].value("message", json());
      // The message starts with the field at fault (SEMANTICS.md: "the message starts with
      // the field"): the golden's field, or a part of it (`inputs[0].dims_mapping` for
      // `inputs[0].dims_mapping[1]: ...`), then ':', '.' or '['; not the field's name
      // anywhere in the text.
      const std::string text = message.is_string() ? message.get<std::string>() : "";
      const bool starts = !field.empty() && text.rfind(field, 0) == 0 && text.size() > field.size() &&
                          (text[field.size()] == ':' || text[field.size()] == '.' ||
                           text[field.size()] == '[');
      if (!starts) {
        return "the message does not start with the field " + field + ": " + answer.dump();
      }
    }
    return "";
  }
  if (answer_is_error || !answer.is_object()) return "expected an answer, got " + answer.dump();
  for (const char* key : {"inputs", "outputs"}) {
    const json got = answer.value(key, json());
    if (got != expect[key]) {
      return std::string(key) + ": expected " + expect[key].dump() + ", got " + got.dump();
    }
  }
  return "";
}

std::string CheckGoldenLine(std::string_view line, std::string* name) {
  CheckLineBounds(line);
  const json golden = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (golden.is_discarded()) ThrowInvalid("line", "not valid JSON");
  if (!golden.is_object()) ThrowInvalid("line", "expected a JSON object (a golden case)");
  for (const char* key : {"name", "why"}) {
    if (golden.contains(key) && !golden[key].is_string()) ThrowInvalid(key, "expected a string");
  }
  if (name != nullptr) *name = golden.value("name", "");
  if (!golden.contains("expect")) ThrowInvalid("expect", "is missing");
  ValidateExpect(golden["expect"]);
  const json answer = json::parse(InferLine(StripGoldenFields(golden).dump()));
  return CompareWithExpect(answer, golden["expect"]);
}

void CheckLineBounds(std::string_view line) {
  if (line.size() > kMaxLineBytes) throw TooLongLineError();
  // The depth of lists and objects, counted outside strings: a scan of the bytes, before
  // any parser builds anything.
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) {
        ThrowInvalid("line", "lists and objects nest deeper than " +
                                 std::to_string(kMaxJsonDepth) + " levels (the limit)");
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

SpmdError TooLongLineError() {
  return SpmdError(ErrorType::kInvalidArgument, "line",
                   "longer than " + std::to_string(kMaxLineBytes) +
                       " bytes (the limit); skipped to the next newline");
}

LineReader::LineReader(std::istream& in, size_t limit)
    : in_(&in), buf_(in.rdbuf()), limit_(limit), chunk_(size_t{1} << 16) {}

// Takes what the stream has ready (at least one byte, waiting for it): never more, so that
// a reader on a pipe does not wait for bytes the writer has not sent. Before waiting, the
// stream tied to the input (std::cout for std::cin) is flushed, as std::getline does: a
// caller that writes a request and waits for its answer gets it.
bool LineReader::Fill() {
  if (buf_ == nullptr) return false;
  if (std::ostream* tied = in_->tie()) tied->flush();
  if (buf_->sgetc() == std::char_traits<char>::eof()) return false;
  const std::streamsize ready = std::max<std::streamsize>(buf_->in_avail(), 1);
  const std::streamsize n = std::min<std::streamsize>(ready, static_cast<std::streamsize>(chunk_.size()));
  pos_ = 0;
  end_ = static_cast<size_t>(std::max<std::streamsize>(buf_->sgetn(chunk_.data(), n), 0));
  return end_ > 0;
}

LineReader::Status LineReader::Next(std::string& line) {
  line.clear();
  bool any = false, too_long = false;
  for (;;) {
    if (pos_ == end_ && !Fill()) {
      if (!any) return Status::kEnd;
      return too_long ? Status::kTooLong : Status::kLine;
    }
    any = true;
    const char* start = chunk_.data() + pos_;
    const size_t ready = end_ - pos_;
    const char* newline = static_cast<const char*>(std::memchr(start, '\n', ready));
    const size_t n = newline != nullptr ? static_cast<size_t>(newline - start) : ready;
    if (!too_long && line.size() + n > limit_) {
      too_long = true;
      line.clear();
    }
    if (!too_long) line.append(start, n);
    pos_ += n;
    if (newline != nullptr) {
      ++pos_;
      return too_long ? Status::kTooLong : Status::kLine;
    }
  }
}

std::string InferLine(std::string_view line) {
  // Parsing, answering and dumping all happen inside the try: whatever one line holds, it
  // gets one answer line and the stream goes on.
  try {
    CheckLineBounds(line);
    // The usual forward request: read without building a json (QuickReader gives exactly
    // ParseRuleRequest's result, or nothing and the line goes the full way below).
    if (std::optional<RuleRequest> r = QuickReader(line).Read()) {
      try {
        return ResultLine(InferForward(*r->op, r->mesh, r->inputs, r->attrs));
      } catch (const SpmdError& e) {
        return DumpLine(ErrorJson(e.type(), e.what()));
      } catch (const std::exception& e) {
        return DumpLine(ErrorJson(ErrorType::kInvalidArgument, std::string("line: ") + e.what()));
      }
    }
    const json request =
        json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
    if (request.is_discarded()) {
      return DumpLine(ErrorJson(ErrorType::kInvalidArgument, "line: not valid JSON"));
    }
    // InferJson(request), printed: an answer is printed straight from the result (the
    // same text DumpLine gives, without building the json), an error as before.
    try {
      return ResultLine(Answer(request));
    } catch (const SpmdError& e) {
      return DumpLine(ErrorJson(e.type(), e.what()));
    } catch (const std::exception& e) {
      return DumpLine(ErrorJson(ErrorType::kInvalidArgument, std::string("line: ") + e.what()));
    }
  } catch (const SpmdError& e) {
    return DumpLine(ErrorJson(e.type(), e.what()));
  } catch (const std::exception& e) {
    return DumpLine(ErrorJson(ErrorType::kInvalidArgument, std::string("line: ") + e.what()));
  }
}

void InferStream(std::istream& in, std::ostream& out) {
  LineReader reader(in);
  std::string line;
  for (;;) {
    const LineReader::Status status = reader.Next(line);
    if (status == LineReader::Status::kEnd) break;
    if (status == LineReader::Status::kTooLong) {
      const SpmdError e = TooLongLineError();
      out << DumpLine(ErrorJson(e.type(), e.what())) << '\n';
    } else if (!Blank(line)) {
      out << InferLine(line) << '\n';
    }
  }
  out.flush();
}

}  // namespace spmd::io
