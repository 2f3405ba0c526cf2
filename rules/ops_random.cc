// Random ops: dropout. Its mask is a pure function of the seed and each element's GLOBAL
// linear index (rules/counter_rng.h), so every dim may stay sharded: the localizer passes
// the shard's global offset and the global shape, and each rank draws the numbers of its
// own elements. The checker's simulated mesh then proves that every sharding computes the
// mask and output of one device.
#include <vector>

#include "rules/dropout_attrs.h"
#include "rules/einsum.h"
#include "rules/error.h"
#include "rules/notation.h"
#include "rules/registry.h"
#include "rules/vjps.h"

namespace spmd::declare {

using notation::FromSignatures;
using notation::MakeAttrs;

// Paddle's dropout: x -> out, mask. Paddle's optional seed_tensor input is not taken and
// fix_seed is accepted for compatibility only: the mask always comes from attrs.seed (a
// seed drawn per run could not be the same on every rank, nor checked).
// Partial inputs: out is x times c, a per-element constant c >= 0 that does not depend on
// x (mask / (1 - p), mask, 1 or 1 - p), and c a + c b = c (a + b), the mean likewise,
// max(c a, c b) = c max(a, b), min likewise. So a partial x of sum, avg, max or min stays
// partial in out, while the mask (drawn from the seed and the indices only, the same on
// every rank of the axis) is replicated over that axis: never partial. prod (c^2 a b is not
// c a b), any and all are reduced first.
namespace {

// x -> out, mask: one letter per dim, each output x's letters.
EinsumSpec Notation(const RuleContext& c) {
  dropout::ReadDropoutAttrs(c.attrs);
  const std::string letters = notation::Letters(static_cast<int>(c.input_shapes[0].size()));
  return notation::FromLetters({letters}, {letters, letters});
}

}  // namespace

OpDecl dropout() {
  return OpBuilder("dropout").Inputs({"x"}).Outputs({"out", "mask"})
      .Tolerance(ToleranceClass::kPointwise)
      .Vjp(vjps::Dropout)
      .Attr("p", AttrKind::kFloat, 0.5, {"dropout_prob"})
      .Attr("is_test", AttrKind::kBool, false)
      .Attr("mode", AttrKind::kString, std::string(dropout::kUpscaleInTrain), {"dropout_implementation"})
      .Attr("seed", AttrKind::kInt, int64_t{0})
      .Attr("fix_seed", AttrKind::kBool, false)
      .Einsum(Notation)
      .Forward([](const RuleContext& c, const Mesh& mesh, const std::vector<DistAttr>& in) {
        EinsumSpec spec = Notation(c);
        spec.accept = PartialAcceptance::kAnyOp;
        BindFactorSizes(spec, c.input_shapes);
        DistAttr x = in[0];
        std::erase_if(x.partial, [](const auto& entry) {
          const ReduceOp op = entry.second;
          return op != ReduceOp::kSum && op != ReduceOp::kAvg && op != ReduceOp::kMax && op != ReduceOp::kMin;
        });
        InferResult result = InferEinsumForward(spec, mesh, {x});
        result.outputs[1].partial.clear();
        return result;
      })
      .Localize([](const LocalContext& c) {
        return c.attrs.With(kLocalOffset, c.input_offsets[0]).With(kLocalGlobalShape, c.global_inputs[0]);
      })
      .Examples(FromSignatures(
          {{{"ab"}, MakeAttrs({{"p", 0.5}, {"seed", int64_t{7}}})},
           {{"ab"}, MakeAttrs({{"p", 0.3}, {"mode", std::string(dropout::kDownscaleInInfer)},
                               {"seed", int64_t{-3}}})},
           {{"a"}, MakeAttrs({{"p", 0.25}, {"is_test", true},
                              {"mode", std::string(dropout::kDownscaleInInfer)}})}}));
}

}  // namespace spmd::declare
