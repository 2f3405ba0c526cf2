#include "rules/vjps.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "rules/attention_shape.h"
#include "rules/dropout_attrs.h"
#include "rules/error.h"
#include "rules/notation.h"
#include "rules/shape_util.h"

namespace spmd::vjps {
namespace {

using notation::Ints;
using notation::MakeAttrs;
using Ref = VjpRef;

int64_t Numel(const Shape& shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
}

Ref Reshape(VjpGraph& g, Ref x, const Shape& from, const Shape& to) {
  if (from == to) return x;
  return g.Add("reshape", {x}, MakeAttrs({{"shape", to}}));
}

Ref ExpandTo(VjpGraph& g, Ref x, const Shape& from, const Shape& to) {
  if (from == to) return x;
  return g.Add("expand", {x}, MakeAttrs({{"shape", to}}));
}

Ref ScaleBy(VjpGraph& g, Ref x, double s, double bias = 0) {
  return g.Add("scale", {x}, MakeAttrs({{"scale", s}, {"bias", bias}}));
}

// The output of a broadcasting binary op.
Shape OutShape(const RuleContext& c) { return notation::BroadcastShapes(c.input_shapes); }

// A reduction's input shape with the reduced dims set to 1 (keep_dim's output shape).
Shape KeptShape(const Shape& x, const std::vector<int64_t>& axis, bool all) {
  const int rank = static_cast<int>(x.size());
  Shape kept = x;
  if (all || axis.empty()) return Shape(x.size(), 1);
  for (int d : notation::NormalizeAxes(axis, rank, "attrs.axis")) kept[d] = 1;
  return kept;
}

}  // namespace

Ref SumToShape(VjpGraph& graph, Ref grad, const Shape& from, const Shape& to) {
  if (from == to) return grad;
  const size_t lead = from.size() - to.size();
  Ints axes;
  Shape kept = from;
  for (size_t d = 0; d < from.size(); ++d) {
    if (d < lead || (to[d - lead] == 1 && from[d] != 1)) {
      axes.push_back(static_cast<int64_t>(d));
      kept[d] = 1;
    }
  }
  Ref summed = grad;
  if (!axes.empty()) {
    summed = graph.Add("sum", {grad}, MakeAttrs({{"axis", axes}, {"keep_dim", true}}));
  }
  return Reshape(graph, summed, kept, to);
}

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

// d x^(-1/2) = -0.5 x^(-3/2) dx = -0.5 out^3 dx.
VjpGraph Rsqrt(const RuleContext&) {
  VjpGraph g;
  const Ref cube = g.Add("multiply", {g.Add("multiply", {Ref::Output(0), Ref::Output(0)}), Ref::Output(0)});
  g.input_grads = {g.Add("multiply", {Ref::OutputGrad(0), ScaleBy(g, cube, -0.5)})};
  return g;
}

VjpGraph Matmul(const RuleContext& c) {
  VjpGraph g;
  Attrs attrs;
  for (const char* name : {"trans_x", "trans_y"}) {
    if (c.attrs.Has(name)) attrs.Set(name, c.attrs.GetBool(name));
  }
  const Ref grads = g.Add("matmul_grad", {Ref::Input(0), Ref::Input(1), Ref::OutputGrad(0)}, attrs);
  g.input_grads = {Ref::Call(grads.index, 0), Ref::Call(grads.index, 1)};
  return g;
}

VjpGraph Sum(const RuleContext& c) {
  VjpGraph g;
  const Shape& x = c.input_shapes[0];
  const Shape kept = KeptShape(x, c.attrs.GetInts("axis"), c.attrs.GetBool("reduce_all"));
  // The cotangent has the output's shape (kept, or kept without the reduced dims): the
  // same values as `kept`, so a reshape gives it the reduced dims back as 1s.
  const Ref reshaped = g.Add("reshape", {Ref::OutputGrad(0)}, MakeAttrs({{"shape", kept}}));
  g.input_grads = {ExpandTo(g, reshaped, kept, x)};
  return g;
}

VjpGraph Mean(const RuleContext& c) {
  VjpGraph g = Sum(c);
  const Shape& x = c.input_shapes[0];
  const Shape kept = KeptShape(x, c.attrs.GetInts("axis"), c.attrs.GetBool("reduce_all"));
  const int64_t count = Numel(kept) == 0 ? 0 : Numel(x) / Numel(kept);
  if (count == 0) ThrowUnsupported("vjp", "mean over zero elements has no gradient");
  g.input_grads[0] = ScaleBy(g, *g.input_grads[0], 1.0 / static_cast<double>(count));
  return g;
}

VjpGraph Softmax(const RuleContext& c) {
  VjpGraph g;
  g.input_grads = {g.Add("softmax_grad", {Ref::Output(0), Ref::OutputGrad(0)},
                         MakeAttrs({{"axis", c.attrs.GetInt("axis")}}))};
  return g;
}

// out_i = sum over j <= i (j < i exclusive; j >= i reversed) of x_j, so x_j's gradient
// sums g_i over the same pairs seen from j: the prefix sums in the other direction.
VjpGraph Cumsum(const RuleContext& c) {
  VjpGraph g;
  const Shape& x = c.input_shapes[0];
  Attrs attrs = MakeAttrs({{"axis", c.attrs.GetInt("axis")},
                           {"exclusive", c.attrs.GetBool("exclusive")},
                           {"reverse", !c.attrs.GetBool("reverse")}});
  if (c.attrs.GetBool("flatten")) {  // out is x flattened: sum along it, then x's shape
    attrs.Set("axis", int64_t{0});
    const Ref summed = g.Add("cumsum", {Ref::OutputGrad(0)}, attrs);
    g.input_grads = {Reshape(g, summed, {Numel(x)}, x)};
    return g;
  }
  g.input_grads = {g.Add("cumsum", {Ref::OutputGrad(0)}, attrs)};
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

VjpGraph ReshapeBack(const RuleContext& c) {
  VjpGraph g;
  g.input_grads = {g.Add("reshape", {Ref::OutputGrad(0)}, MakeAttrs({{"shape", c.input_shapes[0]}}))};
  return g;
}

VjpGraph Transpose(const RuleContext& c) {
  VjpGraph g;
  const int rank = static_cast<int>(c.input_shapes[0].size());
  const std::vector<int> perm = notation::NormalizeAxes(c.attrs.GetInts("perm"), rank, "attrs.perm");
  Ints inverse(perm.size());
  for (size_t d = 0; d < perm.size(); ++d) inverse[perm[d]] = static_cast<int64_t>(d);
  g.input_grads = {g.Add("transpose", {Ref::OutputGrad(0)}, MakeAttrs({{"perm", inverse}}))};
  return g;
}

VjpGraph Expand(const RuleContext& c) {
  VjpGraph g;
  const Shape& x = c.input_shapes[0];
  Shape target;
  if (c.attrs.Has("shape")) {
    target = c.attrs.GetInts("shape");
  } else {  // expand_as
    target = c.attrs.GetInts("target_shape");
    if (target.empty()) target = c.input_shapes[1];
  }
  if (target.size() < x.size()) ThrowInvalid("attrs.shape", "has fewer dims than the input");
  const size_t lead = target.size() - x.size();
  for (size_t d = lead; d < target.size(); ++d) {
    if (target[d] == -1) target[d] = x[d - lead];
  }
  g.input_grads = {SumToShape(g, Ref::OutputGrad(0), target, x)};
  if (c.input_shapes.size() == 2) g.input_grads.push_back(std::nullopt);
  return g;
}

VjpGraph Concat(const RuleContext& c) {
  VjpGraph g;
  const int rank = static_cast<int>(c.input_shapes[0].size());
  const int axis = notation::NormalizeAxis(c.attrs.GetInt("axis"), rank, "attrs.axis");
  Ints sections;
  for (const Shape& s : c.input_shapes) sections.push_back(s[axis]);
  const Ref pieces = g.Add("split", {Ref::OutputGrad(0)},
                           MakeAttrs({{"sections", sections}, {"axis", int64_t{axis}}}));
  for (size_t i = 0; i < c.input_shapes.size(); ++i) g.input_grads.push_back(Ref::Call(pieces.index, i));
  return g;
}

}  // namespace spmd::vjps

namespace spmd::vjps {

VjpGraph Split(const RuleContext& c) {
  VjpGraph g;
  const size_t pieces = c.attrs.Has("num") ? static_cast<size_t>(c.attrs.GetInt("num"))
                                           : c.attrs.GetInts("sections").size();
  std::vector<Ref> grads;
  for (size_t o = 0; o < pieces; ++o) grads.push_back(Ref::OutputGrad(o));
  g.input_grads = {g.Add("concat", grads, MakeAttrs({{"axis", c.attrs.GetInt("axis")}}))};
  return g;
}

VjpGraph Unbind(const RuleContext& c) {
  VjpGraph g;
  const int rank = static_cast<int>(c.input_shapes[0].size());
  const int axis = notation::NormalizeAxis(c.attrs.GetInt("axis"), rank, "attrs.axis");
  const int64_t slices = c.input_shapes[0][axis];
  if (slices == 0) ThrowUnsupported("vjp", "unbind into no slices has no cotangent to stack");
  std::vector<Ref> grads;
  for (int64_t o = 0; o < slices; ++o) grads.push_back(Ref::OutputGrad(static_cast<size_t>(o)));
  g.input_grads = {g.Add("stack", grads, MakeAttrs({{"axis", int64_t{axis}}}))};
  return g;
}

VjpGraph Triu(const RuleContext& c) {
  VjpGraph g;
  g.input_grads = {g.Add("triu", {Ref::OutputGrad(0)}, MakeAttrs({{"diagonal", c.attrs.GetInt("diagonal")}}))};
  return g;
}

VjpGraph Tril(const RuleContext& c) {
  VjpGraph g;
  g.input_grads = {g.Add("tril", {Ref::OutputGrad(0)}, MakeAttrs({{"diagonal", c.attrs.GetInt("diagonal")}}))};
  return g;
}

VjpGraph TrilTriu(const RuleContext& c) {
  VjpGraph g;
  g.input_grads = {g.Add("tril_triu", {Ref::OutputGrad(0)},
                         MakeAttrs({{"diagonal", c.attrs.GetInt("diagonal")},
                                    {"lower", c.attrs.GetBool("lower")}}))};
  return g;
}

VjpGraph AddN(const RuleContext& c) {
  VjpGraph g;
  g.input_grads.assign(c.input_shapes.size(), Ref::OutputGrad(0));
  return g;
}

// Each shift is taken mod its dim's size (the flat size without axes) and turned back:
// size - shift, so that no shift is negated (INT64_MIN has no negation).
VjpGraph Roll(const RuleContext& c) {
  VjpGraph g;
  const Shape& x = c.input_shapes[0];
  const Ints& shifts = c.attrs.GetInts("shifts");
  const Ints& axes = c.attrs.GetInts("axis");
  auto back = [](int64_t shift, int64_t size) {
    if (size <= 0) return int64_t{0};
    const int64_t r = shift % size;
    return r <= 0 ? -r : size - r;
  };
  Ints reversed;
  if (axes.empty()) {
    if (shifts.size() != 1) ThrowInvalid("attrs.shifts", "needs one shift when axis is empty");
    reversed.push_back(back(shifts[0], Numel(x)));
  } else {
    if (shifts.size() != axes.size()) ThrowInvalid("attrs.shifts", "needs one shift per axis");
    for (size_t k = 0; k < axes.size(); ++k) {
      const int d = notation::NormalizeAxis(axes[k], static_cast<int>(x.size()), "attrs.axis");
      reversed.push_back(back(shifts[k], x[static_cast<size_t>(d)]));
    }
  }
  g.input_grads = {g.Add("roll", {Ref::OutputGrad(0)}, MakeAttrs({{"shifts", reversed}, {"axis", axes}}))};
  return g;
}

}  // namespace spmd::vjps

// ---- Masks, selections and reductions to a selected element ----
namespace spmd::vjps {
namespace {

// A tensor of `like`'s shape filled with 0 (or `value`): scale(like, 0, value). No op
// makes a constant; a non-finite element of `like` gives NaN there.
Ref Zeros(VjpGraph& g, Ref like) { return ScaleBy(g, like, 0); }
Ref Filled(VjpGraph& g, Ref like, double value) { return ScaleBy(g, like, 0, value); }

// where(mask, value, 0) / where(mask, 0, value).
Ref Keep(VjpGraph& g, Ref mask, Ref value) { return g.Add("where", {mask, value, Zeros(g, value)}); }
Ref Drop(VjpGraph& g, Ref mask, Ref value) { return g.Add("where", {mask, Zeros(g, value), value}); }

// The cotangent of a reduction, reshaped to the kept-dims shape and expanded to x.
Ref ExpandReduced(VjpGraph& g, Ref reduced, const Shape& kept, const Shape& x) {
  return ExpandTo(g, g.Add("reshape", {reduced}, MakeAttrs({{"shape", kept}})), kept, x);
}

}  // namespace

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

// Paddle's convention: x gets g where x > y (maximum) / x < y (minimum), y the rest,
// ties included.
VjpGraph Maximum(const RuleContext& c) {
  VjpGraph g;
  const Shape out = OutShape(c);
  const Ref x_wins = g.Add("greater_than", {Ref::Input(0), Ref::Input(1)});
  g.input_grads = {SumToShape(g, Keep(g, x_wins, Ref::OutputGrad(0)), out, c.input_shapes[0]),
                   SumToShape(g, Drop(g, x_wins, Ref::OutputGrad(0)), out, c.input_shapes[1])};
  return g;
}

VjpGraph Minimum(const RuleContext& c) {
  VjpGraph g;
  const Shape out = OutShape(c);
  const Ref x_wins = g.Add("less_than", {Ref::Input(0), Ref::Input(1)});
  g.input_grads = {SumToShape(g, Keep(g, x_wins, Ref::OutputGrad(0)), out, c.input_shapes[0]),
                   SumToShape(g, Drop(g, x_wins, Ref::OutputGrad(0)), out, c.input_shapes[1])};
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

VjpGraph Where(const RuleContext& c) {
  VjpGraph g;
  const Shape out = notation::BroadcastShapes(c.input_shapes);
  g.input_grads = {std::nullopt,
                   SumToShape(g, Keep(g, Ref::Input(0), Ref::OutputGrad(0)), out, c.input_shapes[1]),
                   SumToShape(g, Drop(g, Ref::Input(0), Ref::OutputGrad(0)), out, c.input_shapes[2])};
  return g;
}

VjpGraph MeanAll(const RuleContext& c) {
  VjpGraph g;
  const Shape& x = c.input_shapes[0];
  const int64_t count = Numel(x);
  if (count == 0) ThrowUnsupported("vjp", "mean_all over zero elements has no gradient");
  const Ref expanded = ExpandReduced(g, Ref::OutputGrad(0), Shape(x.size(), 1), x);
  g.input_grads = {ScaleBy(g, expanded, 1.0 / static_cast<double>(count))};
  return g;
}

// d sum(x^2) = 2 x g.
VjpGraph SquaredL2Norm(const RuleContext& c) {
  VjpGraph g;
  const Shape& x = c.input_shapes[0];
  const Shape kept = KeptShape(x, c.attrs.GetInts("axis"), false);
  const Ref expanded = ExpandReduced(g, Ref::OutputGrad(0), kept, x);
  g.input_grads = {g.Add("multiply", {expanded, ScaleBy(g, Ref::Input(0), 2)})};
  return g;
}

// Every element equal to the extreme gets the cotangent (Paddle's max_grad: ties share
// it whole). x is never beyond its own extreme, so "not below the max" is "equal to it".
VjpGraph ReduceExtreme(const RuleContext& c, const char* beyond) {
  VjpGraph g;
  const Shape& x = c.input_shapes[0];
  const Shape kept = KeptShape(x, c.attrs.GetInts("axis"), c.attrs.GetBool("reduce_all"));
  const Ref extreme = g.Add("reshape", {Ref::Output(0)}, MakeAttrs({{"shape", kept}}));
  const Ref not_it = g.Add(beyond, {Ref::Input(0), extreme});
  g.input_grads = {Drop(g, not_it, ExpandReduced(g, Ref::OutputGrad(0), kept, x))};
  return g;
}
VjpGraph Max(const RuleContext& c) { return ReduceExtreme(c, "less_than"); }
VjpGraph Min(const RuleContext& c) { return ReduceExtreme(c, "greater_than"); }

// x_i gets g times the product of the slice's other elements, without dividing by x_i: a
// slice without zeros gives g out / x_i; with one zero, the zero gets g times the product
// of the rest and the others 0; with two or more, all get 0. The zeros are counted and
// replaced by ones (`safe`) so that no quotient is taken at a zero (Paddle's prod_grad, g
// out / x, gives NaN there).
VjpGraph Prod(const RuleContext& c) {
  VjpGraph g;
  const Shape& x = c.input_shapes[0];
  const Shape kept = KeptShape(x, c.attrs.GetInts("axis"), c.attrs.GetBool("reduce_all"));
  const Attrs reduce = MakeAttrs({{"axis", c.attrs.GetInts("axis")},
                                  {"keep_dim", true},
                                  {"reduce_all", c.attrs.GetBool("reduce_all")}});
  const Ref in = Ref::Input(0);
  const Ref zero = Zeros(g, in), one = Filled(g, in, 1);
  const Ref nonzero = g.Add("greater_than", {g.Add("abs", {in}), zero});
  const Ref safe = g.Add("where", {nonzero, in, one});
  const Ref is_zero = g.Add("where", {nonzero, zero, one});
  const Ref rest = g.Add("prod", {safe}, reduce);      // the product of the nonzeros
  const Ref count = g.Add("sum", {is_zero}, reduce);   // the zeros in the slice
  const Ref half = Filled(g, count, 0.5);
  const Ref none = ExpandTo(g, g.Add("less_than", {count, half}), kept, x);
  const Ref one_zero = ExpandTo(g, g.Add("less_than", {g.Add("abs", {ScaleBy(g, count, 1, -1)}), half}), kept, x);
  const Ref scaled = ExpandTo(g, g.Add("multiply", {g.Add("reshape", {Ref::OutputGrad(0)}, MakeAttrs({{"shape", kept}})), rest}), kept, x);
  const Ref without_zeros = g.Add("divide", {scaled, safe});
  const Ref at_the_zero = g.Add("multiply", {scaled, is_zero});
  g.input_grads = {g.Add("where", {none, without_zeros, Keep(g, one_zero, at_the_zero)})};
  return g;
}

// d logsumexp = exp(x - out) g.
VjpGraph Logsumexp(const RuleContext& c) {
  VjpGraph g;
  const Shape& x = c.input_shapes[0];
  const Shape kept = KeptShape(x, c.attrs.GetInts("axis"), c.attrs.GetBool("reduce_all"));
  const Ref out = g.Add("reshape", {Ref::Output(0)}, MakeAttrs({{"shape", kept}}));
  const Ref weights = g.Add("exp", {g.Add("subtract", {Ref::Input(0), out})});
  g.input_grads = {g.Add("multiply", {weights, ExpandReduced(g, Ref::OutputGrad(0), kept, x)})};
  return g;
}

// d ||x||_p = sign(x) |x|^(p-1) / out^(p-1) g; out is floored at epsilon as Paddle's
// p_norm_grad does. p = 1 and p = 2 are exact compositions (sign(x), x / out); other p
// write the ratio's power as exp((p - 1) log(|x| / out)).
VjpGraph PNorm(const RuleContext& c) {
  VjpGraph g;
  const Shape& x = c.input_shapes[0];
  const int rank = static_cast<int>(x.size());
  const double p = c.attrs.GetFloat("porder");
  Shape kept(x.size(), 1);
  if (!c.attrs.GetBool("asvector")) {
    const int axis = notation::NormalizeAxisOrScalar(c.attrs.GetInt("axis"), rank, "attrs.axis");
    kept = x;
    if (axis >= 0) kept[axis] = 1;
  }
  const Ref g_x = ExpandReduced(g, Ref::OutputGrad(0), kept, x);
  const Ref zero = Zeros(g, Ref::Input(0));
  const Ref positive = g.Add("greater_than", {Ref::Input(0), zero});
  const Ref negative = g.Add("less_than", {Ref::Input(0), zero});
  auto signed_by_x = [&](Ref magnitude) {  // sign(x) magnitude
    return g.Add("where", {positive, magnitude, Keep(g, negative, ScaleBy(g, magnitude, -1))});
  };
  if (p == 1.0) {
    g.input_grads = {signed_by_x(g_x)};
    return g;
  }
  const Ref out = g.Add("reshape", {Ref::Output(0)}, MakeAttrs({{"shape", kept}}));
  const Ref floored = g.Add("maximum", {out, Filled(g, out, c.attrs.GetFloat("epsilon"))});
  if (p == 2.0) {
    g.input_grads = {g.Add("multiply", {g_x, g.Add("divide", {Ref::Input(0), floored})})};
    return g;
  }
  const Ref magnitude = g.Add("abs", {Ref::Input(0)});
  const Ref ratio = g.Add("divide", {magnitude, floored});
  const Ref power = g.Add("exp", {ScaleBy(g, g.Add("log", {ratio}), p - 1)});
  g.input_grads = {signed_by_x(g.Add("multiply", {g_x, power}))};
  return g;
}

VjpGraph Stack(const RuleContext& c) {
  VjpGraph g;
  const Ref pieces = g.Add("unbind", {Ref::OutputGrad(0)}, MakeAttrs({{"axis", c.attrs.GetInt("axis")}}));
  for (size_t i = 0; i < c.input_shapes.size(); ++i) g.input_grads.push_back(Ref::Call(pieces.index, i));
  return g;
}

// out is x repeated: split each tiled dim into (repeat, size) and sum over the repeats.
VjpGraph Tile(const RuleContext& c) {
  VjpGraph g;
  const Shape& x = c.input_shapes[0];
  Ints repeat = c.attrs.GetInts("repeat_times");
  const size_t out_rank = std::max(x.size(), repeat.size());
  repeat.insert(repeat.begin(), out_rank - repeat.size(), 1);
  Shape padded = x;
  padded.insert(padded.begin(), out_rank - x.size(), 1);
  Shape out, split;
  Ints repeat_axes;
  for (size_t p = 0; p < out_rank; ++p) {
    out.push_back(repeat[p] * padded[p]);
    if (repeat[p] != 1) {
      repeat_axes.push_back(static_cast<int64_t>(split.size()));
      split.push_back(repeat[p]);
    }
    split.push_back(padded[p]);
  }
  if (repeat_axes.empty()) {
    g.input_grads = {Reshape(g, Ref::OutputGrad(0), out, x)};
    return g;
  }
  const Ref parts = g.Add("reshape", {Ref::OutputGrad(0)}, MakeAttrs({{"shape", split}}));
  const Ref summed = g.Add("sum", {parts}, MakeAttrs({{"axis", repeat_axes}, {"keep_dim", false}}));
  g.input_grads = {Reshape(g, summed, padded, x)};
  return g;
}

// The cotangent padded back with zeros: per sliced dim, zeros before and after it
// (slices of x scaled by 0, so each block has exactly the shape it needs) concatenated.
VjpGraph Slice(const RuleContext& c) {
  VjpGraph g;
  const Shape& x = c.input_shapes[0];
  const int rank = static_cast<int>(x.size());
  const std::vector<int> axes = notation::NormalizeAxes(c.attrs.GetInts("axes"), rank, "attrs.axes");
  const Ints& starts = c.attrs.GetInts("starts");
  const Ints& ends = c.attrs.GetInts("ends");
  if (starts.size() != axes.size()) ThrowInvalid("attrs.starts", "needs one entry per axis");
  if (ends.size() != axes.size()) ThrowInvalid("attrs.ends", "needs one entry per axis");
  Ints begin(rank, 0), end(x.begin(), x.end());
  for (size_t k = 0; k < axes.size(); ++k) {
    const int d = axes[k];
    auto clamp = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + x[d] : v, 0, x[d]); };
    begin[d] = clamp(starts[k]);
    end[d] = std::max(begin[d], clamp(ends[k]));
  }
  Shape sliced(rank);
  for (int d = 0; d < rank; ++d) sliced[d] = end[d] - begin[d];
  if (Numel(sliced) == 0) {  // nothing was read: x's gradient is zero
    g.input_grads = {Zeros(g, Ref::Input(0))};
    return g;
  }
  // The cotangent has the sliced shape, less the decreased dims: put them back.
  Shape out_shape;
  const std::vector<int> decreased =
      notation::NormalizeAxes(c.attrs.GetInts("decrease_axis"), rank, "attrs.decrease_axis");
  for (int d = 0; d < rank; ++d) {
    if (std::find(decreased.begin(), decreased.end(), d) == decreased.end()) out_shape.push_back(sliced[d]);
  }
  Ref grad = Reshape(g, Ref::OutputGrad(0), out_shape, sliced);
  Ints lo = begin, hi = end;  // the region of x `grad` covers, widened dim by dim
  // A zero block of x's region [lo, hi) with dim d narrowed to [from, to). Only the dims
  // that differ from x's are sliced (slice forces those replicated; the rest keep theirs).
  auto zeros_block = [&](int d, int64_t from, int64_t to) {
    Ints axes, block_lo, block_hi;
    for (int e = 0; e < rank; ++e) {
      const int64_t a = e == d ? from : lo[e], b = e == d ? to : hi[e];
      if (a == 0 && b == x[e]) continue;
      axes.push_back(e);
      block_lo.push_back(a);
      block_hi.push_back(b);
    }
    const Ref block = g.Add("slice", {Ref::Input(0)},
                            MakeAttrs({{"axes", axes}, {"starts", block_lo}, {"ends", block_hi}}));
    return Zeros(g, block);
  };
  for (int d = 0; d < rank; ++d) {
    if (begin[d] == 0 && end[d] == x[d]) continue;
    std::vector<Ref> pieces;
    if (begin[d] > 0) pieces.push_back(zeros_block(d, 0, begin[d]));
    pieces.push_back(grad);
    if (end[d] < x[d]) pieces.push_back(zeros_block(d, end[d], x[d]));
    grad = g.Add("concat", pieces, MakeAttrs({{"axis", int64_t{d}}}));
    lo[d] = 0;
    hi[d] = x[d];
  }
  g.input_grads = {grad};
  return g;
}

// Operand i's gradient is the einsum of the cotangent with the other operands, giving
// operand i's letters (the planned equation: `...` spelled out as letters). A dim of
// operand i stays out of that einsum's output, and comes back by broadcasting (reshape to
// 1, expand), when no other term has its letter at its size: a letter only in operand i
// (summed there), or one the other terms have only at size 1. A dim that broadcast in the
// forward (size 1, the letter larger elsewhere) is summed by that einsum.
VjpGraph Einsum(const RuleContext& c) {
  VjpGraph g;
  const shape::EinsumPlan plan = shape::PlanEinsum(c.attrs.GetString("equation"), c.input_shapes);
  const shape::EinsumEquation& eq = plan.eq;
  for (size_t i = 0; i < eq.operands.size(); ++i) {
    // The largest size of each letter over the cotangent and the other operands.
    std::vector<int64_t> seen(128, -1);
    auto see = [&](const std::string& letters, const Shape& sizes) {
      for (size_t d = 0; d < letters.size(); ++d) {
        int64_t& s = seen[static_cast<unsigned char>(letters[d])];
        s = std::max(s, sizes[d]);
      }
    };
    see(eq.output, plan.SizesOf(eq.output));
    std::vector<Ref> operands{Ref::OutputGrad(0)};
    std::string terms = eq.output;
    for (size_t j = 0; j < eq.operands.size(); ++j) {
      if (j == i) continue;
      terms += "," + eq.operands[j];
      see(eq.operands[j], c.input_shapes[j]);
      operands.push_back(Ref::Input(j));
    }
    const std::string& mine = eq.operands[i];
    std::string target;
    Shape kept = c.input_shapes[i];
    for (size_t d = 0; d < mine.size(); ++d) {
      const int64_t size = c.input_shapes[i][d];
      if (!plan.broadcast[i][d] && seen[static_cast<unsigned char>(mine[d])] == size) {
        target.push_back(mine[d]);
      } else {
        kept[d] = 1;
      }
    }
    const Ref grad = g.Add("einsum", operands, MakeAttrs({{"equation", terms + "->" + target}}));
    g.input_grads.push_back(target == mine ? grad : ExpandReduced(g, grad, kept, c.input_shapes[i]));
  }
  return g;
}

}  // namespace spmd::vjps

