// flash_attention (docs/OPS.md "Paddle's other registered ops"): per batch entry and head,
// the scores Q K^T as one GEMM (internal::Gemm: OpenBLAS where built with it), a row
// softmax in the compute dtype, then out = P V as a second GEMM. Plain attention, not the
// tiled online-softmax of a GPU flash kernel: the values are the same up to rounding.
// flash_attn_grad: per batch entry and head, P = exp(Q K^T / sqrt(d) + mask - lse) and
// dP = dO V^T as GEMMs, dS = P (dP - rowsum(dO O)), then dQ = dS K, dK = dS^T Q (both
// scaled by 1 / sqrt(d)) and dV = P^T dO as GEMMs accumulating over a key head's q heads.
// The shape plan and its validation are the reference's (rules/ops/attention_shape.h).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <memory>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/internal.h"
#include "rules/ops/attention_shape.h"

namespace spmd::kernels::cpu {
namespace {

using internal::Gemm;
using internal::MatrixView;
using internal::NewOutput;
using internal::ValuesAs;

// The mask's strides over [b, h, sq, sk], 0 on its broadcast (size-1) dims.
std::vector<int64_t> MaskStrides(const attention::FlashAttentionPlan& p) {
  std::vector<int64_t> strides(4, 0);
  if (!p.has_mask) return strides;
  int64_t stride = 1;
  for (size_t d = 4; d-- > 0;) {
    strides[d] = p.mask_shape[d] == 1 ? 0 : stride;
    stride *= p.mask_shape[d];
  }
  return strides;
}

// Row i of batch b, head h's score block, holding q . k from the GEMM: scaled by
// 1 / sqrt(head_dim) and the mask added (size-1 dims broadcast), for the keys j <= last.
template <typename T>
void ScoreRow(T* row, int64_t last, T scale, const ValuesAs<T>* mask, const std::vector<int64_t>& strides,
              int64_t b, int64_t h, int64_t i) {
  for (int64_t j = 0; j <= last; ++j) {
    row[j] *= scale;
    if (mask != nullptr) row[j] += (*mask)[b * strides[0] + h * strides[1] + i * strides[2] + j * strides[3]];
  }
}

template <typename T>
Tensors RunFlashAttention(const TensorArgs& inputs, const attention::FlashAttentionPlan& p) {
  ValuesAs<T> qv(inputs[0]);
  ValuesAs<T> kv(inputs[1]);
  ValuesAs<T> vv(inputs[2]);
  Tensor out = NewOutput(p.out_shape, DTypeOf<T>::value, /*zero=*/true);
  Tensor softmax = NewOutput(p.softmax_shape, DTypeOf<T>::value, /*zero=*/true);
  Tensor lse = NewOutput(p.lse_shape, DTypeOf<T>::value);
  // seed_offset: fixed_seed_offset's pair when given (no dropout advances it), else [0, 0].
  Tensor seed_offset = NewOutput(p.seed_offset_shape, DType::kInt64, /*zero=*/true);
  if (p.has_seed_offset) {
    ValuesAs<double> given(inputs[3]);
    for (int64_t k = 0; k < 2; ++k) {
      const double v = given.data()[k];
      if (!std::isfinite(v) || v != std::trunc(v) || std::fabs(v) > 9.0e15) {
        ThrowInvalid(internal::InputField(3), "fixed_seed_offset " + std::to_string(v) + " is not an int64");
      }
      seed_offset.data<int64_t>()[k] = static_cast<int64_t>(v);
    }
  }
  if (p.batch == 0 || p.heads == 0 || p.sq == 0) {
    return TensorList(std::move(out), std::move(softmax), std::move(lse), std::move(seed_offset));
  }
  std::unique_ptr<ValuesAs<T>> mask;
  if (p.has_mask) mask = std::make_unique<ValuesAs<T>>(inputs[4]);
  const std::vector<int64_t> mask_strides = MaskStrides(p);
  const int64_t group = p.kv_heads == 0 ? 1 : p.heads / p.kv_heads;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(p.head_dim)));
  const T* q = qv.data();
  const T* k = kv.data();
  const T* v = vv.data();
  T* o = out.data<T>();
  T* sm = p.return_softmax ? softmax.data<T>() : nullptr;
  T* l = lse.data<T>();
  internal::CheckOutputShape({p.sq, p.sk});  // the score block
  std::vector<T> scores(static_cast<size_t>(p.sq * p.sk));
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads; ++h) {
      const int64_t g = h / group;
      // scores[i, j] = q[b, i, h, :] . k[b, j, g, :]
      std::fill(scores.begin(), scores.end(), T(0));
      const T* qb = q + (b * p.sq * p.heads + h) * p.head_dim;
      const T* kb = k + (b * p.sk * p.kv_heads + g) * p.head_dim;
      Gemm<T>(p.sq, p.sk, p.head_dim, MatrixView<T>{qb, p.heads * p.head_dim, 1},
              MatrixView<T>{kb, 1, p.kv_heads * p.head_dim}, scores.data(), p.sk, 1);
      for (int64_t i = 0; i < p.sq; ++i) {
        T* row = scores.data() + i * p.sk;
        const int64_t last = attention::LastKey(p, p.row_offset + i);
        ScoreRow(row, last, scale, mask.get(), mask_strides, b, h, i);
        T max = -std::numeric_limits<T>::infinity();
        for (int64_t j = 0; j <= last; ++j) max = std::max(max, row[j]);
        T sum = 0;
        for (int64_t j = 0; j <= last; ++j) {
          row[j] = std::exp(row[j] - max);
          sum += row[j];
        }
        for (int64_t j = 0; j <= last; ++j) row[j] /= sum;
        std::fill(row + last + 1, row + p.sk, T(0));
        l[(b * p.heads + h) * p.sq + i] = max + std::log(sum);
        if (sm != nullptr) std::copy(row, row + p.sk, sm + ((b * p.heads + h) * p.sq + i) * p.sk);
      }
      // out[b, i, h, :] += P[i, :] . v[b, :, g, :]
      Gemm<T>(p.sq, p.v_dim, p.sk, MatrixView<T>{scores.data(), p.sk, 1},
              MatrixView<T>{v + (b * p.sk * p.kv_heads + g) * p.v_dim, p.kv_heads * p.v_dim, 1},
              o + (b * p.sq * p.heads + h) * p.v_dim, p.heads * p.v_dim, 1);
    }
  }
  return TensorList(std::move(out), std::move(softmax), std::move(lse), std::move(seed_offset));
}

