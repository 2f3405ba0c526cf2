// The op declaration: everything per-op about its rule, in one value.
//
// A declaration names the op (Paddle's name), its inputs, outputs and attrs (kinds and
// defaults), and how to build its rule from shapes and attrs: an einsum notation
// (compute ops and most shape ops) or DimTrans transforms (reshape, flatten), plus an
// optional forward override (concat/stack's cost rule) and an optional check of the
// input dist attrs (embedding's row-sharding limits). Forward and reverse inference, attr
// normalisation and input validation are derived from it; nothing is hand-written per
// direction. It also says how far a float run may be from the reference (its tolerance
// class) and, where filled, how its backward is built from registered ops (a VjpGraph).
// References live in reference/ under the same name (rules/engine/op_list.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rules/model/attrs.h"
#include "rules/model/dtype.h"
#include "rules/engine/dimtrans.h"
#include "rules/engine/einsum.h"
#include "rules/model/tolerance.h"
#include "rules/engine/vjp.h"

namespace spmd {

using Shape = std::vector<int64_t>;

// An output dim whose size only the op's run decides (nonzero's count, unique's number of
// distinct values: EinsumSpec::data_dependent; SEMANTICS.md §3.1). The
// declaration gives this in place of the size; the rest of the shape is static.
inline constexpr int64_t kDataDependentDim = EinsumSpec::kDataDependentSize;

// Whether `shape` (an output shape the declaration gave) has a data-dependent dim.
inline bool HasDataDependentDim(const Shape& shape) {
  for (int64_t s : shape) {
    if (s == kDataDependentDim) return true;
  }
  return false;
}

// Whether `actual` (what a run gave) is a shape `declared` allows: the same rank, every
// static dim equal, any size >= 0 at a data-dependent dim.
inline bool ShapeFits(const Shape& declared, const Shape& actual) {
  if (declared.size() != actual.size()) return false;
  for (size_t d = 0; d < declared.size(); ++d) {
    if (declared[d] == kDataDependentDim ? actual[d] < 0 : declared[d] != actual[d]) return false;
  }
  return true;
}

struct AttrSpec {
  std::string name;
  AttrKind kind = AttrKind::kInt;
  std::optional<AttrValue> default_value;  // none: required
  std::vector<std::string> aliases;        // other names accepted (keepdim for keep_dim)
};

// What a rule builder sees: the shapes of the inputs (and, in reverse, of the outputs
// when the caller gave them) and the normalised attrs.
struct RuleContext {
  const std::vector<Shape>& input_shapes;
  const Attrs& attrs;
};

// What values the generators give an input (docs/CHECKER.md, "One case"). Real values are
// distinct (so that max and argmax have one answer) and sign-varying.
enum class ValueKind {
  kReal,      // distinct values in (-2, 2)
  kPositive,  // distinct values in (0.1, 2): sqrt, log, probabilities
  kNonZero,   // distinct values with |v| >= 0.5: divisors
  kBool,      // 0 or 1
  kNearOne,   // distinct values with |v| within a few percent of 1 (never 1), random signs:
              // products of many stay near 1 in magnitude
  kIndex,     // integers in [0, bound): ids, labels
  kUnit,      // distinct values in (-0.9, 0.9): asin, atanh, logit (inside their domains)
  kAboveOne,  // distinct values in (1.1, 3): acosh (inside its domain, away from its pole at 1)
  kProbability,  // distinct values in (0.05, 0.95): bernoulli's probabilities
  kBoxes,     // rows of 4 (x1, y1, x2, y2) with x1 < x2 and y1 < y2, each in (0.1, 2): roi_align's
              // boxes (drawn as kPositive, then each row's pairs ordered: ArrangeInputValues)
  kCounts,    // integers >= 0 summing to `bound`: roi_align's rois per image (drawn as kIndex
              // below bound + 1, then turned into the gaps between sorted cuts: ArrangeInputValues)
  kSmallInt,  // integers in [-bound, bound] in a floating dtype (not distinct): zeros and repeats
              // common, for the ops whose output counts them (nonzero, unique)
};
struct InputValues {
  ValueKind kind = ValueKind::kReal;
  int64_t bound = 0;  // kIndex: one past the largest value; kSmallInt: the largest magnitude
  double ones = 0.5;  // kBool: the probability of a 1
  // kIndex, when hit_end > hit_begin: one element (a random one) is drawn from
  // [hit_begin, hit_end) instead, so an op whose output is zero for ids outside a range
  // (a vocabulary shard) reads at least one row and a wrong claim on it stays visible.
  int64_t hit_begin = 0;
  int64_t hit_end = 0;
};

// The values drawn element by element for `values` (each generator's own draws: kBoxes as
// kPositive, kCounts as kIndex below bound + 1) made into the kind's: kBoxes orders each row's
// (x1, x2) and (y1, y2); kCounts takes the n drawn values, sorted, as cuts of [0, bound] and
// gives the n gaps from 0 to the second cut, ..., from the last cut to bound (the first cut is
// dropped), so they sum to bound. Other kinds are left as drawn. Deterministic: every generator
// keeps its own random stream.
void ArrangeInputValues(const InputValues& values, const Shape& shape, std::vector<double>& data);

// Whether an input of this kind holds integers (int64: ids, counts).
inline bool IsIntegerKind(ValueKind kind) { return kind == ValueKind::kIndex || kind == ValueKind::kCounts; }

// What a localizer sees when one rank runs the op on its shards (SEMANTICS.md §3,
// soundness): global and local shapes of every input and output, and the global offset
// of every input shard.
struct LocalContext {
  const Attrs& attrs;  // normalised
  const std::vector<Shape>& global_inputs;
  const std::vector<Shape>& local_inputs;
  const std::vector<Shape>& input_offsets;
  const std::vector<Shape>& global_outputs;
  const std::vector<Shape>& local_outputs;
};

// Examples for the checker's generators: shapes and attrs an op is checked on. Sizes
// come from a palette the checker picks (divisible by the mesh axes, uneven, smaller than
// a mesh axis, 1), so one example gives every kind of layout.
struct SizePalette {
  std::vector<int64_t> sizes;
  int64_t operator[](size_t i) const { return sizes[i % sizes.size()]; }
};
struct Example {
  std::vector<Shape> shapes;
  Attrs attrs;
};
using ExampleBuilder = std::function<std::vector<Example>(const SizePalette&)>;

using EinsumBuilder = std::function<EinsumSpec(const RuleContext&)>;
using Localizer = std::function<Attrs(const LocalContext&)>;
using ValuesBuilder = std::function<std::vector<InputValues>(const RuleContext&)>;
using DimTransBuilder = std::function<DimTransSpec(const RuleContext&)>;
using ForwardOverride = std::function<InferResult(const RuleContext&, const Mesh&,
                                                  const std::vector<DistAttr>&)>;
using DistCheck = std::function<void(const RuleContext&, const std::vector<DistAttr>&)>;
// Builds the op's vector-Jacobian product for these input shapes and normalised attrs.
using VjpBuilder = std::function<VjpGraph(const RuleContext&)>;

// An op whose local program exchanges data with its peers (Paddle's c_* ops, which hold a
// collective inside): on each rank it runs its Phase::kStats kernel (KernelRef{op, phase},
// rules/engine/phase.h) on the local inputs (one tensor), all-gathers that tensor over the mesh
// axes that shard input `input`'s dim `dim(context)` in the rule's required layout (pieces
// stacked on a new leading dim in the dim's order), then its Phase::kFinish on the local
// inputs and the gathered tensor. Unsharded, the gather would be of one piece, so Dispatch and the
// checker run the op's own kernel / reference instead (the same values). The checker
// simulates the gather; Dispatch runs it on the Communicator. The builder marks the dim's factor exchanged
// in the rule's spec (EinsumSpec::exchanged), so outputs without it are whole. A dim < 0
// means no exchange for these shapes and attrs (a 0-d input, cumsum's flatten): the op
// runs whole, as one without an exchange.
struct Exchange {
  int input = 0;
  std::function<int(const RuleContext&)> dim;
};

struct OpDecl {
  std::string name;
  std::vector<std::string> inputs;   // names; a variadic op has one name (e.g. "xs")
  bool variadic_inputs = false;      // 1 or more inputs
  std::vector<std::string> outputs;  // names; the output count comes from the rule
  std::vector<AttrSpec> attrs;
  EinsumBuilder einsum;              // exactly one of einsum / dimtrans
  DimTransBuilder dimtrans;
  ForwardOverride forward_override;  // optional
  DistCheck dist_check;              // optional, forward only
  ValuesBuilder values;              // optional: every input kReal when absent
  Localizer localize;                // optional: attrs unchanged on a shard when absent
  // The fields of the localized part (Attrs::local()) that `localize` sets and the op's plan,
  // reference and kernels read; no other field is set (the builder's wrapper refuses it) or
  // read (ValidationAgreement.UndeclaredLocalFieldsAreIgnored).
  std::vector<LocalField> localized;
  ExampleBuilder examples;           // shapes and attrs the checker uses
  // Which kind of computation the op is, for the bound on a float run against the
  // reference (rules/model/tolerance.h). Every op declares one; the completeness test fails
  // without it.
  std::optional<ToleranceClass> tolerance;
  VjpBuilder vjp;                    // optional: the backward as registered ops
  // Real inputs the backward holds constant: no gradient by the op's definition although the
  // output depends on them (roi_align's boxes, as Paddle's and every RoIAlign's). The VJP
  // checks (checker/vjp_test.cc, checker/grad_check.cc) skip their finite differences and
  // require the graph to give them none.
  std::vector<int> constant_inputs;
  std::optional<Exchange> exchange;  // optional: a collective inside the op (see Exchange)