// ---- Normalisations and the softmax cross entropy ----
namespace spmd::vjps {
namespace {

// layer_norm / rms_norm: x's dims split at begin_norm_axis into the rows (kept) and the
// normalised dims; the statistics (and their cotangents) reshaped to `kept` broadcast
// against x.
struct NormDims {
  Shape kept;  // x.shape[:begin] + 1s
  double n = 1;
};

NormDims SplitNorm(const RuleContext& c) {
  const Shape& x = c.input_shapes[0];
  const int rank = static_cast<int>(x.size());
  NormDims dims;
  const int64_t begin = c.attrs.GetInt("begin_norm_axis");
  if (begin < 0 || begin >= rank) {
    ThrowInvalid("attrs.begin_norm_axis", "must be in [0, " + std::to_string(rank) + ")");
  }
  dims.kept = x;
  for (int d = static_cast<int>(begin); d < rank; ++d) {
    dims.kept[d] = 1;
    dims.n *= static_cast<double>(x[d]);
  }
  return dims;
}

Ref ToKept(VjpGraph& g, Ref stats, const NormDims& dims) {
  return g.Add("reshape", {stats}, MakeAttrs({{"shape", dims.kept}}));
}

// The attrs the forward passes on to its grad op.
Attrs NormGradAttrs(const RuleContext& c) {
  return MakeAttrs({{"epsilon", c.attrs.GetFloat("epsilon")},
                    {"begin_norm_axis", c.attrs.GetInt("begin_norm_axis")}});
}

}  // namespace

// Through out: layer_norm_grad(x, scale, bias, mean, variance, g) gives x_grad (from
// xhat = (x - mean) / sqrt(variance + eps) and dxhat = g scale: (dxhat - mean(dxhat) -
// xhat mean(dxhat xhat)) / std), scale_grad and bias_grad. The mean and variance outputs'
// cotangents add g_mean / N and 2 (x - mean) g_variance / N to x_grad.
VjpGraph LayerNorm(const RuleContext& c) {
  VjpGraph g;
  const NormDims dims = SplitNorm(c);
  const size_t grads = g.Add("layer_norm_grad",
                             {Ref::Input(0), Ref::Input(1), Ref::Input(2), Ref::Output(1),
                              Ref::Output(2), Ref::OutputGrad(0)},
                             NormGradAttrs(c)).index;
  const Ref centered = g.Add("subtract", {Ref::Input(0), ToKept(g, Ref::Output(1), dims)});
  Ref x_grad = g.Add("add", {Ref::Call(grads, 0), ScaleBy(g, ToKept(g, Ref::OutputGrad(1), dims), 1 / dims.n)});
  const Ref variance_weight = ScaleBy(g, ToKept(g, Ref::OutputGrad(2), dims), 2 / dims.n);
  x_grad = g.Add("add", {x_grad, g.Add("multiply", {centered, variance_weight})});
  g.input_grads = {x_grad, Ref::Call(grads, 1), Ref::Call(grads, 2)};
  return g;
}

// Through out: rms_norm_grad(x, scale, invvar, g) gives x_grad (dxhat invvar - x invvar^3
// sum(dxhat x) / N, dxhat = g scale) and scale_grad. invvar = 1 / sqrt(mean(x^2) + eps)
// has d invvar / dx = -invvar^3 x / N, so its cotangent adds -x invvar^3 g_invvar / N.
VjpGraph RmsNorm(const RuleContext& c) {
  VjpGraph g;
  const NormDims dims = SplitNorm(c);
  const size_t grads = g.Add("rms_norm_grad",
                             {Ref::Input(0), Ref::Input(1), Ref::Output(1), Ref::OutputGrad(0)},
                             NormGradAttrs(c)).index;
  const Ref inv = ToKept(g, Ref::Output(1), dims);
  const Ref inv_cubed = g.Add("multiply", {g.Add("multiply", {inv, inv}), inv});
  const Ref coefficient =
      ScaleBy(g, g.Add("multiply", {inv_cubed, ToKept(g, Ref::OutputGrad(1), dims)}), -1 / dims.n);
  const Ref x_grad = g.Add("add", {Ref::Call(grads, 0), g.Add("multiply", {Ref::Input(0), coefficient})});
  g.input_grads = {x_grad, Ref::Call(grads, 1)};
  return g;
}

}  // namespace spmd::vjps

