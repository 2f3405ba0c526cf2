#include "rules/engine/op_decl.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

#include "rules/model/error.h"

namespace spmd {
namespace {

const char* KindName(AttrKind kind) {
  switch (kind) {
    case AttrKind::kBool: return "a bool";
    case AttrKind::kInt: return "an int";
    case AttrKind::kFloat: return "a float";
    case AttrKind::kString: return "a string";
    case AttrKind::kInts: return "a list of ints";
    case AttrKind::kFloats: return "a list of floats";
  }
  return "a value";
}

// Converts `value` to `kind` where the conversion loses nothing.
// `name` is the attr as given; the field ("attrs.NAME") is built only on failure.
AttrValue ConvertAttr(const AttrValue& value, AttrKind kind, const std::string& name) {
  auto fail = [&]() -> AttrValue {
    ThrowInvalid("attrs." + name, std::string("expected ") + KindName(kind));
  };
  switch (kind) {
    case AttrKind::kBool:
      if (auto* b = std::get_if<bool>(&value)) return *b;
      return fail();
    case AttrKind::kInt:
      if (auto* i = std::get_if<int64_t>(&value)) return *i;
      return fail();
    case AttrKind::kFloat:
      if (auto* f = std::get_if<double>(&value)) {
        if (!std::isfinite(*f)) ThrowInvalid("attrs." + name, "must be finite");
        return *f;
      }
      if (auto* i = std::get_if<int64_t>(&value)) return static_cast<double>(*i);
      return fail();
    case AttrKind::kString:
      if (auto* s = std::get_if<std::string>(&value)) return *s;
      return fail();
    case AttrKind::kInts:
      if (auto* v = std::get_if<std::vector<int64_t>>(&value)) return *v;
      if (auto* i = std::get_if<int64_t>(&value)) return std::vector<int64_t>{*i};
      if (auto* f = std::get_if<std::vector<double>>(&value); f && f->empty()) {
        return std::vector<int64_t>{};
      }
      return fail();
    case AttrKind::kFloats:
      if (auto* v = std::get_if<std::vector<double>>(&value)) return *v;
      if (auto* v = std::get_if<std::vector<int64_t>>(&value)) {
        return std::vector<double>(v->begin(), v->end());
      }
      if (auto* f = std::get_if<double>(&value)) return std::vector<double>{*f};
      return fail();
  }
  return fail();
}

std::string InputField(size_t i) { return "inputs[" + std::to_string(i) + "]"; }
std::string OutputField(size_t i) { return "outputs[" + std::to_string(i) + "]"; }

constexpr size_t kMaxRank = 16;

// Returns whether CheckShape accepts `shape` (the same tests, building no text).
bool ShapeOk(const Shape& shape) {
  if (shape.size() > kMaxRank) return false;
  int64_t numel = 1;
  for (const int64_t size : shape) {
    if (size < 0 || (size > 0 && numel > (int64_t{1} << 62) / size)) return false;
    numel *= std::max<int64_t>(size, 1);
  }
  return true;
}

void CheckShape(const Shape& shape, const std::string& field) {
  if (shape.size() > kMaxRank) {
    ThrowInvalid(field + ".shape", "rank " + std::to_string(shape.size()) + " exceeds " +
                                       std::to_string(kMaxRank));
  }
  int64_t numel = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] > 0 && numel > (int64_t{1} << 62) / shape[d]) {
      ThrowInvalid(field + ".shape", "more than 2^62 elements");
    }
    numel *= std::max<int64_t>(shape[d], 1);
    if (shape[d] < 0) {
      ThrowInvalid(field + ".shape[" + std::to_string(d) + "]",
                   "size " + std::to_string(shape[d]) + " is negative (dynamic sizes are not "
                   "accepted by rules; D5)");
    }
  }
}

std::string ShapeText(const Shape& shape) {
  std::string text = "[";
  for (size_t d = 0; d < shape.size(); ++d) text += (d ? "," : "") + std::to_string(shape[d]);
  return text + "]";
}

void CheckArity(const OpDecl& op, size_t count) {
  if (op.variadic_inputs ? count == 0 : count != op.inputs.size()) {
    std::string want = op.variadic_inputs ? "at least 1" : std::to_string(op.inputs.size());
    ThrowInvalid("inputs", op.name + " takes " + want + " inputs, got " + std::to_string(count));
  }
}

}  // namespace

Localizer CheckedLocalizer(const std::string& op, std::vector<LocalField> fields, Localizer fn) {
  if (!fn) return fn;
  return [op, fields = std::move(fields), fn = std::move(fn)](const LocalContext& c) {
    Attrs local = fn(c);
    for (LocalField field : kAllLocalFields) {
      if (local.local().Has(field) && std::find(fields.begin(), fields.end(), field) == fields.end()) {
        throw std::logic_error("the localizer of " + op + " sets " + LocalFieldName(field) +
                               ", which its declaration does not list");
      }
    }
    return local;
  };
}

