// Elementwise ops: one broadcasting notation; only the partial acceptance differs.
#include <cmath>
#include <string>

#include "rules/ops/elementwise_plan.h"
#include "rules/model/error.h"
#include "rules/engine/notation.h"
#include "rules/engine/registry.h"
#include "rules/ops/vjp_util.h"

// The VJPs of this file's ops (rules/engine/vjp.h), attached below with
// `.Vjp(vjps::Name)`.
namespace spmd::vjps {
namespace {

using notation::Ints;
using notation::MakeAttrs;
using Ref = VjpRef;

// Elementwise, broadcasting.
VjpGraph Add(const RuleContext& c) {
  VjpGraph g;
  const Shape out = OutShape(c);
  g.input_grads = {SumToShape(g, Ref::OutputGrad(0), out, c.input_shapes[0]),
                   SumToShape(g, Ref::OutputGrad(0), out, c.input_shapes[1])};
  return g;
}

VjpGraph Subtract(const RuleContext& c) {
  VjpGraph g;
  const Shape out = OutShape(c);
  const Ref x_grad = SumToShape(g, Ref::OutputGrad(0), out, c.input_shapes[0]);
  const Ref y_grad = ScaleBy(g, SumToShape(g, Ref::OutputGrad(0), out, c.input_shapes[1]), -1);
  g.input_grads = {x_grad, y_grad};
  return g;
}

VjpGraph Multiply(const RuleContext& c) {
  VjpGraph g;
  const Shape out = OutShape(c);
  const Ref gy = g.Add("multiply", {Ref::OutputGrad(0), Ref::Input(1)});
  const Ref gx = g.Add("multiply", {Ref::OutputGrad(0), Ref::Input(0)});
  g.input_grads = {SumToShape(g, gy, out, c.input_shapes[0]),
                   SumToShape(g, gx, out, c.input_shapes[1])};
  return g;
}

// d(x / y) = dx / y - out dy / y.
VjpGraph Divide(const RuleContext& c) {
  VjpGraph g;
  const Shape out = OutShape(c);
  const Ref g_over_y = g.Add("divide", {Ref::OutputGrad(0), Ref::Input(1)});
  const Ref minus_y = ScaleBy(g, g.Add("multiply", {g_over_y, Ref::Output(0)}), -1);
  g.input_grads = {SumToShape(g, g_over_y, out, c.input_shapes[0]),
                   SumToShape(g, minus_y, out, c.input_shapes[1])};
  return g;
}

// Elementwise unary.
// s x + b and s (x + b) both have slope s.
VjpGraph Scale(const RuleContext& c) {
  VjpGraph g;
  g.input_grads = {ScaleBy(g, Ref::OutputGrad(0), c.attrs.GetFloat("scale"))};
  return g;
}

VjpGraph Exp(const RuleContext&) {
  VjpGraph g;
  g.input_grads = {g.Add("multiply", {Ref::OutputGrad(0), Ref::Output(0)})};
  return g;
}

VjpGraph Log(const RuleContext&) {
  VjpGraph g;
  g.input_grads = {g.Add("divide", {Ref::OutputGrad(0), Ref::Input(0)})};
  return g;
}

// d sqrt(x) = dx / (2 out).
VjpGraph Sqrt(const RuleContext&) {
  VjpGraph g;
  g.input_grads = {g.Add("divide", {ScaleBy(g, Ref::OutputGrad(0), 0.5), Ref::Output(0)})};
  return g;
}

// d tanh(x) = (1 - out^2) dx.
VjpGraph Tanh(const RuleContext&) {
  VjpGraph g;
  const Ref one_minus_sq = ScaleBy(g, g.Add("multiply", {Ref::Output(0), Ref::Output(0)}), -1, 1);
  g.input_grads = {g.Add("multiply", {Ref::OutputGrad(0), one_minus_sq})};
  return g;
}

// d sigmoid(x) = out (1 - out) dx.
VjpGraph Sigmoid(const RuleContext&) {
  VjpGraph g;
  const Ref slope = g.Add("multiply", {Ref::Output(0), ScaleBy(g, Ref::Output(0), -1, 1)});
  g.input_grads = {g.Add("multiply", {Ref::OutputGrad(0), slope})};
  return g;
}

// d silu(x) = s (1 + x (1 - s)) dx, s = sigmoid(x).
VjpGraph Silu(const RuleContext&) {
  VjpGraph g;
  const Ref s = g.Add("sigmoid", {Ref::Input(0)});
  const Ref x_one_minus_s = g.Add("multiply", {Ref::Input(0), ScaleBy(g, s, -1, 1)});
  const Ref slope = g.Add("multiply", {s, ScaleBy(g, x_one_minus_s, 1, 1)});
  g.input_grads = {g.Add("multiply", {Ref::OutputGrad(0), slope})};
  return g;
}

// y x^(y-1) g (zero for y == 0)
// d x^y = y x^(y-1) dx; y == 0 is a constant (x^-1 would be infinite at x == 0).
VjpGraph Pow(const RuleContext& c) {
  VjpGraph g;
  const double y = c.attrs.GetFloat("y");
  if (y == 0.0) {
    g.input_grads = {ScaleBy(g, Ref::OutputGrad(0), 0)};
    return g;
  }
  const Ref slope = ScaleBy(g, g.Add("pow", {Ref::Input(0)}, MakeAttrs({{"y", y - 1.0}})), y);
  g.input_grads = {g.Add("multiply", {Ref::OutputGrad(0), slope})};
  return g;
}

// -0.5 out^3 g
// d x^(-1/2) = -0.5 x^(-3/2) dx = -0.5 out^3 dx.
VjpGraph Rsqrt(const RuleContext&) {
  VjpGraph g;
  const Ref cube = g.Add("multiply", {g.Add("multiply", {Ref::Output(0), Ref::Output(0)}), Ref::Output(0)});
  g.input_grads = {g.Add("multiply", {Ref::OutputGrad(0), ScaleBy(g, cube, -0.5)})};
  return g;
}

// the cotangent, once per input
VjpGraph AddN(const RuleContext& c) {
  VjpGraph g;
  g.input_grads.assign(c.input_shapes.size(), Ref::OutputGrad(0));
  return g;
}

// Masks: greater_than / less_than, then where(mask, g, 0).
VjpGraph Relu(const RuleContext&) {
  VjpGraph g;
  const Ref positive = g.Add("greater_than", {Ref::Input(0), Zeros(g, Ref::Input(0))});
  g.input_grads = {Keep(g, positive, Ref::OutputGrad(0))};
  return g;
}

// sign(x) g, 0 at x = 0 (Paddle's abs_grad).
VjpGraph Abs(const RuleContext&) {
  VjpGraph g;
  const Ref zero = Zeros(g, Ref::Input(0));
  const Ref positive = g.Add("greater_than", {Ref::Input(0), zero});
  const Ref negative = g.Add("less_than", {Ref::Input(0), zero});
  const Ref minus_g = ScaleBy(g, Ref::OutputGrad(0), -1);
  g.input_grads = {g.Add("where", {positive, Ref::OutputGrad(0), Keep(g, negative, minus_g)})};
  return g;
}

// g where min < x < max (Paddle's clip_grad), else 0.
VjpGraph Clip(const RuleContext& c) {
  VjpGraph g;
  const Ref above = g.Add("greater_than", {Ref::Input(0), Filled(g, Ref::Input(0), c.attrs.GetFloat("min"))});
  const Ref below = g.Add("less_than", {Ref::Input(0), Filled(g, Ref::Input(0), c.attrs.GetFloat("max"))});
  g.input_grads = {Keep(g, above, Keep(g, below, Ref::OutputGrad(0)))};
  return g;
}

// the condition has no gradient
VjpGraph Where(const RuleContext& c) {
  VjpGraph g;
  const Shape out = notation::BroadcastShapes(c.input_shapes);
  g.input_grads = {std::nullopt,
                   SumToShape(g, Keep(g, Ref::Input(0), Ref::OutputGrad(0)), out, c.input_shapes[1]),
                   SumToShape(g, Drop(g, Ref::Input(0), Ref::OutputGrad(0)), out, c.input_shapes[2])};
  return g;
}

// Through Paddle's grad ops where no composition is exact: gelu_grad (erf's derivative);
// embedding_grad (a scatter-add; the ids get no gradient); cross_entropy_with_softmax_grad
// for a hard label (a one-hot; the label gets none) plus softmax_grad for softmax_out's
// cotangent. A soft label's backward is composed (log_softmax, sum, multiply), the label's
// gradient included.
VjpGraph Gelu(const RuleContext& c) {
  VjpGraph g;
  g.input_grads = {g.Add("gelu_grad", {Ref::Input(0), Ref::OutputGrad(0)},
                         MakeAttrs({{"approximate", c.attrs.GetBool("approximate")}}))};
  return g;
}

}  // namespace
}  // namespace spmd::vjps