template <typename T>
Tensors RunFlashAttnGrad(const TensorArgs& inputs, const attention::FlashAttentionPlan& p) {
  ValuesAs<T> qv(inputs[0]);
  ValuesAs<T> kv(inputs[1]);
  ValuesAs<T> vv(inputs[2]);
  ValuesAs<T> ov(inputs[3]);
  ValuesAs<T> lv(inputs[4]);
  ValuesAs<T> dov(inputs[7]);
  Tensor q_grad = NewOutput(inputs[0].shape(), DTypeOf<T>::value, /*zero=*/true);
  Tensor k_grad = NewOutput(inputs[1].shape(), DTypeOf<T>::value, /*zero=*/true);
  Tensor v_grad = NewOutput(inputs[2].shape(), DTypeOf<T>::value, /*zero=*/true);
  if (p.batch == 0 || p.heads == 0 || p.sq == 0) {
    return TensorList(std::move(q_grad), std::move(k_grad), std::move(v_grad));
  }
  std::unique_ptr<ValuesAs<T>> mask;
  if (p.has_mask) mask = std::make_unique<ValuesAs<T>>(inputs[6]);
  const std::vector<int64_t> mask_strides = MaskStrides(p);
  const int64_t group = p.kv_heads == 0 ? 1 : p.heads / p.kv_heads;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(p.head_dim)));
  const T* q = qv.data();
  const T* k = kv.data();
  const T* v = vv.data();
  const T* o = ov.data();
  const T* l = lv.data();
  const T* dout = dov.data();
  T* dq = q_grad.data<T>();
  T* dk = k_grad.data<T>();
  T* dv = v_grad.data<T>();
  internal::CheckOutputShape({p.sq, p.sk});  // the score blocks
  std::vector<T> probs(static_cast<size_t>(p.sq * p.sk));
  std::vector<T> dscores(static_cast<size_t>(p.sq * p.sk));
  const int64_t q_rs = p.heads * p.head_dim, k_rs = p.kv_heads * p.head_dim;
  const int64_t o_rs = p.heads * p.v_dim, v_rs = p.kv_heads * p.v_dim;
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads; ++h) {
      const int64_t g = h / group;
      const T* qb = q + (b * p.sq * p.heads + h) * p.head_dim;
      const T* kb = k + (b * p.sk * p.kv_heads + g) * p.head_dim;
      const T* vb = v + (b * p.sk * p.kv_heads + g) * p.v_dim;
      const T* ob = o + (b * p.sq * p.heads + h) * p.v_dim;
      const T* gb = dout + (b * p.sq * p.heads + h) * p.v_dim;
      // probs = Q K^T, dscores = dO V^T
      Gemm<T>(p.sq, p.sk, p.head_dim, MatrixView<T>{qb, q_rs, 1}, MatrixView<T>{kb, 1, k_rs}, probs.data(),
              p.sk, 1, /*overwrite=*/true);
      Gemm<T>(p.sq, p.sk, p.v_dim, MatrixView<T>{gb, o_rs, 1}, MatrixView<T>{vb, 1, v_rs}, dscores.data(),
              p.sk, 1, /*overwrite=*/true);
      for (int64_t i = 0; i < p.sq; ++i) {
        T* prow = probs.data() + i * p.sk;
        T* drow = dscores.data() + i * p.sk;
        const int64_t last = attention::LastKey(p, p.row_offset + i);
        const T row_lse = l[(b * p.heads + h) * p.sq + i];
        T row_d = 0;
        for (int64_t e = 0; e < p.v_dim; ++e) row_d += gb[i * o_rs + e] * ob[i * o_rs + e];
        ScoreRow(prow, last, scale, mask.get(), mask_strides, b, h, i);
        for (int64_t j = 0; j <= last; ++j) {
          prow[j] = std::exp(prow[j] - row_lse);
          drow[j] = prow[j] * (drow[j] - row_d) * scale;
        }
        std::fill(prow + last + 1, prow + p.sk, T(0));
        std::fill(drow + last + 1, drow + p.sk, T(0));
      }
      // dQ[i, :] += dS[i, :] . K;  dK[j, :] += dS[:, j]^T . Q;  dV[j, :] += P[:, j]^T . dO
      Gemm<T>(p.sq, p.head_dim, p.sk, MatrixView<T>{dscores.data(), p.sk, 1}, MatrixView<T>{kb, k_rs, 1},
              dq + (b * p.sq * p.heads + h) * p.head_dim, q_rs, 1);
      Gemm<T>(p.sk, p.head_dim, p.sq, MatrixView<T>{dscores.data(), 1, p.sk}, MatrixView<T>{qb, q_rs, 1},
              dk + (b * p.sk * p.kv_heads + g) * p.head_dim, k_rs, 1);
      Gemm<T>(p.sk, p.v_dim, p.sq, MatrixView<T>{probs.data(), 1, p.sk}, MatrixView<T>{gb, o_rs, 1},
              dv + (b * p.sk * p.kv_heads + g) * p.v_dim, v_rs, 1);
    }
  }
  return TensorList(std::move(q_grad), std::move(k_grad), std::move(v_grad));
}

}  // namespace