Attrs OpDecl::NormalizeAttrs(const Attrs& given) const {
  for (LocalField field : kAllLocalFields) {
    if (given.local().Has(field)) ThrowInvalid(LocalFieldName(field), "is set by localization only");
  }
  Attrs normalized;
  std::vector<bool> seen(attrs.size(), false);
  for (const auto& [name, value] : given.values()) {
    size_t k = 0;
    for (; k < attrs.size(); ++k) {
      bool match = attrs[k].name == name;
      for (const std::string& alias : attrs[k].aliases) match = match || alias == name;
      if (match) break;
    }
    if (k == attrs.size()) ThrowInvalid("attrs." + name, "is not an attribute of " + this->name);
    if (seen[k]) ThrowInvalid("attrs." + name, "given twice (under an alias)");
    seen[k] = true;
    normalized.Set(attrs[k].name, ConvertAttr(value, attrs[k].kind, name));
  }
  for (size_t k = 0; k < attrs.size(); ++k) {
    if (seen[k]) continue;
    if (!attrs[k].default_value) ThrowInvalid("attrs." + attrs[k].name, "is required");
    normalized.Set(attrs[k].name, *attrs[k].default_value);
  }
  return normalized;
}

void ArrangeInputValues(const InputValues& values, const Shape& shape, std::vector<double>& data) {
  if (values.kind == ValueKind::kBoxes) {
    if (shape.empty() || shape.back() != 4) return;
    for (size_t row = 0; row + 4 <= data.size(); row += 4) {
      if (data[row] > data[row + 2]) std::swap(data[row], data[row + 2]);
      if (data[row + 1] > data[row + 3]) std::swap(data[row + 1], data[row + 3]);
    }
  } else if (values.kind == ValueKind::kCounts && !data.empty()) {
    std::vector<double> cuts = data;
    std::sort(cuts.begin(), cuts.end());
    cuts.push_back(static_cast<double>(std::max<int64_t>(values.bound, 0)));
    for (size_t k = 0; k < data.size(); ++k) data[k] = k == 0 ? cuts[1] : cuts[k + 1] - cuts[k];
  }
}

std::vector<InputValues> OpDecl::InputValueKinds(const RuleContext& context) const {
  if (values) return values(context);
  return std::vector<InputValues>(context.input_shapes.size());
}

std::optional<EinsumSpec> BuildEinsumSpec(const OpDecl& op, const std::vector<Shape>& shapes,
                                          const Attrs& normalized_attrs) {
  if (!op.einsum) return std::nullopt;
  RuleContext context{shapes, normalized_attrs};
  EinsumSpec spec = op.einsum(context);
  BindFactorSizes(spec, shapes);
  return spec;
}

namespace {

// The output shapes of a built rule, each checked as an input shape is (sizes >= 0, at
// most 2^62 elements), so that whatever the rule accepts has outputs a kernel can hold. With
// `data_dependent` (the spec has such factors), a kDataDependentDim is checked as 0: after
// BindFactorSizes every other factor has a size >= 0.
std::vector<Shape> CheckedOutputShapes(std::vector<Shape> shapes, bool data_dependent = false) {
  for (size_t o = 0; o < shapes.size(); ++o) {
    if (!data_dependent) {
      if (!ShapeOk(shapes[o])) CheckShape(shapes[o], OutputField(o));
      continue;
    }
    Shape statics = shapes[o];
    std::replace(statics.begin(), statics.end(), kDataDependentDim, int64_t{0});
    if (!ShapeOk(statics)) CheckShape(statics, OutputField(o));
  }
  return shapes;
}

// Arity, each input's shape and dist attr, in input order. The fast checks build no field
// names; a failing input goes through the naming checks, which throw (shape first, then
// dist attr).
void CheckForwardInputs(const OpDecl& op, const Mesh& mesh, const std::vector<TensorArg>& inputs) {
  CheckArity(op, inputs.size());
  const int mesh_ndim = mesh.ndim();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const int rank = static_cast<int>(inputs[i].shape.size());
    if (!ShapeOk(inputs[i].shape)) CheckShape(inputs[i].shape, InputField(i));
    if (!IsValid(inputs[i].dist, mesh_ndim, rank)) {
      Validate(inputs[i].dist, mesh, rank, InputField(i));
    }
  }
}

// What a forward inference builds before it reads a dist attr: the normalised attrs, the
// rule (a DimTrans spec, or a bound einsum spec) and the checked output shapes.
struct ForwardRule {
  Attrs normalized;
  std::optional<DimTransSpec> dimtrans;
  std::optional<EinsumSpec> einsum;
  std::vector<Shape> output_shapes;
};

