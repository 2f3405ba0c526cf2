// Shape ops. reshape and flatten are DimTrans; the others are notations where the
// operated dims get new factors (sized here) that are forced replicated (SEMANTICS.md §6.3).
#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "rules/model/error.h"
#include "rules/model/layout.h"
#include "rules/engine/notation.h"
#include "rules/engine/registry.h"
#include "rules/reshard/reshard_bytes.h"
#include "rules/ops/shape_plan.h"
#include "rules/ops/vjp_util.h"

// The VJPs of this file's ops (rules/engine/vjp.h), attached below with
// `.Vjp(vjps::Name)`.
namespace spmd::vjps {
namespace {

using notation::Ints;
using notation::MakeAttrs;
using Ref = VjpRef;

// Shape ops.
// reshape, flatten, squeeze, unsqueeze
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

// expand, expand_as (y: no grad, it gives a shape)
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

// split, split_with_num: concat of the pieces' grads
VjpGraph Split(const RuleContext& c) {
  VjpGraph g;
  const size_t pieces = c.attrs.Has("num") ? static_cast<size_t>(c.attrs.GetInt("num"))
                                           : c.attrs.GetInts("sections").size();
  std::vector<Ref> grads;
  for (size_t o = 0; o < pieces; ++o) grads.push_back(Ref::OutputGrad(o));
  g.input_grads = {g.Add("concat", grads, MakeAttrs({{"axis", c.attrs.GetInt("axis")}}))};
  return g;
}

// stack of the slices' grads
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

// triu is linear: triu of the cotangent
VjpGraph Triu(const RuleContext& c) {
  VjpGraph g;
  g.input_grads = {g.Add("triu", {Ref::OutputGrad(0)}, MakeAttrs({{"diagonal", c.attrs.GetInt("diagonal")}}))};
  return g;
}

// tril of the cotangent
VjpGraph Tril(const RuleContext& c) {
  VjpGraph g;
  g.input_grads = {g.Add("tril", {Ref::OutputGrad(0)}, MakeAttrs({{"diagonal", c.attrs.GetInt("diagonal")}}))};
  return g;
}

// tril_triu of the cotangent, same attrs
VjpGraph TrilTriu(const RuleContext& c) {
  VjpGraph g;
  g.input_grads = {g.Add("tril_triu", {Ref::OutputGrad(0)},
                         MakeAttrs({{"diagonal", c.attrs.GetInt("diagonal")},
                                    {"lower", c.attrs.GetBool("lower")}}))};
  return g;
}

// unbind of the cotangent
VjpGraph Stack(const RuleContext& c) {
  VjpGraph g;
  const Ref pieces = g.Add("unbind", {Ref::OutputGrad(0)}, MakeAttrs({{"axis", c.attrs.GetInt("axis")}}));
  for (size_t i = 0; i < c.input_shapes.size(); ++i) g.input_grads.push_back(Ref::Call(pieces.index, i));
  return g;
}

// reshape to (repeat, size) pairs, sum the repeats
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

// the cotangent padded with zero blocks (concat)
// The cotangent padded back with zeros: per sliced dim, zeros before and after it
// (slices of x scaled by 0, so each block has exactly the shape it needs) concatenated.
VjpGraph Slice(const RuleContext& c) {
  VjpGraph g;
  const Shape& x = c.input_shapes[0];
  const int rank = static_cast<int>(x.size());
  const shape_plan::SlicePlan plan = shape_plan::PlanSlice(x, c.attrs);
  const Ints& begin = plan.begin;
  Ints end(rank);
  for (int d = 0; d < rank; ++d) end[d] = begin[d] + plan.sliced[d];
  const Shape& sliced = plan.sliced;
  if (Numel(sliced) == 0) {  // nothing was read: x's gradient is zero
    g.input_grads = {Zeros(g, Ref::Input(0))};
    return g;
  }
  // The cotangent has the sliced shape, less the decreased dims: put them back.
  Ref grad = Reshape(g, Ref::OutputGrad(0), plan.out, sliced);
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

// The cotangent put back at the strided positions of a zero x, from reshape, pad and
// slice: (1) the dims walked backwards are walked forwards (strided_slice with step -1), so
// along each dim g's element j sits at x position low + j k (k = |step|); (2) a dim with
// k > 1 is reshaped to [m, 1], padded to [m, k] with zeros and merged to m k elements, the
// tail past x's end sliced off; (3) pad adds the zeros before low and after the last one.
VjpGraph StridedSlice(const RuleContext& c) {
  VjpGraph g;
  const Shape& x = c.input_shapes[0];
  const size_t rank = x.size();
  const shape_plan::SlicePlan plan = shape_plan::PlanStridedSlice(x, c.attrs);
  const Shape& m = plan.sliced;
  if (Numel(m) == 0) {  // nothing was read: x's gradient is zero
    g.input_grads = {Zeros(g, Ref::Input(0))};
    return g;
  }
  Ref grad = Ref::OutputGrad(0);
  Ints low(rank), k(rank, 1);  // per dim: g's first element's x position, the gap to the next
  Ints back_axes;
  for (size_t d = 0; d < rank; ++d) {
    if (m[d] > 1) k[d] = plan.step[d] > 0 ? plan.step[d] : -plan.step[d];  // |step| < x[d] here
    const bool back = plan.step[d] < 0 && m[d] > 1;
    low[d] = back ? plan.begin[d] - (m[d] - 1) * k[d] : plan.begin[d];
    if (back) back_axes.push_back(static_cast<int64_t>(d));
  }
  if (!back_axes.empty()) {
    const size_t n = back_axes.size();
    Ints ends;
    for (int64_t d : back_axes) ends.push_back(-m[static_cast<size_t>(d)] - 1);
    grad = g.Add("strided_slice", {grad}, MakeAttrs({{"axes", back_axes}, {"starts", Ints(n, -1)},
                                                     {"ends", ends}, {"strides", Ints(n, -1)}}));
  }
  Shape split, spread = m;  // g with a size-1 dim after each spread dim; g spread out
  Ints gaps;                // pad's paddings of `split`
  Ints cut_axes, cut_ends;  // the spread dims running past x's end
  for (size_t d = 0; d < rank; ++d) {
    split.push_back(m[d]);
    gaps.insert(gaps.end(), {0, 0});
    if (k[d] == 1) continue;
    split.push_back(1);
    gaps.insert(gaps.end(), {0, k[d] - 1});
    spread[d] = m[d] * k[d];
    if (low[d] + spread[d] > x[d]) {
      cut_axes.push_back(static_cast<int64_t>(d));
      cut_ends.push_back(x[d] - low[d]);
      spread[d] = x[d] - low[d];
    }
  }
  if (split.size() > rank) {
    Shape padded = split;
    for (size_t i = 0; i < split.size(); ++i) padded[i] += gaps[2 * i + 1];
    Shape merged;
    for (size_t d = 0; d < rank; ++d) merged.push_back(m[d] * k[d]);
    grad = Reshape(g, grad, m, split);
    grad = g.Add("pad", {grad}, MakeAttrs({{"paddings", gaps}}));
    grad = Reshape(g, grad, padded, merged);
    if (!cut_axes.empty()) {
      grad = g.Add("slice", {grad}, MakeAttrs({{"axes", cut_axes}, {"starts", Ints(cut_axes.size(), 0)},
                                                {"ends", cut_ends}}));
    }
  }
  Ints paddings;
  bool widened = false;
  for (size_t d = 0; d < rank; ++d) {
    paddings.insert(paddings.end(), {low[d], x[d] - low[d] - spread[d]});
    widened = widened || low[d] != 0 || spread[d] != x[d];
  }
  g.input_grads = {widened ? g.Add("pad", {grad}, MakeAttrs({{"paddings", paddings}})) : grad};
  return g;
}

}  // namespace
}  // namespace spmd::vjps

namespace spmd::declare {
namespace {

using notation::FromSignatures;
using notation::Ints;
using notation::Letters;
using notation::MakeAttrs;

int Rank(const RuleContext& c, size_t i = 0) { return static_cast<int>(c.input_shapes[i].size()); }

DimTransSpec Reshape(const Shape& src, const Shape& tgt) {
  DimTransSpec spec{src, tgt, {}};
  const bool empty = std::find(src.begin(), src.end(), 0) != src.end();
  spec.outputs = empty ? std::vector<DimTrans>(tgt.size(), DimTrans::Singleton())
                       : ReshapeTransforms(src, tgt);
  return spec;
}

// Every input Letters(rank) (dim d is factor d), with `axis` given a fresh factor per
// input (its size may differ between them; bound from the input), forced replicated; no
// outputs yet.
EinsumSpec FreshAxis(const RuleContext& c, int axis) {
  const int rank = Rank(c);
  EinsumSpec spec = notation::FromLetters({Letters(rank)}, {});
  spec.inputs.clear();
  for (size_t i = 0; i < c.input_shapes.size(); ++i) {
    Notation in(rank);
    for (int d = 0; d < rank; ++d) in[d] = d;
    in[axis] = spec.AddFactor();
    spec.forced_replicated.push_back(in[axis]);
    spec.inputs.push_back(std::move(in));
  }
  spec.accept = PartialAcceptance::kAnyOp;  // pieces of x: every partial stays
  return spec;
}

// Input 0's notation with dim `axis` replaced by a new factor of `size`, forced replicated.
Notation WithFreshDim(EinsumSpec& spec, int axis, int64_t size) {
  Notation out = spec.inputs[0];
  out[axis] = spec.AddFactor(size);
  spec.forced_replicated.push_back(out[axis]);
  return out;
}

// Paddle's cost rule for concat and stack (SEMANTICS.md §6.3, DECISIONS.md): per mesh axis,
// keep the dim every user agrees on, else the cheapest non-concat dim.
InferResult ConcatCost(const RuleContext& c, const Mesh& mesh, const std::vector<DistAttr>& in,
                       int concat_axis, int stack_axis) {
  const int rank = Rank(c);
  const double kInfinity = std::numeric_limits<double>::infinity();
  std::vector<int> chosen(mesh.ndim(), -1);  // mesh axis -> dim
  std::vector<bool> disputed(mesh.ndim(), false);
  for (int a = 0; a < mesh.ndim(); ++a) {  // first: the axes every user agrees on
    int agreed = -2;  // -2: no user yet, -3: users disagree
    for (const DistAttr& attr : in) {
      const int d = attr.DimOfAxis(a);
      if (d < 0) continue;
      agreed = agreed == -2 || agreed == d ? d : -3;
    }
    if (agreed >= 0 && agreed != concat_axis) {
      chosen[a] = agreed;
    } else {
      disputed[a] = agreed != -2;
    }
  }
  // Partial inputs on a mesh axis that no input shards. Concat and stack only move
  // elements, so a reduction over ranks commutes with them: when every input is partial
  // there with one reduce op, the partial is kept (0 bytes now, as DTensor does). When only
  // some are, the axis goes to a free non-concat dim like a disputed one, so a partial
  // input is reduce-scattered (half an all-reduce's bytes) and a whole one is sliced in
  // place; with no such dim it is reduced whole.
  PartialMap kept;
  for (int a = 0; a < mesh.ndim(); ++a) {
    if (disputed[a] || chosen[a] >= 0) continue;
    std::optional<ReduceOp> common;
    bool all = true, any = false;
    for (const DistAttr& attr : in) {
      auto it = attr.partial.find(a);
      if (it == attr.partial.end()) {
        all = false;
        continue;
      }
      all = all && (!common || *common == it->second);
      common = it->second;
      any = true;
    }
    if (all && any) {
      kept[a] = *common;
    } else if (any) {
      disputed[a] = true;
    }
  }
  for (int a = 0; a < mesh.ndim(); ++a) {  // then: the cheapest free non-concat dim
    if (!disputed[a]) continue;
    double best = kInfinity;
    for (int d = 0; d < rank; ++d) {
      const bool taken = std::find(chosen.begin(), chosen.end(), d) != chosen.end();
      if (d == concat_axis || taken || c.input_shapes[0][d] < mesh.axis_size(a)) continue;
      double cost = 0;
      for (size_t i = 0; i < in.size(); ++i) {
        if (in[i].DimOfAxis(a) == d) continue;
        double numel = 1;
        for (int e = 0; e < rank; ++e) {
          int64_t parts = 1;
          for (int axis : in[i].dims[e]) parts *= mesh.axis_size(axis);
          numel *= static_cast<double>((c.input_shapes[i][e] + parts - 1) / parts);
        }
        cost += numel * static_cast<double>(mesh.axis_size(a));
      }
      if (cost < best) {
        best = cost;
        chosen[a] = d;
      }
    }
  }
  // Place the axes of each dim in the order the first input holding them has, then by axis.
  // axis_dim[a]: the dim mesh axis a shards, -1 none, kSumPartial partial(sum) on every input.
  constexpr int kSumPartial = -2;
  auto layout = [&](const std::vector<int>& axis_dim) {
    DistAttr merged = DistAttr::Replicated(rank);
    for (int a = 0; a < mesh.ndim(); ++a) {
      if (axis_dim[a] >= 0) merged.dims[axis_dim[a]].push_back(a);
    }
    for (int d = 0; d < rank; ++d) {
      auto position = [&](int axis) {
        for (const DistAttr& attr : in) {
          auto it = std::find(attr.dims[d].begin(), attr.dims[d].end(), axis);
          if (it != attr.dims[d].end()) return static_cast<int>(it - attr.dims[d].begin());
        }
        return kMaxMeshAxes;
      };
      std::stable_sort(merged.dims[d].begin(), merged.dims[d].end(),
                       [&](int x, int y) { return position(x) < position(y); });
    }
    merged.partial = kept;
    for (int a = 0; a < mesh.ndim(); ++a) {
      if (axis_dim[a] == kSumPartial) merged.partial[a] = ReduceOp::kSum;
    }
    return merged;
  };
  DistAttr merged = layout(chosen);
  // The cost rule's proxy can miss: every other placement of the mesh axes of size above 1
  // (each on one non-concat dim at least its size, or on none, or, where some input is
  // partial(sum), every partial there is a sum, no input shards a dim on it and no dim can
  // take it, partial(sum) on every input: the ops
  // are linear, and a whole input takes it as R -> P, a local step; the kept partials stay)
  // is priced by the planner's lower bound on the inputs' moves, and a strictly cheaper one
  // replaces it (DECISIONS.md). At most kMaxPlacements are priced.
  constexpr int64_t kMaxPlacements = 256;
  std::vector<int> movable;
  std::vector<bool> sum_partial(mesh.ndim(), false);
  int64_t placements = 1;
  for (int a = 0; a < mesh.ndim(); ++a) {
    if (mesh.axis_size(a) > 1 && kept.count(a) == 0) {
      bool some = false, all_sum = true;
      for (const DistAttr& attr : in) {
        all_sum = all_sum && attr.DimOfAxis(a) < 0;  // S -> P would defer the bytes
        auto it = attr.partial.find(a);
        if (it == attr.partial.end()) continue;
        some = true;
        all_sum = all_sum && it->second == ReduceOp::kSum;
      }
      // Kept only where no dim can take the axis: a reduce-scatter onto a free dim leaves
      // the output whole, where a kept partial defers a whole all-reduce to its consumer.
      bool free_dim = false;
      for (int d = 0; d < rank; ++d) {
        free_dim = free_dim || (d != concat_axis && c.input_shapes[0][d] >= mesh.axis_size(a));
      }
      sum_partial[a] = some && all_sum && !free_dim;
      movable.push_back(a);
      placements *= rank + (sum_partial[a] ? 2 : 1);
    }
    if (placements > kMaxPlacements) break;
  }
  // Each placement prices every input: bounded for concat's hundreds of inputs.
  constexpr int64_t kMaxPricedMoves = 2048;
  if (placements <= kMaxPlacements && !movable.empty() &&
      placements * static_cast<int64_t>(in.size()) <= kMaxPricedMoves) {
    // Stops at `limit`: a candidate that has reached the best price so far cannot replace it.
    auto price = [&](const DistAttr& to, int64_t limit) -> int64_t {
      int64_t bytes = 0;
      for (size_t i = 0; i < in.size() && bytes < limit; ++i) {
        if (in[i] == to) continue;
        DistAttr from = in[i], target = to;
        if (!from.partial.empty() && from.partial == target.partial) {
          from.partial.clear();  // partial to partial: the addends move as whole tensors
          target.partial.clear();
        }
        bytes = SaturatingAdd(
            bytes, ReshardLowerBound(mesh, from, mesh, target, c.input_shapes[i], DType::kFloat32));
      }
      return bytes;
    };
    try {
      int64_t best_bytes = price(merged, std::numeric_limits<int64_t>::max());
      std::vector<int> pick(mesh.ndim(), -1);
      for (int64_t code = 0; code < placements && best_bytes > 0; ++code) {
        int64_t rest = code;
        bool ok = true;
        for (int a : movable) {
          const int options = rank + (sum_partial[a] ? 2 : 1);
          int d = static_cast<int>(rest % options) - 1;
          rest /= options;
          if (d == rank) d = kSumPartial;
          pick[a] = d;
          if (d >= 0 && (d == concat_axis || c.input_shapes[0][d] < mesh.axis_size(a))) ok = false;
        }
        if (!ok) continue;
        DistAttr candidate = layout(pick);
        int64_t bytes = -1;
        try {
          bytes = price(candidate, best_bytes);
        } catch (const SpmdError&) {
          continue;  // a layout the bound cannot price is not a candidate
        }
        if (bytes < best_bytes) {
          best_bytes = bytes;
          merged = std::move(candidate);
        }
      }
    } catch (const SpmdError&) {
      // The cost rule's answer the bound cannot price: it stands.
    }
  }
  InferResult result;
  result.inputs.assign(in.size(), merged);
  DistAttr out = merged;
  if (stack_axis >= 0) out.dims.insert(out.dims.begin() + stack_axis, AxisList{});
  result.outputs.push_back(out);
  return result;
}

// Ops whose attr spells the output shape take the shard's output shape on a shard.
// The shard's sizes are literal: a 0 there is an empty shard, not Paddle's "copy the dim".
Localizer LocalOutputShape(const char* attr) {
  return [attr](const LocalContext& c) {
    return c.attrs.With(attr, c.local_outputs[0]).WithLocal({.exact = true});
  };
}

}  // namespace

OpDecl reshape() {
  return OpBuilder("reshape").Inputs({"x"}).Outputs({"out"})
      .Tolerance(ToleranceClass::kExact)
      .Vjp(vjps::ReshapeBack)
      .Attr("shape", AttrKind::kInts, std::nullopt)
      .DimTrans([](const RuleContext& c) {
        const Shape& src = c.input_shapes[0];
        return Reshape(src, shape_plan::PlanReshape(src, c.attrs));
      })
      .Localize({LocalField::kExact}, LocalOutputShape("shape"))
      .Examples([](const SizePalette& p) {
        auto reshape = [](Shape x, Ints target) {
          return Example{{std::move(x)}, MakeAttrs({{"shape", std::move(target)}})};
        };
        return std::vector<Example>{
            reshape({p[0], p[1], p[2]}, {p[0] * p[1], p[2]}),      // flatten the leading pair
            reshape({p[0], p[1], p[2]}, {p[0], -1}),               // flatten the trailing pair
            reshape({p[0] * p[1], p[2]}, {p[0], p[1], 0}),         // split
            reshape({p[0], p[1] * p[2]}, {p[0] * p[1], p[2]}),     // split and merge
            reshape({p[0], 1, p[1]}, {1, p[0], p[1], 1}),          // size-1 dims
        };
      });
}

OpDecl flatten() {
  return OpBuilder("flatten").Inputs({"x"}).Outputs({"out"})
      .Tolerance(ToleranceClass::kExact)
      .Vjp(vjps::ReshapeBack)
      .Attr("start_axis", AttrKind::kInt, int64_t{0})
      .Attr("stop_axis", AttrKind::kInt, int64_t{-1})
      .DimTrans([](const RuleContext& c) {
        const Shape& src = c.input_shapes[0];
        const shape_plan::FlattenPlan plan = shape_plan::PlanFlatten(src, c.attrs);
        if (src.empty()) return Reshape(src, plan.out);
        const int rank = Rank(c);
        const int start = static_cast<int>(plan.start), stop = static_cast<int>(plan.stop);
        DimTransSpec spec = Reshape(src, plan.out);
        if (std::find(src.begin(), src.end(), 0) != src.end()) return spec;
        // Not the two-pointer walk: it would pair size-1 dims one-to-one across the range
        // ([1,1,1] -> [1,1] keeps dim 1 as out dim 1), while a shard's flatten merges the
        // range whatever its sizes. Size-1 dims of the range are dropped (§6.1).
        spec.outputs.clear();
        for (int d = 0; d < start; ++d) spec.outputs.push_back(DimTrans::InputDim(d));
        std::vector<DimTrans> range;
        for (int d = start; d <= stop; ++d) {
          if (src[d] != 1) range.push_back(DimTrans::InputDim(d));
        }
        if (range.empty()) {  // a range of size-1 dims: its sharding carries (dimtrans.cc)
          for (int d = start; d <= stop; ++d) range.push_back(DimTrans::InputDim(d));
        }
        spec.outputs.push_back(DimTrans::Flatten(std::move(range)));
        for (int d = stop + 1; d < rank; ++d) spec.outputs.push_back(DimTrans::InputDim(d));
        return spec;
      })
      .Examples(FromSignatures({{{"abc"}, MakeAttrs({{"start_axis", int64_t{1}}})},
                                {{"abc"}},
                                {{"a1c"}, MakeAttrs({{"stop_axis", int64_t{1}}})}}));
}

OpDecl squeeze() {
  return OpBuilder("squeeze").Inputs({"x"}).Outputs({"out"})
      .Tolerance(ToleranceClass::kExact)
      .Vjp(vjps::ReshapeBack)
      .Attr("axis", AttrKind::kInts, std::vector<int64_t>{})
      .Einsum([](const RuleContext& c) {
        const int rank = Rank(c);
        const std::vector<bool> drop = shape_plan::PlanSqueeze(c.input_shapes[0], c.attrs).drop;
        std::string in = Letters(rank), out;
        for (int d = 0; d < rank; ++d) {
          if (drop[d]) {
            in[d] = '1';
          } else {
            out.push_back(in[d]);
          }
        }
        EinsumSpec spec = notation::FromLetters({in}, {out});
        spec.accept = PartialAcceptance::kAnyOp;
        return spec;
      })
      .Localize({LocalField::kExact}, [](const LocalContext& c) {
        // A shard's dim may have size 1 where the global one does not: name the dims.
        const Shape& x = c.global_inputs[0];
        const auto& axis = c.attrs.GetInts("axis");
        std::vector<int64_t> exact;
        for (int d = 0; d < static_cast<int>(x.size()); ++d) {
          bool listed = axis.empty();
          for (int64_t a : axis) listed = listed || a == d || a + static_cast<int64_t>(x.size()) == d;
          if (listed && x[d] == 1) exact.push_back(d);
        }
        return c.attrs.With("axis", exact).WithLocal({.exact = true});
      })
      .Examples(FromSignatures({{{"a1c"}, MakeAttrs({{"axis", Ints{1}}})},
                                {{"1b1"}},
                                {{"ab"}, MakeAttrs({{"axis", Ints{0}}})}}));
}

OpDecl unsqueeze() {
  return OpBuilder("unsqueeze").Inputs({"x"}).Outputs({"out"})
      .Tolerance(ToleranceClass::kExact)
      .Vjp(vjps::ReshapeBack)
      .Attr("axis", AttrKind::kInts, std::nullopt)
      .Einsum([](const RuleContext& c) {
        const int rank = Rank(c);
        const std::vector<bool> added = shape_plan::PlanUnsqueeze(c.input_shapes[0], c.attrs).added;
        const int out_rank = static_cast<int>(added.size());
        const std::string letters = Letters(rank);
        std::string out;
        size_t next = 0;
        for (int d = 0; d < out_rank; ++d) out.push_back(added[d] ? '1' : letters[next++]);
        EinsumSpec spec = notation::FromLetters({letters}, {out});
        spec.accept = PartialAcceptance::kAnyOp;
        return spec;
      })
      .Examples(FromSignatures({{{"ab"}, MakeAttrs({{"axis", Ints{0}}})},
                                {{"ab"}, MakeAttrs({{"axis", Ints{-1, 1}}})}}));
}

OpDecl transpose() {
  return OpBuilder("transpose").Inputs({"x"}).Outputs({"out"})
      .Tolerance(ToleranceClass::kExact)
      .Vjp(vjps::Transpose)
      .Attr("perm", AttrKind::kInts, std::nullopt)
      .Einsum([](const RuleContext& c) {
        const std::string letters = Letters(Rank(c));
        std::string out;
        for (int64_t d : shape_plan::PlanTranspose(c.input_shapes[0], c.attrs).perm) out.push_back(letters[d]);
        EinsumSpec spec = notation::FromLetters({letters}, {out});
        spec.accept = PartialAcceptance::kAnyOp;
        return spec;
      })
      .Examples(FromSignatures({{{"abc"}, MakeAttrs({{"perm", Ints{2, 0, 1}}})},
                                {{"ab"}, MakeAttrs({{"perm", Ints{1, 0}}})}}));
}

OpDecl split() {
  return OpBuilder("split").Inputs({"x"}).Outputs({"out"})
      .Tolerance(ToleranceClass::kExact)
      .Vjp(vjps::Split)
      .Attr("sections", AttrKind::kInts, std::nullopt)
      .Attr("axis", AttrKind::kInt, int64_t{0})
      .Einsum([](const RuleContext& c) {
        const shape_plan::SplitPlan plan = shape_plan::PlanSplit(c.input_shapes[0], c.attrs);
        // Each piece its own factor: the pieces' sizes differ.
        EinsumSpec spec = FreshAxis(c, static_cast<int>(plan.axis));
        for (int64_t size : plan.sizes) {
          spec.outputs.push_back(WithFreshDim(spec, static_cast<int>(plan.axis), size));
        }
        return spec;
      })
      .Examples([](const SizePalette& p) {
        return std::vector<Example>{
            {{{p[0], p[1] + 1, p[2]}}, MakeAttrs({{"sections", Ints{1, -1}}, {"axis", int64_t{1}}})},
            {{{p[0], p[1]}}, MakeAttrs({{"sections", Ints{p[0]}}})}};
      });
}

OpDecl split_with_num() {
  return OpBuilder("split_with_num").Inputs({"x"}).Outputs({"out"})
      .Tolerance(ToleranceClass::kExact)
      .Vjp(vjps::Split)
      .Attr("num", AttrKind::kInt, std::nullopt)
      .Attr("axis", AttrKind::kInt, int64_t{0})
      .Einsum([](const RuleContext& c) {
        const shape_plan::SplitPlan plan = shape_plan::PlanSplitWithNum(c.input_shapes[0], c.attrs);
        const int axis = static_cast<int>(plan.axis);
        EinsumSpec spec = FreshAxis(c, axis);
        const Notation out = WithFreshDim(spec, axis, plan.sizes[0]);
        spec.outputs.assign(plan.sizes.size(), out);
        return spec;
      })
      .Examples([](const SizePalette& p) {
        return std::vector<Example>{
            {{{p[0], 2 * p[1]}}, MakeAttrs({{"num", int64_t{2}}, {"axis", int64_t{-1}}})}};
      });
}

OpDecl unbind() {
  return OpBuilder("unbind").Inputs({"x"}).Outputs({"out"})
      .Tolerance(ToleranceClass::kExact)
      .Vjp(vjps::Unbind)
      .Attr("axis", AttrKind::kInt, int64_t{0})
      .Einsum([](const RuleContext& c) {
        const shape_plan::SplitPlan plan = shape_plan::PlanUnbind(c.input_shapes[0], c.attrs);
        const int axis = static_cast<int>(plan.axis);
        EinsumSpec spec = FreshAxis(c, axis);
        Notation out = spec.inputs[0];
        out.erase(out.begin() + axis);
        spec.outputs.assign(static_cast<size_t>(c.input_shapes[0][axis]), out);
        return spec;
      })
      .Examples(FromSignatures({{{"abc"}, MakeAttrs({{"axis", int64_t{1}}})}}));
}

OpDecl concat() {
  auto notation = [](const RuleContext& c) {
    // The rule sees no dtypes: the plan checks the shapes only.
    const shape_plan::ConcatPlan plan = shape_plan::PlanConcat(c.input_shapes, {}, c.attrs);
    const int axis = static_cast<int>(plan.axis);
    EinsumSpec spec = FreshAxis(c, axis);
    spec.outputs.push_back(WithFreshDim(spec, axis, plan.out[axis]));
    return spec;
  };
  return OpBuilder("concat").VariadicInputs("x").Outputs({"out"})
      .Tolerance(ToleranceClass::kExact)
      .Vjp(vjps::Concat)
      .Attr("axis", AttrKind::kInt, int64_t{0})
      .Einsum(notation)
      .Forward([](const RuleContext& c, const Mesh& mesh, const std::vector<DistAttr>& in) {
        const int axis = static_cast<int>(shape_plan::PlanConcat(c.input_shapes, {}, c.attrs).axis);
        return ConcatCost(c, mesh, in, axis, -1);
      })
      .Examples([](const SizePalette& p) {
        return std::vector<Example>{
            {{{p[0], p[1]}, {p[2], p[1]}}, Attrs()},
            {{{p[0], p[1], p[2]}, {p[0], p[1], 2}, {p[0], p[1], 1}}, MakeAttrs({{"axis", int64_t{-1}}})}};
      });
}

OpDecl stack() {
  auto notation = [](const RuleContext& c) {
    const int rank = Rank(c);
    const int axis = static_cast<int>(shape_plan::PlanStack(c.input_shapes, {}, c.attrs).axis);
    EinsumSpec spec = notation::FromLetters(
        std::vector<std::string>(c.input_shapes.size(), Letters(rank)), {Letters(rank)});
    const FactorId stacked = spec.AddFactor(static_cast<int64_t>(c.input_shapes.size()));
    spec.outputs[0].insert(spec.outputs[0].begin() + axis, stacked);
    spec.forced_replicated.push_back(stacked);
    return spec;
  };
  return OpBuilder("stack").VariadicInputs("x").Outputs({"out"})
      .Tolerance(ToleranceClass::kExact)
      .Vjp(vjps::Stack)
      .Attr("axis", AttrKind::kInt, int64_t{0})
      .Einsum(notation)
      .Forward([](const RuleContext& c, const Mesh& mesh, const std::vector<DistAttr>& in) {
        const int axis = static_cast<int>(shape_plan::PlanStack(c.input_shapes, {}, c.attrs).axis);
        return ConcatCost(c, mesh, in, -1, axis);
      })
      .Examples(FromSignatures({{{"ab", "ab"}}, {{"ab", "ab", "ab"}, MakeAttrs({{"axis", int64_t{2}}})}}));
}

namespace {

// slice, strided_slice: a listed dim gets a new factor of its sliced size, both forced
// replicated (out's even split does not line up with x's shards); the others pass through.
// Every partial stays: out is a piece of x.
EinsumSpec SliceNotation(const shape_plan::SlicePlan& plan) {
  const int rank = static_cast<int>(plan.sliced.size());
  EinsumSpec spec = notation::FromLetters({Letters(rank)}, {""});
  for (int d = 0; d < rank; ++d) {
    FactorId out = d;  // input dim d is factor d
    if (plan.listed[d]) {
      out = spec.AddFactor(plan.sliced[d]);
      spec.forced_replicated.insert(spec.forced_replicated.end(), {d, out});
    }
    if (!plan.drop[d]) spec.outputs[0].push_back(out);
  }
  spec.accept = PartialAcceptance::kAnyOp;
  return spec;
}

}  // namespace

OpDecl slice() {
  return OpBuilder("slice").Inputs({"x"}).Outputs({"out"})
      .Tolerance(ToleranceClass::kExact)
      .Vjp(vjps::Slice)
      .Attr("axes", AttrKind::kInts, std::nullopt)
      .Attr("starts", AttrKind::kInts, std::nullopt)
      .Attr("ends", AttrKind::kInts, std::nullopt)
      .Attr("infer_flags", AttrKind::kInts, std::vector<int64_t>{})
      .Attr("decrease_axis", AttrKind::kInts, std::vector<int64_t>{})
      .Einsum([](const RuleContext& c) { return SliceNotation(shape_plan::PlanSlice(c.input_shapes[0], c.attrs)); })
      .Examples(FromSignatures({
          {{"abc"}, MakeAttrs({{"axes", Ints{1}}, {"starts", Ints{1}}, {"ends", Ints{-1}}})},
          {{"abc"}, MakeAttrs({{"axes", Ints{0, 2}}, {"starts", Ints{0, -2}}, {"ends", Ints{1, 100}},
                               {"decrease_axis", Ints{0}}})}}));
}

// strided_slice(x, axes, starts, ends, strides): x[start:end:stride] on each listed axis
// (Python's slice; a negative stride walks back). Paddle's attrs, in Paddle's order; the
// rule is slice's (the listed dims R, every partial kept).
OpDecl strided_slice() {
  return OpBuilder("strided_slice").Inputs({"x"}).Outputs({"out"})
      .Tolerance(ToleranceClass::kExact)
      .Vjp(vjps::StridedSlice)
      .Attr("axes", AttrKind::kInts, std::nullopt)
      .Attr("starts", AttrKind::kInts, std::nullopt)
      .Attr("ends", AttrKind::kInts, std::nullopt)
      .Attr("strides", AttrKind::kInts, std::nullopt)
      .Einsum([](const RuleContext& c) {
        return SliceNotation(shape_plan::PlanStridedSlice(c.input_shapes[0], c.attrs));
      })
      .Examples(FromSignatures({
          {{"abc"}, MakeAttrs({{"axes", Ints{1}}, {"starts", Ints{1}}, {"ends", Ints{-1}}, {"strides", Ints{2}}})},
          {{"abc"}, MakeAttrs({{"axes", Ints{0, 2}}, {"starts", Ints{-1, 0}}, {"ends", Ints{-100, 100}},
                               {"strides", Ints{-1, 3}}})},
          {{"ab"}, MakeAttrs({{"axes", Ints{-1}}, {"starts", Ints{100}}, {"ends", Ints{0}}, {"strides", Ints{-2}}})}}));
}

OpDecl tile() {
  return OpBuilder("tile").Inputs({"x"}).Outputs({"out"})
      .Tolerance(ToleranceClass::kExact)
      .Vjp(vjps::Tile)
      .Attr("repeat_times", AttrKind::kInts, std::nullopt)
      .Einsum([](const RuleContext& c) {
        const int rank = Rank(c);
        const shape_plan::TilePlan plan = shape_plan::PlanTile(c.input_shapes[0], c.attrs);
        const std::vector<int64_t>& repeat = plan.repeats;
        const int out_rank = static_cast<int>(plan.out.size());
        EinsumSpec spec = notation::FromLetters({Letters(rank)}, {""});
        for (int p = 0; p < out_rank; ++p) {
          const int d = p - (out_rank - rank);  // the input dim at p (factor d), or < 0 for a new dim
          if (d >= 0 && repeat[p] == 1) {
            spec.outputs[0].push_back(d);
            continue;
          }
          const FactorId tiled = spec.AddFactor(plan.out[p]);
          spec.outputs[0].push_back(tiled);
          spec.forced_replicated.push_back(tiled);
          if (d >= 0) spec.forced_replicated.push_back(d);
        }
        spec.accept = PartialAcceptance::kAnyOp;  // copies of x: every partial stays
        return spec;
      })
      .Examples(FromSignatures({{{"ab"}, MakeAttrs({{"repeat_times", Ints{2, 1}}})},
                                {{"ab"}, MakeAttrs({{"repeat_times", Ints{2, 1, 3}}})}}));
}

namespace {

// expand / expand_as: broadcast x to the planned `target` (right-aligned, each x dim
// equal or 1). Expanded (1 -> n) and new dims get fresh, replicated letters.
EinsumSpec Expand(const Shape& x, const std::vector<int64_t>& target) {
  const int rank = static_cast<int>(x.size());
  const int out_rank = static_cast<int>(target.size());
  EinsumSpec spec = notation::FromLetters({Letters(rank)}, {""});
  Notation& in = spec.inputs[0];  // dim d is factor d
  Notation& out = spec.outputs[0];
  auto fresh = [&](int64_t size) {
    const FactorId f = spec.AddFactor(size);
    spec.forced_replicated.push_back(f);
    return f;
  };
  for (int p = 0; p < out_rank; ++p) {
    const int d = p - (out_rank - rank);
    const int64_t t = target[p];
    if (d < 0) {
      out.push_back(fresh(t));
    } else if (t == x[d]) {  // kept, size 1 too: a sharded one stays (one rank holds it)
      out.push_back(in[d]);
    } else {  // x[d] == 1
      in[d] = kBroadcastDim;
      out.push_back(fresh(t));
    }
  }
  spec.accept = PartialAcceptance::kAnyOp;  // copies of x: every partial stays
  return spec;
}

}  // namespace

OpDecl expand() {
  return OpBuilder("expand").Inputs({"x"}).Outputs({"out"})
      .Tolerance(ToleranceClass::kExact)
      .Vjp(vjps::Expand)
      .Attr("shape", AttrKind::kInts, std::nullopt)
      .Einsum([](const RuleContext& c) {
        return Expand(c.input_shapes[0], shape_plan::PlanExpand(c.input_shapes[0], c.attrs));
      })
      .Localize({LocalField::kExact}, LocalOutputShape("shape"))
      .Examples([](const SizePalette& p) {
        return std::vector<Example>{
            {{{1, p[1]}}, MakeAttrs({{"shape", Ints{p[0], p[1]}}})},
            {{{p[0], p[1]}}, MakeAttrs({{"shape", Ints{3, -1, p[1]}}})}};
      });
}

namespace {
EinsumSpec ExpandAsNotation(const RuleContext& c) {
  EinsumSpec spec = Expand(c.input_shapes[0],
                           shape_plan::PlanExpandAs(c.input_shapes[0], c.input_shapes[1], c.attrs));
  Notation y;  // y's values are not read: its own factors, kept as given
  for (size_t d = 0; d < c.input_shapes[1].size(); ++d) y.push_back(spec.AddFactor());
  spec.inputs.push_back(y);
  spec.unread_inputs.push_back(1);
  return spec;
}
}  // namespace

OpDecl expand_as() {
  return OpBuilder("expand_as").Inputs({"x", "y"}).Outputs({"out"})
      .Tolerance(ToleranceClass::kExact)
      .Vjp(vjps::Expand)
      .Attr("target_shape", AttrKind::kInts, std::vector<int64_t>{})
      .Einsum(ExpandAsNotation)
      .Forward([](const RuleContext& c, const Mesh& mesh, const std::vector<DistAttr>& in) {
        EinsumSpec spec = ExpandAsNotation(c);
        BindFactorSizes(spec, c.input_shapes);
        InferResult best = InferEinsumForward(spec, mesh, in);
        // x laid out as y: x takes y's dims where its own dim is not broadcast nor of size 1
        // (a `1` dim of the notation) and is whole elsewhere (a local expand fills any
        // shard); x's partials are reduced. It replaces the notation's answer when the
        // planner's bound on moving x is strictly smaller; the answer is then the
        // notation's for x so laid out (y's dims on x's dims; `1`, expanded and new dims
        // whole, as the declaration forces), so re-inferring on it gives it again.
        const Shape& x = c.input_shapes[0];
        const Shape& y = c.input_shapes[1];
        // Only where y's shape is the output's (target_shape may name another).
        if (shape_plan::PlanExpandAs(x, y, c.attrs) != y || y.size() < x.size()) return best;
        const size_t lead = y.size() - x.size();
        DistAttr follow = DistAttr::Replicated(static_cast<int>(x.size()));
        for (size_t d = 0; d < x.size(); ++d) {
          if (x[d] == y[lead + d] && x[d] != 1) follow.dims[d] = in[1].dims[lead + d];
        }
        try {
          auto bytes = [&](const DistAttr& to) {
            return in[0] == to ? int64_t{0}
                               : ReshardLowerBound(mesh, in[0], mesh, to, x, DType::kFloat32);
          };
          if (bytes(follow) < bytes(best.inputs[0])) {
            // The notation's own answer for x so laid out (it keeps x: nothing moves).
            return InferEinsumForward(spec, mesh, std::vector<DistAttr>{follow, in[1]});
          }
        } catch (const SpmdError&) {
          // A layout the bound cannot price: the notation's answer stands.
        }
        return best;
      })
      .Localize({LocalField::kExact}, LocalOutputShape("target_shape"))
      .Examples(FromSignatures({{{"1b", "ab"}}, {{"b", "ab"}}}));
}

// triu keeps x where col - row >= diagonal, tril where col - row <= diagonal. Every dim
// may stay sharded: a shard at rows from r0 and columns from c0 is triu (tril) of its
// block with diagonal + r0 - c0. (Paddle's rule requires the last two dims replicated.)
namespace {
OpBuilder Triangle(const char* name, VjpBuilder vjp) {
  return OpBuilder(name).Inputs({"x"}).Outputs({"out"})
      .Tolerance(ToleranceClass::kExact)
      .Vjp(std::move(vjp))
      .Attr("diagonal", AttrKind::kInt, int64_t{0})
      .Einsum([name = std::string(name)](const RuleContext& c) {
        (void)shape_plan::PlanTriangle(c.input_shapes[0], c.attrs, name, false);
        const std::string letters = Letters(Rank(c));
        EinsumSpec spec = notation::FromLetters({letters}, {letters});
        spec.accept = PartialAcceptance::kAnyOp;  // a mask: every reduce op of 0s is 0
        return spec;
      })
      .Localize({}, [](const LocalContext& c) {
        const Shape& offset = c.input_offsets[0];
        const size_t rows = offset.size() - 2, cols = offset.size() - 1;
        return c.attrs.With("diagonal", c.attrs.GetInt("diagonal") + offset[rows] - offset[cols]);
      });
}
}  // namespace

OpDecl triu() {
  return Triangle("triu", vjps::Triu)
      .Examples(FromSignatures({{{"ab"}}, {{"abc"}, MakeAttrs({{"diagonal", int64_t{-1}}})},
                                {{"ab"}, MakeAttrs({{"diagonal", int64_t{2}}})}}));
}

OpDecl tril() {
  return Triangle("tril", vjps::Tril)
      .Examples(FromSignatures({{{"abc"}, MakeAttrs({{"diagonal", int64_t{1}}})},
                                {{"ab"}, MakeAttrs({{"diagonal", int64_t{-2}}})}}));
}

// Paddle's tril_triu(x, diagonal, lower): tril when lower, else triu.
OpDecl tril_triu() {
  return Triangle("tril_triu", vjps::TrilTriu)
      .Attr("lower", AttrKind::kBool, false)
      .Examples(FromSignatures({{{"ab"}, MakeAttrs({{"diagonal", int64_t{1}}, {"lower", true}})},
                                {{"abc"}, MakeAttrs({{"diagonal", int64_t{-1}}})}}));
}

}  // namespace spmd::declare
