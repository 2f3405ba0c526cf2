#include "rules/vjps.h"

#include <numeric>

#include "rules/error.h"
#include "rules/notation.h"

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

}  // namespace spmd::vjps
