// Sorting ops with Paddle's names, attrs and argument orders: argsort, topk. Each reads
// its whole sorted axis, so that axis is forced replicated (as Paddle's rules); every
// other dim passes through to both outputs, values and int64 indices. A partial input is
// reduced first (the order of a partial sum is not the order of its pieces).
#include <cstdint>
#include <string>
#include <vector>

#include "rules/error.h"
#include "rules/notation.h"
#include "rules/registry.h"
#include "rules/sort_plan.h"
#include "rules/vjps.h"

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
