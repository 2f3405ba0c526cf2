// The normalisations: layer_norm, rms_norm, group_norm, instance_norm, batch_norm and the
// backward ops layer_norm_grad and rms_norm_grad (docs/OPS.md "Normalisation"; the grads
// under "Backward ops"). They work per row of the flattened [outer, n] (group_norm: per (n,
// group), batch_norm: per channel), two passes: mean, then the sum of squared deviations;
// no E[x^2] - E[x]^2 cancellation.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/internal.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/vector_math.h"
#include "rules/ops/norm_pieces.h"
#include "rules/ops/norm_plan.h"

namespace spmd::kernels::cpu {
namespace {

using internal::AxisView;
using internal::CheckArity;
using internal::ComputeDType;
using internal::DispatchFloat;
using internal::InputField;
using internal::NewOutput;
using internal::ValuesAs;

// The compute dtype of layer_norm's (or its grad's) value inputs `read` and its given
// parameters, in input order (an absent parameter's dtype is not read).
DType LayerNormDType(const TensorArgs& inputs, const plan::NormSplit& split, std::vector<size_t> read) {
  if (split.has_scale) read.push_back(1);
  if (split.has_bias) read.push_back(2);
  std::sort(read.begin(), read.end());
  return internal::ComputeDTypeOver(inputs, read);
}

// layer_norm's parameter p (1 scale, 2 bias) as n values of T: its own, or, absent, n ones
// (scale) or zeros (bias) held in `fill`, so that the row loops read [n] either way.
template <typename T>
const T* ParamOrFill(const ValuesAs<T>& given, bool present, T value, int64_t n, std::vector<T>& fill) {
  if (present) return given.data();
  fill.assign(static_cast<size_t>(n), value);
  return fill.data();
}

}  // namespace

// An absent (0-d) scale is 1, an absent bias 0.
Tensors layer_norm(const TensorArgs& inputs, const Attrs& attrs) {
  const plan::NormSplit split = plan::PlanLayerNorm(plan::ShapesOf(inputs), attrs);
  const double epsilon = attrs.GetFloat("epsilon");
  return DispatchFloat(LayerNormDType(inputs, split, {0}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> xv(inputs[0]);
    ValuesAs<T> sv(inputs[1]);
    ValuesAs<T> bv(inputs[2]);
    Tensor out = NewOutput(inputs[0].shape(), DTypeOf<T>::value);
    Tensor mean = NewOutput(split.stats_shape, DTypeOf<T>::value);
    Tensor variance = NewOutput(split.stats_shape, DTypeOf<T>::value);
    std::vector<T> ones, zeros;
    const T* scale = ParamOrFill<T>(sv, split.has_scale, T(1), split.n, ones);
    const T* bias = ParamOrFill<T>(bv, split.has_bias, T(0), split.n, zeros);
    T* o = out.data<T>();
    T* mo = mean.data<T>();
    T* vo = variance.data<T>();
    const int64_t n = split.n;
    const T tn = static_cast<T>(static_cast<double>(n));
    const T eps = static_cast<T>(epsilon);
    if constexpr (std::is_same_v<T, float>) {
      simd::LayerNormRows(xv.data(), scale, bias, eps, split.outer, n, o, mo, vo);
      return TensorList(std::move(out), std::move(mean), std::move(variance));
    }
    for (int64_t r = 0; r < split.outer; ++r) {
      const T* row = xv.data() + r * n;
      T mu = T(0);
      for (int64_t j = 0; j < n; ++j) mu += row[j];
      mu /= tn;
      T var = T(0);
      for (int64_t j = 0; j < n; ++j) var += (row[j] - mu) * (row[j] - mu);
      var /= tn;
      const T inv = T(1) / std::sqrt(var + eps);
      T* dst = o + r * n;
      for (int64_t j = 0; j < n; ++j) dst[j] = (row[j] - mu) * inv * scale[j] + bias[j];
      mo[r] = mu;
      vo[r] = var;
    }
    return TensorList(std::move(out), std::move(mean), std::move(variance));
  });
}

Tensors rms_norm(const TensorArgs& inputs, const Attrs& attrs) {
  const plan::NormSplit split = plan::PlanRmsNorm(plan::ShapesOf(inputs), attrs);
  const double epsilon = attrs.GetFloat("epsilon");
  return DispatchFloat(ComputeDType(inputs, {0, 1}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> xv(inputs[0]);
    ValuesAs<T> sv(inputs[1]);
    Tensor out = NewOutput(inputs[0].shape(), DTypeOf<T>::value);
    Tensor invvar = NewOutput(split.stats_shape, DTypeOf<T>::value);
    const T* scale = sv.data();
    T* o = out.data<T>();
    T* io = invvar.data<T>();
    const int64_t n = split.n;
    const T tn = static_cast<T>(static_cast<double>(n));
    const T eps = static_cast<T>(epsilon);
    for (int64_t r = 0; r < split.outer; ++r) {
      const T* row = xv.data() + r * n;
      T sq = T(0);
      for (int64_t j = 0; j < n; ++j) sq += row[j] * row[j];
      const T inv = T(1) / std::sqrt(sq / tn + eps);
      T* dst = o + r * n;
      for (int64_t j = 0; j < n; ++j) dst[j] = row[j] * inv * scale[j];
      io[r] = inv;
    }
    return TensorList(std::move(out), std::move(invvar));
  });
}

namespace {

// group_norm / instance_norm, sample by sample. Channels first, a group is one contiguous
// block of group_size elements; channels last, a sample is [spatial, C] and every group's
// sums run in one sweep of it. Then y = (x - mean) inv scale[c] + bias[c].
template <typename T>
void GroupNormSamples(const T* x, const T* scale, const T* bias, const plan::GroupNormPlan& p, T eps, T* y,
                      T* mean, T* variance) {
  const int64_t per_sample = p.c * p.spatial;
  const T count = static_cast<T>(static_cast<double>(p.group_size));
  std::vector<T> inv(static_cast<size_t>(p.groups));
  for (int64_t n = 0; n < p.n; ++n) {
    const T* xs = x + n * per_sample;
    T* ys = y + n * per_sample;
    T* mu = mean + n * p.groups;
    T* var = variance + n * p.groups;
    if (!p.channels_last) {
      for (int64_t g = 0; g < p.groups; ++g) {
        const T* block = xs + g * p.group_size;
        T sum = T(0);
        for (int64_t j = 0; j < p.group_size; ++j) sum += block[j];
        mu[g] = sum / count;
        T sq = T(0);
        for (int64_t j = 0; j < p.group_size; ++j) sq += (block[j] - mu[g]) * (block[j] - mu[g]);
        var[g] = sq / count;
        inv[static_cast<size_t>(g)] = T(1) / std::sqrt(var[g] + eps);
        for (int64_t k = 0; k < p.group_channels; ++k) {
          const int64_t c = g * p.group_channels + k;
          const T s = scale != nullptr ? scale[c] : T(1);
          const T b = bias != nullptr ? bias[c] : T(0);
          const T* src = block + k * p.spatial;
          T* dst = ys + c * p.spatial;
          for (int64_t j = 0; j < p.spatial; ++j) dst[j] = (src[j] - mu[g]) * inv[static_cast<size_t>(g)] * s + b;
        }
      }
      continue;
    }
    std::fill(mu, mu + p.groups, T(0));
    std::fill(var, var + p.groups, T(0));
    for (int64_t j = 0; j < p.spatial; ++j) {
      for (int64_t c = 0; c < p.c; ++c) mu[c / p.group_channels] += xs[j * p.c + c];
    }
    for (int64_t g = 0; g < p.groups; ++g) mu[g] /= count;
    for (int64_t j = 0; j < p.spatial; ++j) {
      for (int64_t c = 0; c < p.c; ++c) {
        const T d = xs[j * p.c + c] - mu[c / p.group_channels];
        var[c / p.group_channels] += d * d;
      }
    }
    for (int64_t g = 0; g < p.groups; ++g) {
      var[g] /= count;
      inv[static_cast<size_t>(g)] = T(1) / std::sqrt(var[g] + eps);
    }
    for (int64_t j = 0; j < p.spatial; ++j) {
      for (int64_t c = 0; c < p.c; ++c) {
        const int64_t g = c / p.group_channels;
        const T s = scale != nullptr ? scale[c] : T(1);
        const T b = bias != nullptr ? bias[c] : T(0);
        ys[j * p.c + c] = (xs[j * p.c + c] - mu[g]) * inv[static_cast<size_t>(g)] * s + b;
      }
    }
  }
}

// The compute dtype of x and the present parameters (an absent one's dtype is not read).
Tensors GroupNorm(const TensorArgs& inputs, const plan::GroupNormPlan& p, double epsilon) {
  std::vector<size_t> read{0};
  if (p.has_scale) read.push_back(1);
  if (p.has_bias) read.push_back(2);
  return DispatchFloat(internal::ComputeDTypeOver(inputs, read), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> xv(inputs[0]);
    ValuesAs<T> sv(inputs[1]);
    ValuesAs<T> bv(inputs[2]);
    Tensor y = NewOutput(inputs[0].shape(), DTypeOf<T>::value);
    Tensor mean = NewOutput(p.stats_shape, DTypeOf<T>::value);
    Tensor variance = NewOutput(p.stats_shape, DTypeOf<T>::value);
    GroupNormSamples<T>(xv.data(), p.has_scale ? sv.data() : nullptr, p.has_bias ? bv.data() : nullptr, p,
                        static_cast<T>(epsilon), y.data<T>(), mean.data<T>(), variance.data<T>());
    return TensorList(std::move(y), std::move(mean), std::move(variance));
  });
}

}  // namespace

