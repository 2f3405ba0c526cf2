// block_attention and block_attention_grad (docs/OPS.md "Ring attention's block steps"):
// the online-softmax fold of one key/value block and one block pair's attention
// gradients, in float64 from the definition.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "reference/reference.h"
#include "reference/util.h"
#include "rules/ops/block_attention_shape.h"

namespace spmd::reference::ops {
namespace {

std::vector<Shape> ShapesOf(const Tensors& inputs) {
  std::vector<Shape> shapes;
  for (const Tensor& t : inputs) shapes.push_back(t.shape);
  return shapes;
}

// Offsets of [b, row, h, 0] in a [batch, rows, heads, width] tensor and of [b, h, row] in
// a [batch, heads, rows] one.
int64_t RowAt(int64_t b, int64_t row, int64_t h, int64_t rows, int64_t heads, int64_t width) {
  return ((b * rows + row) * heads + h) * width;
}

double Score(const attention::BlockAttentionPlan& p, const Tensor& q, const Tensor& k, int64_t b, int64_t h,
             int64_t i, int64_t j) {
  const double* qi = q.data.data() + RowAt(b, i, h, p.sq, p.heads, p.head_dim);
  const double* kj = k.data.data() + RowAt(b, j, h, p.sk, p.heads, p.head_dim);
  double dot = 0;
  for (int64_t d = 0; d < p.head_dim; ++d) dot += qi[d] * kj[d];
  return p.scale * dot;
}

}  // namespace

// For batch b, head h, query row i and the keys j it sees (p.Visible): with s_j =
// scale q_i . k_j, lse' = log(exp(lse) + sum_j exp(s_j)) and out' = (exp(lse) out +
// sum_j exp(s_j) v_j) / exp(lse'), computed after subtracting M = max(lse, max_j s_j).
// lse = -inf is the empty state; a row that sees no key keeps its state.
Tensors block_attention(const Tensors& inputs, const Attrs& attrs) {
  internal::CheckArity(inputs, 5);
  const attention::BlockAttentionPlan p = attention::PlanBlockAttention(ShapesOf(inputs), attrs);
  const Tensor &q = inputs[0], &k = inputs[1], &v = inputs[2], &out = inputs[3], &lse = inputs[4];
  Tensor new_out = out;
  Tensor new_lse = lse;
  std::vector<double> score(static_cast<size_t>(p.sk));
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads; ++h) {
      for (int64_t i = 0; i < p.sq; ++i) {
        const int64_t l = (b * p.heads + h) * p.sq + i;
        double top = lse.data[l];
        bool any = false;
        for (int64_t j = 0; j < p.sk; ++j) {
          if (!p.Visible(i, j)) continue;
          any = true;
          score[j] = Score(p, q, k, b, h, i, j);
          top = std::max(top, score[j]);
        }
        if (!any) continue;
        const double kept = lse.data[l] == -std::numeric_limits<double>::infinity() ? 0.0 : std::exp(lse.data[l] - top);
        double total = kept;
        const int64_t o = RowAt(b, i, h, p.sq, p.heads, p.v_dim);
        std::vector<double> acc(static_cast<size_t>(p.v_dim));
        for (int64_t e = 0; e < p.v_dim; ++e) acc[e] = kept * out.data[o + e];
        for (int64_t j = 0; j < p.sk; ++j) {
          if (!p.Visible(i, j)) continue;
          const double w = std::exp(score[j] - top);
          total += w;
          const double* vj = v.data.data() + RowAt(b, j, h, p.sk, p.heads, p.v_dim);
          for (int64_t e = 0; e < p.v_dim; ++e) acc[e] += w * vj[e];
        }
        for (int64_t e = 0; e < p.v_dim; ++e) new_out.data[o + e] = acc[e] / total;
        new_lse.data[l] = top + std::log(total);
      }
    }
  }
  return {new_out, new_lse};
}

// For the pairs (i, j) with j visible to i and lse_i finite: P = exp(s_ij - lse_i),
// D_i = out_grad_i . out_i, dS = P (out_grad_i . v_j - D_i); q_grad_i = scale sum_j dS k_j,
// k_grad_j = scale sum_i dS q_i, v_grad_j = sum_i P out_grad_i.
Tensors block_attention_grad(const Tensors& inputs, const Attrs& attrs) {
  internal::CheckArity(inputs, 6);
  const attention::BlockAttentionPlan p = attention::PlanBlockAttentionGrad(ShapesOf(inputs), attrs);
  const Tensor &q = inputs[0], &k = inputs[1], &v = inputs[2], &out = inputs[3], &lse = inputs[4],
               &dout = inputs[5];
  Tensor dq = internal::Zeros(q.shape, q.dtype);
  Tensor dk = internal::Zeros(k.shape, k.dtype);
  Tensor dv = internal::Zeros(v.shape, v.dtype);
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads; ++h) {
      for (int64_t i = 0; i < p.sq; ++i) {
        const double row_lse = lse.data[(b * p.heads + h) * p.sq + i];
        if (row_lse == -std::numeric_limits<double>::infinity()) continue;
        const int64_t o = RowAt(b, i, h, p.sq, p.heads, p.v_dim);
        const int64_t qi = RowAt(b, i, h, p.sq, p.heads, p.head_dim);
        double delta = 0;
        for (int64_t e = 0; e < p.v_dim; ++e) delta += dout.data[o + e] * out.data[o + e];
        for (int64_t j = 0; j < p.sk; ++j) {
          if (!p.Visible(i, j)) continue;
          const double prob = std::exp(Score(p, q, k, b, h, i, j) - row_lse);
          const int64_t vj = RowAt(b, j, h, p.sk, p.heads, p.v_dim);
          const int64_t kj = RowAt(b, j, h, p.sk, p.heads, p.head_dim);
          double dp = 0;
          for (int64_t e = 0; e < p.v_dim; ++e) {
            dp += dout.data[o + e] * v.data[vj + e];
            dv.data[vj + e] += prob * dout.data[o + e];
          }
          const double ds = prob * (dp - delta);
          for (int64_t d = 0; d < p.head_dim; ++d) {
            dq.data[qi + d] += p.scale * ds * k.data[kj + d];
            dk.data[kj + d] += p.scale * ds * q.data[qi + d];
          }
        }
      }
    }
  }
  return {dq, dk, dv};
}

}  // namespace spmd::reference::ops
