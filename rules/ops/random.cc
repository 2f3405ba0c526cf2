// Random ops: dropout, fused_dropout_add, bernoulli and poisson. Dropout's mask is a pure
// function of the seed and each element's GLOBAL linear index (rules/ops/counter_rng.h; the
// other ops' draws likewise), so every dim may stay sharded: the localizer passes
// the shard's global offset and the global shape, and each rank draws the numbers of its
// own elements. The checker's simulated mesh then proves that every sharding computes the
// mask and output of one device.
#include <string>
#include <vector>

#include "rules/ops/dropout_attrs.h"
#include "rules/model/error.h"
#include "rules/engine/notation.h"
#include "rules/engine/registry.h"
#include "rules/ops/shape_plan.h"
#include "rules/ops/vjp_util.h"

// The VJPs of this file's ops (rules/engine/vjp.h), attached below with
// `.Vjp(vjps::Name)`.
namespace spmd::vjps {
namespace {

using notation::Ints;
using notation::MakeAttrs;
using Ref = VjpRef;

// dropout: g times the forward's mask output and the kept scale (nothing is redrawn).
// Training: out = x mask s, s = 1 / (1 - p) upscaling (0 when p = 1: nothing is kept),
// 1 downscaling, so x gets g mask s. The mask is the forward's own output (read, never
// redrawn); multiply converts the bool mask to g's dtype, as every kernel converts a bool
// value input, so no cast (whose target dtype the graph does not know) is needed.
// Inference: out = x (upscale) or x (1 - p).
VjpGraph Dropout(const RuleContext& c) {
  const dropout::DropoutAttrs a = dropout::ReadDropoutAttrs(c.attrs);
  VjpGraph g;
  if (a.is_test) {
    g.input_grads = {a.upscale ? VjpRef::OutputGrad(0)
                               : g.Add("scale", {VjpRef::OutputGrad(0)}, MakeAttrs({{"scale", 1.0 - a.p}}))};
    return g;
  }
  const VjpRef kept = g.Add("multiply", {VjpRef::OutputGrad(0), VjpRef::Output(1)});
  const double s = !a.upscale ? 1.0 : (a.p >= 1.0 ? 0.0 : 1.0 / (1.0 - a.p));
  g.input_grads = {s == 1.0 ? kept : g.Add("scale", {kept}, MakeAttrs({{"scale", s}}))};
  return g;
}

// fused_dropout_add: x as dropout's x (the forward's mask), y gets the cotangent.
// fused_dropout_add: x gets dropout of g with the forward's attrs (the same seed and global
// indices draw the same mask: g masked and scaled as x was), y gets g. seed_offset has no
// cotangent that reaches an input.
VjpGraph FusedDropoutAdd(const RuleContext& c) {
  VjpGraph g;
  g.input_grads = {g.Add("dropout", {Ref::OutputGrad(0)}, c.attrs), Ref::OutputGrad(0)};
  return g;
}

}  // namespace
}  // namespace spmd::vjps

namespace spmd::declare {

using notation::FromSignatures;
using notation::MakeAttrs;

namespace {

// The localizer of the ops drawn at GLOBAL indices: the shard's offset and the global shape.
Attrs ByGlobalIndex(const LocalContext& c) {
  return c.attrs.WithLocal({.offset = c.input_offsets[0], .global_shape = c.global_inputs[0]});
}

// x -> out, mask: one letter per dim, each output x's letters.
EinsumSpec Notation(const RuleContext& c) {
  dropout::ReadDropoutAttrs(c.attrs);
  const std::string letters = notation::Letters(static_cast<int>(c.input_shapes[0].size()));
  return notation::FromLetters({letters}, {letters, letters});
}

// An op drawing one value per element of x at its global index (bernoulli, poisson): x ->
// out, `ab->ab`, every dim may stay sharded (dropout's localizer), exact, a seed attr, no VJP.
OpDecl DrawnPerElement(const std::string& name, ValueKind values, std::vector<notation::Signature> examples) {
  return OpBuilder(name).Inputs({"x"}).Outputs({"out"})
      .Tolerance(ToleranceClass::kExact)
      .Attr("seed", AttrKind::kInt, int64_t{0})
      .Einsum([](const RuleContext& c) {
        const std::string letters = notation::Letters(static_cast<int>(c.input_shapes[0].size()));
        return notation::FromLetters({letters}, {letters});
      })
      .Values([values](const RuleContext&) { return std::vector<InputValues>{{values}}; })
      .Localize({LocalField::kOffset, LocalField::kGlobalShape}, ByGlobalIndex)
      .Examples(FromSignatures(std::move(examples)));
}

}  // namespace

// Paddle's dropout: x -> out, mask. Paddle's optional seed_tensor input is not taken and
// fix_seed is accepted for compatibility only: the mask always comes from attrs.seed (a
// seed drawn per run could not be the same on every rank, nor checked).
// Partial inputs are reduced first. out alone could keep a partial sum, avg, max or min
// (it is x times c, a per-element constant c >= 0 that does not depend on x, and
// c a + c b = c (a + b), max(c a, c b) = c max(a, b)), but a declaration's partial
// acceptance applies to every output, and the mask, the same on every rank of the axis,
// must never be partial (golden/claims/claims.jsonl holds both facts).
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
      .Localize({LocalField::kOffset, LocalField::kGlobalShape}, ByGlobalIndex)
      .Examples(FromSignatures(
          {{{"ab"}, MakeAttrs({{"p", 0.5}, {"seed", int64_t{7}}})},
           {{"ab"}, MakeAttrs({{"p", 0.3}, {"mode", std::string(dropout::kDownscaleInInfer)},
                               {"seed", int64_t{-3}}})},
           {{"a"}, MakeAttrs({{"p", 0.25}, {"is_test", true},
                              {"mode", std::string(dropout::kDownscaleInInfer)}})}}));
}