ForwardRule BuildForwardRule(const OpDecl& op, const std::vector<Shape>& shapes, const Attrs& attrs) {
  ForwardRule rule;
  rule.normalized = op.NormalizeAttrs(attrs);
  const RuleContext context{shapes, rule.normalized};
  if (op.dimtrans) {
    rule.dimtrans = op.dimtrans(context);  // validates shapes and attrs first
    rule.output_shapes = CheckedOutputShapes({rule.dimtrans->output_shape});
    return rule;
  }
  rule.einsum = op.einsum(context);
  BindFactorSizes(*rule.einsum, shapes);
  rule.output_shapes = CheckedOutputShapes(EinsumOutputShapes(*rule.einsum), !rule.einsum->data_dependent.empty());
  return rule;
}

// The dist attrs are copied only for a declaration's own hooks, which take a vector.
std::vector<DistAttr> CopiedDists(const std::vector<const DistAttr*>& dists) {
  std::vector<DistAttr> copied;
  copied.reserve(dists.size());
  for (const DistAttr* dist : dists) copied.push_back(*dist);
  return copied;
}

// The rest of a forward inference, on valid inputs and their built rule: the op's own
// check of the dist attrs, then the rule (the op's own forward, or the engine's; `prepared`
// when given answers for the einsum engine on these shapes and mesh).
InferResult RunForwardRule(const OpDecl& op, const Mesh& mesh, const std::vector<Shape>& shapes,
                           const ForwardRule& rule, const std::vector<const DistAttr*>& dists,
                           PreparedEinsumForward* prepared) {
  const RuleContext context{shapes, rule.normalized};
  if (rule.dimtrans) {
    if (op.dist_check) op.dist_check(context, CopiedDists(dists));
    return InferDimTransForward(*rule.dimtrans, mesh, *dists[0]);
  }
  if (op.forward_override) {
    const std::vector<DistAttr> copied = CopiedDists(dists);
    if (op.dist_check) op.dist_check(context, copied);
    return op.forward_override(context, mesh, copied);
  }
  if (op.dist_check) op.dist_check(context, CopiedDists(dists));
  if (prepared != nullptr) return prepared->Infer(dists);
  return InferEinsumForward(*rule.einsum, mesh, dists);
}

ForwardInference RunForward(const OpDecl& op, const Mesh& mesh,
                            const std::vector<TensorArg>& inputs, const Attrs& attrs) {
  CheckForwardInputs(op, mesh, inputs);
  std::vector<Shape> shapes;
  shapes.reserve(inputs.size());
  std::vector<const DistAttr*> dists;
  dists.reserve(inputs.size());
  for (const TensorArg& input : inputs) {
    shapes.push_back(input.shape);
    dists.push_back(&input.dist);
  }
  ForwardRule rule = BuildForwardRule(op, shapes, attrs);
  ForwardInference forward;
  forward.rule = RunForwardRule(op, mesh, shapes, rule, dists, nullptr);
  forward.normalized = std::move(rule.normalized);
  forward.output_shapes = std::move(rule.output_shapes);
  return forward;
}

}  // namespace

std::vector<Shape> InferOutputShapes(const OpDecl& op, const std::vector<Shape>& input_shapes,
                                     const Attrs& normalized_attrs) {
  CheckArity(op, input_shapes.size());
  for (size_t i = 0; i < input_shapes.size(); ++i) CheckShape(input_shapes[i], InputField(i));
  const RuleContext context{input_shapes, normalized_attrs};
  if (op.dimtrans) return CheckedOutputShapes({op.dimtrans(context).output_shape});
  EinsumSpec spec = op.einsum(context);
  BindFactorSizes(spec, input_shapes);
  return CheckedOutputShapes(EinsumOutputShapes(spec), !spec.data_dependent.empty());
}

InferResult InferForward(const OpDecl& op, const Mesh& mesh, const std::vector<TensorArg>& inputs,
                         const Attrs& attrs) {
  return std::move(RunForward(op, mesh, inputs, attrs).rule);
}

struct PreparedForward::State {
  const OpDecl* op = nullptr;
  Mesh mesh;
  std::vector<Shape> shapes;
  Attrs attrs;
  // The rule built once (none when building it threw: every inference then runs whole and
  // throws as InferForward does).
  std::optional<ForwardRule> rule;
  std::optional<PreparedEinsumForward> einsum;  // the engine's, when the op has no own forward
};