Tensors flash_attention(const TensorArgs& inputs, const Attrs& attrs) {
  internal::CheckArityAtLeast(inputs, 3);
  std::vector<Shape> shapes;
  for (const Tensor& t : inputs) shapes.push_back(t.shape());
  const attention::FlashAttentionPlan plan = attention::PlanFlashAttention(shapes, attrs);
  internal::CheckOutputShape(plan.out_shape);
  internal::CheckOutputShape(plan.softmax_shape);
  std::vector<size_t> floating = {0, 1, 2};
  if (plan.has_mask) floating.push_back(4);
  return internal::DispatchFloat(internal::ComputeDTypeOver(inputs, floating), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return RunFlashAttention<T>(inputs, plan);
  });
}

Tensors flash_attn_grad(const TensorArgs& inputs, const Attrs& attrs) {
  internal::CheckArity(inputs, 8);
  std::vector<Shape> shapes;
  for (const Tensor& t : inputs) shapes.push_back(t.shape());
  const attention::FlashAttentionPlan plan = attention::PlanFlashAttnGrad(shapes, attrs);
  std::vector<size_t> floating = {0, 1, 2, 3, 4, 7};
  if (plan.has_mask) floating.push_back(6);
  return internal::DispatchFloat(internal::ComputeDTypeOver(inputs, floating), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return RunFlashAttnGrad<T>(inputs, plan);
  });
}

}  // namespace spmd::kernels::cpu