  // Returns the value kind of every input for these shapes and normalised attrs.
  std::vector<InputValues> InputValueKinds(const RuleContext& context) const;

  // Returns the attrs with every declared attr present (defaults filled, aliases resolved,
  // kinds converted: int -> float, int -> ints, ints -> floats). Throws
  // SpmdError(kInvalidArgument, "attrs.NAME") for an undeclared name, a wrong kind, or a
  // missing required attr, and SpmdError(kInvalidArgument, "local.FIELD") for a set field of
  // the localized part (only a localizer sets it, after normalisation).
  Attrs NormalizeAttrs(const Attrs& given) const;
};

// Whether input i of `op` is held constant by its backward (OpDecl::constant_inputs).
inline bool IsConstantInput(const OpDecl& op, size_t i) {
  for (int c : op.constant_inputs) {
    if (c >= 0 && static_cast<size_t>(c) == i) return true;
  }
  return false;
}

// The exchanged dim of `op` for these shapes and attrs, or -1 when it exchanges nothing
// here (no exchange declared, or Exchange::dim < 0).
inline int ExchangedDim(const OpDecl& op, const RuleContext& context) {
  return op.exchange ? op.exchange->dim(context) : -1;
}

// `fn` wrapped so that a localized field it sets and `fields` does not list throws
// std::logic_error (a declaration bug, not a caller's). Empty when `fn` is.
Localizer CheckedLocalizer(const std::string& op, std::vector<LocalField> fields, Localizer fn);

// A small builder so that a declaration reads as one expression.
class OpBuilder {
 public:
  explicit OpBuilder(std::string name) { decl_.name = std::move(name); }
  OpBuilder& Inputs(std::vector<std::string> names) {
    decl_.inputs = std::move(names);
    return *this;
  }
  OpBuilder& VariadicInputs(std::string name) {
    decl_.inputs = {std::move(name)};
    decl_.variadic_inputs = true;
    return *this;
  }
  OpBuilder& Outputs(std::vector<std::string> names) {
    decl_.outputs = std::move(names);
    return *this;
  }
  OpBuilder& Attr(std::string name, AttrKind kind, std::optional<AttrValue> default_value,
                  std::vector<std::string> aliases = {}) {
    decl_.attrs.push_back({std::move(name), kind, std::move(default_value), std::move(aliases)});
    return *this;
  }
  OpBuilder& Einsum(EinsumBuilder builder) {
    decl_.einsum = std::move(builder);
    return *this;
  }
  OpBuilder& DimTrans(DimTransBuilder builder) {
    decl_.dimtrans = std::move(builder);
    return *this;
  }
  OpBuilder& Forward(ForwardOverride fn) {
    decl_.forward_override = std::move(fn);
    return *this;
  }
  OpBuilder& Examples(ExampleBuilder fn) {
    decl_.examples = std::move(fn);
    return *this;
  }
  // `fn` rewrites the attrs for one shard and sets the localized fields `fields` (none
  // when it only rewrites named attrs, as expand's target shape).
  OpBuilder& Localize(std::vector<LocalField> fields, Localizer fn) {
    decl_.localized = std::move(fields);
    decl_.localize = std::move(fn);
    return *this;
  }
  OpBuilder& Values(ValuesBuilder fn) {
    decl_.values = std::move(fn);
    return *this;
  }
  OpBuilder& CheckDist(DistCheck fn) {
    decl_.dist_check = std::move(fn);
    return *this;
  }
  OpBuilder& Tolerance(ToleranceClass tolerance) {
    decl_.tolerance = tolerance;
    return *this;
  }
  OpBuilder& Vjp(VjpBuilder fn) {
    decl_.vjp = std::move(fn);
    return *this;
  }
  OpBuilder& ConstantInputs(std::vector<int> inputs) {
    decl_.constant_inputs = std::move(inputs);
    return *this;
  }
  OpBuilder& ExchangeAlong(int input, std::function<int(const RuleContext&)> dim) {
    decl_.exchange = Exchange{input, std::move(dim)};
    return *this;
  }
  // The builder is a temporary of one declaration expression: converting moves out. An
  // exchange marks its dim's factor exchanged in every spec the rule builds.
  operator OpDecl() {
    decl_.localize = CheckedLocalizer(decl_.name, decl_.localized, std::move(decl_.localize));
    if (decl_.exchange && decl_.einsum) {
      decl_.einsum = [einsum = std::move(decl_.einsum), exchange = *decl_.exchange](const RuleContext& c) {
        EinsumSpec spec = einsum(c);
        const int dim = exchange.dim(c);
        if (dim >= 0) spec.exchanged = {spec.inputs.at(exchange.input).at(dim)};
        return spec;
      };
    }
    return std::move(decl_);
  }

