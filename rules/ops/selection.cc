// Ops whose output length depends on x's values, with Paddle's names, attrs and argument
// orders: nonzero, unique. Their counts are data-dependent dims (EinsumSpec::data_dependent,
// SEMANTICS.md §3.1): the declaration gives every other dim, the run the
// count. As Paddle's rules, every input and output is replicated: x's dims are forced
// replicated (a shard's nonzero positions or distinct values are not a piece of the whole's)
// and a partial x is reduced first. Neither has a gradient (integer outputs; unique's out is
// piecewise constant in x and Paddle registers no backward): no VJP.
#include <cstdint>
#include <string>
#include <vector>

#include "rules/engine/notation.h"
#include "rules/engine/registry.h"
#include "rules/ops/selection_plan.h"

namespace spmd::declare {
namespace {

using notation::Ints;
using notation::Letters;
using notation::MakeAttrs;

// x's notation with every dim forced replicated.
EinsumSpec WholeInput(const Shape& x) {
  const std::string letters = Letters(static_cast<int>(x.size()));
  return notation::FromLetters({letters}, {}, letters);
}

// A factor only the run sizes: forced replicated, in outputs only.
FactorId AddDataDependent(EinsumSpec& spec) {
  const FactorId f = spec.AddFactor(EinsumSpec::kDataDependentSize);
  spec.forced_replicated.push_back(f);
  spec.data_dependent.push_back(f);
  return f;
}

// Small integers (zeros and repeats common) in x's dtype: nonzero's zeros and unique's
// duplicates occur in every generated case.
std::vector<InputValues> SmallIntegers(const RuleContext&) { return {{ValueKind::kSmallInt, 2}}; }

}  // namespace

// nonzero(x) -> out (int64 [count, rank(x)]): the indices of x's nonzero elements (NaN is
// nonzero; -0 is zero), one row per element in row-major order. x of rank >= 1, as Paddle (a
// 0-d x: InvalidArgument inputs[0].shape). `ab->{n}{r} R(a, b, n, r) D(n)`, n data-dependent.
OpDecl nonzero() {
  return OpBuilder("nonzero").Inputs({"x"}).Outputs({"out"})
      .Tolerance(ToleranceClass::kExact)
      .Einsum([](const RuleContext& c) {
        const selection_plan::NonzeroPlan plan = selection_plan::PlanNonzero(c.input_shapes[0]);
        EinsumSpec spec = WholeInput(c.input_shapes[0]);
        const FactorId count = AddDataDependent(spec);
        const FactorId rank = spec.AddFactor(plan.rank);
        spec.forced_replicated.push_back(rank);
        spec.outputs = {{count, rank}};
        return spec;
      })
      .Values(SmallIntegers)
      .Examples(notation::FromSignatures({{{"ab"}, {}}, {{"abc"}, {}}, {{"a"}, {}}}));
}

// unique(x, return_index, return_inverse, return_counts, axis, dtype) -> out (x's sorted
// distinct values, x flattened; along an axis, its distinct slices), indices (int64: the
// first position of each in flattened x, or along the axis), inverse (int64: the position in
// out of each element of x, or of each slice), counts (int64: how often each occurs). An
// output whose flag is false is unset: 0-d, as flash_attention's softmax (DECISIONS.md).
// NaNs sort above every number and are one value; -0 and 0 are one value, out holding the
// first one met; slices compare element by element. axis [] or one axis (InvalidArgument
// attrs.axis otherwise), dtype "int64". Flattened: `ab->{n},{n},{m},{n} R(a, b, n, m) D(n)`,
// n data-dependent, m = numel; along axis 1: `abc->{anc},{n},{b},{n} R(a, b, c, n) D(n)`.
OpDecl unique() {
  return OpBuilder("unique").Inputs({"x"}).Outputs({"out", "indices", "inverse", "counts"})
      .Tolerance(ToleranceClass::kExact)
      .Attr("return_index", AttrKind::kBool, false)
      .Attr("return_inverse", AttrKind::kBool, false)
      .Attr("return_counts", AttrKind::kBool, false)
      .Attr("axis", AttrKind::kInts, std::vector<int64_t>{})
      .Attr("dtype", AttrKind::kString, std::string("int64"))
      .Einsum([](const RuleContext& c) {
        const selection_plan::UniquePlan plan = selection_plan::PlanUnique(c.input_shapes[0], c.attrs);
        EinsumSpec spec = WholeInput(c.input_shapes[0]);
        const FactorId count = AddDataDependent(spec);
        Notation out{count};
        FactorId slices = 0;
        if (plan.axis < 0) {
          slices = spec.AddFactor(plan.numel);
          spec.forced_replicated.push_back(slices);
        } else {  // x's dims, the axis's replaced by the count; inverse runs along x's axis
          out = spec.inputs[0];
          slices = out[static_cast<size_t>(plan.axis)];
          out[static_cast<size_t>(plan.axis)] = count;
        }
        spec.outputs = {out,
                        plan.return_index ? Notation{count} : Notation{},
                        plan.return_inverse ? Notation{slices} : Notation{},
                        plan.return_counts ? Notation{count} : Notation{}};
        for (int o : {1, 2, 3}) {
          if (spec.outputs[static_cast<size_t>(o)].empty()) spec.whole_outputs.push_back(o);
        }
        return spec;
      })
      .Values(SmallIntegers)
      .Examples(notation::FromSignatures(
          {{{"ab"}, MakeAttrs({{"return_index", true}, {"return_inverse", true}, {"return_counts", true}})},
           {{"abc"}, MakeAttrs({{"return_inverse", true}})},
           {{"a"}, MakeAttrs({{"return_counts", true}})},
           {{"ab"}, {}},
           {{"ab"}, MakeAttrs({{"axis", Ints{0}}, {"return_index", true}, {"return_inverse", true},
                               {"return_counts", true}})},
           {{"abc"}, MakeAttrs({{"axis", Ints{-1}}, {"return_inverse", true}})},
           // A middle axis: each slice's elements lie apart in x (dims before and after it).
           {{"abc"}, MakeAttrs({{"axis", Ints{1}}, {"return_index", true}, {"return_counts", true}})},
           // One-element slices of small integers: the slices repeat.
           {{"1a"}, MakeAttrs({{"axis", Ints{1}}, {"return_index", true}, {"return_counts", true}})}}));
}

}  // namespace spmd::declare