// ---- Through Paddle's grad ops ----
namespace spmd::vjps {

VjpGraph Gelu(const RuleContext& c) {
  VjpGraph g;
  g.input_grads = {g.Add("gelu_grad", {Ref::Input(0), Ref::OutputGrad(0)},
                         MakeAttrs({{"approximate", c.attrs.GetBool("approximate")}}))};
  return g;
}

VjpGraph Embedding(const RuleContext& c) {
  VjpGraph g;
  const Ref weight_grad = g.Add("embedding_grad", {Ref::Input(0), Ref::Input(1), Ref::OutputGrad(0)},
                                MakeAttrs({{"padding_idx", c.attrs.GetInt("padding_idx")},
                                           {"sparse", c.attrs.GetBool("sparse")}}));
  g.input_grads = {std::nullopt, weight_grad};
  return g;
}

VjpGraph Select(const RuleContext& c) {
  VjpGraph g;
  const Shape& x = c.input_shapes[0];
  const Shape& index = c.input_shapes[1];
  const int rank = static_cast<int>(x.size());
  const int axis = notation::NormalizeAxis(c.attrs.GetInt("axis"), rank, "attrs.axis");
  // perm moves axis first; `rest` are the other dims in order.
  Ints perm = {axis}, inverse(static_cast<size_t>(rank));
  Shape rest;
  for (int d = 0; d < rank; ++d) {
    if (d == axis) continue;
    perm.push_back(d);
    rest.push_back(x[static_cast<size_t>(d)]);
  }
  for (int d = 0; d < rank; ++d) inverse[static_cast<size_t>(perm[static_cast<size_t>(d)])] = d;
  const int64_t rows = x[static_cast<size_t>(axis)], width = Numel(rest);
  Shape moved = {rows};
  moved.insert(moved.end(), rest.begin(), rest.end());
  // The table as [V, R] (its values are not read: embedding_grad wants its shape).
  const Ref table = g.Add("reshape", {g.Add("transpose", {Ref::Input(0)}, MakeAttrs({{"perm", perm}}))},
                          MakeAttrs({{"shape", Ints{rows, width}}}));
  // The cotangent as index.shape + [R]: a 1-D index's K dim first, then the rest.
  Ref grad = Ref::OutputGrad(0);
  if (!index.empty()) grad = g.Add("transpose", {grad}, MakeAttrs({{"perm", perm}}));
  Ints grad_shape(index.begin(), index.end());
  grad_shape.push_back(width);
  grad = g.Add("reshape", {grad}, MakeAttrs({{"shape", grad_shape}}));
  const Ref summed = g.Add("embedding_grad", {Ref::Input(1), table, grad},
                           MakeAttrs({{"padding_idx", int64_t{-1}}, {"sparse", false}}));
  const Ref back = g.Add("reshape", {summed}, MakeAttrs({{"shape", Ints(moved.begin(), moved.end())}}));
  g.input_grads = {g.Add("transpose", {back}, MakeAttrs({{"perm", inverse}})), std::nullopt};
  return g;
}

VjpGraph Pad(const RuleContext& c) {
  VjpGraph g;
  const Shape& x = c.input_shapes[0];
  const Ints& paddings = c.attrs.GetInts("paddings");
  Ints axes, starts, ends;
  for (size_t d = 0; d < x.size(); ++d) {
    if (paddings[2 * d] == 0 && paddings[2 * d + 1] == 0) continue;
    axes.push_back(static_cast<int64_t>(d));
    starts.push_back(paddings[2 * d]);
    ends.push_back(paddings[2 * d] + x[d]);
  }
  if (axes.empty()) {
    g.input_grads = {Ref::OutputGrad(0)};
    return g;
  }
  g.input_grads = {g.Add("slice", {Ref::OutputGrad(0)},
                         MakeAttrs({{"axes", axes}, {"starts", starts}, {"ends", ends}}))};
  return g;
}

VjpGraph Swiglu(const RuleContext&) {
  VjpGraph g;
  const Ref s = g.Add("sigmoid", {Ref::Input(0)});
  const Ref x_one_minus_s = g.Add("multiply", {Ref::Input(0), ScaleBy(g, s, -1, 1)});
  const Ref slope = g.Add("multiply", {s, ScaleBy(g, x_one_minus_s, 1, 1)});
  const Ref gy = g.Add("multiply", {Ref::OutputGrad(0), Ref::Input(1)});
  const Ref silu = g.Add("multiply", {Ref::Input(0), s});
  g.input_grads = {g.Add("multiply", {gy, slope}), g.Add("multiply", {Ref::OutputGrad(0), silu})};
  return g;
}

// loss = -sum(label log p) along the axis, p = softmax(logits) (or the logits themselves
// without use_softmax). softmax_out's cotangent g0 adds softmax_grad(p, g0) (or g0).
VjpGraph CrossEntropyWithSoftmax(const RuleContext& c) {
  VjpGraph g;
  const int rank = static_cast<int>(c.input_shapes[0].size());
  const int64_t axis = notation::NormalizeAxis(c.attrs.GetInt("axis"), rank, "attrs.axis");
  const bool use_softmax = c.attrs.GetBool("use_softmax");
  const Ref through_softmax_out =
      use_softmax ? g.Add("softmax_grad", {Ref::Output(0), Ref::OutputGrad(0)}, MakeAttrs({{"axis", axis}}))
                  : Ref::OutputGrad(0);
  const Ref loss_grad = Ref::OutputGrad(1);  // the loss's shape: the axis kept as 1
  if (!c.attrs.GetBool("soft_label")) {
    Attrs attrs;
    for (const char* name : {"soft_label", "use_softmax", "numeric_stable_mode"}) attrs.Set(name, c.attrs.GetBool(name));
    attrs.Set("ignore_index", c.attrs.GetInt("ignore_index"));
    attrs.Set("axis", axis);
    const Ref through_loss =
        g.Add("cross_entropy_with_softmax_grad", {Ref::Input(1), Ref::Output(0), loss_grad}, attrs);
    g.input_grads = {g.Add("add", {through_loss, through_softmax_out}), std::nullopt};
    return g;
  }
  // Soft label l: d loss / d logits = g (p sum(l) - l) with softmax, -g l / p without;
  // d loss / d l = -g log p.
  Ref through_loss;
  Ref log_p;
  if (use_softmax) {
    const Ref total = g.Add("sum", {Ref::Input(1)}, MakeAttrs({{"axis", Ints{axis}}, {"keep_dim", true}}));
    const Ref residual = g.Add("subtract", {g.Add("multiply", {Ref::Output(0), total}), Ref::Input(1)});
    through_loss = g.Add("multiply", {loss_grad, residual});
    log_p = g.Add("log_softmax", {Ref::Input(0)}, MakeAttrs({{"axis", axis}}));
  } else {
    through_loss = g.Add("multiply", {ScaleBy(g, loss_grad, -1), g.Add("divide", {Ref::Input(1), Ref::Input(0)})});
    log_p = g.Add("log", {Ref::Input(0)});
  }
  g.input_grads = {g.Add("add", {through_loss, through_softmax_out}),
                   g.Add("multiply", {ScaleBy(g, loss_grad, -1), log_p})};
  return g;
}

VjpGraph Conv2d(const RuleContext& c) {
  VjpGraph g;
  // conv2d_grad declares conv2d's attrs: the forward's pass as they are.
  const Ref grads = g.Add("conv2d_grad", {Ref::Input(0), Ref::Input(1), Ref::OutputGrad(0)}, c.attrs);
  g.input_grads = {Ref::Call(grads.index, 0), Ref::Call(grads.index, 1)};
  return g;
}

// flash_attention. Out's cotangent: flash_attn_grad with dropout 0 (the forward drew no
// dropout: above 0 it is Unsupported unless is_test) and the forward's causal; an absent
// seed or mask is passed as a 0-d placeholder, the sum of softmax_lse. The other terms
// are composed on the scores S = q . k / sqrt(d) + mask, whose gradient they add to:
// X = P g_lse (d lse / dS = P) plus, with return_softmax, softmax_grad(P, g_softmax); q
// and k get X's terms through einsums (scaled by 1 / sqrt(d)); the mask gets all of
// dS = X + softmax_grad(P, g_out . v^T), summed over its broadcast dims. P is the softmax
// output, or recomputed by the forward with return_softmax. Grouped heads (h = g r) split
// q's heads as [g, r].
VjpGraph FlashAttention(const RuleContext& c) {
  const attention::FlashAttentionPlan p = attention::PlanFlashAttention(c.input_shapes, c.attrs);
  const size_t n = c.input_shapes.size();
  VjpGraph g;
  // A 0-d tensor for an absent seed or mask (one call, shared).
  const Ref absent = n < 5 ? g.Add("sum", {Ref::Output(2)}, MakeAttrs({{"axis", Ints{}}})) : Ref::Input(0);
  const Ref seed = n > 3 ? Ref::Input(3) : absent;
  const Ref mask = n > 4 ? Ref::Input(4) : absent;
  const Ref main = g.Add("flash_attn_grad",
                         {Ref::Input(0), Ref::Input(1), Ref::Input(2), Ref::Output(0), Ref::Output(2), seed, mask,
                          Ref::OutputGrad(0)},
                         MakeAttrs({{"dropout", 0.0}, {"causal", p.causal}}));
  const Shape scores = {p.batch, p.heads, p.sq, p.sk};
  Ref probs = Ref::Output(1);
  if (!p.return_softmax) {
    std::vector<Ref> operands;
    for (size_t i = 0; i < n; ++i) operands.push_back(Ref::Input(i));
    probs = Ref::Call(g.Add("flash_attention", operands, c.attrs.With("return_softmax", true)).index, 1);
  }
  const Ref lse_grad = Reshape(g, Ref::OutputGrad(2), p.lse_shape, {p.batch, p.heads, p.sq, 1});
  Ref extra = g.Add("multiply", {probs, lse_grad});
  if (p.return_softmax) {
    extra = g.Add("add", {g.Add("softmax_grad", {probs, Ref::OutputGrad(1)}, MakeAttrs({{"axis", int64_t{-1}}})),
                          extra});
  }
  const bool grouped = p.kv_heads != p.heads;
  const int64_t r = grouped ? p.heads / p.kv_heads : 1;
  const Shape q5 = {p.batch, p.sq, p.kv_heads, r, p.head_dim};
  const Shape o5 = {p.batch, p.sq, p.kv_heads, r, p.v_dim};
  const Shape s5 = {p.batch, p.kv_heads, r, p.sq, p.sk};
  // Letters: the scores' `bhst` (grouped: `bgrst`), q's `bshd` (`bsgrd`), k's `bthd`
  // (`btgd`), out's `bshe` (`bsgre`), v's `bthe` (`btge`).
  const std::string sl = grouped ? "bgrst" : "bhst", ql = grouped ? "bsgrd" : "bshd";
  const std::string kl = grouped ? "btgd" : "bthd", ol = grouped ? "bsgre" : "bshe";
  const std::string vl = grouped ? "btge" : "bthe";
  auto split = [&](Ref x, const Shape& from, const Shape& to) { return grouped ? Reshape(g, x, from, to) : x; };
  const Ref scaled = ScaleBy(g, split(extra, scores, s5), 1.0 / std::sqrt(static_cast<double>(p.head_dim)));
  const Ref q_extra = split(
      g.Add("einsum", {scaled, Ref::Input(1)}, MakeAttrs({{"equation", sl + "," + kl + "->" + ql}})), q5,
      c.input_shapes[0]);
  const Ref k_extra = g.Add("einsum", {scaled, split(Ref::Input(0), c.input_shapes[0], q5)},
                            MakeAttrs({{"equation", sl + "," + ql + "->" + kl}}));
  g.input_grads = {g.Add("add", {Ref::Call(main.index, 0), q_extra}),
                   g.Add("add", {Ref::Call(main.index, 1), k_extra}), Ref::Call(main.index, 2)};
  if (n > 3) g.input_grads.push_back(std::nullopt);  // the seeds: indices
  if (n > 4) {
    if (!p.has_mask) {
      g.input_grads.push_back(std::nullopt);  // 0-d: absent, unread
    } else {
      const Ref dprobs = split(g.Add("einsum", {split(Ref::OutputGrad(0), p.out_shape, o5), Ref::Input(2)},
                                     MakeAttrs({{"equation", ol + "," + vl + "->" + sl}})),
                               s5, scores);
      const Ref dscores =
          g.Add("add", {g.Add("softmax_grad", {probs, dprobs}, MakeAttrs({{"axis", int64_t{-1}}})), extra});
      g.input_grads.push_back(SumToShape(g, dscores, scores, p.mask_shape));
    }
  }
  return g;
}

VjpGraph CEmbedding(const RuleContext& c) {
  VjpGraph g;
  const Ref weight_grad = g.Add("c_embedding_grad", {Ref::Input(0), Ref::Input(1), Ref::OutputGrad(0)},
                                MakeAttrs({{"start_index", c.attrs.GetInt("start_index")}}));
  g.input_grads = {weight_grad, std::nullopt};
  return g;
}

VjpGraph CSoftmaxWithCrossEntropy(const RuleContext& c) {
  VjpGraph g;
  const int64_t last = static_cast<int64_t>(c.input_shapes[0].size()) - 1;
  Attrs attrs;
  for (const char* name : {"ignore_index", "ring_id", "rank", "nranks"}) attrs.Set(name, c.attrs.GetInt(name));
  const Ref through_loss =
      g.Add("c_softmax_with_cross_entropy_grad", {Ref::Output(0), Ref::Input(1), Ref::OutputGrad(1)}, attrs);
  const Ref through_softmax =
      g.Add("softmax_grad", {Ref::Output(0), Ref::OutputGrad(0)}, MakeAttrs({{"axis", last}}));
  g.input_grads = {g.Add("add", {through_loss, through_softmax}), std::nullopt};
  return g;
}

}  // namespace spmd::vjps

