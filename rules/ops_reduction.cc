// Reductions: the output drops (or keeps as `1`) the reduced letters. Sum-like ones leave
// the output partial with their own reduce op (D3, D7); logsumexp and p_norm need the
// reduced factors whole (D2); argmax needs its axis whole; cumsum exchanges its axis.
#include <algorithm>
#include <cmath>

#include "rules/error.h"
#include "rules/notation.h"
#include "rules/reduction_plan.h"
#include "rules/registry.h"
#include "rules/vjps.h"

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

void ForceReducedReplicated(EinsumSpec& spec) {
  for (FactorId f : spec.inputs[0]) {
    if (!Contains(spec.outputs[0], f)) spec.forced_replicated.push_back(f);
  }
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
  return c.attrs.With(kLocalCount, out == 0 ? int64_t{0} : in / out);
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
  op.localize = LocalizeMean;
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
  }).Localize(LocalizeMean).Examples(FromSignatures({{{"abc"}}, {{"a"}}}));
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
        ForceReducedReplicated(spec);
        return spec;
      })
      .Examples(FromSignatures({{{"abc"}, MakeAttrs({{"axis", Ints{1}}})},
                                {{"ab"}, MakeAttrs({{"keepdim", true}})}}));
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
        return spec;
      })
      .Examples(FromSignatures({{{"abc"}, MakeAttrs({{"axis", int64_t{1}}})},
                                {{"ab"}, MakeAttrs({{"porder", 3.0}, {"asvector", true}})}}));
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
      .Localize([](const LocalContext& c) { return c.attrs.With(kLocalOffset, c.input_offsets[0]); })
      .Examples(FromSignatures({{{"abc"}, MakeAttrs({{"axis", int64_t{1}}})},
                                {{"ab"}, MakeAttrs({{"axis", int64_t{0}}, {"exclusive", true}, {"reverse", true}})},
                                {{"ab"}, MakeAttrs({{"flatten", true}})}}));
}

}  // namespace spmd::declare
