// The softmax family: softmax, log_softmax and softmax_grad. Each exchanges its reduced
// factor (OpDecl::exchange): it may stay sharded, each rank summarises its piece of every row
// in one or two numbers (rules/ops/norm_pieces.h), the summaries are all-gathered and each rank
// finishes its piece.
#include "rules/model/error.h"
#include "rules/engine/notation.h"
#include "rules/engine/registry.h"
#include "rules/ops/softmax_plan.h"
#include "rules/ops/vjp_util.h"

// The VJPs of this file's ops (rules/engine/vjp.h), attached below with
// `.Vjp(vjps::Name)`.
namespace spmd::vjps {
namespace {

using notation::Ints;
using notation::MakeAttrs;
using Ref = VjpRef;

// softmax_grad; log_softmax: g - exp(out) sum(g).
VjpGraph Softmax(const RuleContext& c) {
  VjpGraph g;
  g.input_grads = {g.Add("softmax_grad", {Ref::Output(0), Ref::OutputGrad(0)},
                         MakeAttrs({{"axis", c.attrs.GetInt("axis")}}))};
  return g;
}

// d log_softmax: g - softmax(x) sum(g) along the axis, softmax(x) = exp(out).
VjpGraph LogSoftmax(const RuleContext& c) {
  VjpGraph g;
  const int rank = static_cast<int>(c.input_shapes[0].size());
  const int axis = notation::NormalizeAxisOrScalar(c.attrs.GetInt("axis"), rank, "attrs.axis");
  if (axis < 0) {  // a 0-d x: out is 0 whatever x is
    g.input_grads = {ScaleBy(g, Ref::OutputGrad(0), 0)};
    return g;
  }
  const Ref total = g.Add("sum", {Ref::OutputGrad(0)},
                          MakeAttrs({{"axis", Ints{axis}}, {"keep_dim", true}}));
  const Ref weighted = g.Add("multiply", {g.Add("exp", {Ref::Output(0)}), total});
  g.input_grads = {g.Add("subtract", {Ref::OutputGrad(0), weighted})};
  return g;
}

}  // namespace
}  // namespace spmd::vjps

namespace spmd::declare {
namespace {

using notation::FromSignatures;
using notation::MakeAttrs;

// The normalised attrs.axis of input 0 (-1 for a 0-d input, which has no axis).
int SoftmaxAxis(const RuleContext& c) {
  const int rank = static_cast<int>(c.input_shapes[0].size());
  return notation::NormalizeAxisOrScalar(c.attrs.GetInt("axis"), rank, "attrs.axis");
}

// `n` inputs and one output sharing x's letters; the axis letter forced replicated unless
// `exchanged` (then the exchange keeps it sharded).
EinsumSpec AlongAxis(const RuleContext& c, size_t operands, bool exchanged = false) {
  const int axis = SoftmaxAxis(c);
  const std::string letters = notation::Letters(static_cast<int>(c.input_shapes[0].size()));
  return notation::FromLetters(std::vector<std::string>(operands, letters), {letters},
                               axis >= 0 && !exchanged ? letters.substr(axis, 1) : "");
}

// softmax / log_softmax: x `abc` -> out `abc`, the axis exchanged (a piece's max and sum of
// exp(x - max) per row).
OpBuilder Softmax(const char* name) {
  return OpBuilder(name).Inputs({"x"}).Outputs({"out"})
      .Attr("axis", AttrKind::kInt, int64_t{-1})
      .Einsum([](const RuleContext& c) { return AlongAxis(c, 1, true); })
      .ExchangeAlong(0, SoftmaxAxis)
      .Examples(FromSignatures({{{"abc"}}, {{"ab"}, MakeAttrs({{"axis", int64_t{0}}})}}));
}

}  // namespace

OpDecl softmax() {
  return Softmax("softmax")
      .Tolerance(ToleranceClass::kRelative)
      .Vjp(vjps::Softmax);
}
OpDecl log_softmax() {
  return Softmax("log_softmax")
      .Tolerance(ToleranceClass::kLogDomain)
      .Vjp(vjps::LogSoftmax);
}
OpDecl softmax_grad() {
  return OpBuilder("softmax_grad").Inputs({"out", "out_grad"}).Outputs({"x_grad"})
      .Tolerance(ToleranceClass::kSoftmaxGrad)
      .Attr("axis", AttrKind::kInt, int64_t{-1})
      .Einsum([](const RuleContext& c) {
        plan::PlanSoftmaxGrad(c.input_shapes);
        return AlongAxis(c, 2, true);
      })
      .ExchangeAlong(0, SoftmaxAxis)  // a piece's part of sum(out_grad * out) per row
      .Examples(FromSignatures({{{"abc", "abc"}, MakeAttrs({{"axis", int64_t{1}}})}}));
}

}  // namespace spmd::declare
