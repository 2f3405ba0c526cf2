// Sorting ops with Paddle's names, attrs and argument orders: argsort, topk. Each reads
// its whole sorted axis, so that axis is forced replicated (as Paddle's rules); every
// other dim passes through to both outputs, values and int64 indices. A partial input is
// reduced first (the order of a partial sum is not the order of its pieces).
#include <cstdint>
#include <string>
#include <vector>

#include "rules/model/error.h"
#include "rules/engine/notation.h"
#include "rules/engine/registry.h"
#include "rules/ops/sort_plan.h"
#include "rules/ops/vjp_util.h"

// The VJPs of this file's ops (rules/engine/vjp.h), attached below with
// `.Vjp(vjps::Name)`.
namespace spmd::vjps {
namespace {

using notation::Ints;
using notation::MakeAttrs;
using Ref = VjpRef;

// argsort, topk: out's cotangent put back at the indices (multiply by one_hot(indices) as a
// mask, sum over the picked dim, the class dim moved to the axis).
// argsort, topk: out[.., j, ..] = x[.., indices[.., j, ..], ..] along the axis, so x gets
// each g[.., j, ..] at its index: g times one_hot(indices) (as a bool mask, so that g's
// dtype is kept), summed over j, the class dim moved to the axis. It costs indices' size
// times the axis' length. A 0-d x gets g.
VjpGraph SortedValues(const RuleContext& c) {
  VjpGraph g;
  const Shape& x = c.input_shapes[0];
  const int rank = static_cast<int>(x.size());
  if (rank == 0) {
    g.input_grads = {Ref::OutputGrad(0)};
    return g;
  }
  const int axis = notation::NormalizeAxis(c.attrs.GetInt("axis"), rank, "attrs.axis");
  const int64_t n = x[static_cast<size_t>(axis)];
  if (n == 0) {
    g.input_grads = {Zeros(g, Ref::Input(0))};
    return g;
  }
  Shape picked = x;
  if (c.attrs.Has("k")) picked[static_cast<size_t>(axis)] = c.attrs.GetInt("k");
  const Ref one_hot = g.Add("one_hot", {Ref::Output(1)}, MakeAttrs({{"num_classes", n}}));
  const Ref hit = g.Add("greater_than", {one_hot, Filled(g, one_hot, 0.5)});
  Shape column = picked;
  column.push_back(1);
  const Ref spread = g.Add("multiply", {Reshape(g, Ref::OutputGrad(0), picked, column), hit});
  Ref summed = g.Add("sum", {spread}, MakeAttrs({{"axis", Ints{axis}}, {"keep_dim", false}}));
  if (axis != rank - 1) {
    Ints perm;
    for (int d = 0; d < axis; ++d) perm.push_back(d);
    perm.push_back(rank - 1);
    for (int d = axis; d < rank - 1; ++d) perm.push_back(d);
    summed = g.Add("transpose", {summed}, MakeAttrs({{"perm", perm}}));
  }
  g.input_grads = {summed};
  return g;
}

}  // namespace
}  // namespace spmd::vjps

namespace spmd::declare {
namespace {

using notation::Letters;
using notation::MakeAttrs;

int Rank(const RuleContext& c) { return static_cast<int>(c.input_shapes[0].size()); }

}  // namespace

// argsort(x, axis, descending, stable) -> out (x sorted along axis), indices (int64: the
// position in x of each element of out). Ties keep index order whatever `stable` says; NaN
// sorts above every number. `abc->abc,abc R(axis)`.
OpDecl argsort() {
  return OpBuilder("argsort").Inputs({"x"}).Outputs({"out", "indices"})
      .Tolerance(ToleranceClass::kExact)
      .Vjp(vjps::SortedValues)
      .Attr("axis", AttrKind::kInt, int64_t{-1})
      .Attr("descending", AttrKind::kBool, false)
      .Attr("stable", AttrKind::kBool, false)
      .Einsum([](const RuleContext& c) {
        const sort_plan::SortPlan plan = sort_plan::PlanArgsort(c.input_shapes[0], c.attrs);
        const std::string x = Letters(Rank(c));
        return notation::FromLetters({x}, {x, x}, plan.scalar ? "" : x.substr(static_cast<size_t>(plan.axis), 1));
      })
      .Examples(notation::FromSignatures(
          {{{"abc"}, MakeAttrs({{"axis", int64_t{1}}})},
           {{"ab"}, MakeAttrs({{"descending", true}})},
           {{"ab"}, MakeAttrs({{"axis", int64_t{0}}, {"stable", true}})}}));
}

// topk(x, k, axis, largest, sorted) -> out, indices (int64): the k largest (largest false:
// smallest) elements along axis, in descending (ascending) order, ties in index order;
// sorted false gives the same order. 0 <= k <= x.shape[axis]; a 0-d x takes k == 1. The
// axis becomes a new factor of size k: `abc->a{k}c,a{k}c R(b, k)`.
OpDecl topk() {
  return OpBuilder("topk").Inputs({"x"}).Outputs({"out", "indices"})
      .Tolerance(ToleranceClass::kExact)
      .Vjp(vjps::SortedValues)
      .Attr("k", AttrKind::kInt, int64_t{1})
      .Attr("axis", AttrKind::kInt, int64_t{-1})
      .Attr("largest", AttrKind::kBool, true)
      .Attr("sorted", AttrKind::kBool, true)
      .Einsum([](const RuleContext& c) {
        const sort_plan::SortPlan plan = sort_plan::PlanTopk(c.input_shapes[0], c.attrs);
        const std::string x = Letters(Rank(c));
        if (plan.scalar) return notation::FromLetters({x}, {x, x});
        const size_t axis = static_cast<size_t>(plan.axis);
        const int64_t k = plan.k;
        EinsumSpec spec = notation::FromLetters({x}, {}, x.substr(static_cast<size_t>(axis), 1));
        Notation out = spec.inputs[0];
        const FactorId picked = spec.AddFactor(k);
        out[static_cast<size_t>(axis)] = picked;
        spec.forced_replicated.push_back(picked);
        spec.outputs = {out, out};
        return spec;
      })
      .Examples([](const SizePalette& p) {
        // k no larger than the sorted axis (a palette size may be 0 or 1).
        const int64_t k1 = p[1] < 2 ? p[1] : 2;
        const int64_t k0 = p[0] < 1 ? p[0] : 1;
        return std::vector<Example>{
            {{{p[0], p[1], p[2]}}, MakeAttrs({{"k", k1}, {"axis", int64_t{1}}})},
            {{{p[0], p[1]}}, MakeAttrs({{"k", k0}, {"axis", int64_t{0}}, {"largest", false}})},
            {{{p[0], p[1]}}, MakeAttrs({{"k", p[1]}, {"sorted", false}})}};
      });
}

}  // namespace spmd::declare
