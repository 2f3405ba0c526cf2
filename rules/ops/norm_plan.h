// The plans of the normalisations (rules/ops/norm.cc): attr reads, typed validation and
// output shapes of layer_norm, rms_norm, layer_norm_grad, rms_norm_grad, group_norm,
// instance_norm and batch_norm, written once for
// the rules, the references (reference/ops_norm.cc), the CPU kernels (kernels/cpu/norm.cc)
// and the CUDA kernels (kernels/cuda/norm.cu), which keep only their loops. Header-only; no
// value arithmetic.
//
// Example: layer_norm of x [4, 6, 8] with begin_norm_axis 1 -> rows 4, n 48, scale and
// bias [48], mean and variance [4]; begin_norm_axis -2 is the same split; a 0-d scale or
// bias is absent (has_scale / has_bias false: 1 and 0). group_norm of x
// [2, 6, 5] with groups 3 (NCHW) -> 6 groups of 2 channels x 5 = 10 elements, mean and
// variance [2, 3]; instance_norm of the same x -> groups of 1 channel (5 elements), [2, 6];
// batch_norm of the same x in training -> per channel 2 x 5 = 10 elements, statistics [6].
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "rules/model/attrs.h"
#include "rules/model/error.h"
#include "rules/engine/op_plan.h"
#include "rules/engine/shape_util.h"

namespace spmd::plan {

// layer_norm / rms_norm and their grads: x split at begin_norm_axis into [outer, n].
// layer_norm's and layer_norm_grad's scale and bias are optional, as Paddle's: a 0-d one is
// absent (scale 1, bias 0; no values read), and layer_norm_grad's gradient of an absent one
// is a 0-d zero (ParamGradShape). rms_norm's scale is always given.
struct NormSplit {
  int64_t begin = 0;
  int64_t outer = 1;
  int64_t n = 1;
  Shape stats_shape;  // x.shape[:begin]: mean, variance, invvar
  bool has_scale = true, has_bias = true;