 private:
  OpDecl decl_;
};

// One tensor of a rule request: its shape and (forward inputs, reverse outputs) its dist
// attr.
struct TensorArg {
  Shape shape;
  DistAttr dist;
};

// Forward inference for `op`: validates arity, ranks and dist attrs against `mesh`,
// normalises attrs, builds the rule and runs it. Throws SpmdError naming the field.
InferResult InferForward(const OpDecl& op, const Mesh& mesh, const std::vector<TensorArg>& inputs,
                         const Attrs& attrs);

// InferForward for many dist attrs of the same inputs (the checker's families: one op,
// mesh, input shapes and attrs, every combination of input dist attrs): the arity and
// shape checks, the normalised attrs, the rule built for the shapes (DimTrans or einsum
// spec) and the engine's context are made once, and the engine keeps the bounds its
// pricing computed (PreparedEinsumForward). Infer(dists) gives what InferForward gives for
// {shapes[i], *dists[i]} and the attrs: the same answer, or the same error (a request
// InferForward refuses runs through InferForward). One dist attr per shape
// (std::logic_error otherwise). Not safe to use from two threads at once.
class PreparedForward {
 public:
  PreparedForward(const OpDecl& op, const Mesh& mesh, std::vector<Shape> shapes, Attrs attrs);
  ~PreparedForward();
  PreparedForward(PreparedForward&&) noexcept;
  PreparedForward& operator=(PreparedForward&&) noexcept;

