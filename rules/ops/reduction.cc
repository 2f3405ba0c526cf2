// Reductions: the output drops (or keeps as `1`) the reduced letters. Sum-like ones leave
// the output partial with their own reduce op (D3, D7); p_norm needs the reduced factors
// whole (D2); logsumexp exchanges its largest reduced dim and needs the others whole;
// argmax needs its axis whole; cumsum exchanges its axis.
#include <algorithm>
#include <cmath>

#include "rules/model/error.h"
#include "rules/engine/notation.h"
#include "rules/ops/reduction_plan.h"
#include "rules/engine/registry.h"
#include "rules/ops/vjp_util.h"

// The VJPs of this file's ops (rules/engine/vjp.h), attached below with
// `.Vjp(vjps::Name)`.
namespace spmd::vjps {
namespace {

using notation::Ints;
using notation::MakeAttrs;
using Ref = VjpRef;

// A reduction's input shape with the reduced dims set to 1 (keep_dim's output shape).
Shape KeptShape(const Shape& x, const std::vector<int64_t>& axis, bool all) {
  const int rank = static_cast<int>(x.size());
  Shape kept = x;
  if (all || axis.empty()) return Shape(x.size(), 1);
  for (int d : notation::NormalizeAxes(axis, rank, "attrs.axis")) kept[d] = 1;
  return kept;
}

// Reductions: reshape to the kept-dims shape, expand back (mean also scales by 1/n).
VjpGraph Sum(const RuleContext& c) {
  VjpGraph g;
  const Shape& x = c.input_shapes[0];
  const Shape kept = KeptShape(x, c.attrs.GetInts("axis"), c.attrs.GetBool("reduce_all"));
  // The cotangent has the output's shape (kept, or kept without the reduced dims): the
  // same values as `kept`, so a reshape gives it the reduced dims back as 1s.
  const Ref reshaped = g.Add("reshape", {Ref::OutputGrad(0)}, MakeAttrs({{"shape", kept}}));
  g.input_grads = {ExpandTo(g, reshaped, kept, x)};
  return g;
}

VjpGraph Mean(const RuleContext& c) {
  VjpGraph g = Sum(c);
  const Shape& x = c.input_shapes[0];
  const Shape kept = KeptShape(x, c.attrs.GetInts("axis"), c.attrs.GetBool("reduce_all"));
  const int64_t count = Numel(kept) == 0 ? 0 : Numel(x) / Numel(kept);
  if (count == 0) ThrowUnsupported("vjp", "mean over zero elements has no gradient");
  g.input_grads[0] = ScaleBy(g, *g.input_grads[0], 1.0 / static_cast<double>(count));
  return g;
}

// cumsum: the prefix sums run the other way.
// out_i = sum over j <= i (j < i exclusive; j >= i reversed) of x_j, so x_j's gradient
// sums g_i over the same pairs seen from j: the prefix sums in the other direction.
VjpGraph Cumsum(const RuleContext& c) {
  VjpGraph g;
  const Shape& x = c.input_shapes[0];
  Attrs attrs = MakeAttrs({{"axis", c.attrs.GetInt("axis")},
                           {"exclusive", c.attrs.GetBool("exclusive")},
                           {"reverse", !c.attrs.GetBool("reverse")}});
  if (c.attrs.GetBool("flatten")) {  // out is x flattened: sum along it, then x's shape
    attrs.Set("axis", int64_t{0});
    const Ref summed = g.Add("cumsum", {Ref::OutputGrad(0)}, attrs);
    g.input_grads = {Reshape(g, summed, {Numel(x)}, x)};
    return g;
  }
  g.input_grads = {g.Add("cumsum", {Ref::OutputGrad(0)}, attrs)};
  return g;
}

// Reductions.
VjpGraph MeanAll(const RuleContext& c) {
  VjpGraph g;
  const Shape& x = c.input_shapes[0];
  const int64_t count = Numel(x);
  if (count == 0) ThrowUnsupported("vjp", "mean_all over zero elements has no gradient");
  const Ref expanded = ExpandReduced(g, Ref::OutputGrad(0), Shape(x.size(), 1), x);
  g.input_grads = {ScaleBy(g, expanded, 1.0 / static_cast<double>(count))};
  return g;
}

// 2 x g
// d sum(x^2) = 2 x g.
VjpGraph SquaredL2Norm(const RuleContext& c) {
  VjpGraph g;
  const Shape& x = c.input_shapes[0];
  const Shape kept = KeptShape(x, c.attrs.GetInts("axis"), false);
  const Ref expanded = ExpandReduced(g, Ref::OutputGrad(0), kept, x);
  g.input_grads = {g.Add("multiply", {expanded, ScaleBy(g, Ref::Input(0), 2)})};
  return g;
}

// Every element equal to the extreme gets the cotangent (Paddle's max_grad: ties share
// it whole). x is never beyond its own extreme, so "not below the max" is "equal to it".
VjpGraph ReduceExtreme(const RuleContext& c, const char* beyond) {
  VjpGraph g;
  const Shape& x = c.input_shapes[0];
  const Shape kept = KeptShape(x, c.attrs.GetInts("axis"), c.attrs.GetBool("reduce_all"));
  const Ref extreme = g.Add("reshape", {Ref::Output(0)}, MakeAttrs({{"shape", kept}}));
  const Ref not_it = g.Add(beyond, {Ref::Input(0), extreme});
  g.input_grads = {Drop(g, not_it, ExpandReduced(g, Ref::OutputGrad(0), kept, x))};
  return g;
}

// g where x equals the max (ties share it)
VjpGraph Max(const RuleContext& c) { return ReduceExtreme(c, "less_than"); }

VjpGraph Min(const RuleContext& c) { return ReduceExtreme(c, "greater_than"); }

// g times the product of the others (no division)
// x_i gets g times the product of the slice's other elements, without dividing by x_i: a
// slice without zeros gives g out / x_i; with one zero, the zero gets g times the product
// of the rest and the others 0; with two or more, all get 0. The zeros are counted and
// replaced by ones (`safe`) so that no quotient is taken at a zero (Paddle's prod_grad, g
// out / x, gives NaN there).
VjpGraph Prod(const RuleContext& c) {
  VjpGraph g;
  const Shape& x = c.input_shapes[0];
  const Shape kept = KeptShape(x, c.attrs.GetInts("axis"), c.attrs.GetBool("reduce_all"));
  const Attrs reduce = MakeAttrs({{"axis", c.attrs.GetInts("axis")},
                                  {"keep_dim", true},
                                  {"reduce_all", c.attrs.GetBool("reduce_all")}});
  const Ref in = Ref::Input(0);
  const Ref zero = Zeros(g, in), one = Filled(g, in, 1);
  const Ref nonzero = g.Add("greater_than", {g.Add("abs", {in}), zero});
  const Ref safe = g.Add("where", {nonzero, in, one});
  const Ref is_zero = g.Add("where", {nonzero, zero, one});
  const Ref rest = g.Add("prod", {safe}, reduce);      // the product of the nonzeros
  const Ref count = g.Add("sum", {is_zero}, reduce);   // the zeros in the slice
  const Ref half = Filled(g, count, 0.5);
  const Ref none = ExpandTo(g, g.Add("less_than", {count, half}), kept, x);
  const Ref one_zero = ExpandTo(g, g.Add("less_than", {g.Add("abs", {ScaleBy(g, count, 1, -1)}), half}), kept, x);
  const Ref scaled = ExpandTo(g, g.Add("multiply", {g.Add("reshape", {Ref::OutputGrad(0)}, MakeAttrs({{"shape", kept}})), rest}), kept, x);
  const Ref without_zeros = g.Add("divide", {scaled, safe});
  const Ref at_the_zero = g.Add("multiply", {scaled, is_zero});
  g.input_grads = {g.Add("where", {none, without_zeros, Keep(g, one_zero, at_the_zero)})};
  return g;
}

// exp(x - out) g
// d logsumexp = exp(x - out) g.
VjpGraph Logsumexp(const RuleContext& c) {
  VjpGraph g;
  const Shape& x = c.input_shapes[0];
  const Shape kept = KeptShape(x, c.attrs.GetInts("axis"), c.attrs.GetBool("reduce_all"));
  const Ref out = g.Add("reshape", {Ref::Output(0)}, MakeAttrs({{"shape", kept}}));
  const Ref weights = g.Add("exp", {g.Add("subtract", {Ref::Input(0), out})});
  g.input_grads = {g.Add("multiply", {weights, ExpandReduced(g, Ref::OutputGrad(0), kept, x)})};
  return g;
}

// sign(x) |x|^(p-1) / max(out, eps)^(p-1) g
// d ||x||_p = sign(x) |x|^(p-1) / out^(p-1) g; out is floored at epsilon as Paddle's
// p_norm_grad does. p = 1 and p = 2 are exact compositions (sign(x), x / out); other p
// write the ratio's power as exp((p - 1) log(|x| / out)).
VjpGraph PNorm(const RuleContext& c) {
  VjpGraph g;
  const Shape& x = c.input_shapes[0];
  const int rank = static_cast<int>(x.size());
  const double p = c.attrs.GetFloat("porder");
  Shape kept(x.size(), 1);
  if (!c.attrs.GetBool("asvector")) {
    const int axis = notation::NormalizeAxisOrScalar(c.attrs.GetInt("axis"), rank, "attrs.axis");
    kept = x;
    if (axis >= 0) kept[axis] = 1;
  }
  const Ref g_x = ExpandReduced(g, Ref::OutputGrad(0), kept, x);
  const Ref zero = Zeros(g, Ref::Input(0));
  const Ref positive = g.Add("greater_than", {Ref::Input(0), zero});
  const Ref negative = g.Add("less_than", {Ref::Input(0), zero});
  auto signed_by_x = [&](Ref magnitude) {  // sign(x) magnitude
    return g.Add("where", {positive, magnitude, Keep(g, negative, ScaleBy(g, magnitude, -1))});
  };
  if (p == 1.0) {
    g.input_grads = {signed_by_x(g_x)};
    return g;
  }
  const Ref out = g.Add("reshape", {Ref::Output(0)}, MakeAttrs({{"shape", kept}}));
  const Ref floored = g.Add("maximum", {out, Filled(g, out, c.attrs.GetFloat("epsilon"))});
  if (p == 2.0) {
    g.input_grads = {g.Add("multiply", {g_x, g.Add("divide", {Ref::Input(0), floored})})};
    return g;
  }
  const Ref magnitude = g.Add("abs", {Ref::Input(0)});
  const Ref ratio = g.Add("divide", {magnitude, floored});
  const Ref power = g.Add("exp", {ScaleBy(g, g.Add("log", {ratio}), p - 1)});
  g.input_grads = {signed_by_x(g.Add("multiply", {g_x, power}))};
  return g;
}

// x / out g
// d sqrt(sum x^2) = x / out g, as Paddle's frobenius_norm_grad (an all-zero slice gives
// 0 / 0: NaN there, which training refuses as non-finite).
VjpGraph FrobeniusNorm(const RuleContext& c) {
  VjpGraph g;
  const Shape& x = c.input_shapes[0];
  const Shape kept = KeptShape(x, c.attrs.GetInts("axis"), c.attrs.GetBool("reduce_all"));
  const Ref out = g.Add("reshape", {Ref::Output(0)}, MakeAttrs({{"shape", kept}}));
  const Ref g_x = ExpandReduced(g, Ref::OutputGrad(0), kept, x);
  g.input_grads = {g.Add("multiply", {g_x, g.Add("divide", {Ref::Input(0), out})})};
  return g;
}

}  // namespace
}  // namespace spmd::vjps