Tensors group_norm(const TensorArgs& inputs, const Attrs& attrs) {
  return GroupNorm(inputs, plan::PlanGroupNorm(plan::ShapesOf(inputs), attrs), attrs.GetFloat("epsilon"));
}

Tensors instance_norm(const TensorArgs& inputs, const Attrs& attrs) {
  return GroupNorm(inputs, plan::PlanInstanceNorm(plan::ShapesOf(inputs), attrs), attrs.GetFloat("epsilon"));
}

namespace {

// batch_norm in T. Training: the channels' sums in one sweep of x (channels first: a block
// of `spatial` per (n, c); channels last: rows of C), then the squared deviations, the
// running statistics blended with momentum; or, in the exchange's finish phase, the batch's
// moments merged from the gathered pieces (`batch`: [C, 3] merged moments, null otherwise).
// Global statistics: the given mean and variance. Then out = (x - mean) inv scale[c] +
// bias[c], inv = 1/sqrt(variance + eps).
template <typename T>
void BatchNormChannels(const T* x, const T* running_mean, const T* running_variance, const T* scale,
                       const T* bias, const plan::BatchNormPlan& p, T eps, T momentum, T* out, T* mean_out,
                       T* variance_out, T* mean, T* inv, const norm_pieces::Moments* batch = nullptr) {
  const auto c_count = static_cast<size_t>(p.c);
  // Visits every element of x with its channel: f(flat index, channel).
  auto each = [&](auto&& f) {
    if (p.channels_last) {
      for (int64_t r = 0; r < p.count(); ++r) {
        for (int64_t c = 0; c < p.c; ++c) f(r * p.c + c, c);
      }
      return;
    }
    for (int64_t b = 0; b < p.n; ++b) {
      for (int64_t c = 0; c < p.c; ++c) {
        const int64_t base = (b * p.c + c) * p.spatial;
        for (int64_t j = 0; j < p.spatial; ++j) f(base + j, c);
      }
    }
  };
  std::vector<T> variance(c_count);
  if (p.global_stats) {
    std::copy(running_mean, running_mean + p.c, mean);
    std::copy(running_variance, running_variance + p.c, variance.begin());
    std::copy(running_mean, running_mean + p.c, mean_out);
    std::copy(running_variance, running_variance + p.c, variance_out);
  } else {
    if (batch != nullptr) {
      for (int64_t c = 0; c < p.c; ++c) {
        mean[c] = static_cast<T>(batch[c].mean);
        variance[static_cast<size_t>(c)] = static_cast<T>(batch[c].m2 / batch[c].count);
      }
    } else {
      const T count = static_cast<T>(static_cast<double>(p.count()));
      std::fill(mean, mean + p.c, T(0));
      each([&](int64_t i, int64_t c) { mean[c] += x[i]; });
      for (int64_t c = 0; c < p.c; ++c) mean[c] /= count;
      each([&](int64_t i, int64_t c) {
        const T d = x[i] - mean[c];
        variance[static_cast<size_t>(c)] += d * d;
      });
      for (int64_t c = 0; c < p.c; ++c) variance[static_cast<size_t>(c)] /= count;
    }
    for (int64_t c = 0; c < p.c; ++c) {
      const T v = variance[static_cast<size_t>(c)];
      mean_out[c] = momentum * running_mean[c] + (T(1) - momentum) * mean[c];
      variance_out[c] = momentum * running_variance[c] + (T(1) - momentum) * v;
    }
  }
  for (int64_t c = 0; c < p.c; ++c) inv[c] = T(1) / std::sqrt(variance[static_cast<size_t>(c)] + eps);
  each([&](int64_t i, int64_t c) {
    const T s = scale != nullptr ? scale[c] : T(1);
    const T b = bias != nullptr ? bias[c] : T(0);
    out[i] = (x[i] - mean[c]) * inv[c] * s + b;
  });
}

}  // namespace

