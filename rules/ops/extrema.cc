// The extrema family: Paddle's amax, amin and argmin (each registered by Paddle 3.3.1 with
// its reduction rule). amax and amin are max and min in value (the same plan, rule and
// partial acceptance: a partial(max) input stays partial(max)); they differ in the
// gradient, which ties share equally (Paddle's amax_grad) where max's gives each tie the
// whole cotangent. argmin is argmax's rule and plan with the smallest value's first index.
// cummax and cummin (Paddle's, with its rule: the scanned axis whole) give the running
// extreme along an axis and where it was found; their gradient goes back to where.
#include <string>
#include <vector>

#include "rules/engine/notation.h"
#include "rules/engine/registry.h"
#include "rules/ops/reduction_plan.h"
#include "rules/ops/vjp_util.h"

namespace spmd::declare {
namespace {

using notation::FromSignatures;
using notation::Ints;
using notation::MakeAttrs;
using Ref = VjpRef;

// x `abc` reduced over the plan's dims: out `ac`, or `a1c` with keep_dim.
EinsumSpec Reduction(const std::vector<bool>& reduced, bool keep_dim) {
  std::string out;
  for (size_t d = 0; d < reduced.size(); ++d) {
    if (!reduced[d]) {
      out.push_back(static_cast<char>('a' + d));
    } else if (keep_dim) {
      out.push_back('1');
    }
  }
  return notation::FromLetters({notation::Letters(static_cast<int>(reduced.size()))}, {out});
}

// The reduced input shape with the reduced dims set to 1.
Shape KeptShape(const RuleContext& c) {
  const plan::ReduceShape p = plan::PlanReduce(c.input_shapes, c.attrs, "keep_dim");
  Shape kept = c.input_shapes[0];
  for (size_t d = 0; d < kept.size(); ++d) {
    if (p.reduced[d]) kept[d] = 1;
  }
  return kept;
}

// amax / amin's VJP: the cotangent shared equally by the elements equal to the extreme
// (x is never beyond its own extreme, so "not beyond" is "equal to it"):
// where(x beyond out, 0, g / count), count = the number of ties in x's slice.
VjpBuilder SharedExtreme(const char* beyond) {
  return [beyond](const RuleContext& c) {
    VjpGraph g;
    const Shape& x = c.input_shapes[0];
    const Shape kept = KeptShape(c);
    const Ref extreme = g.Add("reshape", {Ref::Output(0)}, MakeAttrs({{"shape", kept}}));
    const Ref not_it = g.Add(beyond, {Ref::Input(0), extreme});
    const Ref ones = vjps::Drop(g, not_it, vjps::Filled(g, Ref::Input(0), 1));
    Ints axes;  // the reduced dims of more than one element (an empty axis would mean all)
    for (size_t d = 0; d < x.size(); ++d) {
      if (kept[d] == 1 && x[d] != 1) axes.push_back(static_cast<int64_t>(d));
    }
    const Ref ties = axes.empty() ? ones
                                  : g.Add("sum", {ones}, MakeAttrs({{"axis", axes}, {"keep_dim", true}, {"reduce_all", false}}));
    const Ref g_kept = g.Add("reshape", {Ref::OutputGrad(0)}, MakeAttrs({{"shape", kept}}));
    const Ref share = g.Add("divide", {g_kept, ties});
    g.input_grads = {vjps::Drop(g, not_it, vjps::ExpandReduced(g, share, kept, x))};
    return g;
  };
}

OpBuilder Extreme(const char* name, ReduceOp reduce) {
  return OpBuilder(name).Inputs({"x"}).Outputs({"out"})
      .Tolerance(ToleranceClass::kExact)
      .Attr("axis", AttrKind::kInts, std::vector<int64_t>{})
      .Attr("keep_dim", AttrKind::kBool, false, {"keepdim"})
      .Attr("reduce_all", AttrKind::kBool, false)
      .Einsum([reduce](const RuleContext& c) {
        EinsumSpec spec = Reduction(plan::PlanReduce(c.input_shapes, c.attrs, "keep_dim").reduced,
                                    c.attrs.GetBool("keep_dim"));
        spec.reduce = reduce;
        spec.accept = PartialAcceptance::kSameOp;
        spec.accepted_op = reduce;
        return spec;
      })
      .Examples(FromSignatures({{{"abc"}, MakeAttrs({{"axis", Ints{1}}})},
                                {{"abc"}, MakeAttrs({{"axis", Ints{0, -1}}, {"keep_dim", true}})},
                                {{"ab"}, MakeAttrs({{"reduce_all", true}})}}));
}

// cummax / cummin: x `abc` scanned along the axis to out `abc` and indices `abc`. A running
// extreme reads every element before it along the axis, so the axis is exchanged (as
// cumsum's): it may stay sharded, each piece sends every lane's extreme, where it was found
// and its own first position and length (rules/ops/scan_pieces.h), and each piece restarts its
// scan from the pieces before it; indices are global positions. The other dims pass through.
// The indices hold no partial value, and an extreme of addends is not the addends' extreme:
// a partial x is reduced first (the default acceptance).
// Its VJP (Paddle's cummax_grad): each out's cotangent is added at the element its extreme
// came from, a put_along_axis add of g into zeros at the forward's indices (0-d: g).
VjpGraph CumExtremeVjp(const RuleContext& c) {
  VjpGraph g;
  if (c.input_shapes[0].empty()) {
    g.input_grads = {Ref::OutputGrad(0)};
    return g;
  }
  g.input_grads = {g.Add("put_along_axis", {vjps::Zeros(g, Ref::Input(0)), Ref::Output(1), Ref::OutputGrad(0)},
                         MakeAttrs({{"axis", c.attrs.GetInt("axis")},
                                    {"reduce", std::string("add")},
                                    {"include_self", true}}))};
  return g;
}

OpDecl CumExtreme(const char* name) {
  return OpBuilder(name).Inputs({"x"}).Outputs({"out", "indices"})
      .Tolerance(ToleranceClass::kExact)
      .Vjp(CumExtremeVjp)
      .Attr("axis", AttrKind::kInt, int64_t{-1})
      .Attr("dtype", AttrKind::kString, std::string("int64"))
      .Einsum([name](const RuleContext& c) {
        (void)plan::PlanCumExtreme(c.input_shapes, c.attrs, name);
        const std::string letters = notation::Letters(static_cast<int>(c.input_shapes[0].size()));
        return notation::FromLetters({letters}, {letters, letters});
      })
      .ExchangeAlong(0, [name](const RuleContext& c) { return plan::PlanCumExtreme(c.input_shapes, c.attrs, name).axis; })
      .Localize({LocalField::kOffset},
                [](const LocalContext& c) { return c.attrs.WithLocal({.offset = c.input_offsets[0]}); })
      .Examples(FromSignatures({{{"abc"}, MakeAttrs({{"axis", int64_t{1}}})},
                                {{"ab"}, MakeAttrs({{"axis", int64_t{0}}})},
                                {{"a"}, Attrs()}}));
}

}  // namespace

OpDecl amax() { return Extreme("amax", ReduceOp::kMax).Vjp(SharedExtreme("less_than")); }
OpDecl amin() { return Extreme("amin", ReduceOp::kMin).Vjp(SharedExtreme("greater_than")); }

// argmax's rule: the searched dims whole (forced replicated), the others pass through.
OpDecl argmin() {
  return OpBuilder("argmin").Inputs({"x"}).Outputs({"out"})
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
        EinsumSpec spec = p.flatten && !c.attrs.GetBool("keepdims")
                              ? notation::FromLetters({notation::Letters(rank)}, {"1"})
                              : Reduction(reduced, c.attrs.GetBool("keepdims"));
        for (FactorId f : spec.inputs[0]) {
          bool kept = false;
          for (FactorId o : spec.outputs[0]) kept = kept || o == f;
          if (!kept) spec.forced_replicated.push_back(f);
        }
        return spec;
      })
      .Examples(FromSignatures({{{"abc"}, MakeAttrs({{"axis", int64_t{1}}})},
                                {{"ab"}, MakeAttrs({{"keepdims", true}})},
                                {{"ab"}, MakeAttrs({{"flatten", true}})}}));
}

OpDecl cummax() { return CumExtreme("cummax"); }
OpDecl cummin() { return CumExtreme("cummin"); }

}  // namespace spmd::declare
