// The embeddings: lookup_table_v2, c_embedding and their weight gradients embedding_grad
// and c_embedding_grad (docs/OPS.md "Embedding"; c_embedding under "Paddle's other
// registered ops", the grads under "Backward ops").
#include <string>
#include <vector>

#include "reference/reference.h"
#include "reference/util.h"
#include "rules/ops/embedding_plan.h"

namespace spmd::reference::ops {
namespace {

using internal::InputField;

// Returns `v` as an integral id, or throws naming `field`.
int64_t IdOf(double v, const std::string& field) { return plan::FloatId(v, field); }

}  // namespace

Tensors lookup_table_v2(const Tensors& inputs, const Attrs& attrs) {
  const plan::EmbeddingPlan p = plan::PlanLookupTable(plan::ShapesOf(inputs), attrs);
  const Tensor& ids = inputs[0];
  const Tensor& weight = inputs[1];
  const int64_t padding_idx = p.padding_idx;
  const bool sharded = p.id_limit < 0;  // a local.vocab_start: ids outside this shard read zeros
  const int64_t start = p.start;
  const int64_t vocab = p.vocab;
  const int64_t hidden = p.hidden;
  const Shape& out_shape = p.out_shape;
  Tensor out = internal::Zeros(out_shape);  // ids.shape + [H]
  for (size_t t = 0; t < ids.data.size(); ++t) {
    int64_t id = IdOf(ids.data[t], InputField(0, "data"));
    if (id < 0 || (!sharded && id >= vocab)) {
      plan::ThrowIdOutside(InputField(0, "data"), "id", id, vocab);
    }
    if (padding_idx >= 0 && id == padding_idx) continue;  // stays zero
    int64_t row = id - start;
    if (row < 0 || row >= vocab) continue;  // another shard's row: stays zero
    for (int64_t h = 0; h < hidden; ++h) {
      out.data[t * hidden + h] = weight.data[row * hidden + h];
    }
  }
  return {out};
}

// c_embedding: out[t] = weight[id - start_index] for ids in [start_index, start_index + V),
// zeros for the others; ids must be >= 0 (and < vocab_size when it is >= 0).
Tensors c_embedding(const Tensors& inputs, const Attrs& attrs) {
  const plan::EmbeddingPlan p = plan::PlanCEmbedding(plan::ShapesOf(inputs), attrs);
  const Tensor& weight = inputs[0];
  const Tensor& ids = inputs[1];
  const int64_t start = p.start;
  const int64_t vocab_size = p.id_limit;
  const int64_t rows = p.vocab;
  const int64_t hidden = p.hidden;
  const Shape& out_shape = p.out_shape;
  Tensor out = internal::Zeros(out_shape, weight.dtype);
  for (size_t t = 0; t < ids.data.size(); ++t) {
    const int64_t id = IdOf(ids.data[t], InputField(1, "data"));
    if (id < 0 || (vocab_size >= 0 && id >= vocab_size)) {
      plan::ThrowIdOutside(InputField(1, "data"), "id", id, vocab_size);
    }
    const int64_t row = id - start;
    if (row < 0 || row >= rows) continue;  // another piece's row: stays zero
    for (int64_t h = 0; h < hidden; ++h) out.data[t * hidden + h] = weight.data[row * hidden + h];
  }
  return {out};
}

// weight_grad [V, H]: out_grad's row t added at row id_t - start_index for ids in this
// piece's rows; the others belong to other pieces.
Tensors c_embedding_grad(const Tensors& inputs, const Attrs& attrs) {
  const plan::EmbeddingPlan p = plan::PlanCEmbeddingGrad(plan::ShapesOf(inputs), attrs);
  const Tensor& weight = inputs[0];
  const Tensor& ids = inputs[1];
  const Tensor& out_grad = inputs[2];
  const int64_t start = p.start;
  const int64_t rows = p.vocab;
  const int64_t hidden = p.hidden;
  Tensor weight_grad = internal::Zeros(weight.shape);
  for (size_t t = 0; t < ids.data.size(); ++t) {
    const int64_t id = IdOf(ids.data[t], InputField(1, "data"));
    if (id < 0) ThrowInvalid(InputField(1, "data"), "id " + std::to_string(id) + " is negative");
    const int64_t row = id - start;
    if (row < 0 || row >= rows) continue;
    for (int64_t h = 0; h < hidden; ++h) {
      weight_grad.data[row * hidden + h] += out_grad.data[t * hidden + h];
    }
  }
  return {weight_grad};
}

Tensors embedding_grad(const Tensors& inputs, const Attrs& attrs) {
  const plan::EmbeddingPlan p = plan::PlanEmbeddingGrad(plan::ShapesOf(inputs), attrs);
  const Tensor& ids = inputs[0];
  const Tensor& weight = inputs[1];
  const Tensor& out_grad = inputs[2];
  const int64_t padding_idx = p.padding_idx;
  const bool sharded = p.id_limit < 0;  // a local.vocab_start: ids outside this shard are skipped
  const int64_t start = p.start;
  const int64_t vocab = p.vocab;
  const int64_t hidden = p.hidden;
  Tensor weight_grad = internal::Zeros(weight.shape);
  for (size_t t = 0; t < ids.data.size(); ++t) {
    int64_t id = IdOf(ids.data[t], InputField(0, "data"));
    if (id < 0 || (!sharded && id >= vocab)) {
      plan::ThrowIdOutside(InputField(0, "data"), "id", id, vocab);
    }
    if (padding_idx >= 0 && id == padding_idx) continue;  // the padding row gets nothing
    int64_t row = id - start;
    if (row < 0 || row >= vocab) continue;  // another shard's row
    for (int64_t h = 0; h < hidden; ++h) {
      weight_grad.data[row * hidden + h] += out_grad.data[t * hidden + h];
    }
  }
  return {weight_grad};
}

}  // namespace spmd::reference::ops
