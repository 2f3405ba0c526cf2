// The embeddings: lookup_table_v2, c_embedding and their weight gradients embedding_grad and
// c_embedding_grad (docs/OPS.md "Embedding"; c_embedding under "Paddle's other registered
// ops", the grads under "Backward ops"): a gather of weight rows, and its scatter-add.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/internal.h"
#include "kernels/cpu/rows.h"
#include "rules/ops/embedding_plan.h"

namespace spmd::kernels::cpu {
namespace {

using internal::AxisView;
using internal::CheckArity;
using internal::ComputeDType;
using internal::DispatchFloat;
using internal::InputField;
using internal::NewOutput;
using internal::ValuesAs;
using rows::Ids;

}  // namespace

namespace {

// lookup_table_v2 and c_embedding (plan::PlanLookupTable / PlanCEmbedding): out[t] =
// weight[id - start], zeros for the padding id and for ids outside this piece's rows.
Tensors GatherRows(const TensorArgs& inputs, const plan::EmbeddingPlan& p) {
  const Tensor& ids_t = inputs[p.ids_at];
  const std::string ids_field = InputField(p.ids_at, "data");
  const Ids ids(ids_t, ids_field);
  const int64_t hidden = p.hidden;
  return DispatchFloat(ComputeDType(inputs, {p.weight_at}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> wv(inputs[p.weight_at]);
    Tensor out = NewOutput(p.out_shape, DTypeOf<T>::value);
    T* o = out.data<T>();
    const T* w = wv.data();
    const int64_t count = ids_t.numel();
    for (int64_t t = 0; t < count; ++t) {
      const int64_t id = ids[t];
      if (id < 0 || (p.id_limit >= 0 && id >= p.id_limit)) plan::ThrowIdOutside(ids_field, "id", id, p.id_limit);
      T* dst = o + t * hidden;
      const bool padding = p.padding_idx >= 0 && id == p.padding_idx;
      const int64_t row = id - p.start;  // no overflow: 0 <= id, 0 <= start
      if (padding || row < 0 || row >= p.vocab) {  // zeros: padding, or another shard's row
        std::fill(dst, dst + hidden, T(0));
      } else if (hidden > 0) {
        std::memcpy(dst, w + row * hidden, static_cast<size_t>(hidden) * sizeof(T));
      }
    }
    return TensorList(std::move(out));
  });
}

}  // namespace

Tensors lookup_table_v2(const TensorArgs& inputs, const Attrs& attrs) {
  return GatherRows(inputs, plan::PlanLookupTable(plan::ShapesOf(inputs), attrs));
}

Tensors c_embedding(const TensorArgs& inputs, const Attrs& attrs) {
  return GatherRows(inputs, plan::PlanCEmbedding(plan::ShapesOf(inputs), attrs));
}

namespace {

// weight_grad [V, H] with out_grad's rows added at id - start for every id (embedding_grad
// and c_embedding_grad: plan::PlanEmbeddingGrad / PlanCEmbeddingGrad). Ids outside this
// piece's rows are another piece's; the padding id adds nothing.
Tensors ScatterAddRows(const TensorArgs& inputs, const plan::EmbeddingPlan& p, DType dtype) {
  const Tensor& ids_t = inputs[p.ids_at];
  const std::string ids_field = InputField(p.ids_at, "data");
  const Ids ids(ids_t, ids_field);
  const int64_t hidden = p.hidden;
  return DispatchFloat(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> gv(inputs[2]);
    Tensor weight_grad = NewOutput(p.out_shape, DTypeOf<T>::value, /*zero=*/true);
    T* w = weight_grad.data<T>();
    const T* g = gv.data();
    const int64_t count = ids_t.numel();
    for (int64_t t = 0; t < count; ++t) {
      const int64_t id = ids[t];
      if (id < 0 || (p.id_limit >= 0 && id >= p.id_limit)) plan::ThrowIdOutside(ids_field, "id", id, p.id_limit);
      const int64_t row = id - p.start;  // no overflow: 0 <= id, 0 <= start
      if ((p.padding_idx >= 0 && id == p.padding_idx) || row < 0 || row >= p.vocab) continue;
      T* dst = w + row * hidden;
      const T* src = g + t * hidden;
      for (int64_t h = 0; h < hidden; ++h) dst[h] += src[h];
    }
    return TensorList(std::move(weight_grad));
  });
}

}  // namespace

Tensors embedding_grad(const TensorArgs& inputs, const Attrs& attrs) {
  return ScatterAddRows(inputs, plan::PlanEmbeddingGrad(plan::ShapesOf(inputs), attrs), ComputeDType(inputs, {1, 2}));
}

// c_embedding_grad: the rows of this piece, [start_index, start_index + V), gather out_grad.
Tensors c_embedding_grad(const TensorArgs& inputs, const Attrs& attrs) {
  return ScatterAddRows(inputs, plan::PlanCEmbeddingGrad(plan::ShapesOf(inputs), attrs), ComputeDType(inputs, {0, 2}));
}

}  // namespace spmd::kernels::cpu
