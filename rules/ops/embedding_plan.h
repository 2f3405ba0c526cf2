// The plans of the embeddings (rules/ops/embedding.cc): attr reads, typed validation and
// output shapes of lookup_table_v2, c_embedding, embedding_grad and c_embedding_grad, written
// once for the rules, the references (reference/ops_embedding.cc), the CPU kernels
// (kernels/cpu/embedding.cc) and the CUDA kernels (kernels/cuda/embedding.cu). Header-only;
// no value arithmetic (the ids' values are the kernels' to check, plan::FloatId).
//
// Example: lookup_table_v2 of ids [4, 6] and weight [50, 8] -> out [4, 6, 8].
#pragma once

#include <cstdint>
#include <string>

#include "rules/model/attrs.h"
#include "rules/model/error.h"
#include "rules/engine/op_plan.h"
#include "rules/engine/shape_util.h"

namespace spmd::plan {

// A gather (or, for the grads, a scatter) of weight rows [vocab, hidden]: id t reads row
// id - start when it lies in [0, vocab) and is not padding_idx, else zeros (another piece's
// row); ids must lie in [0, id_limit) (only >= 0 when id_limit < 0).
struct EmbeddingPlan {
  size_t ids_at = 0, weight_at = 1;
  int64_t vocab = 0, hidden = 0;
  int64_t start = 0;
  int64_t id_limit = -1;
  int64_t padding_idx = -1;
  Shape out_shape;  // the forward's ids.shape + [H]; the grads' [V, H]
};

namespace internal {
inline EmbeddingPlan EmbeddingRows(const Shapes& shapes, size_t ids_at, size_t weight_at) {
  const Shape& weight = shapes[weight_at];
  if (weight.size() != 2) {
    ThrowInvalid(shape::InputField(weight_at, "shape"), "weight must be [V, H], got " + shape::ShapeString(weight));
  }
  EmbeddingPlan p;
  p.ids_at = ids_at;
  p.weight_at = weight_at;
  p.vocab = weight[0];
  p.hidden = weight[1];
  p.out_shape = shapes[ids_at];
  p.out_shape.push_back(p.hidden);
  return p;
}
inline void CheckRowsGrad(const Shapes& shapes, EmbeddingPlan& p) {
  if (shapes[2] != p.out_shape) {
    ThrowInvalid(shape::InputField(2, "shape"), "out_grad must be " + shape::ShapeString(p.out_shape) +
                                                    " (x.shape + [H]), got " + shape::ShapeString(shapes[2]));
  }
  p.out_shape = {p.vocab, p.hidden};
}
// lookup_table_v2's localized local.vocab_start: this shard holds rows [start, start + V);
// without it every id must be a row of the weight.
inline void ReadVocabStart(const Attrs& attrs, EmbeddingPlan& p) {
  const bool sharded = attrs.local().vocab_start.has_value();
  p.start = sharded ? *attrs.local().vocab_start : 0;
  if (p.start < 0) ThrowInvalid(std::string(LocalFieldName(LocalField::kVocabStart)), "negative row offset");
  p.id_limit = sharded ? -1 : p.vocab;
}
inline int64_t ReadStartIndex(const Attrs& attrs) {
  const int64_t start = attrs.GetInt("start_index");
  return start;
}
// start_index in [0, 2^61], so that a shard's start (start_index plus its first row, at
// most 2^62) cannot overflow.
inline void CheckStartIndex(int64_t start) {
  if (start < 0 || start > (int64_t{1} << 61)) ThrowInvalid("attrs.start_index", "must be in [0, 2^61]");
}
}  // namespace internal

// lookup_table_v2 (ids, weight [V, H]) -> ids.shape + [H].
inline EmbeddingPlan PlanLookupTable(const Shapes& shapes, const Attrs& attrs) {
  const int64_t padding_idx = attrs.GetInt("padding_idx");
  (void)attrs.GetBool("sparse");  // how Paddle stores the gradient; no effect on values
  CheckArity(shapes, 2);
  EmbeddingPlan p = internal::EmbeddingRows(shapes, 0, 1);
  p.padding_idx = padding_idx;
  internal::ReadVocabStart(attrs, p);
  return p;
}

// c_embedding (weight [V, H], ids) -> ids.shape + [H]: rows [start_index, start_index + V)
// of a table of vocab_size rows (no upper limit on the ids when vocab_size < 0).
inline EmbeddingPlan PlanCEmbedding(const Shapes& shapes, const Attrs& attrs) {
  const int64_t start = internal::ReadStartIndex(attrs);
  const int64_t vocab_size = attrs.GetInt("vocab_size");
  CheckArity(shapes, 2);
  EmbeddingPlan p = internal::EmbeddingRows(shapes, 1, 0);
  internal::CheckStartIndex(start);
  p.start = start;
  p.id_limit = vocab_size < 0 ? -1 : vocab_size;
  return p;
}

// embedding_grad (ids, weight [V, H], out_grad ids.shape + [H]) -> [V, H].
inline EmbeddingPlan PlanEmbeddingGrad(const Shapes& shapes, const Attrs& attrs) {
  const int64_t padding_idx = attrs.GetInt("padding_idx");
  (void)attrs.GetBool("sparse");
  CheckArity(shapes, 3);
  EmbeddingPlan p = internal::EmbeddingRows(shapes, 0, 1);
  internal::CheckRowsGrad(shapes, p);
  p.padding_idx = padding_idx;
  internal::ReadVocabStart(attrs, p);
  return p;
}

// c_embedding_grad (weight [V, H], ids, out_grad ids.shape + [H]) -> [V, H]; ids outside
// this piece's rows belong to other pieces.
inline EmbeddingPlan PlanCEmbeddingGrad(const Shapes& shapes, const Attrs& attrs) {
  const int64_t start = internal::ReadStartIndex(attrs);
  CheckArity(shapes, 3);
  EmbeddingPlan p = internal::EmbeddingRows(shapes, 1, 0);
  internal::CheckRowsGrad(shapes, p);
  internal::CheckStartIndex(start);
  p.start = start;
  return p;
}

}  // namespace spmd::plan