  // The shape of a parameter's gradient: [n], or [] (a zero) for an absent parameter.
  Shape ParamGradShape(bool present) const { return present ? Shape{n} : Shape{}; }
};

// `piece`: x is one rank's piece of a normalised dim the exchange keeps sharded (the grads'
// phases, norm_pieces::PlanNormGradPiece), which may hold none of its elements (an uneven
// split); the caller checks the whole row instead.
inline NormSplit SplitForNorm(const Shape& x, int64_t begin_norm_axis, bool piece = false) {
  NormSplit split;
  const auto rank = static_cast<int64_t>(x.size());
  split.begin = shape::NormalizeAxis(begin_norm_axis, rank, "attrs.begin_norm_axis");
  for (int64_t d = 0; d < rank; ++d) {
    if (d < split.begin) {
      split.outer *= x[d];
      split.stats_shape.push_back(x[d]);
    } else {
      split.n *= x[d];
    }
  }
  if (split.n == 0 && !piece) {
    ThrowInvalid(shape::InputField(0, "shape"),
                 "normalising over an empty set of elements of " + shape::ShapeString(x));
  }
  return split;
}

// epsilon of the normalisations: finite and >= 0 (a negative one makes the root of a
// constant row's variance NaN).
inline void CheckNormEpsilon(const Attrs& attrs) {
  const double epsilon = attrs.GetFloat("epsilon");
  if (!std::isfinite(epsilon) || epsilon < 0.0) {
    ThrowInvalid("attrs.epsilon", "must be finite and >= 0, got " + std::to_string(epsilon));
  }
}

// Which of the parameters (inputs 1, 2) are given: with `optional_params` (layer_norm and
// its grad) a 0-d one is absent; rms_norm's scale is always given. The shapes are checked.
inline void ReadNormParams(const Shapes& shapes, size_t params, bool optional_params, NormSplit& split) {
  split.has_scale = !optional_params || !shapes[1].empty();
  split.has_bias = params > 1 && (!optional_params || !shapes[2].empty());
}

// layer_norm (x, scale, bias; params 2, each [n] or 0-d: absent) or rms_norm (x, scale;
// params 1, [n]): epsilon and begin_norm_axis read, the parameters checked.
inline NormSplit PlanNorm(const Shapes& shapes, const Attrs& attrs, size_t params, bool optional_params) {
  CheckNormEpsilon(attrs);
  const int64_t begin_norm_axis = attrs.GetInt("begin_norm_axis");
  CheckArity(shapes, 1 + params);
  NormSplit split = SplitForNorm(shapes[0], begin_norm_axis);
  for (size_t p = 1; p <= params; ++p) {
    if (optional_params && shapes[p].empty()) continue;  // 0-d: absent
    if (shapes[p] != Shape{split.n}) {
      ThrowInvalid(shape::InputField(p, "shape"), "expected [" + std::to_string(split.n) + "]" +
                                                      (optional_params ? " or 0-d (absent)" : "") + ", got " +
                                                      shape::ShapeString(shapes[p]));
    }
  }
  ReadNormParams(shapes, params, optional_params, split);
  return split;
}

inline NormSplit PlanLayerNorm(const Shapes& shapes, const Attrs& attrs) { return PlanNorm(shapes, attrs, 2, true); }
inline NormSplit PlanRmsNorm(const Shapes& shapes, const Attrs& attrs) { return PlanNorm(shapes, attrs, 1, false); }

// layer_norm_grad (params 2, statistics 2; a 0-d parameter absent) / rms_norm_grad (1, 1):
// x, the parameters, the statistics, out_grad (shape::CheckNormGradShapes).
inline NormSplit PlanNormGrad(const Shapes& shapes, const Attrs& attrs, size_t params, size_t statistics,
                              bool optional_params, bool piece = false) {
  CheckNormEpsilon(attrs);
  const int64_t begin_norm_axis = attrs.GetInt("begin_norm_axis");
  CheckArity(shapes, 2 + params + statistics);
  NormSplit split = SplitForNorm(shapes[0], begin_norm_axis, piece);
  shape::CheckNormGradShapes(shapes, split.begin, params, statistics, optional_params);
  ReadNormParams(shapes, params, optional_params, split);
  return split;
}

inline NormSplit PlanLayerNormGrad(const Shapes& shapes, const Attrs& attrs, bool piece = false) {
  return PlanNormGrad(shapes, attrs, 2, 2, true, piece);
}
inline NormSplit PlanRmsNormGrad(const Shapes& shapes, const Attrs& attrs, bool piece = false) {
  return PlanNormGrad(shapes, attrs, 1, 1, false, piece);
}

// The channel norms' x (group_norm, instance_norm, batch_norm): [N, C, *spatial] of rank 2
// to 5, or with data_format NHWC [N, *spatial, C]. Index plan: x's element at flat index i is
// of channel ChannelOf(i).
struct ChannelLayout {
  bool channels_last = false;
  int64_t n = 0, c = 0;
  int64_t spatial = 1;      // the product of the spatial dims
  int64_t channel_dim = 1;  // x's channel dim: 1, or rank - 1 when channels last