namespace spmd::declare {
namespace {

using notation::FromSignatures;
using notation::Ints;
using notation::MakeAttrs;

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

using shape::ReducedDims;

// x `abc`, reduced {1}: out `ac`, or `a1c` with keep_dim.
EinsumSpec Reduction(int rank, const std::vector<bool>& reduced, bool keep_dim) {
  std::string out;
  for (int d = 0; d < rank; ++d) {
    if (!reduced[d]) {
      out.push_back(static_cast<char>('a' + d));
    } else if (keep_dim) {
      out.push_back('1');
    }
  }
  return notation::FromLetters({notation::Letters(rank)}, {out});
}

// sum, mean, max, ...: attrs axis, keep_dim (alias keepdim), reduce_all.
OpBuilder SumLike(const char* name, ReduceOp reduce, PartialAcceptance accept) {
  return OpBuilder(name).Inputs({"x"}).Outputs({"out"})
      .Attr("axis", AttrKind::kInts, std::vector<int64_t>{})
      .Attr("keep_dim", AttrKind::kBool, false, {"keepdim"})
      .Attr("reduce_all", AttrKind::kBool, false)
      .Einsum([reduce, accept](const RuleContext& c) {
        const int rank = static_cast<int>(c.input_shapes[0].size());
        EinsumSpec spec = Reduction(rank, plan::PlanReduce(c.input_shapes, c.attrs, "keep_dim").reduced,
                                    c.attrs.GetBool("keep_dim"));
        spec.reduce = reduce;
        spec.accept = accept;
        spec.accepted_op = reduce;
        return spec;
      })
      .Examples(FromSignatures({{{"abc"}, MakeAttrs({{"axis", Ints{1}}})},
                                {{"abc"}, MakeAttrs({{"axis", Ints{0, -1}}, {"keep_dim", true}})},
                                {{"ab"}, MakeAttrs({{"reduce_all", true}})}}));
}

// A norm's reduced dim of size 1 may stay sharded: one shard holds its element and the
// others an empty slice, whose norm is 0, so the output is partial(sum) there (Paddle's
// answer, 0 bytes, where replicating the dim broadcasts x). Un-forces those factors.
void LetSizeOneNormDimsStaySharded(EinsumSpec& spec, const Shape& x) {
  std::erase_if(spec.forced_replicated, [&](FactorId f) { return x[static_cast<size_t>(f)] == 1; });
}

void ForceReducedReplicated(EinsumSpec& spec, int exchanged_dim = -1) {
  for (size_t d = 0; d < spec.inputs[0].size(); ++d) {
    const FactorId f = spec.inputs[0][d];
    if (!Contains(spec.outputs[0], f) && static_cast<int>(d) != exchanged_dim) spec.forced_replicated.push_back(f);
  }
}

// logsumexp's exchanged dim: its largest reduced dim (the first of equal size), which may
// stay sharded (each piece sends its max and sum of exp(x - max) per output element); the
// other reduced dims are forced replicated, as one gather runs over one dim's mesh axes.
// -1 when nothing is reduced (a 0-d x).
int LogsumexpExchangedDim(const RuleContext& c) {
  const Shape& x = c.input_shapes[0];
  const int rank = static_cast<int>(x.size());
  const std::vector<bool> reduced =
      ReducedDims(c.attrs.GetInts("axis"), c.attrs.GetBool("reduce_all"), rank, "attrs.axis");
  int best = -1;
  for (int d = 0; d < rank; ++d) {
    if (reduced[d] && (best < 0 || x[d] > x[best])) best = d;
  }
  return best;
}

}  // namespace

OpDecl sum() {
  return SumLike("sum", ReduceOp::kSum, PartialAcceptance::kSameOp)
      .Tolerance(ToleranceClass::kSumOfProducts)
      .Vjp(vjps::Sum);
}
// A shard's mean divides by the global count of reduced elements (D7).
Attrs LocalizeMean(const LocalContext& c) {
  const int64_t in = NumElements(c.global_inputs[0]), out = NumElements(c.global_outputs[0]);
  return c.attrs.WithLocal({.count = out == 0 ? int64_t{0} : in / out});
}

// A mean over no elements has no value to fill a non-empty output with: refused by the
// plan, as the reference and the kernels refuse it.
static EinsumSpec CheckMeanCount(EinsumSpec spec, const RuleContext& c) {
  (void)plan::PlanMean(c.input_shapes, c.attrs);
  return spec;
}

OpDecl mean() {
  OpDecl op = SumLike("mean", ReduceOp::kSum, PartialAcceptance::kSameOp);  // linear (D7)
  op.tolerance = ToleranceClass::kSumOfProducts;
  op.vjp = vjps::Mean;
  op.localized = {LocalField::kCount};
  op.localize = CheckedLocalizer(op.name, op.localized, LocalizeMean);
  op.einsum = [sum = op.einsum](const RuleContext& c) { return CheckMeanCount(sum(c), c); };
  return op;
}
OpDecl max() {
  return SumLike("max", ReduceOp::kMax, PartialAcceptance::kSameOp)
      .Tolerance(ToleranceClass::kExact)
      .Vjp(vjps::Max);
}
OpDecl min() {
  return SumLike("min", ReduceOp::kMin, PartialAcceptance::kSameOp)
      .Tolerance(ToleranceClass::kExact)
      .Vjp(vjps::Min);
}
// Values near 1: a product over many elements neither underflows nor falls under the
// checker's tolerance, so a wrong partial claim (a sum for a product) stays visible.
OpDecl prod() {
  return SumLike("prod", ReduceOp::kProd, PartialAcceptance::kNone)
      .Tolerance(ToleranceClass::kSumOfProducts)
      .Vjp(vjps::Prod)
      .Values([](const RuleContext&) { return std::vector<InputValues>{{ValueKind::kNearOne}}; });
}
// Logical reductions get 0/1 inputs: with nonzero reals every wrong rule would pass. The
// share of ones makes each reduced slice of m elements all ones (all) or all zeros (any)
// half the time, so both results occur however many elements a slice has; with 1/2,
// all() over 18 elements would be 0 nearly everywhere and hide a wrong claim.
OpDecl Logical(const char* name, ReduceOp reduce) {
  OpDecl op = SumLike(name, reduce, PartialAcceptance::kNone);
  op.tolerance = ToleranceClass::kExact;  // 0/1 in, 0/1 out
  op.values = [einsum = op.einsum, reduce](const RuleContext& c) {
    EinsumSpec spec = einsum(c);
    BindFactorSizes(spec, c.input_shapes);
    const int64_t in = NumElements(c.input_shapes[0]);
    const int64_t out = NumElements(EinsumOutputShapes(spec)[0]);
    const double m = static_cast<double>(std::max<int64_t>(out > 0 ? in / out : 1, 1));
    const double all_ones = std::pow(0.5, 1.0 / m);
    InputValues values{ValueKind::kBool};
    values.ones = reduce == ReduceOp::kAll ? all_ones : 1.0 - all_ones;
    return std::vector<InputValues>{values};
  };
  return op;
}

OpDecl any() { return Logical("any", ReduceOp::kAny); }
OpDecl all() { return Logical("all", ReduceOp::kAll); }

OpDecl squared_l2_norm() {
  return OpBuilder("squared_l2_norm").Inputs({"x"}).Outputs({"out"})
      .Vjp(vjps::SquaredL2Norm)
      .Tolerance(ToleranceClass::kSumOfProducts)
      .Attr("axis", AttrKind::kInts, std::vector<int64_t>{})
      .Attr("keep_dim", AttrKind::kBool, false, {"keepdim"})
      .Einsum([](const RuleContext& c) {
        const int rank = static_cast<int>(c.input_shapes[0].size());
        return Reduction(rank, ReducedDims(c.attrs.GetInts("axis"), false, rank, "attrs.axis"),
                         c.attrs.GetBool("keep_dim"));
      })
      .Examples(FromSignatures({{{"abc"}, MakeAttrs({{"axis", Ints{1}}})}, {{"ab"}}}));
}

OpDecl mean_all() {
  return OpBuilder("mean_all").Inputs({"x"}).Outputs({"out"})
      .Vjp(vjps::MeanAll)
      .Tolerance(ToleranceClass::kSumOfProducts)
      .Einsum([](const RuleContext& c) {
    (void)plan::PlanMeanAll(c.input_shapes, c.attrs);
    const int rank = static_cast<int>(c.input_shapes[0].size());
    return Reduction(rank, std::vector<bool>(rank, true), false);
  }).Localize({LocalField::kCount}, LocalizeMean).Examples(FromSignatures({{{"abc"}}, {{"a"}}}));
}

OpDecl logsumexp() {
  return OpBuilder("logsumexp").Inputs({"x"}).Outputs({"out"})
      .Vjp(vjps::Logsumexp)
      .Tolerance(ToleranceClass::kLogDomain)
      .Attr("axis", AttrKind::kInts, std::vector<int64_t>{})
      .Attr("keepdim", AttrKind::kBool, false, {"keep_dim"})
      .Attr("reduce_all", AttrKind::kBool, false)
      .Einsum([](const RuleContext& c) {
        const int rank = static_cast<int>(c.input_shapes[0].size());
        EinsumSpec spec = Reduction(
            rank, ReducedDims(c.attrs.GetInts("axis"), c.attrs.GetBool("reduce_all"), rank,
                              "attrs.axis"),
            c.attrs.GetBool("keepdim"));
        ForceReducedReplicated(spec, LogsumexpExchangedDim(c));
        return spec;
      })
      .ExchangeAlong(0, LogsumexpExchangedDim)
      .Examples(FromSignatures({{{"abc"}, MakeAttrs({{"axis", Ints{1}}})},
                                {{"ab"}, MakeAttrs({{"keepdim", true}})},
                                {{"abc"}, MakeAttrs({{"axis", Ints{-1, 0}}})}}));
}

OpDecl p_norm() {
  return OpBuilder("p_norm").Inputs({"x"}).Outputs({"out"})
      .Vjp(vjps::PNorm)
      .Tolerance(ToleranceClass::kRelative)
      .Attr("porder", AttrKind::kFloat, 2.0)
      .Attr("axis", AttrKind::kInt, int64_t{-1})
      .Attr("epsilon", AttrKind::kFloat, 1e-12)
      .Attr("keepdim", AttrKind::kBool, false, {"keep_dim"})
      .Attr("asvector", AttrKind::kBool, false)
      .Einsum([](const RuleContext& c) {
        const plan::PNormPlan p = plan::PlanPNorm(c.input_shapes, c.attrs);
        const int rank = static_cast<int>(c.input_shapes[0].size());
        EinsumSpec spec = Reduction(rank, p.reduce.reduced, c.attrs.GetBool("keepdim"));
        ForceReducedReplicated(spec);
        // The empty slice's norm is 0 only for porder > 0 (the sum of no |x|^p, to the
        // 1/p); porder < 0 makes it infinite: forced.
        if (p.porder > 0) LetSizeOneNormDimsStaySharded(spec, c.input_shapes[0]);
        return spec;
      })
      .Examples(FromSignatures({{{"abc"}, MakeAttrs({{"axis", int64_t{1}}})},
                                {{"ab"}, MakeAttrs({{"porder", 3.0}, {"asvector", true}})}}));
}

// sqrt(sum(x^2)) over `axis` (every dim with reduce_all or an empty list), Paddle's
// frobenius_norm. The norm of a slice is not a reduction of its pieces' norms, so the
// reduced dims are forced replicated (a partial input is reduced first), except those of
// size 1, as p_norm's: one shard holds the element and the others an empty slice, whose
// norm is 0, so the output is partial(sum) there.
OpDecl frobenius_norm() {
  OpDecl op = SumLike("frobenius_norm", ReduceOp::kSum, PartialAcceptance::kNone)
                  .Tolerance(ToleranceClass::kRelative)
                  .Vjp(vjps::FrobeniusNorm);
  op.einsum = [sum = op.einsum](const RuleContext& c) {
    EinsumSpec spec = sum(c);
    ForceReducedReplicated(spec);
    LetSizeOneNormDimsStaySharded(spec, c.input_shapes[0]);
    return spec;
  };
  return op;
}

OpDecl argmax() {
  return OpBuilder("argmax").Inputs({"x"}).Outputs({"out"})
      .Tolerance(ToleranceClass::kExact)
      .Attr("axis", AttrKind::kInt, int64_t{-1})
      .Attr("keepdims", AttrKind::kBool, false, {"keepdim", "keep_dim"})
      .Attr("flatten", AttrKind::kBool, false)
      .Attr("dtype", AttrKind::kString, std::string("int64"))
      .Einsum([](const RuleContext& c) {
        const plan::ArgmaxPlan p = plan::PlanArgmax(c.input_shapes, c.attrs);
        const int rank = static_cast<int>(c.input_shapes[0].size());
        std::vector<bool> reduced(rank, p.flatten);
        if (p.axis >= 0) reduced[p.axis] = true;
        // flatten without keepdims: Paddle's rank-1 [1] (one index into the flattened x).
        EinsumSpec spec = p.flatten && !c.attrs.GetBool("keepdims")
                              ? notation::FromLetters({notation::Letters(rank)}, {"1"})
                              : Reduction(rank, reduced, c.attrs.GetBool("keepdims"));
        ForceReducedReplicated(spec);
        return spec;
      })
      .Examples(FromSignatures({{{"abc"}, MakeAttrs({{"axis", int64_t{1}}})},
                                {{"ab"}, MakeAttrs({{"keepdims", true}})},
                                {{"ab"}, MakeAttrs({{"flatten", true}})}}));
}

OpDecl cumsum() {
  return OpBuilder("cumsum").Inputs({"x"}).Outputs({"out"})
      .Tolerance(ToleranceClass::kSumOfProducts)
      .Vjp(vjps::Cumsum)
      .Attr("axis", AttrKind::kInt, int64_t{-1})
      .Attr("flatten", AttrKind::kBool, false)
      .Attr("exclusive", AttrKind::kBool, false)
      .Attr("reverse", AttrKind::kBool, false)
      .Einsum([](const RuleContext& c) {
        const int rank = static_cast<int>(c.input_shapes[0].size());
        const std::string letters = notation::Letters(rank);
        if (c.attrs.GetBool("flatten")) {  // out is 1-D of every element: a new factor
          EinsumSpec spec = notation::FromLetters({letters}, {}, letters);
          const FactorId flat = spec.AddFactor(NumElements(c.input_shapes[0]));
          spec.outputs.push_back({flat});
          spec.forced_replicated.push_back(flat);
          spec.accept = PartialAcceptance::kSameOp;
          return spec;
        }
        (void)notation::NormalizeAxisOrScalar(c.attrs.GetInt("axis"), rank, "attrs.axis");
        EinsumSpec spec = notation::FromLetters({letters}, {letters});
        spec.accept = PartialAcceptance::kSameOp;  // running sums are linear: P(sum) stays
        return spec;
      })
      // The axis is exchanged: a piece's running sums start from the totals of the pieces
      // before it (after it with reverse), so each piece sends one total per row and its
      // first position along the axis (the localizer's offset).
      .ExchangeAlong(0, [](const RuleContext& c) {
        if (c.attrs.GetBool("flatten")) return -1;  // the flat output is forced replicated
        const int rank = static_cast<int>(c.input_shapes[0].size());
        return notation::NormalizeAxisOrScalar(c.attrs.GetInt("axis"), rank, "attrs.axis");
      })
      .Localize({LocalField::kOffset},
                [](const LocalContext& c) { return c.attrs.WithLocal({.offset = c.input_offsets[0]}); })
      .Examples(FromSignatures({{{"abc"}, MakeAttrs({{"axis", int64_t{1}}})},
                                {{"ab"}, MakeAttrs({{"axis", int64_t{0}}, {"exclusive", true}, {"reverse", true}})},
                                {{"ab"}, MakeAttrs({{"flatten", true}})}}));
}

}  // namespace spmd::declare
