// The normalisations: layer_norm, rms_norm, group_norm, instance_norm, batch_norm and the
// backward ops layer_norm_grad and rms_norm_grad (docs/OPS.md "Normalisation"; the grads
// under "Backward ops").
#include <algorithm>
#include <cmath>
#include <vector>

#include "reference/reference.h"
#include "reference/util.h"
#include "rules/ops/norm_pieces.h"
#include "rules/ops/norm_plan.h"

namespace spmd::reference::ops {
namespace {

using plan::NormSplit;

// The backward of layer_norm (mean and inv per row) or rms_norm (mean 0, inv = invvar;
// `centered` false) through out, row by row: xhat = (x - mean) inv, dxhat = out_grad scale;
// x_grad = inv (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), without the mean(dxhat) term
// when not `centered`; scale_grad and bias_grad sum out_grad xhat and out_grad over the rows.
// An absent scale is 1 (dxhat = out_grad); an absent parameter's gradient is a 0-d zero.
Tensors NormGrad(const Tensors& inputs, const NormSplit& split, const std::vector<double>& inv,
                 const std::vector<double>& mean, bool centered) {
  const Tensor& x = inputs[0];
  const Tensor& scale = inputs[1];
  const Tensor& out_grad = inputs.back();
  const int64_t n = split.n;
  Tensor x_grad = internal::Zeros(x.shape);
  Tensor scale_grad = internal::Zeros({n});
  Tensor bias_grad = internal::Zeros({n});
  std::vector<double> xhat(static_cast<size_t>(n)), dxhat(static_cast<size_t>(n));
  for (int64_t o = 0; o < split.outer; ++o) {
    double mean_dxhat = 0.0, mean_dxhat_xhat = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      const double g = out_grad.data[o * n + j];
      xhat[j] = (x.data[o * n + j] - mean[o]) * inv[o];
      dxhat[j] = split.has_scale ? g * scale.data[j] : g;
      mean_dxhat += dxhat[j];
      mean_dxhat_xhat += dxhat[j] * xhat[j];
      scale_grad.data[j] += g * xhat[j];
      bias_grad.data[j] += g;
    }
    mean_dxhat = centered ? mean_dxhat / static_cast<double>(n) : 0.0;
    mean_dxhat_xhat /= static_cast<double>(n);
    for (int64_t j = 0; j < n; ++j) {
      x_grad.data[o * n + j] = (dxhat[j] - mean_dxhat - xhat[j] * mean_dxhat_xhat) * inv[o];
    }
  }
  if (!split.has_scale) scale_grad = internal::Zeros(split.ParamGradShape(false));
  if (!split.has_bias) bias_grad = internal::Zeros(split.ParamGradShape(false));
  return {x_grad, scale_grad, bias_grad};
}

// The mean and population variance of each statistic s over the `count` elements i of x
// with stat_of(i) == s, into zeroed `mean` and `variance`: every element added to its
// statistic's sum, the means, then the squared deviations from them.
template <typename StatOf>
void TwoPassStatistics(const std::vector<double>& x, StatOf stat_of, double count, std::vector<double>& mean,
                       std::vector<double>& variance) {
  const auto n = static_cast<int64_t>(x.size());
  for (int64_t i = 0; i < n; ++i) mean[static_cast<size_t>(stat_of(i))] += x[static_cast<size_t>(i)];
  for (double& m : mean) m /= count;
  for (int64_t i = 0; i < n; ++i) {
    const double d = x[static_cast<size_t>(i)] - mean[static_cast<size_t>(stat_of(i))];
    variance[static_cast<size_t>(stat_of(i))] += d * d;
  }
  for (double& v : variance) v /= count;
}

// group_norm / instance_norm: each element of x added to its statistic's sum, the means, then
// the squared deviations, then y = (x - mean) / sqrt(variance + epsilon) * scale[c] + bias[c]
// (an absent scale or bias: 1, 0).
Tensors GroupNorm(const Tensors& inputs, const plan::GroupNormPlan& p, double epsilon) {
  const Tensor& x = inputs[0];
  const Tensor& scale = inputs[1];
  const Tensor& bias = inputs[2];
  Tensor y = internal::Zeros(x.shape);
  Tensor mean = internal::Zeros(p.stats_shape);
  Tensor variance = internal::Zeros(p.stats_shape);
  const auto n = static_cast<int64_t>(x.data.size());
  TwoPassStatistics(x.data, [&p](int64_t i) { return p.StatOf(i); }, static_cast<double>(p.group_size), mean.data,
                    variance.data);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t s = p.StatOf(i), c = p.ChannelOf(i);
    const double normalised = (x.data[i] - mean.data[s]) / std::sqrt(variance.data[s] + epsilon);
    y.data[i] = normalised * (p.has_scale ? scale.data[c] : 1.0) + (p.has_bias ? bias.data[c] : 0.0);
  }
  return {y, mean, variance};
}

}  // namespace