  int64_t ChannelOf(int64_t i) const { return channels_last ? i % c : (i / spatial) % c; }
};

namespace detail {

// x's rank checked (InvalidArgument inputs[0].shape) and its layout read; `format` is
// data_format's value ("NCHW" or "NHWC", else InvalidArgument attrs.data_format), or null
// for channels first (instance_norm has no data_format).
inline ChannelLayout ReadChannelLayout(const Shape& x, const std::string* format) {
  if (x.size() < 2 || x.size() > 5) {
    ThrowInvalid(shape::InputField(0, "shape"), "x must have rank 2 to 5 ([N, C, *spatial]), got " +
                                                    shape::ShapeString(x));
  }
  ChannelLayout l;
  if (format != nullptr) {
    if (*format == "NHWC") {
      l.channels_last = true;
    } else if (*format != "NCHW") {
      ThrowInvalid("attrs.data_format", "expected NCHW or NHWC, got '" + *format + "'");
    }
  }
  const int64_t rank = static_cast<int64_t>(x.size());
  l.channel_dim = l.channels_last ? rank - 1 : 1;
  l.n = x[0];
  l.c = x[static_cast<size_t>(l.channel_dim)];
  for (int64_t d = 1; d < rank; ++d) {
    if (d != l.channel_dim) l.spatial *= x[static_cast<size_t>(d)];
  }
  return l;
}

}  // namespace detail

// group_norm (x, scale, bias; epsilon, groups, data_format) and instance_norm (x, scale,
// bias; epsilon: groups = C, channels first): x [N, C, *spatial] (channels last, data_format
// NHWC: [N, *spatial, C]) of rank 2 to 5, its channels cut into `groups` groups of C / groups
// consecutive channels. Each (n, group) is normalised over its channels and every spatial
// position (group_size elements); scale and bias are [C], or 0-d: absent (1 and 0). The
// statistics are [N, groups] (instance_norm: [N, C]). A spatial dim of size 0 leaves groups
// of no elements (InvalidArgument); N = 0, or C = 0 for instance_norm (a shard of its
// channels may hold none), gives empty outputs. Index plan: x's element at flat index i
// belongs to statistic StatOf(i) and channel ChannelOf(i).
struct GroupNormPlan : ChannelLayout {
  int64_t groups = 1;
  int64_t group_channels = 1;  // C / groups
  int64_t group_size = 1;      // group_channels * spatial: the elements one statistic covers
  bool has_scale = false, has_bias = false;
  Shape stats_shape;  // [N, groups]

  int64_t StatOf(int64_t i) const { return (i / (c * spatial)) * groups + ChannelOf(i) / group_channels; }
};

namespace detail {

inline GroupNormPlan PlanGroups(const Shapes& shapes, const Attrs& attrs, bool instance) {
  CheckNormEpsilon(attrs);
  CheckArity(shapes, 3);
  const Shape& x = shapes[0];
  GroupNormPlan p;
  static_cast<ChannelLayout&>(p) = ReadChannelLayout(x, instance ? nullptr : &attrs.GetString("data_format"));
  p.groups = instance ? p.c : attrs.GetInt("groups");
  if (!instance && (p.groups < 1 || p.groups > p.c || p.c % p.groups != 0)) {
    ThrowInvalid("attrs.groups", "must be in [1, C] and divide C = " + std::to_string(p.c) + ", got " +
                                     std::to_string(p.groups));
  }
  if (p.spatial == 0) {
    ThrowInvalid(shape::InputField(0, "shape"),
                 "normalising over an empty set of elements of " + shape::ShapeString(x));
  }
  // No batch, or (instance_norm, a shard of the channels) no channel: empty outputs.
  p.group_channels = instance ? 1 : p.c / p.groups;
  p.group_size = p.group_channels * p.spatial;
  for (size_t k = 1; k <= 2; ++k) {
    if (shapes[k].empty()) continue;  // 0-d: absent
    if (shapes[k] != Shape{p.c}) {
      ThrowInvalid(shape::InputField(k, "shape"), std::string(k == 1 ? "scale" : "bias") + " must be [" +
                                                      std::to_string(p.c) + "] or 0-d (absent), got " +
                                                      shape::ShapeString(shapes[k]));
    }
  }
  p.has_scale = !shapes[1].empty();
  p.has_bias = !shapes[2].empty();
  p.stats_shape = {p.n, p.groups};
  return p;
}

}  // namespace detail

inline GroupNormPlan PlanGroupNorm(const Shapes& shapes, const Attrs& attrs) {
  return detail::PlanGroups(shapes, attrs, false);
}

inline GroupNormPlan PlanInstanceNorm(const Shapes& shapes, const Attrs& attrs) {
  return detail::PlanGroups(shapes, attrs, true);
}

// batch_norm (x, mean, variance, scale, bias; is_test, momentum, epsilon, data_format,
// use_global_stats, trainable_statistics): x [N, C, *spatial] (data_format NHWC: [N,
// *spatial, C]) of rank 2 to 5, mean and variance [C] (the running statistics), scale and
// bias [C] or 0-d: absent (1 and 0). Global statistics (Paddle's: is_test without
// trainable_statistics, or use_global_stats) normalise with the given mean and variance,
// element by element; otherwise (training) with the batch's, per channel over N and every
// spatial position (`count` = N * spatial elements, at least 1: an empty batch has no
// statistics, InvalidArgument). Outputs: out (x's shape), mean_out, variance_out, saved_mean,
// saved_variance (all [C]). momentum is finite.
struct BatchNormPlan : ChannelLayout {
  bool global_stats = false;
  bool has_scale = false, has_bias = false;
  Shape stats_shape;  // [C]

