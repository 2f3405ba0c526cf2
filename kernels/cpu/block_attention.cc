// block_attention and block_attention_grad (docs/OPS.md "Ring attention's block steps"):
// per batch entry, head and query row, the visible keys' scores, then the state's
// rescale and the block's exp-weighted sum (forward), or each visible pair's P and dS
// added into the three gradients (backward), in the compute dtype. Row loops, not GEMMs:
// a ring step's block is small next to the communication it overlaps. The shape plan, the
// masks and their validation are the reference's (rules/ops/block_attention_shape.h).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/internal.h"
#include "rules/ops/block_attention_shape.h"

namespace spmd::kernels::cpu {
namespace {

using attention::BlockAttentionPlan;
using internal::NewOutput;
using internal::ValuesAs;

std::vector<Shape> ShapesOf(const TensorArgs& inputs) {
  std::vector<Shape> shapes;
  for (const Tensor& t : inputs) shapes.push_back(t.shape());
  return shapes;
}

template <typename T>
T Dot(const T* a, const T* b, int64_t n) {
  T s = 0;
  for (int64_t x = 0; x < n; ++x) s += a[x] * b[x];
  return s;
}

template <typename T>
Tensors RunBlockAttention(const TensorArgs& inputs, const BlockAttentionPlan& p) {
  ValuesAs<T> qv(inputs[0]), kv(inputs[1]), vv(inputs[2]), ov(inputs[3]), lv(inputs[4]);
  Tensor out = NewOutput(p.out_shape, DTypeOf<T>::value);
  Tensor lse = NewOutput(p.lse_shape, DTypeOf<T>::value);
  T* o = out.data<T>();
  T* l = lse.data<T>();
  std::copy(ov.data(), ov.data() + out.numel(), o);
  std::copy(lv.data(), lv.data() + lse.numel(), l);
  const T scale = static_cast<T>(p.scale);
  const T minus_inf = -std::numeric_limits<T>::infinity();
  std::vector<T> score(static_cast<size_t>(p.sk));
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads; ++h) {
      for (int64_t i = 0; i < p.sq; ++i) {
        T* row_lse = l + (b * p.heads + h) * p.sq + i;
        const T* qi = qv.data() + ((b * p.sq + i) * p.heads + h) * p.head_dim;
        T top = *row_lse;
        bool any = false;
        for (int64_t j = 0; j < p.sk; ++j) {
          if (!p.Visible(i, j)) continue;
          any = true;
          score[j] = scale * Dot(qi, kv.data() + ((b * p.sk + j) * p.heads + h) * p.head_dim, p.head_dim);
          top = std::max(top, score[j]);
        }
        if (!any) continue;
        const T kept = *row_lse == minus_inf ? T(0) : std::exp(*row_lse - top);
        T* oi = o + ((b * p.sq + i) * p.heads + h) * p.v_dim;
        T total = kept;
        for (int64_t e = 0; e < p.v_dim; ++e) oi[e] *= kept;
        for (int64_t j = 0; j < p.sk; ++j) {
          if (!p.Visible(i, j)) continue;
          const T w = std::exp(score[j] - top);
          total += w;
          const T* vj = vv.data() + ((b * p.sk + j) * p.heads + h) * p.v_dim;
          for (int64_t e = 0; e < p.v_dim; ++e) oi[e] += w * vj[e];
        }
        for (int64_t e = 0; e < p.v_dim; ++e) oi[e] /= total;
        *row_lse = top + std::log(total);
      }
    }
  }
  return TensorList(std::move(out), std::move(lse));
}

template <typename T>
Tensors RunBlockAttentionGrad(const TensorArgs& inputs, const BlockAttentionPlan& p) {
  ValuesAs<T> qv(inputs[0]), kv(inputs[1]), vv(inputs[2]), ov(inputs[3]), lv(inputs[4]), gv(inputs[5]);
  Tensor q_grad = NewOutput(inputs[0].shape(), DTypeOf<T>::value, /*zero=*/true);
  Tensor k_grad = NewOutput(inputs[1].shape(), DTypeOf<T>::value, /*zero=*/true);
  Tensor v_grad = NewOutput(inputs[2].shape(), DTypeOf<T>::value, /*zero=*/true);
  T* dq = q_grad.data<T>();
  T* dk = k_grad.data<T>();
  T* dv = v_grad.data<T>();
  const T scale = static_cast<T>(p.scale);
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads; ++h) {
      for (int64_t i = 0; i < p.sq; ++i) {
        const T row_lse = lv[(b * p.heads + h) * p.sq + i];
        if (row_lse == -std::numeric_limits<T>::infinity()) continue;
        const int64_t qi = ((b * p.sq + i) * p.heads + h) * p.head_dim;
        const int64_t oi = ((b * p.sq + i) * p.heads + h) * p.v_dim;
        const T delta = Dot(gv.data() + oi, ov.data() + oi, p.v_dim);
        for (int64_t j = 0; j < p.sk; ++j) {
          if (!p.Visible(i, j)) continue;
          const int64_t kj = ((b * p.sk + j) * p.heads + h) * p.head_dim;
          const int64_t vj = ((b * p.sk + j) * p.heads + h) * p.v_dim;
          const T prob = std::exp(scale * Dot(qv.data() + qi, kv.data() + kj, p.head_dim) - row_lse);
          const T ds = prob * (Dot(gv.data() + oi, vv.data() + vj, p.v_dim) - delta) * scale;
          for (int64_t e = 0; e < p.v_dim; ++e) dv[vj + e] += prob * gv[oi + e];
          for (int64_t d = 0; d < p.head_dim; ++d) {
            dq[qi + d] += ds * kv[kj + d];
            dk[kj + d] += ds * qv[qi + d];
          }
        }
      }
    }
  }
  return TensorList(std::move(q_grad), std::move(k_grad), std::move(v_grad));
}

}  // namespace

Tensors block_attention(const TensorArgs& inputs, const Attrs& attrs) {
  internal::CheckArity(inputs, 5);
  const BlockAttentionPlan plan = attention::PlanBlockAttention(ShapesOf(inputs), attrs);
  return internal::DispatchFloat(internal::ComputeDTypeAll(inputs), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return RunBlockAttention<T>(inputs, plan);
  });
}

Tensors block_attention_grad(const TensorArgs& inputs, const Attrs& attrs) {
  internal::CheckArity(inputs, 6);
  const BlockAttentionPlan plan = attention::PlanBlockAttentionGrad(ShapesOf(inputs), attrs);
  return internal::DispatchFloat(internal::ComputeDTypeAll(inputs), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return RunBlockAttentionGrad<T>(inputs, plan);
  });
}

}  // namespace spmd::kernels::cpu
