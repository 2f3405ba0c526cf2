// The normalisations: layer_norm, rms_norm and their grads, group_norm, instance_norm and
// batch_norm, checked by their plans (rules/ops/norm_plan.h). layer_norm and rms_norm
// exchange their first normalised dim (OpDecl::exchange: each rank summarises its piece of
// every row, rules/ops/norm_pieces.h); layer_norm_grad and rms_norm_grad keep their
// normalised factors forced replicated (the local kernels need a row whole); group_norm,
// instance_norm and batch_norm (in training) keep every dim a statistic reads across forced
// replicated.
#include <optional>
#include <string>
#include <vector>

#include "rules/model/error.h"
#include "rules/ops/norm_plan.h"
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
  // begin_norm_axis as the forward takes it (a negative one counts from the end).
  const int64_t begin = plan::SplitForNorm(x, c.attrs.GetInt("begin_norm_axis")).begin;
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

// layer_norm, rms_norm: through out, their grad ops (layer_norm_grad, rms_norm_grad); the
// statistics outputs' cotangents add their terms to x_grad (reshape, scale, subtract,
// multiply, add).
// Through out: layer_norm_grad(x, scale, bias, mean, variance, g) gives x_grad (from
// xhat = (x - mean) / sqrt(variance + eps) and dxhat = g scale: (dxhat - mean(dxhat) -
// xhat mean(dxhat xhat)) / std), scale_grad and bias_grad. The mean and variance outputs'
// cotangents add g_mean / N and 2 (x - mean) g_variance / N to x_grad. An absent (0-d)
// scale or bias gets no gradient (layer_norm_grad's 0-d zero for it is not used).
VjpGraph LayerNorm(const RuleContext& c) {
  VjpGraph g;
  const NormDims dims = SplitNorm(c);
  const plan::NormSplit split = plan::PlanLayerNorm(c.input_shapes, c.attrs);
  const size_t grads = g.Add("layer_norm_grad",
                             {Ref::Input(0), Ref::Input(1), Ref::Input(2), Ref::Output(1),
                              Ref::Output(2), Ref::OutputGrad(0)},
                             NormGradAttrs(c)).index;
  const Ref centered = g.Add("subtract", {Ref::Input(0), ToKept(g, Ref::Output(1), dims)});
  Ref x_grad = g.Add("add", {Ref::Call(grads, 0), ScaleBy(g, ToKept(g, Ref::OutputGrad(1), dims), 1 / dims.n)});
  const Ref variance_weight = ScaleBy(g, ToKept(g, Ref::OutputGrad(2), dims), 2 / dims.n);
  x_grad = g.Add("add", {x_grad, g.Add("multiply", {centered, variance_weight})});
  g.input_grads = {x_grad, split.has_scale ? std::optional<Ref>(Ref::Call(grads, 1)) : std::nullopt,
                   split.has_bias ? std::optional<Ref>(Ref::Call(grads, 2)) : std::nullopt};
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

// group_norm / instance_norm: x viewed as [N, S1, G, S2] so that a group is the dims 1 and
// 3 at one (n, g): channels first [N, 1, G, C / G * spatial], channels last [N, spatial, G,
// C / G] (both plain reshapes of x); the statistics [N, G] as [N, 1, G, 1]. Through y (with
// dxhat = g scale, scale along x's channel dim): x_grad = inv (dxhat - mean(dxhat) - xhat
// mean(dxhat xhat)) over each group, as layer_norm_grad's; the mean and variance outputs'
// cotangents add g_mean / M and 2 (x - mean) g_variance / M (M elements per group).
// scale_grad and bias_grad sum g xhat and g over every dim but the channel dim; an absent
// (0-d) scale or bias gets none.
VjpGraph GroupNormGraph(const RuleContext& c, const plan::GroupNormPlan& p) {
  VjpGraph g;
  const Shape& x = c.input_shapes[0];
  const Shape view = p.channels_last ? Shape{p.n, p.spatial, p.groups, p.group_channels}
                                     : Shape{p.n, 1, p.groups, p.group_size};
  const Shape kept{p.n, 1, p.groups, 1};
  const double m = static_cast<double>(p.group_size);
  auto group_mean = [&](Ref r) {
    return g.Add("mean", {r}, MakeAttrs({{"axis", Ints{1, 3}}, {"keep_dim", true}}));
  };
  const Ref xv = Reshape(g, Ref::Input(0), x, view);
  const Ref mean = Reshape(g, Ref::Output(1), p.stats_shape, kept);
  const Ref variance = Reshape(g, Ref::Output(2), p.stats_shape, kept);
  const Ref inv = g.Add("rsqrt", {ScaleBy(g, variance, 1, c.attrs.GetFloat("epsilon"))});
  const Ref centered = g.Add("subtract", {xv, mean});
  const Ref xhat = g.Add("multiply", {centered, inv});
  Ref dxhat = Ref::OutputGrad(0);
  if (p.has_scale) {
    // scale [C] along x's channel dim: [C, 1, ..] channels first, [C] (the last dim) channels last.
    Shape along{p.c};
    if (!p.channels_last) along.resize(x.size() - 1, 1);
    dxhat = g.Add("multiply", {dxhat, Reshape(g, Ref::Input(1), {p.c}, along)});
  }
  dxhat = Reshape(g, dxhat, x, view);
  const Ref mean_dxhat = group_mean(dxhat);
  const Ref mean_dxhat_xhat = group_mean(g.Add("multiply", {dxhat, xhat}));
  Ref x_grad = g.Add("subtract", {g.Add("subtract", {dxhat, mean_dxhat}), g.Add("multiply", {xhat, mean_dxhat_xhat})});
  x_grad = g.Add("multiply", {x_grad, inv});
  x_grad = g.Add("add", {x_grad, ScaleBy(g, Reshape(g, Ref::OutputGrad(1), p.stats_shape, kept), 1 / m)});
  const Ref variance_weight = ScaleBy(g, Reshape(g, Ref::OutputGrad(2), p.stats_shape, kept), 2 / m);
  x_grad = g.Add("add", {x_grad, g.Add("multiply", {centered, variance_weight})});
  Ints others;  // every dim but the channel dim
  for (int64_t d = 0; d < static_cast<int64_t>(x.size()); ++d) {
    if (d != p.channel_dim) others.push_back(d);
  }
  const Attrs sum_others = MakeAttrs({{"axis", others}});
  std::optional<Ref> scale_grad, bias_grad;
  if (p.has_scale) {
    scale_grad = g.Add("sum", {g.Add("multiply", {Ref::OutputGrad(0), Reshape(g, xhat, view, x)})}, sum_others);
  }
  if (p.has_bias) bias_grad = g.Add("sum", {Ref::OutputGrad(0)}, sum_others);
  g.input_grads = {Reshape(g, x_grad, view, x), scale_grad, bias_grad};
  return g;
}

VjpGraph GroupNorm(const RuleContext& c) {
  return GroupNormGraph(c, plan::PlanGroupNorm(c.input_shapes, c.attrs));
}

VjpGraph InstanceNorm(const RuleContext& c) {
  return GroupNormGraph(c, plan::PlanInstanceNorm(c.input_shapes, c.attrs));
}

// batch_norm: x viewed as [N, C, spatial] (channels last: [N * spatial, C, 1], both plain
// reshapes) so that every channel's statistics run over dims 0 and 2; the [C] statistics
// and parameters as [1, C, 1]. inv = saved_variance (1/sqrt(variance + epsilon) of the
// variance used, in both modes), xhat = (x - mean) inv, dxhat = g_out scale; scale_grad and
// bias_grad sum g_out xhat and g_out over dims 0 and 2; an absent (0-d) scale or bias gets
// none.
// Training (the batch's statistics, M = N * spatial per channel): x through out as
// layer_norm's, inv (dxhat - mean(dxhat) - xhat mean(dxhat xhat)); the batch mean and
// (population) variance also reach mean_out and variance_out with weight 1 - momentum and
// saved_mean and saved_variance (d inv / d variance = -inv^3 / 2), so their cotangents
// g_bm, g_bv add g_bm / M + 2 (x - mean) g_bv / M. mean and variance reach only mean_out
// and variance_out: momentum g.
// Global statistics: out is elementwise in x (dxhat inv); mean gets -sum(dxhat) inv plus
// the cotangents of mean_out and saved_mean (both are mean); variance gets -(sum(dxhat (x -
// mean)) + g_saved_variance) inv^3 / 2 plus variance_out's cotangent.
VjpGraph BatchNorm(const RuleContext& c) {
  VjpGraph g;
  const plan::BatchNormPlan p = plan::PlanBatchNorm(c.input_shapes, c.attrs);
  const Shape& x = c.input_shapes[0];
  const Shape view = p.channels_last ? Shape{p.n * p.spatial, p.c, 1} : Shape{p.n, p.c, p.spatial};
  const Shape kept{1, p.c, 1};
  const double momentum = c.attrs.GetFloat("momentum");
  const Attrs over = MakeAttrs({{"axis", Ints{0, 2}}, {"keep_dim", true}});
  auto per_channel = [&](Ref r) { return Reshape(g, r, p.stats_shape, kept); };
  auto channel_sum = [&](Ref r) { return g.Add("sum", {r}, over); };  // [1, C, 1]
  auto to_stats = [&](Ref r) { return Reshape(g, r, kept, p.stats_shape); };
  auto mul = [&](Ref a, Ref b) { return g.Add("multiply", {a, b}); };
  auto add = [&](Ref a, Ref b) { return g.Add("add", {a, b}); };
  const Ref xv = Reshape(g, Ref::Input(0), x, view);
  const Ref gv = Reshape(g, Ref::OutputGrad(0), x, view);
  const Ref mean = per_channel(p.global_stats ? Ref::Input(1) : Ref::Output(3));
  const Ref inv = per_channel(Ref::Output(4));
  const Ref inv_cubed = mul(mul(inv, inv), inv);
  const Ref centered = g.Add("subtract", {xv, mean});
  const Ref xhat = mul(centered, inv);
  const Ref dxhat = p.has_scale ? mul(gv, per_channel(Ref::Input(3))) : gv;
  Ref x_grad, mean_grad, variance_grad;
  if (p.global_stats) {
    x_grad = mul(dxhat, inv);
    mean_grad = add(add(to_stats(ScaleBy(g, mul(channel_sum(dxhat), inv), -1)), Ref::OutputGrad(1)),
                    Ref::OutputGrad(3));
    const Ref through = add(channel_sum(mul(dxhat, centered)), per_channel(Ref::OutputGrad(4)));
    variance_grad = add(to_stats(ScaleBy(g, mul(through, inv_cubed), -0.5)), Ref::OutputGrad(2));
  } else {
    const double m = static_cast<double>(p.count());
    const Ref mean_dxhat = g.Add("mean", {dxhat}, over);
    const Ref mean_dxhat_xhat = g.Add("mean", {mul(dxhat, xhat)}, over);
    x_grad = mul(g.Add("subtract", {g.Add("subtract", {dxhat, mean_dxhat}), mul(xhat, mean_dxhat_xhat)}), inv);
    const Ref batch_mean_grad = add(ScaleBy(g, Ref::OutputGrad(1), 1 - momentum), Ref::OutputGrad(3));
    const Ref batch_variance_grad = add(per_channel(ScaleBy(g, Ref::OutputGrad(2), 1 - momentum)),
                                        ScaleBy(g, mul(per_channel(Ref::OutputGrad(4)), inv_cubed), -0.5));
    x_grad = add(x_grad, ScaleBy(g, per_channel(batch_mean_grad), 1 / m));
    x_grad = add(x_grad, mul(centered, ScaleBy(g, batch_variance_grad, 2 / m)));
    mean_grad = ScaleBy(g, Ref::OutputGrad(1), momentum);
    variance_grad = ScaleBy(g, Ref::OutputGrad(2), momentum);
  }
  std::optional<Ref> scale_grad, bias_grad;
  if (p.has_scale) scale_grad = to_stats(channel_sum(mul(gv, xhat)));
  if (p.has_bias) bias_grad = to_stats(channel_sum(gv));
  g.input_grads = {Reshape(g, x_grad, view, x), mean_grad, variance_grad, scale_grad, bias_grad};
  return g;
}

}  // namespace
}  // namespace spmd::vjps