  InferResult Infer(const std::vector<const DistAttr*>& dists);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// InferForward plus what it computes on the way: the normalised attrs and the global
// output shapes (as InferOutputShapes gives them). Dispatch needs all three; one call
// validates and builds the rule once.
struct ForwardInference {
  InferResult rule;
  Attrs normalized;
  std::vector<Shape> output_shapes;
};
ForwardInference InferForwardWithShapes(const OpDecl& op, const Mesh& mesh,
                                        const std::vector<TensorArg>& inputs,
                                        const Attrs& attrs);

// Reverse inference: `input_shapes` and the outputs' shapes and dist attrs. Each output's
// shape must fit what the inputs give (ShapeFits: any size at a data-dependent dim).
InferResult InferReverse(const OpDecl& op, const Mesh& mesh,
                         const std::vector<Shape>& input_shapes,
                         const std::vector<TensorArg>& outputs, const Attrs& attrs);

// Returns the global shape of every output for these input shapes and normalised attrs:
// the einsum spec's factor sizes, or the DimTrans output shape; kDataDependentDim at a
// data-dependent dim (EinsumSpec::data_dependent), whose size the run gives (ShapeFits
// compares). Validates as InferForward does (arity, input shapes, attrs) and checks every
// output shape (sizes >= 0 but at data-dependent dims, at most 2^62 elements;
// SpmdError(kInvalidArgument, "outputs[o].shape")). Every caller that needs output shapes
// before a kernel runs (Dispatch, the checker, the generators) uses this one.
std::vector<Shape> InferOutputShapes(const OpDecl& op, const std::vector<Shape>& input_shapes,
                                     const Attrs& normalized_attrs);

// Returns the op's rule as an einsum spec, bound to these shapes (factor sizes filled), for
// these shapes and attrs, or nothing for a DimTrans op (used by `spmd explain` and the
// tests).
std::optional<EinsumSpec> BuildEinsumSpec(const OpDecl& op, const std::vector<Shape>& shapes,
                                          const Attrs& normalized_attrs);

}  // namespace spmd