// An absent (0-d) scale is 1, an absent bias 0.
Tensors layer_norm(const Tensors& inputs, const Attrs& attrs) {
  const NormSplit split = plan::PlanLayerNorm(plan::ShapesOf(inputs), attrs);
  const double epsilon = attrs.GetFloat("epsilon");
  const Tensor& x = inputs[0];
  const Tensor& scale = inputs[1];
  const Tensor& bias = inputs[2];
  Tensor out = internal::Zeros(x.shape);
  Tensor mean = internal::Zeros(split.stats_shape);  // x.shape[:begin]
  Tensor variance = internal::Zeros(split.stats_shape);
  for (int64_t o = 0; o < split.outer; ++o) {
    const double* row = x.data.data() + o * split.n;
    double mu = 0.0;
    for (int64_t j = 0; j < split.n; ++j) mu += row[j];
    mu /= static_cast<double>(split.n);
    double var = 0.0;
    for (int64_t j = 0; j < split.n; ++j) var += (row[j] - mu) * (row[j] - mu);
    var /= static_cast<double>(split.n);
    double inv = 1.0 / std::sqrt(var + epsilon);
    for (int64_t j = 0; j < split.n; ++j) {
      out.data[o * split.n + j] = (row[j] - mu) * inv * (split.has_scale ? scale.data[j] : 1.0) +
                                  (split.has_bias ? bias.data[j] : 0.0);
    }
    mean.data[o] = mu;
    variance.data[o] = var;
  }
  return {out, mean, variance};
}

Tensors rms_norm(const Tensors& inputs, const Attrs& attrs) {
  const NormSplit split = plan::PlanRmsNorm(plan::ShapesOf(inputs), attrs);
  const double epsilon = attrs.GetFloat("epsilon");
  const Tensor& x = inputs[0];
  const Tensor& scale = inputs[1];
  Tensor out = internal::Zeros(x.shape);
  Tensor invvar = internal::Zeros(split.stats_shape);  // x.shape[:begin]
  for (int64_t o = 0; o < split.outer; ++o) {
    const double* row = x.data.data() + o * split.n;
    double sq = 0.0;
    for (int64_t j = 0; j < split.n; ++j) sq += row[j] * row[j];
    double inv = 1.0 / std::sqrt(sq / static_cast<double>(split.n) + epsilon);
    for (int64_t j = 0; j < split.n; ++j) out.data[o * split.n + j] = row[j] * inv * scale.data[j];
    invvar.data[o] = inv;
  }
  return {out, invvar};
}

Tensors group_norm(const Tensors& inputs, const Attrs& attrs) {
  return GroupNorm(inputs, plan::PlanGroupNorm(plan::ShapesOf(inputs), attrs), attrs.GetFloat("epsilon"));
}

Tensors instance_norm(const Tensors& inputs, const Attrs& attrs) {
  return GroupNorm(inputs, plan::PlanInstanceNorm(plan::ShapesOf(inputs), attrs), attrs.GetFloat("epsilon"));
}

// Training: each element of x added to its channel's sum, the means, then the squared
// deviations (the population variance), the running statistics blended with momentum.
// Global statistics: the given mean and variance, passed through. Then out = (x - mean) inv
// scale[c] + bias[c] with inv = 1/sqrt(variance + epsilon) (an absent scale or bias: 1, 0);
// saved_mean and saved_variance are the mean and inv used.
namespace {

// batch_norm's outputs from each channel's mean and variance: the batch's in training (then
// mean_out and variance_out blend them into the running ones), the running ones with global
// statistics.
Tensors BatchNormOutputs(const Tensors& inputs, const plan::BatchNormPlan& p, const Attrs& attrs, Tensor mean,
                         Tensor variance) {
  const double epsilon = attrs.GetFloat("epsilon");
  const double momentum = attrs.GetFloat("momentum");
  const Tensor& x = inputs[0];
  const Tensor& running_mean = inputs[1];
  const Tensor& running_variance = inputs[2];
  const Tensor& scale = inputs[3];
  const Tensor& bias = inputs[4];
  const auto n = static_cast<int64_t>(x.data.size());
  Tensor mean_out = running_mean, variance_out = running_variance;
  mean_out.dtype = variance_out.dtype = DType::kFloat64;
  if (!p.global_stats) {
    for (int64_t c = 0; c < p.c; ++c) {
      mean_out.data[c] = momentum * running_mean.data[c] + (1 - momentum) * mean.data[c];
      variance_out.data[c] = momentum * running_variance.data[c] + (1 - momentum) * variance.data[c];
    }
  }
  Tensor inv = internal::Zeros(p.stats_shape);
  for (int64_t c = 0; c < p.c; ++c) inv.data[c] = 1.0 / std::sqrt(variance.data[c] + epsilon);
  Tensor out = internal::Zeros(x.shape);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = p.ChannelOf(i);
    out.data[i] = (x.data[i] - mean.data[c]) * inv.data[c] * (p.has_scale ? scale.data[c] : 1.0) +
                  (p.has_bias ? bias.data[c] : 0.0);
  }
  return {out, mean_out, variance_out, mean, inv};
}

}  // namespace

