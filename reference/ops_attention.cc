// flash_attention and flash_attn_grad (docs/OPS.md "Paddle's other registered ops"):
// plain softmax attention and its gradients in float64, from the definition.
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "reference/reference.h"
#include "reference/util.h"
#include "rules/ops/attention_shape.h"

namespace spmd::reference::ops {
namespace {

// The mask's strides over [b, h, i, j], 0 on its size-1 (broadcast) dims, and
// sqrt(head_dim): what every Score of one call shares.
struct ScoreShape {
  int64_t mask_strides[4] = {0, 0, 0, 0};
  double root = 1.0;
};

ScoreShape MakeScoreShape(const attention::FlashAttentionPlan& p) {
  ScoreShape s;
  s.root = std::sqrt(static_cast<double>(p.head_dim));
  if (p.has_mask) {
    const Shape strides = internal::Strides(p.mask_shape);
    for (size_t dim = 0; dim < 4; ++dim) s.mask_strides[dim] = p.mask_shape[dim] != 1 ? strides[dim] : 0;
  }
  return s;
}

// The score of query row i and key j for batch b and head h (k/v head h / (heads /
// kv_heads)): (q[b,i,h,:] . k[b,j,g,:]) / sqrt(head_dim) + mask[b,h,i,j], the mask's size-1
// dims broadcast (`mask` null: none).
double Score(const attention::FlashAttentionPlan& p, const ScoreShape& shape, const Tensor& q, const Tensor& k,
             const Tensor* mask, int64_t b, int64_t h, int64_t i, int64_t j) {
  const int64_t g = h / (p.kv_heads == 0 ? 1 : p.heads / p.kv_heads);
  const double* qr = q.data.data() + ((b * p.sq + i) * p.heads + h) * p.head_dim;
  const double* kr = k.data.data() + ((b * p.sk + j) * p.kv_heads + g) * p.head_dim;
  double dot = 0.0;
  for (int64_t d = 0; d < p.head_dim; ++d) dot += qr[d] * kr[d];
  double score = dot / shape.root;
  if (mask != nullptr) {
    const int64_t* st = shape.mask_strides;
    score += mask->data[b * st[0] + h * st[1] + i * st[2] + j * st[3]];
  }
  return score;
}

}  // namespace

// For batch b, head h (k/v head h / (heads / kv_heads)), query row i (global row r):
// score[j] = (q[b,i,h,:] . k[b,j,g,:]) / sqrt(head_dim) + mask[b,h,i,j] for the keys j the
// row sees (all, or j <= r + sk - global_sq when causal); p = softmax(score) over them
// (0 for the others); out[b,i,h,:] = sum_j p[j] v[b,j,g,:]; softmax_lse[b,h,i] =
// log(sum_j exp(score[j])); softmax[b,h,i,:] = p when return_softmax.
Tensors flash_attention(const Tensors& inputs, const Attrs& attrs) {
  internal::CheckArityAtLeast(inputs, 3);
  std::vector<Shape> shapes;
  for (const Tensor& t : inputs) shapes.push_back(t.shape);
  const attention::FlashAttentionPlan p = attention::PlanFlashAttention(shapes, attrs);
  const Tensor& q = inputs[0];
  const Tensor& k = inputs[1];
  const Tensor& v = inputs[2];
  Tensor out = internal::Zeros(p.out_shape, q.dtype);
  Tensor softmax = internal::Zeros(p.softmax_shape, q.dtype);
  Tensor lse = internal::Zeros(p.lse_shape, q.dtype);
  const int64_t group = p.kv_heads == 0 ? 1 : p.heads / p.kv_heads;
  const ScoreShape score_shape = MakeScoreShape(p);
  std::vector<double> score(static_cast<size_t>(p.sk));
  std::vector<double> weight(static_cast<size_t>(p.sk));  // exp(score[j] - max)
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads; ++h) {
      const int64_t g = h / group;
      for (int64_t i = 0; i < p.sq; ++i) {
        const int64_t last = attention::LastKey(p, p.row_offset + i);
        double max = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j <= last; ++j) {
          score[j] = Score(p, score_shape, q, k, p.has_mask ? &inputs[4] : nullptr, b, h, i, j);
          max = std::max(max, score[j]);
        }
        double sum = 0.0;
        for (int64_t j = 0; j <= last; ++j) {
          weight[j] = std::exp(score[j] - max);
          sum += weight[j];
        }
        lse.data[(b * p.heads + h) * p.sq + i] = max + std::log(sum);
        for (int64_t j = 0; j <= last; ++j) {
          const double prob = weight[j] / sum;
          if (p.return_softmax) softmax.data[((b * p.heads + h) * p.sq + i) * p.sk + j] = prob;
          for (int64_t e = 0; e < p.v_dim; ++e) {
            out.data[((b * p.sq + i) * p.heads + h) * p.v_dim + e] +=
                prob * v.data[((b * p.sk + j) * p.kv_heads + g) * p.v_dim + e];
          }
        }
      }
    }
  }
  // seed_offset: fixed_seed_offset's pair when given (no dropout is drawn to advance it),
  // else [0, 0].
  Tensor seed_offset = internal::Zeros(p.seed_offset_shape, DType::kInt64);
  if (p.has_seed_offset) {
    for (double v : inputs[3].data) {
      if (!std::isfinite(v) || v != std::trunc(v) || std::fabs(v) > 9.0e15) {
        ThrowInvalid(internal::InputField(3), "fixed_seed_offset " + std::to_string(v) + " is not an int64");
      }
    }
    seed_offset.data = inputs[3].data;
  }
  Tensors result;
  result.push_back(std::move(out));
  result.push_back(std::move(softmax));
  result.push_back(std::move(lse));
  result.push_back(std::move(seed_offset));
  return result;
}