  int64_t count() const { return n * spatial; }
};

namespace detail {
// batch_norm's checks on its five inputs and attrs, without the training one on the element
// count (a piece of the batch may be empty; PlanBatchNorm and PlanBatchNormPiece add theirs).
inline BatchNormPlan ReadBatchNorm(const Shapes& shapes, const Attrs& attrs) {
  CheckNormEpsilon(attrs);
  const double momentum = attrs.GetFloat("momentum");
  if (!std::isfinite(momentum)) ThrowInvalid("attrs.momentum", "must be finite, got " + std::to_string(momentum));
  const Shape& x = shapes[0];
  BatchNormPlan p;
  static_cast<ChannelLayout&>(p) = detail::ReadChannelLayout(x, &attrs.GetString("data_format"));
  p.global_stats = (attrs.GetBool("is_test") && !attrs.GetBool("trainable_statistics")) ||
                   attrs.GetBool("use_global_stats");
  p.stats_shape = {p.c};
  for (size_t k = 1; k <= 4; ++k) {
    const bool optional = k >= 3;
    if (optional && shapes[k].empty()) continue;  // 0-d: absent
    if (shapes[k] != p.stats_shape) {
      static constexpr const char* kNames[] = {"", "mean", "variance", "scale", "bias"};
      ThrowInvalid(shape::InputField(k, "shape"), std::string(kNames[k]) + " must be [" + std::to_string(p.c) +
                                                      "]" + (optional ? " or 0-d (absent)" : "") + ", got " +
                                                      shape::ShapeString(shapes[k]));
    }
  }
  p.has_scale = !shapes[3].empty();
  p.has_bias = !shapes[4].empty();
  return p;
}
}  // namespace detail

inline BatchNormPlan PlanBatchNorm(const Shapes& shapes, const Attrs& attrs) {
  CheckArity(shapes, 5);
  BatchNormPlan p = detail::ReadBatchNorm(shapes, attrs);
  // Training normalises each channel over N and the spatial positions: none is refused (a
  // shard of unevenly split channels may hold no channel: empty outputs).
  if (!p.global_stats && p.count() == 0) {
    ThrowInvalid(shape::InputField(0, "shape"),
                 "batch statistics over an empty set of elements of " + shape::ShapeString(shapes[0]));
  }
  return p;
}

// batch_norm's exchange phases on a piece of the batch (training only: with global
// statistics nothing is exchanged): the op's checks on its five inputs (the gathered
// statistics follow them in the finish phase, `arity` 6); the piece may hold no element.
inline BatchNormPlan PlanBatchNormPiece(const Shapes& shapes, const Attrs& attrs, size_t arity) {
  CheckArity(shapes, arity);
  BatchNormPlan p = detail::ReadBatchNorm(Shapes(shapes.begin(), shapes.begin() + 5), attrs);
  if (p.global_stats) {
    ThrowInvalid("attrs.use_global_stats", "batch_norm's exchange phases run with batch statistics only");
  }
  return p;
}

}  // namespace spmd::plan
