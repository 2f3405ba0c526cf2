// CUDA kernels of the embeddings (the ops of kernels/cpu/embedding.cc): lookup_table_v2,
// c_embedding (a gather of weight rows) and embedding_grad, c_embedding_grad (a scatter-add
// with float atomics: the order of the additions varies run to run). Ids are checked on the
// device as the CPU kernels check them (rows::CheckedIds), which synchronizes the stream once
// per call.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/internal.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/math_util.cuh"
#include "kernels/cuda/registry.h"
#include "kernels/cuda/rows.cuh"
#include "rules/ops/embedding_plan.h"
#include "rules/model/attrs.h"

namespace spmd::kernels::cuda {
namespace {

using cpu::internal::AxisView;
using cpu::internal::CheckArity;
using cpu::internal::ComputeDType;
using cpu::internal::InputField;
using rows::kBlock;
using rows::CheckedIds;
using rows::IdRules;
using rows::IdVerdict;

// ---- lookup_table_v2, embedding_grad ----------------------------------------------------------

// out[t, h] = weight[id_t - start, h], 0 for the padding id and ids outside the shard.
template <typename V>
__global__ void Gather(const int64_t* ids, const V* weight, V* out, int64_t count, int64_t vocab,
                       int64_t hidden, int64_t start, int64_t padding_idx) {
  const int64_t total = count * hidden;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += step) {
    const int64_t t = e / hidden;
    const int64_t h = e - t * hidden;
    const int64_t id = ids[t];
    const int64_t row = id - start;  // no overflow: 0 <= id, 0 <= start
    const bool zero = (padding_idx >= 0 && id == padding_idx) || row < 0 || row >= vocab;
    out[e] = zero ? V(Compute<V>(0)) : weight[row * hidden + h];
  }
}

// lookup_table_v2 (ids, weight) and c_embedding (weight, ids): the Gather above, planned by
// plan::PlanLookupTable / PlanCEmbedding.
template <bool kC>
Tensors Embedding(const TensorArgs& inputs, const Attrs& attrs) {
  CheckTwoByteMix(inputs);
  const plan::EmbeddingPlan p = kC ? plan::PlanCEmbedding(plan::ShapesOf(inputs), attrs)
                                   : plan::PlanLookupTable(plan::ShapesOf(inputs), attrs);
  const Tensor& ids_t = inputs[p.ids_at];
  CallContext ctx(inputs);
  const IdRules rules{InputField(p.ids_at, "data"), "id", p.id_limit};
  IdVerdict bad;
  const Tensor ids = CheckedIds(ids_t, rules, ids_t, ctx.stream, &bad);
  const DType dtype = ComputeDType(inputs, {p.weight_at});
  Temporaries temps(ctx.stream);
  const Tensor& weight = temps.As(inputs[p.weight_at], dtype);
  Tensor out = NewChecked(ids_t, p.out_shape, dtype);
  bad.ThrowIfBad(rules);
  const int64_t count = ids_t.numel();
  if (count * p.hidden == 0) return TensorList(std::move(out));
  DispatchFloating(dtype, InputField(p.weight_at, "dtype"), true, [&](auto zero) {
    using V = decltype(zero);
    Gather<V><<<GridFor(count * p.hidden, kBlock), kBlock, 0, ctx.stream>>>(
        DataOf<int64_t>(ids), DataOf<V>(weight), DataOf<V>(out), count, p.vocab, p.hidden, p.start,
        p.padding_idx);
    SPMD_CUDA_CHECK_LAUNCH();
  });
  return TensorList(std::move(out));
}
Tensors LookupTable(const TensorArgs& inputs, const Attrs& attrs) { return Embedding<false>(inputs, attrs); }
Tensors CEmbedding(const TensorArgs& inputs, const Attrs& attrs) { return Embedding<true>(inputs, attrs); }

// weight_grad[id_t - start, h] += out_grad[t, h] (atomics: float32 / float64 only).
template <typename T>
__global__ void ScatterAdd(const int64_t* ids, const T* grad, T* weight_grad, int64_t count,
                           int64_t vocab, int64_t hidden, int64_t start, int64_t padding_idx) {
  const int64_t total = count * hidden;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += step) {
    const int64_t t = e / hidden;
    const int64_t h = e - t * hidden;
    const int64_t id = ids[t];
    const int64_t row = id - start;
    if ((padding_idx >= 0 && id == padding_idx) || row < 0 || row >= vocab) continue;
    atomicAdd(weight_grad + row * hidden + h, grad[e]);
  }
}

// weight_grad [V, H] with out_grad's rows added at id - start (embedding_grad,
// c_embedding_grad: plan::PlanEmbeddingGrad / PlanCEmbeddingGrad).
Tensor ScatterRows(const TensorArgs& inputs, const plan::EmbeddingPlan& p, DType dtype) {
  const Tensor& ids_t = inputs[p.ids_at];
  const Tensor& grad_t = inputs[2];
  CallContext ctx(inputs);
  const IdRules rules{InputField(p.ids_at, "data"), "id", p.id_limit};
  IdVerdict bad;
  const Tensor ids = CheckedIds(ids_t, rules, ids_t, ctx.stream, &bad);
  Temporaries temps(ctx.stream);
  const Tensor& grad = temps.As(grad_t, dtype);
  Tensor weight_grad = NewChecked(ids_t, p.out_shape, dtype);
  bad.ThrowIfBad(rules);
  if (weight_grad.nbytes() > 0) {
    SPMD_CUDA_CHECK(cudaMemsetAsync(weight_grad.bytes(), 0, weight_grad.nbytes(), ctx.stream));
  }
  const int64_t count = ids_t.numel();
  if (count * p.hidden == 0) return weight_grad;
  // RunCudaKernel widens 2-byte floats (HalfInputs::kWidened): float32 or float64 here.
  DispatchFloating(dtype, InputField(2, "dtype"), /*half=*/false, [&](auto zero) {
    using T = decltype(zero);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {  // atomicAdd's
      ScatterAdd<T><<<GridFor(count * p.hidden, kBlock), kBlock, 0, ctx.stream>>>(
          DataOf<int64_t>(ids), DataOf<T>(grad), DataOf<T>(weight_grad), count, p.vocab, p.hidden,
          p.start, p.padding_idx);
      SPMD_CUDA_CHECK_LAUNCH();
    }
  });
  return weight_grad;
}

Tensors EmbeddingGrad(const TensorArgs& inputs, const Attrs& attrs) {
  const plan::EmbeddingPlan p = plan::PlanEmbeddingGrad(plan::ShapesOf(inputs), attrs);
  return TensorList(ScatterRows(inputs, p, ComputeDType(inputs, {1, 2})));
}

Tensors CEmbeddingGrad(const TensorArgs& inputs, const Attrs& attrs) {
  const plan::EmbeddingPlan p = plan::PlanCEmbeddingGrad(plan::ShapesOf(inputs), attrs);
  return TensorList(ScatterRows(inputs, p, ComputeDType(inputs, {0, 2})));
}

}  // namespace

// The embeddings' CUDA kernels, by op name (kernels/cuda/registry.h).
const CudaKernel ops::lookup_table_v2{&LookupTable, HalfInputs::kNative};
const CudaKernel ops::c_embedding{&CEmbedding, HalfInputs::kNative};
// Float atomics accumulate in the compute dtype: 2-byte floats are widened to float32.
const CudaKernel ops::embedding_grad{&EmbeddingGrad, HalfInputs::kWidened};
const CudaKernel ops::c_embedding_grad{&CEmbeddingGrad, HalfInputs::kWidened};

}  // namespace spmd::kernels::cuda
