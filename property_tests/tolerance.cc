#include "property_tests/tolerance.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <utility>
#include <variant>

#include "rules/ops/attention_shape.h"
#include "rules/ops/block_attention_shape.h"
#include "rules/ops/norm_plan.h"

namespace spmd::prop {
namespace {

namespace ref = reference;
using Shape = reference::Shape;

// The length of x's dim named by an int attr "axis" (softmax-like ops and cumsum reduce
// or normalise along it), or 1 when the op has no such attr or x is 0-d.
int64_t IntAxisLength(const Shape& x, const Attrs& attrs) {
  const auto it = attrs.values().find("axis");
  if (x.empty() || it == attrs.values().end()) return 1;
  const int64_t* axis = std::get_if<int64_t>(&it->second);
  if (axis == nullptr) return 1;
  const int64_t a = *axis < 0 ? *axis + static_cast<int64_t>(x.size()) : *axis;
  if (a < 0 || a >= static_cast<int64_t>(x.size())) return 1;
  return x[static_cast<size_t>(a)];
}

int64_t Ratio(const Shape& x, const Shape& out) {
  return std::max<int64_t>(1, Numel(x) / std::max<int64_t>(1, Numel(out)));
}

// A narrow float format: significand bits (the implicit one included), the smallest
// normal exponent and the largest finite value.
struct Format {
  std::string_view name;
  int bits;
  int min_exponent;  // the smallest normal value is 2^min_exponent
  double max;
};
constexpr Format kFormats[] = {
    {"float16", 11, -14, 65504.0},
    {"bfloat16", 8, -126, 0x1.fep127},
};

// layer_norm_grad (x, scale, bias, mean, variance, out_grad) and rms_norm_grad (x, scale,
// invvar, out_grad), row by row of n elements: inv (1/sqrt(variance + eps), or invvar),
// xhat = (x - mean) inv (rms: x inv), dxhat = g scale, D = mean |dxhat| (layer_norm_grad
// subtracts mean(dxhat); rms_norm_grad has no such term: D = 0), P = mean |dxhat xhat|.
// x_grad's element sums n terms and scales with inv (|dxhat| + D + |xhat| P); scale_grad's
// sums the R rows and scales with sum |g xhat|, bias_grad's with sum |g|. layer_norm_grad's
// absent (0-d) scale is 1, and an absent parameter's gradient is a 0-d zero (magnitude 0).
void NormGradBounds(Bounds& b, const ref::Tensors& inputs, const Attrs& attrs, bool layer_norm) {
  const ref::Tensor& x = inputs[0];
  const ref::Tensor& scale = inputs[1];
  const ref::Tensor& g = inputs.back();
  std::vector<Shape> shapes;
  for (const ref::Tensor& t : inputs) shapes.push_back(t.shape);
  const plan::NormSplit split =
      layer_norm ? plan::PlanLayerNormGrad(shapes, attrs) : plan::PlanRmsNormGrad(shapes, attrs);
  const size_t n = static_cast<size_t>(split.n);
  const size_t rows = n == 0 ? 0 : x.data.size() / n;
  const double eps = attrs.GetFloat("epsilon");
  b.terms = {static_cast<double>(n), static_cast<double>(rows), static_cast<double>(rows)};
  b.magnitude.assign(layer_norm ? 3 : 2, std::vector<double>(n, 0.0));
  b.magnitude[0].assign(x.data.size(), 0.0);
  std::vector<double> xhat(n), dxhat(n);
  for (size_t r = 0; r < rows; ++r) {
    // |invvar|: an invvar drawn as any real (a request the rule refuses) may be negative.
    const double inv = layer_norm ? 1.0 / std::sqrt(inputs[4].data[r] + eps) : std::fabs(inputs[2].data[r]);
    const double mean = layer_norm ? inputs[3].data[r] : 0.0;
    double d = 0, p = 0;
    for (size_t j = 0; j < n; ++j) {
      const size_t at = r * n + j;
      xhat[j] = (x.data[at] - mean) * inv;
      dxhat[j] = split.has_scale ? g.data[at] * scale.data[j] : g.data[at];
      d += std::fabs(dxhat[j]);
      p += std::fabs(dxhat[j] * xhat[j]);
      b.magnitude[1][j] += std::fabs(g.data[at] * xhat[j]);
      if (layer_norm) b.magnitude[2][j] += std::fabs(g.data[at]);
    }
    d = layer_norm ? d / static_cast<double>(n) : 0.0;
    p /= static_cast<double>(n);
    for (size_t j = 0; j < n; ++j) {
      b.magnitude[0][r * n + j] = inv * (std::fabs(dxhat[j]) + d + std::fabs(xhat[j]) * p);
    }
  }
  if (!split.has_scale) b.magnitude[1].assign(1, 0.0);
  if (layer_norm && !split.has_bias) b.magnitude[2].assign(1, 0.0);
}

// flash_attn_grad (q, k, v, out, softmax_lse, seed_offset, attn_mask, out_grad): every term
// carries a P = exp(score - softmax_lse), and P sums to exp(lse - softmax_lse) over a row
// (lse the forward's, from its reference). q_grad's element scales with its row's sum of P
// over the K keys; k_grad's and v_grad's with their key's sum of P over the query rows of
// its heads (v_grad of the reference with out_grad all ones).
// block_attention_grad (q, k, v, out, lse, out_grad): flash_attn_grad's bounds for one
// block pair, the row sums of P from block_attention folded into the empty state (the
// block's own log-sum-exp), the column sums from v_grad with out_grad all ones.
void BlockAttentionGradBounds(Bounds& b, const ref::Tensors& inputs, const Attrs& attrs) {
  std::vector<Shape> shapes;
  for (const ref::Tensor& t : inputs) shapes.push_back(t.shape);
  const attention::BlockAttentionPlan p = attention::PlanBlockAttentionGrad(shapes, attrs);
  b.head_dim = static_cast<double>(std::max<int64_t>(1, p.head_dim));
  b.v_dim = static_cast<double>(p.v_dim);
  b.terms = {static_cast<double>(p.sk), static_cast<double>(p.sq), static_cast<double>(p.sq)};
  ref::Tensor empty_out = inputs[3], empty_lse = inputs[4];
  std::fill(empty_out.data.begin(), empty_out.data.end(), 0.0);
  std::fill(empty_lse.data.begin(), empty_lse.data.end(), -std::numeric_limits<double>::infinity());
  const ref::Tensor block_lse =
      ref::FindReference("block_attention")({inputs[0], inputs[1], inputs[2], empty_out, empty_lse}, attrs)[1];
  ref::Tensors ones = inputs;
  std::fill(ones[5].data.begin(), ones[5].data.end(), 1.0);
  const ref::Tensor column = ref::FindReference("block_attention_grad")(ones, attrs)[2];
  b.magnitude.assign(3, {});
  b.magnitude[0].assign(inputs[0].data.size(), 0.0);
  for (int64_t bi = 0; bi < p.batch; ++bi) {
    for (int64_t i = 0; i < p.sq; ++i) {
      for (int64_t h = 0; h < p.heads; ++h) {
        const size_t row = static_cast<size_t>((bi * p.heads + h) * p.sq + i);
        const double sum = std::isinf(block_lse.data[row]) ? 0.0 : std::exp(block_lse.data[row] - inputs[4].data[row]);
        for (int64_t d = 0; d < p.head_dim; ++d) {
          b.magnitude[0][static_cast<size_t>(((bi * p.sq + i) * p.heads + h) * p.head_dim + d)] = sum;
        }
      }
    }
  }
  for (size_t out : {size_t{1}, size_t{2}}) {
    const int64_t width = out == 1 ? p.head_dim : p.v_dim;
    b.magnitude[out].assign(inputs[out].data.size(), 0.0);
    for (size_t key = 0; p.v_dim > 0 && key < static_cast<size_t>(p.batch * p.sk * p.heads); ++key) {
      for (int64_t d = 0; d < width; ++d) {
        b.magnitude[out][key * static_cast<size_t>(width) + static_cast<size_t>(d)] =
            std::fabs(column.data[key * static_cast<size_t>(p.v_dim)]);
      }
    }
  }
}

void AttentionGradBounds(Bounds& b, const ref::Tensors& inputs, const Attrs& attrs) {
  std::vector<Shape> shapes;
  for (const ref::Tensor& t : inputs) shapes.push_back(t.shape);
  const attention::FlashAttentionPlan p = attention::PlanFlashAttnGrad(shapes, attrs);
  const int64_t group = p.kv_heads == 0 ? 1 : p.heads / p.kv_heads;
  b.head_dim = static_cast<double>(std::max<int64_t>(1, p.head_dim));
  b.v_dim = static_cast<double>(p.v_dim);
  b.terms = {static_cast<double>(p.sk), static_cast<double>(p.sq * group), static_cast<double>(p.sq * group)};
  const Attrs forward = attrs.With("is_test", false).With("return_softmax", false).With("rng_name", std::string());
  const ref::Tensor lse =
      ref::FindReference("flash_attention")({inputs[0], inputs[1], inputs[2], inputs[5], inputs[6]}, forward)[2];
  ref::Tensors ones = inputs;
  std::fill(ones[7].data.begin(), ones[7].data.end(), 1.0);
  const ref::Tensor column = ref::FindReference("flash_attn_grad")(ones, attrs)[2];
  b.magnitude.assign(3, {});
  b.magnitude[0].assign(inputs[0].data.size(), 0.0);
  for (int64_t bi = 0; bi < p.batch; ++bi) {
    for (int64_t i = 0; i < p.sq; ++i) {
      for (int64_t h = 0; h < p.heads; ++h) {
        const size_t row = static_cast<size_t>((bi * p.heads + h) * p.sq + i);
        const double sum = std::exp(lse.data[row] - inputs[4].data[row]);
        for (int64_t d = 0; d < p.head_dim; ++d) {
          b.magnitude[0][static_cast<size_t>(((bi * p.sq + i) * p.heads + h) * p.head_dim + d)] = sum;
        }
      }
    }
  }
  for (size_t out : {size_t{1}, size_t{2}}) {
    const int64_t width = out == 1 ? p.head_dim : p.v_dim;
    b.magnitude[out].assign(inputs[out].data.size(), 0.0);
    for (size_t key = 0; p.v_dim > 0 && key < static_cast<size_t>(p.batch * p.sk * p.kv_heads); ++key) {
      for (int64_t d = 0; d < width; ++d) {
        b.magnitude[out][key * static_cast<size_t>(width) + static_cast<size_t>(d)] =
            std::fabs(column.data[key * static_cast<size_t>(p.v_dim)]);
      }
    }
  }
}

}  // namespace

int64_t Numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

double MaxAbs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

Precision PrecisionOf(DType dtype) {
  const double u = UnitRoundoff(dtype);
  const double f32 = UnitRoundoff(DType::kFloat32);
  if (u <= f32) return {u, 0, 0};  // float64, float32 (and 0 for int64, bool)
  double abs = 0;                  // narrower than float32: computed in float32, stored narrow
  for (const Format& f : kFormats) {
    if (ToString(dtype) == f.name) abs = std::ldexp(1.0, f.min_exponent - f.bits);
  }
  return {f32, u, abs};
}

double RoundToDType(double v, DType dtype) {
  if (dtype == DType::kFloat32) return static_cast<double>(static_cast<float>(v));
  if (!std::isfinite(v) || v == 0) return v;
  for (const Format& f : kFormats) {
    if (ToString(dtype) != f.name) continue;
    int e = 0;
    std::frexp(v, &e);  // |v| in [2^(e-1), 2^e)
    // The spacing of the format's values near v (fixed below the normal range).
    const int quantum_exponent = std::max(e - 1, f.min_exponent) - (f.bits - 1);
    const double rounded =
        std::ldexp(std::nearbyint(std::ldexp(v, -quantum_exponent)), quantum_exponent);
    if (std::fabs(rounded) > f.max) return std::copysign(std::numeric_limits<double>::infinity(), v);
    return rounded;
  }
  return v;
}

Bounds MakeBounds(const OpDecl& op, const ref::Tensors& inputs, const Attrs& attrs,
                  const ref::Tensors& expected) {
  if (!op.tolerance) throw std::logic_error(op.name + " declares no tolerance class");
  Bounds b;
  b.tolerance = *op.tolerance;
  for (const ref::Tensor& t : inputs) {
    if (IsFloating(t.dtype)) b.m = std::max(b.m, MaxAbs(t.data));
  }
  // K, the terms one output element depends on: the most of x's elements per element of
  // any output (reductions, normalisations) and of the length along an int "axis"
  // (softmax-like ops, cumsum). Either may overcount, never undercount; a sum of products
  // also counts its terms directly below.
  if (!inputs.empty()) {
    for (const ref::Tensor& e : expected) {
      b.k = std::max(b.k, static_cast<double>(Ratio(inputs[0].shape, e.shape)));
    }
    b.k = std::max(b.k, static_cast<double>(IntAxisLength(inputs[0].shape, attrs)));
  }
  const ref::ReferenceFn fn = ref::FindReference(op.name);
  switch (b.tolerance) {
    case ToleranceClass::kSumOfProducts: {
      // A = the reference on |inputs|; the terms per element = the reference on all-ones
      // inputs (a contraction's length, cumsum's prefix), at least the ratio above (mean
      // and prod give 1 on ones).
      // Integer inputs (ids, indices) keep their values: ones there would address other
      // (maybe absent) rows, and the real ids count each row's terms exactly.
      ref::Tensors abs_inputs = inputs, ones = inputs;
      for (ref::Tensor& t : abs_inputs) {
        for (double& v : t.data) v = std::fabs(v);
      }
      b.abs_run = fn(abs_inputs, attrs);
      for (ref::Tensor& t : ones) {
        if (IsFloating(t.dtype)) std::fill(t.data.begin(), t.data.end(), 1.0);
      }
      for (const ref::Tensor& t : fn(ones, attrs)) b.k = std::max(b.k, MaxAbs(t.data));
      // A put along an axis (ids in input 1): a position gathers at most index's length
      // along the axis of values and x's own element, whatever its reduction (mul and mean
      // give 1 on ones).
      if (inputs.size() > 1 && inputs[1].dtype == DType::kInt64) {
        b.k = std::max(b.k, static_cast<double>(IntAxisLength(inputs[1].shape, attrs) + 1));
      }
      break;
    }
    case ToleranceClass::kRelative:
      if (attrs.Has("porder")) b.p_factor = std::max(1.0, 1.0 / std::fabs(attrs.GetFloat("porder")));
      break;
    case ToleranceClass::kAttention:
      // q [batch, sq, heads, head_dim], k [batch, sk, ...]: K = the keys.
      b.head_dim = static_cast<double>(std::max<int64_t>(1, inputs[0].shape.at(3)));
      b.k = static_cast<double>(std::max<int64_t>(1, inputs[1].shape.at(1)));
      // flash_attention (out, softmax, softmax_lse, seed_offset); block_attention (out,
      // lse): +1 term, the state's own.
      b.lse_output = op.name == "flash_attention" ? 2 : op.outputs.size() - 1;
      if (op.name == "block_attention") b.k += 1;
      break;
    case ToleranceClass::kCrossEntropy:
      for (double p : expected[0].data) {
        if (p > 0) b.log_max = std::max(b.log_max, std::fabs(std::log(p)));
      }
      break;
    case ToleranceClass::kLayerNorm: {
      // Outputs out, mean, variance: a row is the normalised size. An absent (0-d) scale or
      // bias is 1 or 0 whatever value it holds (rms_norm's scale is always given).
      b.row = Ratio(inputs[0].shape, expected[1].shape);
      const double eps = attrs.GetFloat("epsilon");
      for (double var : expected[2].data) b.inv.push_back(1.0 / std::sqrt(var + eps));
      std::vector<Shape> shapes;
      for (const ref::Tensor& t : inputs) shapes.push_back(t.shape);
      const plan::NormSplit split = plan::PlanLayerNorm(shapes, attrs);
      b.scale_max = split.has_scale ? MaxAbs(inputs[1].data) : 1.0;
      b.bias_max = split.has_bias ? MaxAbs(inputs[2].data) : 0.0;
      break;
    }
    case ToleranceClass::kGroupNorm: {
      // Outputs y, mean, variance [N, groups]: layer_norm's bounds with each element of y
      // under its (n, group)'s inv (channels first or last: the plan's index), row 1. An
      // absent (0-d) scale or bias is 1 or 0 whatever value it holds. instance_norm
      // declares no groups attr: one channel per group.
      std::vector<Shape> shapes;
      for (const ref::Tensor& t : inputs) shapes.push_back(t.shape);
      const plan::GroupNormPlan p =
          attrs.Has("groups") ? plan::PlanGroupNorm(shapes, attrs) : plan::PlanInstanceNorm(shapes, attrs);
      const double eps = attrs.GetFloat("epsilon");
      b.row = 1;
      for (size_t i = 0; i < expected[0].data.size(); ++i) {
        const double var = expected[2].data[static_cast<size_t>(p.StatOf(static_cast<int64_t>(i)))];
        b.inv.push_back(1.0 / std::sqrt(var + eps));
      }
      b.scale_max = p.has_scale ? MaxAbs(inputs[1].data) : 1.0;
      b.bias_max = p.has_bias ? MaxAbs(inputs[2].data) : 0.0;
      break;
    }
    case ToleranceClass::kBatchNorm: {
      // Outputs out, mean_out, variance_out, saved_mean, saved_variance [C]: layer_norm's
      // bounds with each element of out under its channel's inv (saved_variance, the inverse
      // root of the variance used in either mode), row 1. An absent (0-d) scale or bias is 1
      // or 0 whatever value it holds.
      std::vector<Shape> shapes;
      for (const ref::Tensor& t : inputs) shapes.push_back(t.shape);
      const plan::BatchNormPlan p = plan::PlanBatchNorm(shapes, attrs);
      b.row = 1;
      for (size_t i = 0; i < expected[0].data.size(); ++i) {
        b.inv.push_back(expected[4].data[static_cast<size_t>(p.ChannelOf(static_cast<int64_t>(i)))]);
      }
      b.scale_max = p.has_scale ? MaxAbs(inputs[3].data) : 1.0;
      b.bias_max = p.has_bias ? MaxAbs(inputs[4].data) : 0.0;
      b.p_factor = std::fabs(attrs.GetFloat("momentum")) + std::fabs(1 - attrs.GetFloat("momentum"));
      break;
    }
    case ToleranceClass::kLayerNormGrad:
      NormGradBounds(b, inputs, attrs, true);
      break;
    case ToleranceClass::kRmsNormGrad:
      NormGradBounds(b, inputs, attrs, false);
      break;
    case ToleranceClass::kAttentionGrad:
      if (op.name == "block_attention_grad") {
        BlockAttentionGradBounds(b, inputs, attrs);
      } else {
        AttentionGradBounds(b, inputs, attrs);
      }
      break;
    default:
      break;
  }
  return b;
}

double ClassTolerance(const Bounds& b, size_t out, size_t i, double r, double u) {
  constexpr double kFloor = 1e-30;
  const double a = std::fabs(r);
  const double k = b.k, m = b.m;
  switch (b.tolerance) {
    case ToleranceClass::kExact: return 0;
    case ToleranceClass::kPointwise: return (168 * a + 17) * u;
    case ToleranceClass::kSumOfProducts:
      return 2 * (k + 2) * u * std::fabs((*b.abs_run)[out].data[i]) + kFloor;
    case ToleranceClass::kRelative: return 2 * (k + 8 + 2 * m) * u * a * b.p_factor + kFloor;
    case ToleranceClass::kLogDomain: return 2 * (k + 8 + 2 * m) * u * (a + m + 1) + kFloor;
    case ToleranceClass::kCrossEntropy:
      if (out == 0) return 2 * (k + 8 + 2 * m) * u * a + kFloor;
      return 2 * (k + 8 + 2 * m) * u * (a + 1 + k * m * b.log_max) + kFloor;
    case ToleranceClass::kLayerNorm:
    case ToleranceClass::kGroupNorm:
      if (out == 1) return 2 * (k + 8) * u * (a + m) + kFloor;
      // The variance also carries the pieces' means' errors (each at most (K + 2) u M) where
      // the row is combined from pieces (the exchanged statistics, Chan's merge): the
      // between-piece term delta^2 n_a n_b / n moves by 2 |delta| |e| n_a n_b / n, at most
      // 2 (K + 2) u M sqrt(|ref|) of the variance (delta^2 n_a n_b / n <= n |ref|).
      if (out == 2) {
        return 2 * (k + 8) * u * a + 2 * (2 * (k + 2) * u * m) * std::sqrt(a) +
               4 * (k * m * u) * (k * m * u) + kFloor;
      }
      return 2 * (k + 8 + 2 * m) * u *
                 (a + b.bias_max + b.inv[i / static_cast<size_t>(b.row)] * b.scale_max * 3 * m) +
             kFloor;
    case ToleranceClass::kBatchNorm:
      // mean_out, variance_out: momentum r + (1 - momentum) (the batch's statistic, within
      // layer_norm's bound with r <= M, M^2), p_factor = |momentum| + |1 - momentum|.
      // saved_mean: layer_norm's mean. saved_variance = 1/sqrt(v + eps): the variance's error
      // e moves it by about a^3 e / 2, plus its own root and division.
      if (out == 1 || out == 3) return 2 * (k + 8) * u * b.p_factor * (a + m) + kFloor;
      if (out == 2) return 2 * (k + 8) * u * b.p_factor * (a + m * m) + 4 * (k * m * u) * (k * m * u) + kFloor;
      if (out == 4) {
        const double e = 2 * (k + 8) * u * m * m + 4 * (k * m * u) * (k * m * u);
        return 8 * u * a + a * a * a * e + kFloor;
      }
      return 2 * (k + 8 + 2 * m) * u *
                 (a + b.bias_max + b.inv[i / static_cast<size_t>(b.row)] * b.scale_max * 3 * m) +
             kFloor;
    case ToleranceClass::kRmsNorm: return 2 * (k + 8 + 2 * m) * u * a + kFloor;
    case ToleranceClass::kSoftmaxGrad: return 2 * (k + 8) * u * (a + m * (m + k * m * m)) + kFloor;
    case ToleranceClass::kAttention: {
      // A score (a dot product of D terms scaled by 1/sqrt(D), plus a mask value) is off by
      // at most s u; each probability by (2 s + K + 8) u relatively (the exponential turns
      // the score's absolute error into a relative one, the normaliser sums K terms); out
      // sums K products with v (|v| <= m); softmax_lse is a score plus a log of a sum.
      const double d = b.head_dim;
      const double s = (d + 3) * std::sqrt(d) * m * m + 2 * m + 1;
      if (out == 0) return 2 * (2 * s + 2 * k + 10) * u * m + kFloor;
      if (out == b.lse_output) return 2 * (s + k + 8) * u * (a + 1) + kFloor;
      return 2 * (2 * s + k + 8) * u * a + kFloor;
    }
    case ToleranceClass::kLayerNormGrad:
    case ToleranceClass::kRmsNormGrad:
      // x_grad = inv (dxhat - mean(dxhat) - xhat mean(dxhat xhat)): xhat carries 5 u of
      // itself (a difference, inv's add, root and division, a product), each mean (K + 8) u
      // of the mean of its |terms|, the difference and the product by inv 4 u more: (K + 20)
      // u times the magnitude. A parameter's gradient sums R products carrying 6 u each: (R +
      // 6) u sum |term|. Doubled, as the other classes, for the second-order terms. No
      // other class fits: x_grad is a difference of terms far larger than itself (|ref|
      // bounds nothing), and the reference on |inputs| still subtracts (x - mean).
      return 2 * (b.terms[out] + 20) * u * b.magnitude[out][i] + kFloor;
    case ToleranceClass::kAttentionGrad: {
      // A score is off by s u (kAttention's s), its argument to exp by u (|score| + |lse|)
      // more, so P by (2 s + 2 m + 2) u relatively. dP = out_grad . v and D = out_grad . out
      // (e terms each, at most e m^2) by (e + 2) u e m^2; dS = P (dP - D) / sqrt(d) thus by
      // (2 s + 2 m + e + 7) u 2 e m^2 P / sqrt(d). q_grad and k_grad sum K such terms times
      // k or q (|.| <= m), adding (K + 2) u of their sum; v_grad sums K terms P out_grad.
      // Times the sum of P the element's terms carry (magnitude). Doubled, as the others.
      const double d = b.head_dim, e = b.v_dim;
      const double s = (d + 3) * std::sqrt(d) * m * m + 2 * m + 1;
      const double sum = b.magnitude[out][i];
      if (out == 2) return 2 * (2 * s + 2 * m + b.terms[out] + 4) * u * m * sum + kFloor;
      return 2 * (2 * s + 2 * m + e + b.terms[out] + 9) * u * 2 * e * m * m * m / std::sqrt(d) * sum + kFloor;
    }
  }
  return 0;
}

bool SameSpecial(double x, double y) {
  if (std::isnan(x) || std::isnan(y)) return std::isnan(x) && std::isnan(y);
  if (std::isinf(x) || std::isinf(y)) return x == y;
  return false;
}

std::string CompareValues(const OpDecl& op, size_t out, const std::string& where, DType dtype,
                          const std::vector<double>& got, const std::vector<double>& want,
                          double f64_rel, std::optional<Bounds>& bounds,
                          const std::function<Bounds()>& make_bounds) {
  if (IsFloating(dtype) && dtype != DType::kFloat64 && !op.tolerance) {
    return op.name + " declares no tolerance class";
  }
  const Precision precision = PrecisionOf(dtype);
  for (size_t i = 0; i < got.size(); ++i) {
    const double r = want[i], k = got[i];
    const double rounded = RoundToDType(r, dtype);
    double tolerance = 0;
    bool ok;
    if (!IsFloating(dtype)) {
      ok = k == r;
    } else if (SameSpecial(k, r)) {
      ok = true;
    } else if (dtype == DType::kFloat64) {
      tolerance = f64_rel * std::max(1.0, std::fabs(r));
      ok = std::fabs(k - r) <= tolerance;
    } else if (*op.tolerance == ToleranceClass::kExact) {
      ok = k == rounded;
    } else {
      if (!bounds) bounds = make_bounds();
      const double computed = ClassTolerance(*bounds, out, i, r, precision.compute_u);
      tolerance = computed + precision.storage_u * (std::fabs(r) + computed) + precision.storage_abs;
      // A reference beyond the dtype's range: the run overflows to the same infinity.
      ok = std::fabs(k - r) <= tolerance || (std::isinf(rounded) && k == rounded);
    }
    if (!ok) {
      std::ostringstream os;
      os.precision(17);
      os << where << " element " << i << ": got " << k << ", reference " << r << " (|diff| "
         << std::fabs(k - r) << ", tolerance " << tolerance;
      if (IsFloating(dtype) && dtype != DType::kFloat64) os << ", class " << ToString(*op.tolerance);
      os << ")";
      return os.str();
    }
  }
  return "";
}

}  // namespace spmd::prop
