// flash_attention (docs/OPS.md "Paddle's other registered ops"): plain softmax attention
// in float64, from the definition.
#include <cmath>
#include <limits>
#include <vector>

#include "reference/reference.h"
#include "reference/util.h"
#include "rules/attention_shape.h"

namespace spmd::reference::ops {

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
  const double scale = 1.0 / std::sqrt(static_cast<double>(p.head_dim));
  const Shape mask_strides = p.has_mask ? internal::Strides(p.mask_shape) : Shape{};
  std::vector<double> score(static_cast<size_t>(p.sk));
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads; ++h) {
      const int64_t g = h / group;
      for (int64_t i = 0; i < p.sq; ++i) {
        const int64_t last = attention::LastKey(p, p.row_offset + i);
        double max = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j <= last; ++j) {
          double dot = 0.0;
          for (int64_t d = 0; d < p.head_dim; ++d) {
            dot += q.data[((b * p.sq + i) * p.heads + h) * p.head_dim + d] *
                   k.data[((b * p.sk + j) * p.kv_heads + g) * p.head_dim + d];
          }
          score[j] = dot * scale;
          if (p.has_mask) {
            const std::vector<int64_t> at = {b, h, i, j};
            int64_t offset = 0;
            for (size_t dim = 0; dim < 4; ++dim) {
              if (p.mask_shape[dim] != 1) offset += at[dim] * mask_strides[dim];
            }
            score[j] += inputs[4].data[offset];
          }
          max = std::max(max, score[j]);
        }
        double sum = 0.0;
        for (int64_t j = 0; j <= last; ++j) sum += std::exp(score[j] - max);
        lse.data[(b * p.heads + h) * p.sq + i] = max + std::log(sum);
        for (int64_t j = 0; j <= last; ++j) {
          const double prob = std::exp(score[j] - max) / sum;
          if (p.return_softmax) softmax.data[((b * p.heads + h) * p.sq + i) * p.sk + j] = prob;
          for (int64_t e = 0; e < p.v_dim; ++e) {
            out.data[((b * p.sq + i) * p.heads + h) * p.v_dim + e] +=
                prob * v.data[((b * p.sk + j) * p.kv_heads + g) * p.v_dim + e];
          }
        }
      }
    }
  }
  return {out, softmax, lse};
}

}  // namespace spmd::reference::ops
