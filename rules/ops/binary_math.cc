// The binary math family (rules/engine/binary_math_list.h): one declaration line each. Every op
// is pointwise on two broadcasting inputs (the elementwise notation: every dim may stay
// sharded; partial inputs are reduced first, since none of them is linear), with the
// values its inputs are generated from, its tolerance class and, where Paddle defines a
// gradient that is not zero almost everywhere, its VJP as a graph of registered ops.
// floor_divide, trunc_divide, heaviside, the comparisons and the logical and bitwise ops
// have none (piecewise constant in their inputs, or not real-valued).
#include <vector>

#include "rules/engine/notation.h"
#include "rules/engine/registry.h"
#include "rules/ops/vjp_util.h"

namespace spmd::declare {
namespace {

using notation::FromSignatures;
using Ref = VjpRef;

constexpr ToleranceClass kExact = ToleranceClass::kExact;
constexpr ToleranceClass kPointwise = ToleranceClass::kPointwise;

// One op of the family: (x, y) -> out broadcast, x's values of `x`, y's of `y`.
OpBuilder Math(const char* name, ToleranceClass tolerance, InputValues x = {ValueKind::kReal},
               InputValues y = {ValueKind::kReal}) {
  return OpBuilder(name).Inputs({"x", "y"}).Outputs({"out"}).Tolerance(tolerance)
      .Einsum([](const RuleContext& c) { return notation::Elementwise(c.input_shapes); })
      .Values([x, y](const RuleContext&) { return std::vector<InputValues>{x, y}; })
      .Examples(FromSignatures({{{"ab", "ab"}}, {{"abc", "c"}}, {{"1b", "ab"}}}));
}

// Small integers (int64): the comparisons see ties, the bitwise ops several bits.
InputValues Ints(int64_t bound) { return {ValueKind::kIndex, bound}; }
constexpr InputValues kBools{ValueKind::kBool};
constexpr InputValues kNonZero{ValueKind::kNonZero};

// d(x^y) = y out / x dx + out log(x) dy (x > 0: the generated x are positive).
VjpGraph PowVjp(const RuleContext& c) {
  VjpGraph g;
  const Shape out = notation::BroadcastShapes(c.input_shapes);
  const Ref g_out = g.Add("multiply", {Ref::OutputGrad(0), Ref::Output(0)});
  const Ref dx = g.Add("multiply", {g.Add("divide", {g_out, Ref::Input(0)}), Ref::Input(1)});
  const Ref dy = g.Add("multiply", {g_out, g.Add("log", {Ref::Input(0)})});
  g.input_grads = {vjps::SumToShape(g, dx, out, c.input_shapes[0]),
                   vjps::SumToShape(g, dy, out, c.input_shapes[1])};
  return g;
}

// remainder(x, y) = x - y floor(x / y): dx = g, dy = -g floor_divide(x, y) (Paddle's
// remainder_grad), off the jumps where x / y is an integer.
VjpGraph RemainderVjp(const RuleContext& c) {
  VjpGraph g;
  const Shape out = notation::BroadcastShapes(c.input_shapes);
  const Ref q = g.Add("floor_divide", {Ref::Input(0), Ref::Input(1)});
  const Ref dy = g.Add("scale", {g.Add("multiply", {Ref::OutputGrad(0), q})},
                       notation::MakeAttrs({{"scale", -1.0}, {"bias", 0.0}}));
  g.input_grads = {vjps::SumToShape(g, Ref::OutputGrad(0), out, c.input_shapes[0]),
                   vjps::SumToShape(g, dy, out, c.input_shapes[1])};
  return g;
}

}  // namespace

OpDecl elementwise_pow() { return Math("elementwise_pow", kPointwise, {ValueKind::kPositive}).Vjp(PowVjp); }
OpDecl floor_divide() { return Math("floor_divide", kExact, {ValueKind::kReal}, kNonZero); }
OpDecl trunc_divide() { return Math("trunc_divide", kExact, {ValueKind::kReal}, kNonZero); }
OpDecl remainder() { return Math("remainder", kPointwise, {ValueKind::kReal}, kNonZero).Vjp(RemainderVjp); }
OpDecl fmax() { return Math("fmax", kExact).Vjp(vjps::Maximum); }
OpDecl fmin() { return Math("fmin", kExact).Vjp(vjps::Minimum); }
OpDecl heaviside() { return Math("heaviside", kExact, kBools); }  // x in {0, 1}: y is read at 0
OpDecl equal() { return Math("equal", kExact, Ints(3), Ints(3)); }
OpDecl not_equal() { return Math("not_equal", kExact, Ints(3), Ints(3)); }
OpDecl greater_equal() { return Math("greater_equal", kExact, Ints(3), Ints(3)); }
OpDecl less_equal() { return Math("less_equal", kExact, Ints(3), Ints(3)); }
OpDecl logical_and() { return Math("logical_and", kExact, kBools, kBools); }
OpDecl logical_or() { return Math("logical_or", kExact, kBools, kBools); }
OpDecl logical_xor() { return Math("logical_xor", kExact, kBools, kBools); }
OpDecl bitwise_and() { return Math("bitwise_and", kExact, Ints(16), Ints(16)); }
OpDecl bitwise_or() { return Math("bitwise_or", kExact, Ints(16), Ints(16)); }
OpDecl bitwise_xor() { return Math("bitwise_xor", kExact, Ints(16), Ints(16)); }

}  // namespace spmd::declare