namespace spmd::declare {
namespace {

using notation::MakeAttrs;

// layer_norm / rms_norm examples: x `abc` with begin 1 and 2, parameters of the
// flattened normalised size; layer_norm (params 2) also on x `ab` with begin 1 and a 0-d
// (absent) scale, bias or both, small: the normalised dim b may be exchanged.
ExampleBuilder NormExamples(size_t params) {
  return [params](const SizePalette& p) {
    std::vector<Example> examples;
    for (int64_t begin : {1, 2}) {
      Shape x{p[0], p[1], p[2]};
      int64_t normalized = 1;
      for (size_t d = begin; d < x.size(); ++d) normalized *= x[d];
      std::vector<Shape> shapes{x};
      for (size_t k = 0; k < params; ++k) shapes.push_back({normalized});
      examples.push_back({shapes, MakeAttrs({{"begin_norm_axis", begin}})});
    }
    if (params == 2) {
      const Shape x{p[0], p[1]}, given{p[1]}, absent{};
      examples.push_back({{x, absent, given}, MakeAttrs({{"begin_norm_axis", int64_t{1}}})});
      examples.push_back({{x, given, absent}, MakeAttrs({{"begin_norm_axis", int64_t{-1}}})});
      examples.push_back({{x, absent, absent}, MakeAttrs({{"begin_norm_axis", int64_t{1}}, {"epsilon", 1e-3}})});
    }
    return examples;
  };
}

// layer_norm / rms_norm: x `abcd` with begin 2 -> out `abcd`, statistics `ab`; scale and
// bias are 1-D of prod(x.shape[begin:]) (a new factor). c, the first normalised dim, is
// exchanged (OpDecl::exchange: each piece's row moments are gathered); d and the
// parameters' factor are forced replicated (a piece reads its slice of the whole scale).
// layer_norm's absent (0-d) scale or bias has no letters: replicated, tying nothing.
EinsumSpec Normalization(const RuleContext& c, const plan::NormSplit& split, size_t statistics) {
  const int rank = static_cast<int>(c.input_shapes[0].size());
  const int64_t begin = split.begin;
  const std::string letters = notation::Letters(rank);
  EinsumSpec spec = notation::FromLetters(
      {letters}, std::vector<std::string>(1 + statistics, letters.substr(0, begin)),
      letters.substr(begin + 1));
  spec.outputs[0] = spec.inputs[0];
  const size_t params = c.input_shapes.size() - 1;
  std::optional<FactorId> param;  // the flattened normalised dims, when a parameter is given
  for (size_t p = 0; p < params; ++p) {
    if (!(p == 0 ? split.has_scale : split.has_bias)) {
      spec.inputs.push_back({});
      continue;
    }
    if (!param) {
      param = spec.AddFactor();
      spec.forced_replicated.push_back(*param);
    }
    spec.inputs.push_back({*param});
  }
  return spec;
}

// The exchanged dim of layer_norm / rms_norm: the first normalised one, begin_norm_axis
// normalised (validated by the spec builder, which runs first).
int NormExchangedDim(const RuleContext& c) {
  return static_cast<int>(plan::SplitForNorm(c.input_shapes[0], c.attrs.GetInt("begin_norm_axis")).begin);
}

// A piece of layer_norm / rms_norm reads its slice of the whole scale and bias: x's global
// offset and shape.
Attrs NormPiece(const LocalContext& c) {
  return c.attrs.WithLocal({.offset = c.input_offsets[0], .global_shape = c.global_inputs[0]});
}

// layer_norm_grad / rms_norm_grad: x `abcd` with begin 2, the parameters `N` (the flattened
// normalised size), the forward's statistics `ab`, out_grad `abcd` -> x_grad `abcd` and one
// `N` gradient per parameter. c, the first normalised dim, is exchanged (each piece's row
// sums of dxhat and dxhat xhat are gathered) and N follows it (EinsumSpec::tied: sharded
// with c when the axes divide both sizes, so a piece holds the slice of the parameters and
// of their gradients that matches its slice of the row); d is forced replicated. The rows
// a, b may stay sharded, and since the parameters' gradients sum over them, those come out
// partial(sum) on the rows' mesh axes. layer_norm_grad's absent (0-d) scale or bias has no
// letters (replicated) and its gradient is a 0-d zero, whole (never partial); N then lives
// in the given parameter alone, and with none given there is no N to tie.
EinsumSpec NormalizationGrad(const RuleContext& c, const plan::NormSplit& split, size_t params,
                             size_t statistics) {
  const int rank = static_cast<int>(c.input_shapes[0].size());
  const int64_t begin = split.begin;
  const std::string letters = notation::Letters(rank);
  std::vector<std::string> inputs{letters}, outputs{letters};
  for (size_t p = 0; p < params; ++p) {
    const bool given = p == 0 ? split.has_scale : split.has_bias;
    inputs.push_back(given ? "N" : "");
    outputs.push_back(given ? "N" : "");
  }
  inputs.insert(inputs.end(), statistics, letters.substr(0, begin));
  inputs.push_back(letters);
  EinsumSpec spec = notation::FromLetters(inputs, outputs, letters.substr(begin + 1));
  bool tied = false;
  for (size_t p = 0; p < params; ++p) {
    const Notation& param = spec.inputs[1 + p];
    if (param.empty()) {
      spec.whole_outputs.push_back(static_cast<int>(1 + p));  // an absent parameter's 0-d zero
    } else if (!tied) {
      spec.tied.push_back({param[0], spec.inputs[0][begin]});  // N follows c
      tied = true;
    }
  }
  return spec;
}

// Grad examples: x `abc` with begin 1 and 2, the parameters, the statistics x.shape[:begin]
// and out_grad of x's shape; of the forward's absent-parameter examples, the absent scale
// and the absent pair (a given scale with an absent bias ties N as the absent scale's given
// bias does: left out, the grad's sweep being the larger).
ExampleBuilder NormGradExamples(size_t params, size_t statistics) {
  return [params, statistics](const SizePalette& p) {
    std::vector<Example> examples;
    for (Example e : NormExamples(params)(p)) {
      if (params == 2 && !e.shapes[1].empty() && e.shapes[2].empty()) continue;
      const Shape x = e.shapes[0];
      const auto rank = static_cast<int64_t>(x.size());
      const int64_t begin = shape::NormalizeAxis(e.attrs.GetInt("begin_norm_axis"), rank, "attrs.begin_norm_axis");
      for (size_t k = 0; k < statistics; ++k) e.shapes.push_back(Shape(x.begin(), x.begin() + begin));
      e.shapes.push_back(x);
      examples.push_back(std::move(e));
    }
    return examples;
  };
}

// A palette size, at least 1: the group norms' examples keep their groups non-empty.
int64_t NonEmpty(int64_t size) { return size > 0 ? size : 1; }

// The channel norms' x letters: `a` the batch, `c` the channels, `h`, `i`, ... the spatial
// dims in order (channels last: `ahic`); `spatial` gets the spatial letters.
std::string ChannelNormLetters(const plan::ChannelLayout& p, size_t rank, std::string& spatial) {
  std::string x;
  for (size_t d = 0; d < rank; ++d) {
    if (d == 0) {
      x += 'a';
    } else if (static_cast<int64_t>(d) == p.channel_dim) {
      x += 'c';
    } else {
      spatial += static_cast<char>('h' + spatial.size());
      x += spatial.back();
    }
  }
  return x;
}

// group_norm / instance_norm: x `acHW` (channels last `aHWc`), scale and bias `c` (0-d,
// absent: no letters), y as x. The statistics of an (n, group) read its channels and every
// spatial position: the spatial factors are forced replicated, and group_norm's c too (a
// shard of the channels would cut groups; scale and bias follow it), its mean and variance
// `aG` with G a new factor of size groups (replicated: no input has it). instance_norm's
// groups are single channels, so c may stay sharded and its statistics are `ac`. The batch
// a may stay sharded in both.
EinsumSpec GroupNormalization(const RuleContext& c, bool instance) {
  const plan::GroupNormPlan p = instance ? plan::PlanInstanceNorm(c.input_shapes, c.attrs)
                                         : plan::PlanGroupNorm(c.input_shapes, c.attrs);
  std::string spatial;
  const std::string x = ChannelNormLetters(p, c.input_shapes[0].size(), spatial);
  const std::string forced = (instance ? "" : "c") + spatial;
  const std::string scale = p.has_scale ? "c" : "", bias = p.has_bias ? "c" : "";
  if (instance) return notation::FromLetters({x, scale, bias}, {x, "ac", "ac"}, forced);
  EinsumSpec spec = notation::FromLetters({x, scale, bias}, {x}, forced);
  const FactorId groups = spec.AddFactor(p.groups);
  const Notation stats{spec.inputs[0][0], groups};
  spec.outputs.push_back(stats);
  spec.outputs.push_back(stats);
  spec.forced_replicated.push_back(groups);
  return spec;
}

// batch_norm: x `acHW` (channels last `aHWc`), mean, variance `c`, scale and bias `c` (0-d,
// absent: no letters) -> out as x, mean_out, variance_out, saved_mean, saved_variance `c`.
// The channels c may stay sharded in both modes (every statistic is one channel's; the
// parameters follow c). Training reads each channel's statistics across the batch and every
// spatial position: the batch a is exchanged (each piece sends every channel's count, mean
// and M2, merged as layer_norm's; Paddle's SyncBatchNorm), the spatial factors are forced
// replicated. Global statistics make the op elementwise per channel: every dim may stay
// sharded.
// Partial inputs are reduced (out is not linear in any of them).
EinsumSpec BatchNormalization(const RuleContext& c) {
  const plan::BatchNormPlan p = plan::PlanBatchNorm(c.input_shapes, c.attrs);
  std::string spatial;
  const std::string x = ChannelNormLetters(p, c.input_shapes[0].size(), spatial);
  const std::string forced = p.global_stats ? "" : spatial;
  const std::string scale = p.has_scale ? "c" : "", bias = p.has_bias ? "c" : "";
  EinsumSpec spec = notation::FromLetters({x, "c", "c", scale, bias}, {x, "c", "c", "c", "c"}, forced);
  // What each output reads: with global statistics the four statistics outputs are mean or
  // variance (saved_variance their inverse root) and never read x, so a sharded batch or
  // spatial dim leaves them whole, not partial; in training they read x too.
  if (p.global_stats) {
    spec.output_reads = {{0, 1, 2, 3, 4}, {1}, {2}, {1}, {2}};
  } else {
    spec.output_reads = {{0, 1, 2, 3, 4}, {0, 1}, {0, 2}, {0}, {0}};
  }
  return spec;
}

}  // namespace

OpDecl layer_norm() {
  return OpBuilder("layer_norm").Inputs({"x", "scale", "bias"})
      .Tolerance(ToleranceClass::kLayerNorm)
      .Vjp(vjps::LayerNorm)
      .Outputs({"out", "mean", "variance"})
      .Attr("epsilon", AttrKind::kFloat, 1e-5)
      .Attr("begin_norm_axis", AttrKind::kInt, int64_t{1})
      .Einsum([](const RuleContext& c) { return Normalization(c, plan::PlanLayerNorm(c.input_shapes, c.attrs), 2); })
      .ExchangeAlong(0, NormExchangedDim)
      .Localize({LocalField::kOffset, LocalField::kGlobalShape}, NormPiece)
      .Examples(NormExamples(2));
}

OpDecl rms_norm() {
  return OpBuilder("rms_norm").Inputs({"x", "scale"}).Outputs({"out", "invvar"})
      .Tolerance(ToleranceClass::kRmsNorm)
      .Vjp(vjps::RmsNorm)
      .Attr("epsilon", AttrKind::kFloat, 1e-6)
      .Attr("begin_norm_axis", AttrKind::kInt, int64_t{1})
      .Einsum([](const RuleContext& c) { return Normalization(c, plan::PlanRmsNorm(c.input_shapes, c.attrs), 1); })
      .ExchangeAlong(0, NormExchangedDim)
      .Localize({LocalField::kOffset, LocalField::kGlobalShape}, NormPiece)
      .Examples(NormExamples(1));
}

// Paddle's group_norm(x, scale, bias): x [N, C, *spatial] (rank 2 to 5; NHWC: channels
// last) with its C channels in `groups` groups of consecutive channels; per (n, group), over
// the group's channels and every spatial position: mean, variance (population), y = (x -
// mean) / sqrt(variance + epsilon) * scale[c] + bias[c]. mean and variance are [N, groups].
// A 0-d scale or bias is absent (1, 0).
OpDecl group_norm() {
  return OpBuilder("group_norm").Inputs({"x", "scale", "bias"}).Outputs({"y", "mean", "variance"})
      .Tolerance(ToleranceClass::kGroupNorm)
      .Vjp(vjps::GroupNorm)
      .Attr("epsilon", AttrKind::kFloat, 1e-5)
      .Attr("groups", AttrKind::kInt, std::nullopt)
      .Attr("data_format", AttrKind::kString, std::string("NCHW"))
      .Einsum([](const RuleContext& c) { return GroupNormalization(c, false); })
      .Examples([](const SizePalette& p) {
        // Channels and spatial dims of at least 1 (a palette's 0 there leaves no group or an
        // empty one, which the op refuses); the channels in groups of two.
        const int64_t s1 = NonEmpty(p[1]), s2 = NonEmpty(p[2]), c1 = 2 * s1, c2 = 2 * s2;
        return std::vector<Example>{
            {{{p[0], c1, s2}, {c1}, {c1}}, MakeAttrs({{"groups", s1}})},
            {{{p[0], s1, 2, c2}, {c2}, {}}, MakeAttrs({{"groups", int64_t{2}}, {"data_format", std::string("NHWC")}})},
            {{{p[0], s1, s2}, {}, {s1}}, MakeAttrs({{"groups", int64_t{1}}, {"epsilon", 1e-3}})}};
      });
}

// Paddle's instance_norm(x, scale, bias): group_norm with one channel per group, channels
// first: per (n, c), over the spatial positions. saved_mean and saved_variance are [N, C]
// (Paddle's kernel gives them flattened, [N * C]: docs/DECISIONS.md).
OpDecl instance_norm() {
  return OpBuilder("instance_norm").Inputs({"x", "scale", "bias"})
      .Outputs({"y", "saved_mean", "saved_variance"})
      .Tolerance(ToleranceClass::kGroupNorm)
      .Vjp(vjps::InstanceNorm)
      .Attr("epsilon", AttrKind::kFloat, 1e-5)
      .Einsum([](const RuleContext& c) { return GroupNormalization(c, true); })
      .Examples([](const SizePalette& p) {
        const int64_t s2 = NonEmpty(p[2]);  // a spatial dim of 0 leaves empty groups
        return std::vector<Example>{
            {{{p[0], p[1], 2, s2}, {p[1]}, {p[1]}}, {}},
            {{{p[0], p[1], s2}, {}, {p[1]}}, MakeAttrs({{"epsilon", 1e-3}})},
            {{{p[0], p[1], s2, 1, 2}, {p[1]}, {}}, {}}};
      });
}

// Paddle's batch_norm(x, mean, variance, scale, bias): x [N, C, *spatial] (rank 2 to 5; NHWC:
// channels last), mean and variance the running statistics [C]. Training (neither global
// statistics flag): per channel over N and every spatial position, the batch mean and
// population variance; out = (x - mean) / sqrt(variance + epsilon) * scale[c] + bias[c];
// mean_out = momentum mean + (1 - momentum) batch mean (variance_out likewise, from the
// population variance, as Paddle's kernels); saved_mean the batch mean, saved_variance
// 1/sqrt(batch variance + epsilon). Global statistics (is_test without
// trainable_statistics, or use_global_stats): out from the given mean and variance,
// mean_out and variance_out pass them through, saved_mean = mean, saved_variance =
// 1/sqrt(variance + epsilon). Paddle's reserve_space is not an output (docs/DECISIONS.md).
// A 0-d scale or bias is absent (1, 0).
OpDecl batch_norm() {
  return OpBuilder("batch_norm").Inputs({"x", "mean", "variance", "scale", "bias"})
      .Outputs({"out", "mean_out", "variance_out", "saved_mean", "saved_variance"})
      .Tolerance(ToleranceClass::kBatchNorm)
      .Vjp(vjps::BatchNorm)
      .Attr("is_test", AttrKind::kBool, false)
      .Attr("momentum", AttrKind::kFloat, 0.9)
      .Attr("epsilon", AttrKind::kFloat, 1e-5)
      .Attr("data_format", AttrKind::kString, std::string("NCHW"))
      .Attr("use_global_stats", AttrKind::kBool, false)
      .Attr("trainable_statistics", AttrKind::kBool, false)
      .Einsum(BatchNormalization)
      // training: the batch dim is exchanged (no piece offset needed: moments merge in any order)
      .ExchangeAlong(0, [](const RuleContext& c) { return plan::PlanBatchNorm(c.input_shapes, c.attrs).global_stats ? -1 : 0; })
      .Values([](const RuleContext&) {  // a variance is >= 0
        return std::vector<InputValues>{{}, {}, {ValueKind::kPositive}, {}, {}};
      })
      .Examples([](const SizePalette& p) {
        // Training: a spatial dim of 2, so that every channel has at least two elements (a
        // palette's 0 batch leaves none, which training refuses), channels first and last.
        // Global statistics: any sizes. Three examples: each fills the sweep's cap.
        const int64_t n = NonEmpty(p[0]), c = p[1], s = p[2];
        return std::vector<Example>{
            {{{n, c, 2}, {c}, {c}, {c}, {}}, {}},
            {{{n, 2, c}, {c}, {c}, {}, {c}}, MakeAttrs({{"data_format", std::string("NHWC")}, {"momentum", 0.5}})},
            {{{p[0], c, s}, {c}, {c}, {c}, {c}}, MakeAttrs({{"is_test", true}})}};
      });
}

// Paddle's layer_norm_grad(x, scale, bias, mean, variance, out_grad): the backward of
// layer_norm through out, from the forward's mean and variance (their shapes as
// layer_norm gives them). With inv = 1/sqrt(variance + epsilon), xhat = (x - mean) inv and
// dxhat = out_grad scale: x_grad = inv (dxhat - mean(dxhat) - xhat mean(dxhat xhat)) over
// each row, scale_grad = the sum of out_grad xhat over the rows, bias_grad = the sum of
// out_grad; bias's values are not read. The cotangents of the mean and variance outputs
// are not inputs: the VJP adds their terms.
OpDecl layer_norm_grad() {
  return OpBuilder("layer_norm_grad")
      .Inputs({"x", "scale", "bias", "mean", "variance", "out_grad"})
      .Outputs({"x_grad", "scale_grad", "bias_grad"})
      .Tolerance(ToleranceClass::kLayerNormGrad)
      .Attr("epsilon", AttrKind::kFloat, 1e-5)
      .Attr("begin_norm_axis", AttrKind::kInt, int64_t{1})
      .Einsum([](const RuleContext& c) {
        return NormalizationGrad(c, plan::PlanLayerNormGrad(c.input_shapes, c.attrs), 2, 2);
      })
      .ExchangeAlong(0, NormExchangedDim)
      .Localize({LocalField::kOffset, LocalField::kGlobalShape}, NormPiece)
      .Values([](const RuleContext&) {  // a variance is >= 0
        return std::vector<InputValues>{{}, {}, {}, {}, {ValueKind::kPositive}, {}};
      })
      .Examples(NormGradExamples(2, 2));
}

// Paddle's rms_norm_grad(x, scale, invvar, out_grad): the backward of rms_norm through out,
// from the forward's invvar = 1/sqrt(mean(x^2) + epsilon) (epsilon is not read again). With
// xhat = x invvar and dxhat = out_grad scale: x_grad = invvar (dxhat - xhat mean(dxhat
// xhat)) over each row, scale_grad = the sum of out_grad xhat over the rows. invvar's own
// cotangent is not an input: the VJP adds its term.
OpDecl rms_norm_grad() {
  return OpBuilder("rms_norm_grad").Inputs({"x", "scale", "invvar", "out_grad"})
      .Outputs({"x_grad", "scale_grad"})
      .Tolerance(ToleranceClass::kRmsNormGrad)
      .Attr("epsilon", AttrKind::kFloat, 1e-6)
      .Attr("begin_norm_axis", AttrKind::kInt, int64_t{1})
      .Einsum([](const RuleContext& c) {
        return NormalizationGrad(c, plan::PlanRmsNormGrad(c.input_shapes, c.attrs), 1, 1);
      })
      .ExchangeAlong(0, NormExchangedDim)
      .Localize({LocalField::kOffset, LocalField::kGlobalShape}, NormPiece)
      .Values([](const RuleContext&) {  // an inverse root is > 0
        return std::vector<InputValues>{{}, {}, {ValueKind::kPositive}, {}};
      })
      .Examples(NormGradExamples(1, 1));
}

}  // namespace spmd::declare
