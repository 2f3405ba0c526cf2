// The unary math family (rules/engine/unary_math_list.h): one declaration line each. Every op is
// pointwise on one input (the elementwise notation: every dim may stay sharded, partial
// inputs reduced first, since none of them is additive; assign, the identity, keeps them),
// with its domain for the generated values, its attrs (Paddle's names and defaults), its
// tolerance class and, where it has a derivative almost everywhere that is not zero, its
// VJP as a graph of registered ops. The rounding ops and sign (piecewise constant: Paddle's
// grads are zeros) have none; digamma neither (its derivative, trigamma, is no op).
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "rules/engine/notation.h"
#include "rules/engine/registry.h"
#include "rules/ops/unary_math_attrs.h"

namespace spmd::declare {
namespace {

using notation::FromSignatures;
using notation::MakeAttrs;
using Ref = VjpRef;

// One pointwise op of the family: x -> out, values of `values`, checked attrs.
OpBuilder Math(const char* name, ToleranceClass tolerance, ValueKind values = ValueKind::kReal) {
  return OpBuilder(name).Inputs({"x"}).Outputs({"out"}).Tolerance(tolerance)
      .Einsum([op = std::string(name)](const RuleContext& c) {
        unary_math::CheckAttrs(op, c.attrs);
        return notation::Elementwise(c.input_shapes);
      })
      .Values([values](const RuleContext&) { return std::vector<InputValues>{{values}}; })
      .Examples(FromSignatures({{{"abc"}}, {{"a1"}}}));
}

constexpr ToleranceClass kExact = ToleranceClass::kExact;
constexpr ToleranceClass kPointwise = ToleranceClass::kPointwise;

// ---- VJP pieces: the input's gradient is g times a slope built from x and out ---------

Ref X() { return Ref::Input(0); }
Ref Out() { return Ref::Output(0); }
Ref Scale(VjpGraph& g, Ref r, double s, double bias = 0) {
  return g.Add("scale", {r}, MakeAttrs({{"scale", s}, {"bias", bias}}));
}
Ref Call(VjpGraph& g, const char* op, Ref r) { return g.Add(op, {r}); }
Ref Mul(VjpGraph& g, Ref a, Ref b) { return g.Add("multiply", {a, b}); }
Ref Const(VjpGraph& g, double v) { return Scale(g, X(), 0, v); }  // x's shape, filled
Ref Above(VjpGraph& g, Ref r, double c) { return g.Add("greater_than", {r, Const(g, c)}); }
Ref Below(VjpGraph& g, Ref r, double c) { return g.Add("less_than", {r, Const(g, c)}); }
Ref Where(VjpGraph& g, Ref mask, Ref a, Ref b) { return g.Add("where", {mask, a, b}); }
// 1 on (lo, hi), else 0.
Ref Inside(VjpGraph& g, Ref r, double lo, double hi) {
  return Where(g, Above(g, r, lo), Where(g, Below(g, r, hi), Const(g, 1), Const(g, 0)), Const(g, 0));
}

// A VJP x_grad = g * slope(graph, attrs).
template <class F>
VjpBuilder Slope(F slope) {
  return [slope](const RuleContext& c) {
    VjpGraph g;
    const Ref s = slope(g, c.attrs);
    g.input_grads = {Mul(g, Ref::OutputGrad(0), s)};
    return g;
  };
}
#define SLOPE(expr) Slope([](VjpGraph& g, const Attrs& a) { (void)a; return expr; })
#define A(n) a.GetFloat(n)

Ref AsinSlope(VjpGraph& g) { return Call(g, "rsqrt", Scale(g, Call(g, "square", X()), -1, 1)); }

}  // namespace

OpDecl sin() { return Math("sin", kPointwise).Vjp(SLOPE(Call(g, "cos", X()))); }
OpDecl cos() { return Math("cos", kPointwise).Vjp(SLOPE(Scale(g, Call(g, "sin", X()), -1))); }
OpDecl tan() { return Math("tan", kPointwise, ValueKind::kUnit).Vjp(SLOPE(Scale(g, Call(g, "square", Out()), 1, 1))); }
OpDecl asin() { return Math("asin", kPointwise, ValueKind::kUnit).Vjp(SLOPE(AsinSlope(g))); }
OpDecl acos() { return Math("acos", kPointwise, ValueKind::kUnit).Vjp(SLOPE(Scale(g, AsinSlope(g), -1))); }
OpDecl atan() {
  return Math("atan", kPointwise).Vjp(SLOPE(Call(g, "reciprocal", Scale(g, Call(g, "square", X()), 1, 1))));
}
OpDecl sinh() { return Math("sinh", kPointwise).Vjp(SLOPE(Call(g, "cosh", X()))); }
OpDecl cosh() { return Math("cosh", kPointwise).Vjp(SLOPE(Call(g, "sinh", X()))); }
OpDecl asinh() {
  return Math("asinh", kPointwise).Vjp(SLOPE(Call(g, "rsqrt", Scale(g, Call(g, "square", X()), 1, 1))));
}
OpDecl acosh() {  // 1 / sqrt(x^2 - 1)
  return Math("acosh", kPointwise, ValueKind::kAboveOne)
      .Vjp(SLOPE(Call(g, "rsqrt", Scale(g, Call(g, "square", X()), 1, -1))));
}
OpDecl atanh() {
  return Math("atanh", kPointwise, ValueKind::kUnit)
      .Vjp(SLOPE(Call(g, "reciprocal", Scale(g, Call(g, "square", X()), -1, 1))));
}
OpDecl expm1() { return Math("expm1", kPointwise).Vjp(SLOPE(Scale(g, Out(), 1, 1))); }
OpDecl log1p() {
  return Math("log1p", kPointwise, ValueKind::kUnit).Vjp(SLOPE(Call(g, "reciprocal", Scale(g, X(), 1, 1))));
}
OpDecl log2() {
  return Math("log2", kPointwise, ValueKind::kPositive)
      .Vjp(SLOPE(Scale(g, Call(g, "reciprocal", X()), 1 / std::numbers::ln2)));
}
OpDecl log10() {
  return Math("log10", kPointwise, ValueKind::kPositive)
      .Vjp(SLOPE(Scale(g, Call(g, "reciprocal", X()), 1 / std::numbers::ln10)));
}
OpDecl erf() {  // 2 / sqrt(pi) exp(-x^2)
  return Math("erf", kPointwise)
      .Vjp(SLOPE(Scale(g, Call(g, "exp", Scale(g, Call(g, "square", X()), -1)), 2 * std::numbers::inv_sqrtpi)));
}
// erf^-1: slope sqrt(pi) / 2 e^(out^2); on (-0.9, 0.9), away from its poles at +-1.
OpDecl erfinv() {
  return Math("erfinv", kPointwise, ValueKind::kUnit)
      .Vjp(SLOPE(Scale(g, Call(g, "exp", Call(g, "square", Out())), 1 / (2 * std::numbers::inv_sqrtpi))));
}
// lgamma's slope is digamma; digamma's (trigamma) is no registered op: no VJP. Both on
// (0.1, 2), away from the poles at 0, -1, ....
OpDecl lgamma() { return Math("lgamma", kPointwise, ValueKind::kPositive).Vjp(SLOPE(Call(g, "digamma", X()))); }
OpDecl digamma() { return Math("digamma", kPointwise, ValueKind::kPositive); }
OpDecl ceil() { return Math("ceil", kExact); }
OpDecl floor() { return Math("floor", kExact); }
OpDecl round() { return Math("round", kExact).Attr("decimals", AttrKind::kInt, int64_t{0}); }
OpDecl trunc() { return Math("trunc", kExact); }
OpDecl sign() { return Math("sign", kExact); }
OpDecl reciprocal() {
  return Math("reciprocal", kPointwise, ValueKind::kNonZero).Vjp(SLOPE(Scale(g, Call(g, "square", Out()), -1)));
}
OpDecl square() { return Math("square", kPointwise).Vjp(SLOPE(Scale(g, X(), 2))); }
OpDecl logsigmoid() { return Math("logsigmoid", kPointwise).Vjp(SLOPE(Call(g, "sigmoid", Scale(g, X(), -1)))); }
OpDecl softsign() {  // 1 / (1 + |x|)^2
  return Math("softsign", kPointwise)
      .Vjp(SLOPE(Call(g, "reciprocal", Call(g, "square", Scale(g, Call(g, "abs", X()), 1, 1)))));
}
OpDecl softplus() {  // sigmoid(beta x); 1 on the linear branch
  return Math("softplus", kPointwise)
      .Attr("beta", AttrKind::kFloat, 1.0)
      .Attr("threshold", AttrKind::kFloat, 20.0)
      .Vjp(SLOPE(Where(g, Above(g, Scale(g, X(), A("beta")), A("threshold")), Const(g, 1),
                       Call(g, "sigmoid", Scale(g, X(), A("beta"))))));
}
OpDecl mish() {  // t + x (1 - t^2) sp', t = tanh(sp), sp' = sigmoid(x) (1 on the linear branch)
  return Math("mish", kPointwise)
      .Attr("threshold", AttrKind::kFloat, 20.0)
      .Vjp(SLOPE([&] {
        const Ref sp = g.Add("softplus", {X()}, MakeAttrs({{"beta", 1.0}, {"threshold", A("threshold")}}));
        const Ref t = Call(g, "tanh", sp);
        const Ref dsp = Where(g, Above(g, X(), A("threshold")), Const(g, 1), Call(g, "sigmoid", X()));
        const Ref rest = Mul(g, Mul(g, X(), Scale(g, Call(g, "square", t), -1, 1)), dsp);
        return g.Add("add", {t, rest});
      }()));
}
OpDecl swish() {  // s (1 + x (1 - s)), s = sigmoid(x)
  return Math("swish", kPointwise).Vjp(SLOPE([&] {
    const Ref s = Call(g, "sigmoid", X());
    return Mul(g, s, Scale(g, Mul(g, X(), Scale(g, s, -1, 1)), 1, 1));
  }()));
}
OpDecl relu6() { return Math("relu6", kExact).Vjp(SLOPE(Inside(g, X(), 0, 6))); }
OpDecl hardswish() {  // 0 below -3, 1 above 3, (2x + 3) / 6 between
  return Math("hardswish", kPointwise)
      .Vjp(SLOPE(Where(g, Above(g, X(), 3), Const(g, 1),
                       Where(g, Below(g, X(), -3), Const(g, 0), Scale(g, X(), 1.0 / 3, 0.5)))));
}
OpDecl hardsigmoid() {  // slope where the output is strictly inside (0, 1)
  return Math("hardsigmoid", kPointwise)
      .Attr("slope", AttrKind::kFloat, 0.2)
      .Attr("offset", AttrKind::kFloat, 0.5)
      .Vjp(SLOPE(Scale(g, Inside(g, Out(), 0, 1), A("slope"))));
}
OpDecl leaky_relu() {
  return Math("leaky_relu", kPointwise)
      .Attr("negative_slope", AttrKind::kFloat, 0.02, {"alpha"})
      .Vjp(SLOPE(Where(g, Above(g, X(), 0), Const(g, 1), Const(g, A("negative_slope")))));
}
OpDecl elu() {  // alpha e^x = out + alpha below 0
  return Math("elu", kPointwise)
      .Attr("alpha", AttrKind::kFloat, 1.0)
      .Vjp(SLOPE(Where(g, Above(g, X(), 0), Const(g, 1), Scale(g, Out(), 1, A("alpha")))));
}
OpDecl celu() {  // e^(x / alpha) = out / alpha + 1 below 0
  return Math("celu", kPointwise)
      .Attr("alpha", AttrKind::kFloat, 1.0)
      .Vjp(SLOPE(Where(g, Above(g, X(), 0), Const(g, 1), Scale(g, Out(), 1 / A("alpha"), 1))));
}
OpDecl selu() {  // scale above 0, scale alpha e^x = out + scale alpha below
  return Math("selu", kPointwise)
      .Attr("scale", AttrKind::kFloat, 1.0507009873554804934193349852946)
      .Attr("alpha", AttrKind::kFloat, 1.6732632423543772848170429916717)
      .Vjp(SLOPE(Where(g, Above(g, X(), 0), Const(g, A("scale")), Scale(g, Out(), 1, A("scale") * A("alpha")))));
}
OpDecl hardshrink() {
  return Math("hardshrink", kExact)
      .Attr("threshold", AttrKind::kFloat, 0.5)
      .Vjp(SLOPE(Where(g, Above(g, Call(g, "abs", X()), A("threshold")), Const(g, 1), Const(g, 0))));
}
OpDecl softshrink() {
  return Math("softshrink", kPointwise)
      .Attr("threshold", AttrKind::kFloat, 0.5, {"lambda"})
      .Vjp(SLOPE(Where(g, Above(g, Call(g, "abs", X()), A("threshold")), Const(g, 1), Const(g, 0))));
}
OpDecl hardtanh() {
  return Math("hardtanh", kExact)
      .Attr("t_min", AttrKind::kFloat, 0.0, {"min"})
      .Attr("t_max", AttrKind::kFloat, 24.0, {"max"})
      .Vjp(SLOPE(Inside(g, X(), A("t_min"), A("t_max"))))
      .Examples(FromSignatures({{{"abc"}, MakeAttrs({{"t_min", -1.0}, {"t_max", 1.0}})}, {{"a1"}}}));
}
OpDecl thresholded_relu() {
  return Math("thresholded_relu", kExact)
      .Attr("threshold", AttrKind::kFloat, 1.0)
      .Attr("value", AttrKind::kFloat, 0.0)
      .Vjp(SLOPE(Where(g, Above(g, X(), A("threshold")), Const(g, 1), Const(g, 0))));
}
OpDecl stanh() {  // a b (1 - tanh(a x)^2)
  return Math("stanh", kPointwise)
      .Attr("scale_a", AttrKind::kFloat, 0.67)
      .Attr("scale_b", AttrKind::kFloat, 1.7159)
      .Vjp(SLOPE(Scale(g, Call(g, "square", Call(g, "tanh", Scale(g, X(), A("scale_a")))),
                       -A("scale_a") * A("scale_b"), A("scale_a") * A("scale_b"))));
}
OpDecl tanh_shrink() { return Math("tanh_shrink", kPointwise).Vjp(SLOPE(Call(g, "square", Call(g, "tanh", X())))); }
// 1 / (x (1 - x)) inside [eps, 1 - eps], 0 outside (Paddle's logit_grad). The examples clamp
// to [0.1, 0.9] (eps 0.1, 0.25): near 0 and 1 the slope and its derivatives blow up, and
// float32's 1 - 1e-6 is 1% off in its distance from 1 (the goldens check the default eps).
OpDecl logit() {
  return Math("logit", kPointwise, ValueKind::kUnit)
      .Attr("eps", AttrKind::kFloat, 1e-6)
      .Examples(FromSignatures({{{"abc"}, MakeAttrs({{"eps", 0.1}})}, {{"a1"}, MakeAttrs({{"eps", 0.25}})}}))
      .Vjp(SLOPE(Where(g, Below(g, X(), A("eps")), Const(g, 0),
                       Where(g, Above(g, X(), 1 - A("eps")), Const(g, 0),
                             Call(g, "reciprocal", Mul(g, X(), Scale(g, X(), -1, 1)))))));
}
// The identity: every partial kept (a sum of shards is the sum of their copies).
OpDecl assign() {
  OpDecl op = Math("assign", kExact);
  op.einsum = [](const RuleContext& c) {
    EinsumSpec spec = notation::Elementwise(c.input_shapes);
    spec.accept = PartialAcceptance::kAnyOp;
    return spec;
  };
  op.vjp = [](const RuleContext&) {
    VjpGraph g;
    g.input_grads = {Ref::OutputGrad(0)};
    return g;
  };
  return op;
}

// conj of real values: the identity (Paddle's conj returns a real x as it is), every
// partial kept as assign does.
OpDecl conj() {
  OpDecl op = assign();
  op.name = "conj";
  return op;
}
// Every element `value`, x's shape (Paddle's fill, the in-place full_like): the values of
// x are read nowhere, so its gradient is zero (no VJP).
OpDecl fill() { return Math("fill", kExact).Attr("value", AttrKind::kFloat, 0.0); }
// x == 0 as bool, any input dtype (rules/ops/unary_math_attrs.h); piecewise constant.
OpDecl logical_not() { return Math("logical_not", kExact, ValueKind::kBool); }
// ~x on int64 or bool inputs (small integers: several bits set).
OpDecl bitwise_not() {
  OpDecl op = Math("bitwise_not", kExact);
  op.values = [](const RuleContext&) { return std::vector<InputValues>{{ValueKind::kIndex, 16}}; };
  return op;
}

#undef A
#undef SLOPE

}  // namespace spmd::declare