// Paddle's fused_dropout_add: dropout(x) + y, x and y of one shape -> out, seed_offset.
// out's mask is dropout's (the same seed, elements and localizer: every dim may stay
// sharded). seed_offset is Paddle's second output, its generator's state: the int64 pair
// [seed, offset] = [attrs.seed, 0] (spmdkit's generator is keyed by the seed and each
// element's global index, so no offset advances), [2], replicated and never partial
// (Paddle's rule answers [-1]); the backward redraws the mask from the seed. Partial
// inputs are reduced.
OpDecl fused_dropout_add() {
  return OpBuilder("fused_dropout_add").Inputs({"x", "y"}).Outputs({"out", "seed_offset"})
      .Tolerance(ToleranceClass::kPointwise)
      .Vjp(vjps::FusedDropoutAdd)
      .Attr("p", AttrKind::kFloat, 0.5, {"dropout_prob"})
      .Attr("is_test", AttrKind::kBool, false)
      .Attr("mode", AttrKind::kString, std::string(dropout::kUpscaleInTrain), {"dropout_implementation"})
      .Attr("seed", AttrKind::kInt, int64_t{0})
      .Attr("fix_seed", AttrKind::kBool, false)
      .Einsum([](const RuleContext& c) {
        shape_plan::CheckSameShape(c.input_shapes[0], c.input_shapes[1]);
        dropout::ReadDropoutAttrs(c.attrs);
        const std::string letters = notation::Letters(static_cast<int>(c.input_shapes[0].size()));
        EinsumSpec spec = notation::FromLetters({letters, letters}, {letters});
        const FactorId pair = spec.AddFactor(2);  // [seed, offset]
        spec.outputs.push_back({pair});
        spec.forced_replicated.push_back(pair);
        spec.whole_outputs.push_back(1);
        return spec;
      })
      .Localize({LocalField::kOffset, LocalField::kGlobalShape}, ByGlobalIndex)
      .Examples(FromSignatures(
          {{{"ab", "ab"}, MakeAttrs({{"p", 0.5}, {"seed", int64_t{11}}})},
           {{"ab", "ab"}, MakeAttrs({{"p", 0.25}, {"mode", std::string(dropout::kDownscaleInInfer)},
                                       {"seed", int64_t{4}}})},
           {{"a", "a"}, MakeAttrs({{"p", 0.3}, {"is_test", true}})}}));
}

// Paddle's bernoulli: x -> out, each element 1 with probability x (in [0, 1], else
// InvalidArgument inputs[0].data, as Paddle's kernel), else 0, in x's dtype: out = 1 where
// counter_rng::Uniform(seed, global index) < x. Paddle draws from its global generator and
// takes no seed; here attrs.seed keys dropout's counter generator, so every dim may stay
// sharded (the same localizer) and one seed gives one result on any mesh. No gradient (out
// is piecewise constant in x). Partial inputs are reduced.
OpDecl bernoulli() {
  return DrawnPerElement("bernoulli", ValueKind::kProbability,
                         {{{"ab"}, MakeAttrs({{"seed", int64_t{7}}})},
                          {{"abc"}, Attrs()},
                          {{"a"}, MakeAttrs({{"seed", int64_t{-3}}})}});
}

// Paddle's poisson: x -> out, each element a Poisson(x) count in x's dtype, drawn by
// counter_rng::PoissonCount from the element's counter_rng::Uniform(seed, global index).
// Rates in [0, 700] (NaN, infinity, negative: InvalidArgument inputs[0].data; above 700:
// Unsupported). As bernoulli: Paddle draws from its global generator and takes no seed;
// attrs.seed keys the draws, so every dim may stay sharded and one seed gives one result on
// any mesh. No gradient (Paddle's poisson_grad is zero: out is piecewise constant in x).
// Partial inputs are reduced.
OpDecl poisson() {
  return DrawnPerElement("poisson", ValueKind::kPositive,
                         {{{"ab"}, MakeAttrs({{"seed", int64_t{5}}})},
                          {{"abc"}, Attrs()},
                          {{"a"}, MakeAttrs({{"seed", int64_t{-9}}})}});
}

}  // namespace spmd::declare