namespace spmd::declare {
namespace {

using notation::FromSignatures;
using notation::MakeAttrs;

constexpr double kFloatMax = 1.7976931348623157e308;

EinsumSpec Pointwise(const RuleContext& c) { return notation::Elementwise(c.input_shapes); }

EinsumSpec Accepting(const RuleContext& c, PartialAcceptance accept) {
  EinsumSpec spec = notation::Elementwise(c.input_shapes);
  spec.accept = accept;
  return spec;
}

OpBuilder Unary(const char* name, ValueKind values = ValueKind::kReal) {
  return OpBuilder(name).Inputs({"x"}).Outputs({"out"}).Einsum(Pointwise)
      .Values([values](const RuleContext&) { return std::vector<InputValues>{{values}}; })
      .Examples(FromSignatures({{{"abc"}}, {{"a1"}}}));
}

OpBuilder Binary(const char* name, PartialAcceptance accept = PartialAcceptance::kNone) {
  return OpBuilder(name).Inputs({"x", "y"}).Outputs({"out"})
      .Einsum([accept](const RuleContext& c) { return Accepting(c, accept); })
      .Examples(FromSignatures({{{"ab", "ab"}}, {{"abc", "c"}}, {{"1b", "ab"}}}));
}

}  // namespace

OpDecl relu() { return Unary("relu").Tolerance(ToleranceClass::kExact).Vjp(vjps::Relu); }
OpDecl gelu() {
  return OpBuilder("gelu").Inputs({"x"}).Outputs({"out"})
      .Tolerance(ToleranceClass::kPointwise)
      .Vjp(vjps::Gelu)
      .Attr("approximate", AttrKind::kBool, false).Einsum(Pointwise)
      .Examples(FromSignatures({{{"abc"}}, {{"ab"}, MakeAttrs({{"approximate", true}})}}));
}
// gelu's derivative times out_grad: erf's derivative has no composition of registered ops.
// x and out_grad have one shape (no broadcasting, as Paddle's kernel).
OpDecl gelu_grad() {
  return OpBuilder("gelu_grad").Inputs({"x", "out_grad"}).Outputs({"x_grad"})
      .Tolerance(ToleranceClass::kPointwise)
      .Attr("approximate", AttrKind::kBool, false)
      .Einsum([](const RuleContext& c) {
        (void)plan::PlanGeluGrad(c.input_shapes, c.attrs);
        return notation::Elementwise(c.input_shapes);
      })
      .Examples(FromSignatures({{{"abc", "abc"}}, {{"ab", "ab"}, MakeAttrs({{"approximate", true}})}}));
}
OpDecl silu() { return Unary("silu").Tolerance(ToleranceClass::kPointwise).Vjp(vjps::Silu); }
OpDecl exp() { return Unary("exp").Tolerance(ToleranceClass::kPointwise).Vjp(vjps::Exp); }
OpDecl log() {
  return Unary("log", ValueKind::kPositive)
      .Tolerance(ToleranceClass::kPointwise)
      .Vjp(vjps::Log);
}
OpDecl tanh() { return Unary("tanh").Tolerance(ToleranceClass::kPointwise).Vjp(vjps::Tanh); }
OpDecl sigmoid() {
  return Unary("sigmoid")
      .Tolerance(ToleranceClass::kPointwise)
      .Vjp(vjps::Sigmoid);
}
OpDecl sqrt() {
  return Unary("sqrt", ValueKind::kPositive)
      .Tolerance(ToleranceClass::kPointwise)
      .Vjp(vjps::Sqrt);
}
OpDecl abs() { return Unary("abs").Tolerance(ToleranceClass::kExact).Vjp(vjps::Abs); }

// pow(x, y): x^y for a scalar exponent y (Paddle's attr name). A fractional y needs
// x > 0 (the generated values are positive then). y == 1 is the identity and keeps every
// partial input; any other y reduces them first (x^y is not additive).
OpDecl pow() {
  return OpBuilder("pow").Inputs({"x"}).Outputs({"out"})
      .Tolerance(ToleranceClass::kPointwise)
      .Vjp(vjps::Pow)
      .Attr("y", AttrKind::kFloat, 1.0)
      .Einsum([](const RuleContext& c) {
        EinsumSpec spec = notation::Elementwise(c.input_shapes);
        if (c.attrs.GetFloat("y") == 1.0) spec.accept = PartialAcceptance::kAnyOp;
        return spec;
      })
      .Values([](const RuleContext& c) {
        const double y = c.attrs.GetFloat("y");
        const bool integral = std::isfinite(y) && y == std::nearbyint(y);
        return std::vector<InputValues>{{integral ? ValueKind::kReal : ValueKind::kPositive}};
      })
      .Examples(FromSignatures({{{"abc"}, MakeAttrs({{"y", 2.0}})},
                                {{"ab"}, MakeAttrs({{"y", -1.5}})},
                                {{"a1"}, MakeAttrs({{"y", 1.0}})}}));
}
// rsqrt(x) = 1 / sqrt(x).
OpDecl rsqrt() {
  return Unary("rsqrt", ValueKind::kPositive)
      .Tolerance(ToleranceClass::kPointwise)
      .Vjp(vjps::Rsqrt);
}

// add_n(inputs): the sum of one or more tensors of one shape (Paddle's add_n does not
// broadcast). A mesh axis stays partial(sum) when every input is partial(sum) there.
// (Paddle keeps any partial that every input shares, max included: see DECISIONS.md.)
OpDecl add_n() {
  return OpBuilder("add_n").VariadicInputs("inputs").Outputs({"out"})
      .Tolerance(ToleranceClass::kPointwise)
      .Vjp(vjps::AddN)
      .Einsum([](const RuleContext& c) {
        plan::PlanAddN(c.input_shapes);
        return Accepting(c, PartialAcceptance::kSumOfAll);
      })
      .Examples(FromSignatures({{{"ab", "ab"}}, {{"a", "a", "a"}}, {{"1bc"}}}));
}

// scale is linear in x only without a bias: a bias would be added once per rank.
OpDecl scale() {
  return OpBuilder("scale").Inputs({"x"}).Outputs({"out"})
      .Tolerance(ToleranceClass::kPointwise)
      .Vjp(vjps::Scale)
      .Attr("scale", AttrKind::kFloat, 1.0)
      .Attr("bias", AttrKind::kFloat, 0.0)
      .Attr("bias_after_scale", AttrKind::kBool, true)
      .Einsum([](const RuleContext& c) {
        EinsumSpec spec = notation::Elementwise(c.input_shapes);
        if (c.attrs.GetFloat("bias") == 0.0) spec.accept = PartialAcceptance::kSameOp;
        return spec;
      })
      .Examples(FromSignatures({{{"abc"}, MakeAttrs({{"scale", 2.5}})},
                                {{"ab"}, MakeAttrs({{"scale", -1.5}, {"bias", 0.5}})},
                                {{"ab"}, MakeAttrs({{"bias", 1.0}, {"bias_after_scale", false}})}}));
}

OpDecl clip() {
  return OpBuilder("clip").Inputs({"x"}).Outputs({"out"})
      .Tolerance(ToleranceClass::kExact)
      .Vjp(vjps::Clip)
      .Attr("min", AttrKind::kFloat, -kFloatMax)
      .Attr("max", AttrKind::kFloat, kFloatMax)
      .Einsum([](const RuleContext& c) {
        (void)plan::PlanClip(c.attrs);
        return notation::Elementwise(c.input_shapes);
      })
      .Examples(FromSignatures({{{"abc"}, MakeAttrs({{"min", -0.5}, {"max", 0.75}})}}));
}

OpDecl cast() {
  return OpBuilder("cast").Inputs({"x"}).Outputs({"out"})
      .Tolerance(ToleranceClass::kExact)
      .Attr("dtype", AttrKind::kString, std::string("float64"))
      .Einsum([](const RuleContext& c) {
        (void)plan::PlanCastDType(c.attrs);
        return notation::Elementwise(c.input_shapes);
      })
      .Examples(FromSignatures({{{"abc"}, MakeAttrs({{"dtype", std::string("float32")}})},
                                {{"ab"}, MakeAttrs({{"dtype", std::string("int64")}})},
                                {{"ab"}, MakeAttrs({{"dtype", std::string("bool")}})}}));
}

OpDecl add() {
  return Binary("add", PartialAcceptance::kSumOfAll)
      .Tolerance(ToleranceClass::kPointwise)
      .Vjp(vjps::Add);
}
OpDecl subtract() {
  return Binary("subtract", PartialAcceptance::kSumOfAll)
      .Tolerance(ToleranceClass::kPointwise)
      .Vjp(vjps::Subtract);
}
OpDecl multiply() {
  return Binary("multiply", PartialAcceptance::kMultilinear)
      .Tolerance(ToleranceClass::kPointwise)
      .Vjp(vjps::Multiply);
}
OpDecl divide() {
  OpDecl op = Binary("divide", PartialAcceptance::kLinearFirst);
  op.tolerance = ToleranceClass::kPointwise;
  op.vjp = vjps::Divide;
  op.values = [](const RuleContext&) {
    return std::vector<InputValues>{{ValueKind::kReal}, {ValueKind::kNonZero}};
  };
  return op;
}
OpDecl maximum() { return Binary("maximum").Tolerance(ToleranceClass::kExact).Vjp(vjps::Maximum); }
OpDecl minimum() { return Binary("minimum").Tolerance(ToleranceClass::kExact).Vjp(vjps::Minimum); }
OpDecl greater_than() { return Binary("greater_than").Tolerance(ToleranceClass::kExact); }
OpDecl less_than() { return Binary("less_than").Tolerance(ToleranceClass::kExact); }
OpDecl where() {
  return OpBuilder("where").Inputs({"condition", "x", "y"}).Outputs({"out"})
      .Einsum([](const RuleContext& c) {  // linear in (x, y) together: P(sum) on both stays
        EinsumSpec spec = Accepting(c, PartialAcceptance::kSumOfAll);
        spec.linear_inputs = {1, 2};
        return spec;
      })
      .Tolerance(ToleranceClass::kExact)
      .Vjp(vjps::Where)
      .Values([](const RuleContext&) {
        return std::vector<InputValues>{{ValueKind::kBool}, {ValueKind::kReal}, {ValueKind::kReal}};
      })
      .Examples(FromSignatures({{{"ab", "ab", "ab"}}, {{"ab", "b", "1b"}}}));
}

}  // namespace spmd::declare