// The gradients of <out_grad, out> for out = P . v, from the given out and softmax_lse:
// for each batch b, head h (k/v head g) and query row i, over the keys j the row sees,
// P[j] = exp(score[j] - softmax_lse[b,h,i]) (score as the forward's), dP[j] =
// out_grad[b,i,h,:] . v[b,j,g,:], D = out_grad[b,i,h,:] . out[b,i,h,:], dS[j] = P[j] (dP[j] - D);
// q_grad[b,i,h,:] += dS[j] k[b,j,g,:] / sqrt(d), k_grad[b,j,g,:] += dS[j] q[b,i,h,:] / sqrt(d),
// v_grad[b,j,g,:] += P[j] out_grad[b,i,h,:]. A key head's gradients sum over its q heads.
Tensors flash_attn_grad(const Tensors& inputs, const Attrs& attrs) {
  internal::CheckArity(inputs, 8);
  std::vector<Shape> shapes;
  for (const Tensor& t : inputs) shapes.push_back(t.shape);
  const attention::FlashAttentionPlan p = attention::PlanFlashAttnGrad(shapes, attrs);
  const Tensor& q = inputs[0];
  const Tensor& k = inputs[1];
  const Tensor& v = inputs[2];
  const Tensor& out = inputs[3];
  const Tensor& lse = inputs[4];
  const Tensor& dout = inputs[7];
  Tensor q_grad = internal::Zeros(q.shape);
  Tensor k_grad = internal::Zeros(k.shape);
  Tensor v_grad = internal::Zeros(v.shape);
  const int64_t group = p.kv_heads == 0 ? 1 : p.heads / p.kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(p.head_dim));
  const ScoreShape score_shape = MakeScoreShape(p);
  auto q_at = [&](int64_t b, int64_t i, int64_t h, int64_t d) { return ((b * p.sq + i) * p.heads + h) * p.head_dim + d; };
  auto k_at = [&](int64_t b, int64_t j, int64_t g, int64_t d) { return ((b * p.sk + j) * p.kv_heads + g) * p.head_dim + d; };
  auto o_at = [&](int64_t b, int64_t i, int64_t h, int64_t e) { return ((b * p.sq + i) * p.heads + h) * p.v_dim + e; };
  auto v_at = [&](int64_t b, int64_t j, int64_t g, int64_t e) { return ((b * p.sk + j) * p.kv_heads + g) * p.v_dim + e; };
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads; ++h) {
      const int64_t g = h / group;
      for (int64_t i = 0; i < p.sq; ++i) {
        const int64_t last = attention::LastKey(p, p.row_offset + i);
        double row_d = 0.0;
        for (int64_t e = 0; e < p.v_dim; ++e) row_d += dout.data[o_at(b, i, h, e)] * out.data[o_at(b, i, h, e)];
        for (int64_t j = 0; j <= last; ++j) {
          const double score = Score(p, score_shape, q, k, p.has_mask ? &inputs[6] : nullptr, b, h, i, j);
          const double prob = std::exp(score - lse.data[(b * p.heads + h) * p.sq + i]);
          double dprob = 0.0;
          for (int64_t e = 0; e < p.v_dim; ++e) {
            dprob += dout.data[o_at(b, i, h, e)] * v.data[v_at(b, j, g, e)];
            v_grad.data[v_at(b, j, g, e)] += prob * dout.data[o_at(b, i, h, e)];
          }
          const double dscore = prob * (dprob - row_d) * scale;
          for (int64_t d = 0; d < p.head_dim; ++d) {
            q_grad.data[q_at(b, i, h, d)] += dscore * k.data[k_at(b, j, g, d)];
            k_grad.data[k_at(b, j, g, d)] += dscore * q.data[q_at(b, i, h, d)];
          }
        }
      }
    }
  }
  Tensors result;
  result.push_back(std::move(q_grad));
  result.push_back(std::move(k_grad));
  result.push_back(std::move(v_grad));
  return result;
}

}  // namespace spmd::reference::ops