PreparedForward::PreparedForward(const OpDecl& op, const Mesh& mesh, std::vector<Shape> shapes, Attrs attrs)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.op = &op;
  s.mesh = mesh;
  s.shapes = std::move(shapes);
  s.attrs = std::move(attrs);
  bool shapes_ok = op.variadic_inputs ? !s.shapes.empty() : s.shapes.size() == op.inputs.size();
  for (const Shape& shape : s.shapes) shapes_ok = shapes_ok && ShapeOk(shape);
  if (!shapes_ok) return;
  try {
    s.rule = BuildForwardRule(op, s.shapes, s.attrs);
  } catch (...) {
    return;  // thrown again, by the whole inference, for each request
  }
  if (s.rule->einsum && !op.forward_override) s.einsum.emplace(*s.rule->einsum, mesh, s.shapes.size());
}

PreparedForward::~PreparedForward() = default;
PreparedForward::PreparedForward(PreparedForward&&) noexcept = default;
PreparedForward& PreparedForward::operator=(PreparedForward&&) noexcept = default;

InferResult PreparedForward::Infer(const std::vector<const DistAttr*>& dists) {
  State& s = *state_;
  if (dists.size() != s.shapes.size()) {
    throw std::logic_error("PreparedForward of " + s.op->name + ": " + std::to_string(dists.size()) +
                           " dist attrs for " + std::to_string(s.shapes.size()) + " shapes");
  }
  bool valid = s.rule.has_value();
  for (size_t i = 0; valid && i < dists.size(); ++i) {
    valid = IsValid(*dists[i], s.mesh.ndim(), static_cast<int>(s.shapes[i].size()));
  }
  if (!valid) {  // InferForward's own error, named as it names it
    std::vector<TensorArg> inputs;
    for (size_t i = 0; i < dists.size(); ++i) inputs.push_back({s.shapes[i], *dists[i]});
    return InferForward(*s.op, s.mesh, inputs, s.attrs);
  }
  return RunForwardRule(*s.op, s.mesh, s.shapes, *s.rule, dists, s.einsum ? &*s.einsum : nullptr);
}

ForwardInference InferForwardWithShapes(const OpDecl& op, const Mesh& mesh,
                                        const std::vector<TensorArg>& inputs,
                                        const Attrs& attrs) {
  return RunForward(op, mesh, inputs, attrs);
}

InferResult InferReverse(const OpDecl& op, const Mesh& mesh,
                         const std::vector<Shape>& input_shapes,
                         const std::vector<TensorArg>& outputs, const Attrs& attrs) {
  CheckArity(op, input_shapes.size());
  for (size_t i = 0; i < input_shapes.size(); ++i) CheckShape(input_shapes[i], InputField(i));
  const Attrs normalized = op.NormalizeAttrs(attrs);
  RuleContext context{input_shapes, normalized};

  // The outputs the inputs give: a reverse request describes those outputs, so each given
  // output must have exactly their shape (rank and sizes), not only their rank.
  std::vector<Shape> expected;
  std::vector<size_t> ranks;
  std::optional<EinsumSpec> spec;
  std::optional<DimTransSpec> dimtrans;
  if (op.dimtrans) {
    dimtrans = op.dimtrans(context);
    ranks.push_back(dimtrans->outputs.size());
    expected = CheckedOutputShapes({dimtrans->output_shape});
  } else {
    spec = op.einsum(context);
    BindFactorSizes(*spec, input_shapes);
    for (const Notation& notation : spec->outputs) ranks.push_back(notation.size());
    expected = CheckedOutputShapes(EinsumOutputShapes(*spec), !spec->data_dependent.empty());
  }
  if (outputs.size() != ranks.size()) {
    ThrowInvalid("outputs", op.name + " has " + std::to_string(ranks.size()) +
                                " outputs here, got " + std::to_string(outputs.size()));
  }
  std::vector<DistAttr> dists;
  for (size_t o = 0; o < outputs.size(); ++o) {
    CheckShape(outputs[o].shape, OutputField(o));
    if (outputs[o].shape.size() != ranks[o]) {
      ThrowInvalid(OutputField(o) + ".shape", "rank " + std::to_string(outputs[o].shape.size()) +
                                                  ", the rule gives rank " + std::to_string(ranks[o]));
    }
    if (!ShapeFits(expected[o], outputs[o].shape)) {
      ThrowInvalid(OutputField(o) + ".shape",
                   ShapeText(outputs[o].shape) + ", but these inputs give " + op.name +
                       " an output of shape " + ShapeText(expected[o]));
    }
    Validate(outputs[o].dist, mesh, static_cast<int>(ranks[o]), OutputField(o));
    dists.push_back(outputs[o].dist);
  }
  if (dimtrans) return InferDimTransReverse(*dimtrans, mesh, dists[0]);
  return InferEinsumReverse(*spec, mesh, dists);
}

}  // namespace spmd