// The compute dtype of x, mean, variance and the present parameters (an absent one's dtype
// is not read).
namespace {

// batch_norm on one device (batch null) or as its exchange's finish phase (batch: the merged
// moments of every channel).
Tensors BatchNorm(const TensorArgs& inputs, const Attrs& attrs, const plan::BatchNormPlan& p,
                  const norm_pieces::Moments* batch) {
  std::vector<size_t> read{0, 1, 2};
  if (p.has_scale) read.push_back(3);
  if (p.has_bias) read.push_back(4);
  return DispatchFloat(internal::ComputeDTypeOver(inputs, read), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> xv(inputs[0]);
    ValuesAs<T> mv(inputs[1]);
    ValuesAs<T> vv(inputs[2]);
    ValuesAs<T> sv(inputs[3]);
    ValuesAs<T> bv(inputs[4]);
    const DType dtype = DTypeOf<T>::value;
    Tensor out = NewOutput(inputs[0].shape(), dtype);
    Tensor mean_out = NewOutput(p.stats_shape, dtype);
    Tensor variance_out = NewOutput(p.stats_shape, dtype);
    Tensor saved_mean = NewOutput(p.stats_shape, dtype);
    Tensor saved_variance = NewOutput(p.stats_shape, dtype);
    BatchNormChannels<T>(xv.data(), mv.data(), vv.data(), p.has_scale ? sv.data() : nullptr,
                         p.has_bias ? bv.data() : nullptr, p, static_cast<T>(attrs.GetFloat("epsilon")),
                         static_cast<T>(attrs.GetFloat("momentum")), out.data<T>(), mean_out.data<T>(),
                         variance_out.data<T>(), saved_mean.data<T>(), saved_variance.data<T>(), batch);
    return TensorList(std::move(out), std::move(mean_out), std::move(variance_out), std::move(saved_mean),
                      std::move(saved_variance));
  });
}

}  // namespace