// ---- Random ops ----
namespace spmd::vjps {

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

// fused_dropout_add: x gets dropout of g with the forward's attrs (the same seed and global
// indices draw the same mask: g masked and scaled as x was), y gets g. seed_offset has no
// cotangent that reaches an input.
VjpGraph FusedDropoutAdd(const RuleContext& c) {
  VjpGraph g;
  g.input_grads = {g.Add("dropout", {Ref::OutputGrad(0)}, c.attrs), Ref::OutputGrad(0)};
  return g;
}

// gather_nd: x gets every row's cotangent added at its tuple (repeats add up), the index
// none.
VjpGraph GatherNd(const RuleContext&) {
  VjpGraph g;
  g.input_grads = {g.Add("scatter_nd_add", {Zeros(g, Ref::Input(0)), Ref::Input(1), Ref::OutputGrad(0)}),
                   std::nullopt};
  return g;
}

// scatter_nd_add: x gets g, updates the rows of g at their tuples, the index none.
VjpGraph ScatterNdAdd(const RuleContext&) {
  VjpGraph g;
  g.input_grads = {Ref::OutputGrad(0), std::nullopt, g.Add("gather_nd", {Ref::OutputGrad(0), Ref::Input(1)})};
  return g;
}

// scatter: the rows the index names come from the updates in both modes, so x gets g with
// those rows zeroed (a scatter of zeros). Accumulate mode: update i gets g's row index[i].
// Overwrite mode: only the last update to a row reaches out, so the others get 0 (Paddle's
// kernel gives every one the row). The winner is found with the updates' positions
// 1..N (a cumsum of ones, in float64 so that every position is exact): scatter them into
// a zero x, read back each update's row, and an update whose row holds a later position
// lost.
VjpGraph Scatter(const RuleContext& c) {
  VjpGraph g;
  const Ref index = Ref::Input(1);
  const Ref x_grad = g.Add("scatter", {Ref::OutputGrad(0), index, Zeros(g, Ref::Input(2))},
                           MakeAttrs({{"overwrite", true}}));
  const Ref rows = g.Add("gather", {Ref::OutputGrad(0), index}, MakeAttrs({{"axis", int64_t{0}}}));
  if (!c.attrs.GetBool("overwrite")) {
    g.input_grads = {x_grad, std::nullopt, rows};
    return g;
  }
  const auto wide = [&g](Ref t) { return g.Add("cast", {t}, MakeAttrs({{"dtype", std::string("float64")}})); };
  const Ref position = g.Add("cumsum", {wide(Filled(g, Ref::Input(2), 1))}, MakeAttrs({{"axis", int64_t{0}}}));
  const Ref winners = g.Add("scatter", {wide(Zeros(g, Ref::Input(0))), index, position},
                            MakeAttrs({{"overwrite", true}}));
  const Ref winner = g.Add("gather", {winners, index}, MakeAttrs({{"axis", int64_t{0}}}));
  const Ref lost = g.Add("greater_than", {winner, position});
  g.input_grads = {x_grad, std::nullopt, Drop(g, lost, rows)};
  return g;
}

// argsort, topk: out[.., j, ..] = x[.., indices[.., j, ..], ..] along the axis, so x gets
// each g[.., j, ..] at its index: g times one_hot(indices) (as a bool mask, so that g's
// dtype is kept), summed over j, the class dim moved to the axis. It costs indices' size
// times the axis' length. A 0-d x gets g.
VjpGraph SortedValues(const RuleContext& c) {
  VjpGraph g;
  const Shape& x = c.input_shapes[0];
  const int rank = static_cast<int>(x.size());
  if (rank == 0) {
    g.input_grads = {Ref::OutputGrad(0)};
    return g;
  }
  const int axis = notation::NormalizeAxis(c.attrs.GetInt("axis"), rank, "attrs.axis");
  const int64_t n = x[static_cast<size_t>(axis)];
  if (n == 0) {
    g.input_grads = {Zeros(g, Ref::Input(0))};
    return g;
  }
  Shape picked = x;
  if (c.attrs.Has("k")) picked[static_cast<size_t>(axis)] = c.attrs.GetInt("k");
  const Ref one_hot = g.Add("one_hot", {Ref::Output(1)}, MakeAttrs({{"num_classes", n}}));
  const Ref hit = g.Add("greater_than", {one_hot, Filled(g, one_hot, 0.5)});
  Shape column = picked;
  column.push_back(1);
  const Ref spread = g.Add("multiply", {Reshape(g, Ref::OutputGrad(0), picked, column), hit});
  Ref summed = g.Add("sum", {spread}, MakeAttrs({{"axis", Ints{axis}}, {"keep_dim", false}}));
  if (axis != rank - 1) {
    Ints perm;
    for (int d = 0; d < axis; ++d) perm.push_back(d);
    perm.push_back(rank - 1);
    for (int d = axis; d < rank - 1; ++d) perm.push_back(d);
    summed = g.Add("transpose", {summed}, MakeAttrs({{"perm", perm}}));
  }
  g.input_grads = {summed};
  return g;
}

// out = cos x + sin R(x), R the rotation of pairs (use_neox_rotary_style) or of halves:
// R(x)[j] = sign_j x[p(j)] with p the partner and sign_{p(j)} = -sign_j, so R^T = -R and
// g_x[j] = cos[j] g[j] - sign_j sin[p(j)] g[p(j)]: the same op on the cotangents with
// sin' = -sin[p(.)] (sin's head dim permuted by the partner: a roll by half the head dim,
// or a swap within each pair through a reshape to [..., d/2, 2]). cos: sum of g x over
// the rotated tensors, batch and heads; sin: of g R(x) (Paddle's fused_rope_grad gives
// sin and cos none).
VjpGraph FusedRope(const RuleContext& c) {
  VjpGraph g;
  const size_t n = c.input_shapes.size();
  if (n < 3) ThrowInvalid("inputs", "expected q, [k, [v,]] sin, cos");
  const Shape& sin = c.input_shapes[n - 2];
  if (sin.empty()) ThrowInvalid("inputs[" + std::to_string(n - 2) + "].shape", "sin must have rank >= 2");
  const int64_t d = sin.back();
  const bool neox = c.attrs.GetBool("use_neox_rotary_style");
  Ref permuted;
  if (neox) {
    Shape pairs = sin;
    pairs.back() = d / 2;
    pairs.push_back(2);
    const Ref split = Reshape(g, Ref::Input(n - 2), sin, pairs);
    const Ref swapped = g.Add("roll", {split}, MakeAttrs({{"shifts", Ints{1}}, {"axis", Ints{-1}}}));
    permuted = Reshape(g, swapped, pairs, sin);
  } else {
    permuted = g.Add("roll", {Ref::Input(n - 2)}, MakeAttrs({{"shifts", Ints{d / 2}}, {"axis", Ints{-1}}}));
  }
  std::vector<Ref> operands;
  for (size_t o = 0; o + 2 < n; ++o) operands.push_back(Ref::OutputGrad(o));
  operands.push_back(ScaleBy(g, permuted, -1));
  operands.push_back(Ref::Input(n - 1));
  const Ref rotated = g.Add("fused_rotary_position_embedding", operands,
                            MakeAttrs({{"use_neox_rotary_style", neox}, {"time_major", c.attrs.GetBool("time_major")}}));
  for (size_t o = 0; o + 2 < n; ++o) g.input_grads.push_back(Ref::Call(rotated.index, o));
  // cos: the sum over rotated tensors, batch and heads of g x; sin: of g R(x), R(x) the same
  // op with sin = 1 and cos = 0 (scale by 0 plus a bias, exact for finite tables).
  const Ref ones = g.Add("scale", {Ref::Input(n - 2)}, MakeAttrs({{"scale", 0.0}, {"bias", 1.0}}));
  const Ref zeros = g.Add("scale", {Ref::Input(n - 1)}, MakeAttrs({{"scale", 0.0}, {"bias", 0.0}}));
  std::vector<Ref> inputs;
  for (size_t i = 0; i + 2 < n; ++i) inputs.push_back(Ref::Input(i));
  inputs.push_back(ones);
  inputs.push_back(zeros);
  const Ref turned = g.Add("fused_rotary_position_embedding", inputs,
                           MakeAttrs({{"use_neox_rotary_style", neox}, {"time_major", c.attrs.GetBool("time_major")}}));
  std::optional<Ref> cos_terms, sin_terms;
  for (size_t i = 0; i + 2 < n; ++i) {
    const Ref gx = g.Add("multiply", {Ref::OutputGrad(i), Ref::Input(i)});
    const Ref grx = g.Add("multiply", {Ref::OutputGrad(i), Ref::Call(turned.index, i)});
    cos_terms = cos_terms ? g.Add("add", {*cos_terms, gx}) : gx;
    sin_terms = sin_terms ? g.Add("add", {*sin_terms, grx}) : grx;
  }
  const bool time_major = c.attrs.GetBool("time_major");
  const Shape& q = c.input_shapes[0];
  const Ints batch_and_heads = time_major ? Ints{1, 2} : Ints{0, 2};
  const Shape kept = time_major ? Shape{q[0], 1, 1, d} : Shape{1, q[1], 1, d};
  for (const auto& [terms, table] : {std::pair{*sin_terms, n - 2}, std::pair{*cos_terms, n - 1}}) {
    const Ref summed = g.Add("sum", {terms}, MakeAttrs({{"axis", batch_and_heads}, {"keep_dim", true}}));
    g.input_grads.push_back(Reshape(g, summed, kept, c.input_shapes[table]));
  }
  return g;
}

}  // namespace spmd::vjps
