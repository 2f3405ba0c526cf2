// Optimizer steps as ops: adamw, one AdamW step of a parameter and its two moments
// (rules/ops/adamw_plan.h). Elementwise over four inputs of one shape (no broadcasting):
// every dim may be sharded, alike on every input and output, so a ZeRO shard updates its
// own slice. No partial is accepted: the update is not linear in the gradient (g^2, the
// division), so a partial gradient is reduced first.
#include <string>
#include <vector>

#include "rules/ops/adamw_plan.h"
#include "rules/engine/notation.h"
#include "rules/engine/registry.h"

namespace spmd::declare {

using notation::FromSignatures;
using notation::MakeAttrs;

// (param, grad, moment1, moment2) -> (param_out, moment1_out, moment2_out).
OpDecl adamw() {
  return OpBuilder("adamw").Inputs({"param", "grad", "moment1", "moment2"})
      .Outputs({"param_out", "moment1_out", "moment2_out"})
      .Tolerance(ToleranceClass::kPointwise)
      .Attr("lr", AttrKind::kFloat, 0.001)
      .Attr("beta1", AttrKind::kFloat, 0.9)
      .Attr("beta2", AttrKind::kFloat, 0.999)
      .Attr("epsilon", AttrKind::kFloat, 1e-8)
      .Attr("weight_decay", AttrKind::kFloat, 0.01)
      .Attr("step", AttrKind::kInt, int64_t{1})
      .Einsum([](const RuleContext& c) {
        optim::PlanAdamW(c.input_shapes, c.attrs);
        // One letter per dim (`1` for a size-1 dim), the same on every input and output.
        const std::vector<std::string> l = notation::ElementwiseLetters(c.input_shapes);
        return notation::FromLetters({l[0], l[1], l[2], l[3]}, {l[4], l[4], l[4]});
      })
      .Values([](const RuleContext&) {
        return std::vector<InputValues>{{ValueKind::kReal}, {ValueKind::kReal}, {ValueKind::kReal},
                                        {ValueKind::kPositive}};
      })
      .Examples(FromSignatures(
          {{{"abc", "abc", "abc", "abc"}, MakeAttrs({{"lr", 0.1}, {"step", int64_t{3}}})},
           {{"ab", "ab", "ab", "ab"}, MakeAttrs({{"lr", 0.05}, {"beta1", 0.5}, {"beta2", 0.75}, {"weight_decay", 0.0}})},
           {{"a", "a", "a", "a"}, MakeAttrs({{"lr", 0.2}, {"epsilon", 1e-3}, {"weight_decay", 0.5}, {"step", int64_t{100}}})}}));
}

}  // namespace spmd::declare
