// The softmax family: softmax, log_softmax and softmax_grad. Each exchanges its reduced
// factor (OpDecl::exchange): it may stay sharded, each rank summarises its piece of every row
// in one or two numbers (rules/norm_pieces.h), the summaries are all-gathered and each rank
// finishes its piece.
#include "rules/error.h"
#include "rules/notation.h"
#include "rules/registry.h"
#include "rules/softmax_plan.h"
#include "rules/vjps.h"

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