Tensors batch_norm(const Tensors& inputs, const Attrs& attrs) {
  const plan::BatchNormPlan p = plan::PlanBatchNorm(plan::ShapesOf(inputs), attrs);
  Tensor mean = internal::Zeros(p.stats_shape), variance = internal::Zeros(p.stats_shape);
  if (p.global_stats) {
    mean.data = inputs[1].data;
    variance.data = inputs[2].data;
  } else {
    TwoPassStatistics(inputs[0].data, [&p](int64_t i) { return p.ChannelOf(i); }, static_cast<double>(p.count()),
                      mean.data, variance.data);
  }
  return BatchNormOutputs(inputs, p, attrs, std::move(mean), std::move(variance));
}

// Phase::kStats (training, a piece of the batch): every channel's {count, mean, M2} over the
// piece, [C, 3] (norm_pieces::ChannelMomentStats).
Tensors batch_norm_stats(const Tensors& inputs, const Attrs& attrs) {
  const plan::BatchNormPlan p = plan::PlanBatchNormPiece(plan::ShapesOf(inputs), attrs, 5);
  Tensor stats = internal::Zeros({p.c, norm_pieces::kMomentStats});
  norm_pieces::ChannelMomentStats(inputs[0].data.data(), static_cast<int64_t>(inputs[0].data.size()), p,
                                  stats.data.data());
  return {stats};
}

// Phase::kFinish: the batch's mean and population variance per channel from the gathered
// [pieces, C, 3] (merged as layer_norm's, norm_pieces::CombineMoments), then the op's outputs.
Tensors batch_norm_finish(const Tensors& inputs, const Attrs& attrs) {
  const plan::BatchNormPlan p = plan::PlanBatchNormPiece(plan::ShapesOf(inputs), attrs, 6);
  const Tensor& gathered = inputs[5];
  const int64_t k = norm_pieces::kMomentStats;
  const int64_t pieces = norm_pieces::GatheredPieces(gathered.shape, static_cast<int64_t>(gathered.data.size()), 5,
                                                     p.c, k);
  Tensor mean = internal::Zeros(p.stats_shape), variance = internal::Zeros(p.stats_shape);
  for (int64_t c = 0; c < p.c; ++c) {
    const norm_pieces::Moments m = norm_pieces::CombineMoments(gathered.data.data() + c * k, pieces, p.c * k);
    if (m.count <= 0) {
      ThrowInvalid(internal::InputField(0, "shape"), "batch statistics over an empty set of elements (every piece empty)");
    }
    mean.data[c] = m.mean;
    variance.data[c] = m.m2 / m.count;
  }
  return BatchNormOutputs(inputs, p, attrs, std::move(mean), std::move(variance));
}

// x, scale, bias (not read), mean, variance, out_grad -> x_grad, scale_grad, bias_grad:
// inv = 1/sqrt(variance + epsilon) per row; a 0-d (absent) scale or bias gets a 0-d zero.
Tensors layer_norm_grad(const Tensors& inputs, const Attrs& attrs) {
  const NormSplit split = plan::PlanLayerNormGrad(plan::ShapesOf(inputs), attrs);
  const double epsilon = attrs.GetFloat("epsilon");
  std::vector<double> inv;
  for (double variance : inputs[4].data) inv.push_back(1.0 / std::sqrt(variance + epsilon));
  return NormGrad(inputs, split, inv, inputs[3].data, true);
}

// x, scale, invvar, out_grad -> x_grad, scale_grad: xhat = x invvar, no mean(dxhat) term.
Tensors rms_norm_grad(const Tensors& inputs, const Attrs& attrs) {
  const NormSplit split = plan::PlanRmsNormGrad(plan::ShapesOf(inputs), attrs);
  Tensors grads = NormGrad(inputs, split, inputs[2].data,
                           std::vector<double>(inputs[2].data.size(), 0.0), false);
  grads.pop_back();  // no bias
  return grads;
}

}  // namespace spmd::reference::ops
