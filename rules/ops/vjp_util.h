// What the VJPs of rules/ops/ share (rules/engine/vjp.h): small graph-building steps
// used by more than one family. Each op's VJP sits beside its declaration, in its
// family file, attached with `.Vjp(vjps::Name)`; checker/vjp_test.cc checks every
// attached one against finite differences of the float64 reference.
#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>

#include "rules/engine/notation.h"
#include "rules/engine/op_decl.h"
#include "rules/engine/shape_util.h"
#include "rules/model/error.h"
#include "rules/ops/attention_shape.h"
#include "rules/ops/dropout_attrs.h"

namespace spmd::vjps {

using notation::Ints;
using notation::MakeAttrs;
using Ref = VjpRef;

inline int64_t Numel(const Shape& shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
}

inline Ref Reshape(VjpGraph& g, Ref x, const Shape& from, const Shape& to) {
  if (from == to) return x;
  return g.Add("reshape", {x}, MakeAttrs({{"shape", to}}));
}

inline Ref ExpandTo(VjpGraph& g, Ref x, const Shape& from, const Shape& to) {
  if (from == to) return x;
  return g.Add("expand", {x}, MakeAttrs({{"shape", to}}));
}

inline Ref ScaleBy(VjpGraph& g, Ref x, double s, double bias = 0) {
  return g.Add("scale", {x}, MakeAttrs({{"scale", s}, {"bias", bias}}));
}

// The output of a broadcasting binary op.
inline Shape OutShape(const RuleContext& c) { return notation::BroadcastShapes(c.input_shapes); }

// Returns `grad` (shape `from`, a broadcast of `to`) summed back to `to`: a sum over the
// broadcast dims (keep_dim) and a reshape dropping the leading ones. Adds no call when
// the shapes are equal.
inline Ref SumToShape(VjpGraph& graph, Ref grad, const Shape& from, const Shape& to) {
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

// A tensor of `like`'s shape filled with 0 (or `value`): scale(like, 0, value). No op
// makes a constant; a non-finite element of `like` gives NaN there.
inline Ref Zeros(VjpGraph& g, Ref like) { return ScaleBy(g, like, 0); }

inline Ref Filled(VjpGraph& g, Ref like, double value) { return ScaleBy(g, like, 0, value); }

// where(mask, value, 0) / where(mask, 0, value).
inline Ref Keep(VjpGraph& g, Ref mask, Ref value) { return g.Add("where", {mask, value, Zeros(g, value)}); }

inline Ref Drop(VjpGraph& g, Ref mask, Ref value) { return g.Add("where", {mask, Zeros(g, value), value}); }

// The cotangent of a reduction, reshaped to the kept-dims shape and expanded to x.
inline Ref ExpandReduced(VjpGraph& g, Ref reduced, const Shape& kept, const Shape& x) {
  return ExpandTo(g, g.Add("reshape", {reduced}, MakeAttrs({{"shape", kept}})), kept, x);
}

// Paddle's convention: x gets g where x > y (maximum) / x < y (minimum), y the rest,
// ties included.
inline VjpGraph Maximum(const RuleContext& c) {
  VjpGraph g;
  const Shape out = OutShape(c);
  const Ref x_wins = g.Add("greater_than", {Ref::Input(0), Ref::Input(1)});
  g.input_grads = {SumToShape(g, Keep(g, x_wins, Ref::OutputGrad(0)), out, c.input_shapes[0]),
                   SumToShape(g, Drop(g, x_wins, Ref::OutputGrad(0)), out, c.input_shapes[1])};
  return g;
}

inline VjpGraph Minimum(const RuleContext& c) {
  VjpGraph g;
  const Shape out = OutShape(c);
  const Ref x_wins = g.Add("less_than", {Ref::Input(0), Ref::Input(1)});
  g.input_grads = {SumToShape(g, Keep(g, x_wins, Ref::OutputGrad(0)), out, c.input_shapes[0]),
                   SumToShape(g, Drop(g, x_wins, Ref::OutputGrad(0)), out, c.input_shapes[1])};
  return g;
}

}  // namespace spmd::vjps