Tensors batch_norm(const TensorArgs& inputs, const Attrs& attrs) {
  return BatchNorm(inputs, attrs, plan::PlanBatchNorm(plan::ShapesOf(inputs), attrs), nullptr);
}

// Phase::kStats (training, a piece of the batch): every channel's {count, mean, M2} over the
// piece in x's compute dtype, kept in float64, [C, 3].
Tensors batch_norm_stats(const TensorArgs& inputs, const Attrs& attrs) {
  const plan::BatchNormPlan p = plan::PlanBatchNormPiece(plan::ShapesOf(inputs), attrs, 5);
  return DispatchFloat(internal::ComputeDType(inputs, {0}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> xv(inputs[0]);
    Tensor stats = NewOutput({p.c, norm_pieces::kMomentStats}, DType::kFloat64);
    norm_pieces::ChannelMomentStats(xv.data(), inputs[0].numel(), p, stats.data<double>());
    return TensorList(std::move(stats));
  });
}

// Phase::kFinish: the op's outputs from the gathered float64 [pieces, C, 3], merged per channel.
Tensors batch_norm_finish(const TensorArgs& inputs, const Attrs& attrs) {
  const plan::BatchNormPlan p = plan::PlanBatchNormPiece(plan::ShapesOf(inputs), attrs, 6);
  const Tensor& gathered = inputs[5];
  if (gathered.dtype() != DType::kFloat64) {
    ThrowInvalid(internal::InputField(5, "dtype"), "the gathered statistics must be float64, got " +
                                                       std::string(ToString(gathered.dtype())));
  }
  const int64_t k = norm_pieces::kMomentStats;
  const int64_t pieces = norm_pieces::GatheredPieces(gathered.shape(), gathered.numel(), 5, p.c, k);
  std::vector<norm_pieces::Moments> batch(static_cast<size_t>(p.c));
  for (int64_t c = 0; c < p.c; ++c) {
    batch[static_cast<size_t>(c)] = norm_pieces::CombineMoments(gathered.data<double>() + c * k, pieces, p.c * k);
    if (batch[static_cast<size_t>(c)].count <= 0) {
      ThrowInvalid(internal::InputField(0, "shape"), "batch statistics over an empty set of elements (every piece empty)");
    }
  }
  return BatchNorm(inputs, attrs, p, batch.data());
}

namespace {

// The backward of layer_norm (kLayerNorm: stats = mean, variance) or rms_norm (stats =
// invvar, variance unused) through out, row by row: xhat = (x - mean) inv, dxhat = g scale,
// x_grad = inv (dxhat - mean(dxhat) - xhat mean(dxhat xhat)) (rms_norm: no mean(dxhat)
// term); scale_grad (and bias_grad, when given) add g xhat (g) row after row.
template <typename T, bool kLayerNorm>
void NormGradRows(const T* x, const T* scale, const T* stats, const T* variance, const T* g,
                  const plan::NormSplit& shape, T eps, T* x_grad, T* scale_grad,
                  T* bias_grad) {
  const int64_t n = shape.n;
  const T tn = static_cast<T>(static_cast<double>(n));
  std::vector<T> xhat(static_cast<size_t>(n)), dxhat(static_cast<size_t>(n));
  for (int64_t r = 0; r < shape.outer; ++r) {
    const T* xr = x + r * n;
    const T* gr = g + r * n;
    const T inv = kLayerNorm ? T(1) / std::sqrt(variance[r] + eps) : stats[r];
    const T mu = kLayerNorm ? stats[r] : T(0);
    T sum_dxhat = T(0), sum_dxhat_xhat = T(0);
    for (int64_t j = 0; j < n; ++j) {
      xhat[j] = (xr[j] - mu) * inv;
      dxhat[j] = gr[j] * scale[j];
      sum_dxhat += dxhat[j];
      sum_dxhat_xhat += dxhat[j] * xhat[j];
      scale_grad[j] += gr[j] * xhat[j];
      if constexpr (kLayerNorm) bias_grad[j] += gr[j];
    }
    const T mean_dxhat = kLayerNorm ? sum_dxhat / tn : T(0);
    const T mean_dxhat_xhat = sum_dxhat_xhat / tn;
    T* dst = x_grad + r * n;
    for (int64_t j = 0; j < n; ++j) dst[j] = (dxhat[j] - mean_dxhat - xhat[j] * mean_dxhat_xhat) * inv;
  }
}

// layer_norm_grad (kLayerNorm: x, scale, bias (not read), mean, variance, out_grad ->
// x_grad, scale_grad, bias_grad) and rms_norm_grad (x, scale, invvar, out_grad -> x_grad,
// scale_grad). layer_norm_grad's absent (0-d) scale is read as ones; an absent parameter's
// gradient is summed into scratch and given as a 0-d zero.
template <bool kLayerNorm>
Tensors NormGrad(const TensorArgs& inputs, const Attrs& attrs) {
  constexpr size_t kParams = kLayerNorm ? 2 : 1;
  const plan::NormSplit shape = kLayerNorm ? plan::PlanLayerNormGrad(plan::ShapesOf(inputs), attrs)
                                           : plan::PlanRmsNormGrad(plan::ShapesOf(inputs), attrs);
  const double epsilon = attrs.GetFloat("epsilon");
  constexpr size_t kStats = 1 + kParams;                   // mean or invvar
  constexpr size_t kVariance = kLayerNorm ? 4 : kStats;  // rms_norm_grad: not read
  const DType dtype = kLayerNorm ? LayerNormDType(inputs, shape, {0, 3, 4, 5}) : internal::ComputeDTypeAll(inputs);
  return DispatchFloat(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> x(inputs[0]);
    ValuesAs<T> scale_values(inputs[1]);
    ValuesAs<T> stats(inputs[kStats]);
    ValuesAs<T> variance(inputs[kVariance]);
    ValuesAs<T> g(inputs[inputs.size() - 1]);
    std::vector<T> ones;
    const T* scale = ParamOrFill<T>(scale_values, shape.has_scale, T(1), shape.n, ones);
    Tensor x_grad = NewOutput(inputs[0].shape(), DTypeOf<T>::value);
    Tensor scale_grad = NewOutput({shape.n}, DTypeOf<T>::value, /*zero=*/true);
    Tensor bias_grad = kLayerNorm ? NewOutput({shape.n}, DTypeOf<T>::value, /*zero=*/true) : Tensor();
    if constexpr (kLayerNorm && std::is_same_v<T, float>) {
      simd::LayerNormGradRows(x.data(), scale, stats.data(), variance.data(), g.data(),
                              static_cast<float>(epsilon), shape.outer, shape.n, x_grad.data<T>(),
                              scale_grad.data<T>(), bias_grad.data<T>());
    } else {
      NormGradRows<T, kLayerNorm>(x.data(), scale, stats.data(), variance.data(), g.data(),
                                  shape, static_cast<T>(epsilon), x_grad.data<T>(),
                                  scale_grad.data<T>(), kLayerNorm ? bias_grad.data<T>() : nullptr);
    }
    if constexpr (kLayerNorm) {
      if (!shape.has_scale) scale_grad = NewOutput(shape.ParamGradShape(false), DTypeOf<T>::value, /*zero=*/true);
      if (!shape.has_bias) bias_grad = NewOutput(shape.ParamGradShape(false), DTypeOf<T>::value, /*zero=*/true);
      return TensorList(std::move(x_grad), std::move(scale_grad), std::move(bias_grad));
    } else {
      return TensorList(std::move(x_grad), std::move(scale_grad));
    }
  });
}

}  // namespace

Tensors layer_norm_grad(const TensorArgs& inputs, const Attrs& attrs) {
  return NormGrad<true>(inputs, attrs);
}

Tensors rms_norm_grad(const TensorArgs& inputs, const Attrs& attrs) {
  return NormGrad<false>(inputs, attrs);
}

}  // namespace spmd::kernels::cpu
