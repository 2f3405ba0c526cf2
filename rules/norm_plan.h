// The plans of the normalisations, embeddings and losses (rules/ops_norm.cc): attr reads,
// typed validation and output shapes of softmax_grad, layer_norm, rms_norm and their grads,
// lookup_table_v2, c_embedding, embedding_grad, c_embedding_grad, cross_entropy_with_softmax
// and its grad, written once for the references (reference/ops_norm.cc), the CPU kernels
// (kernels/cpu/norm.cc) and the CUDA kernels (kernels/cuda/norm.cu), which keep only their
// loops. Header-only; no value arithmetic.
//
// Example: layer_norm of x [4, 6, 8] with begin_norm_axis 1 -> rows 4, n 48, scale and
// bias [48], mean and variance [4].
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "rules/attrs.h"
#include "rules/error.h"
#include "rules/local_attrs.h"
#include "rules/op_plan.h"
#include "rules/shape_util.h"

namespace spmd::plan {

// softmax_grad (out, out_grad): out_grad must have out's shape.
inline void PlanSoftmaxGrad(const Shapes& shapes) {
  CheckArity(shapes, 2);
  if (shapes[1] != shapes[0]) {
    ThrowInvalid(shape::InputField(1, "shape"),
                 "out_grad " + shape::ShapeString(shapes[1]) + " != out " + shape::ShapeString(shapes[0]));
  }
}

// layer_norm / rms_norm and their grads: x split at begin_norm_axis into [outer, n].
struct NormSplit {
  int64_t begin = 0;
  int64_t outer = 1;
  int64_t n = 1;
  Shape stats_shape;  // x.shape[:begin]: mean, variance, invvar
};

inline NormSplit SplitForNorm(const Shape& x, int64_t begin_norm_axis) {
  NormSplit split;
  const auto rank = static_cast<int64_t>(x.size());
  split.begin = shape::NormalizeAxis(begin_norm_axis, rank, "attrs.begin_norm_axis");
  for (int64_t d = 0; d < rank; ++d) {
    if (d < split.begin) {
      split.outer *= x[d];
      split.stats_shape.push_back(x[d]);
    } else {
      split.n *= x[d];
    }
  }
  if (split.n == 0) {
    ThrowInvalid(shape::InputField(0, "shape"),
                 "normalising over an empty set of elements of " + shape::ShapeString(x));
  }
  return split;
}

// epsilon of the normalisations: finite and >= 0 (a negative one makes the root of a
// constant row's variance NaN).
inline void CheckNormEpsilon(const Attrs& attrs) {
  const double epsilon = attrs.GetFloat("epsilon");
  if (!std::isfinite(epsilon) || epsilon < 0.0) {
    ThrowInvalid("attrs.epsilon", "must be finite and >= 0, got " + std::to_string(epsilon));
  }
}

// layer_norm (x, scale, bias; params 2) or rms_norm (x, scale; params 1): epsilon and
// begin_norm_axis read, the parameters [n].
inline NormSplit PlanNorm(const Shapes& shapes, const Attrs& attrs, size_t params) {
  CheckNormEpsilon(attrs);
  const int64_t begin_norm_axis = attrs.GetInt("begin_norm_axis");
  CheckArity(shapes, 1 + params);
  NormSplit split = SplitForNorm(shapes[0], begin_norm_axis);
  for (size_t p = 1; p <= params; ++p) {
    if (shapes[p] != Shape{split.n}) {
      ThrowInvalid(shape::InputField(p, "shape"),
                   "expected [" + std::to_string(split.n) + "], got " + shape::ShapeString(shapes[p]));
    }
  }
  return split;
}

// layer_norm_grad (params 2, statistics 2) / rms_norm_grad (1, 1): x, the parameters, the
// statistics, out_grad (shape::CheckNormGradShapes).
inline NormSplit PlanNormGrad(const Shapes& shapes, const Attrs& attrs, size_t params, size_t statistics) {
  CheckNormEpsilon(attrs);
  const int64_t begin_norm_axis = attrs.GetInt("begin_norm_axis");
  CheckArity(shapes, 2 + params + statistics);
  NormSplit split = SplitForNorm(shapes[0], begin_norm_axis);
  shape::CheckNormGradShapes(shapes, split.begin, params, statistics);
  return split;
}

// ---- embeddings ---------------------------------------------------------------------------

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
// lookup_table_v2's localized __vocab_start: this shard holds rows [start, start + V);
// without it every id must be a row of the weight.
inline void ReadVocabStart(const Attrs& attrs, EmbeddingPlan& p) {
  const bool sharded = attrs.Has(kLocalVocabStart);
  p.start = sharded ? attrs.GetInt(kLocalVocabStart) : 0;
  if (p.start < 0) ThrowInvalid(std::string("attrs.") + kLocalVocabStart, "negative row offset");
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

// ---- cross_entropy_with_softmax -----------------------------------------------------------

// The class axis of logits (softmax for the grad) and the loss shape (the class dim 1).
struct CrossEntropyPlan {
  bool soft_label = false;
  bool use_softmax = true;
  int64_t ignore_index = -100;
  int axis = 0;
  Shape loss_shape;
};

namespace internal {
inline CrossEntropyPlan ReadCrossEntropyAttrs(const Attrs& attrs) {
  CrossEntropyPlan p;
  p.soft_label = attrs.GetBool("soft_label");
  p.use_softmax = attrs.GetBool("use_softmax");
  (void)attrs.GetBool("numeric_stable_mode");  // the stable form is always used
  p.ignore_index = attrs.GetInt("ignore_index");
  p.axis = static_cast<int>(attrs.GetInt("axis"));
  return p;
}
inline void ClassAxis(const Shape& probs, size_t at, const std::string& what, CrossEntropyPlan& p) {
  if (probs.empty()) ThrowInvalid(shape::InputField(at, "shape"), what + " need a class dim, got []");
  p.axis = shape::NormalizeAxis(p.axis, static_cast<int64_t>(probs.size()), "attrs.axis");
  p.loss_shape = probs;
  p.loss_shape[p.axis] = 1;
}
// The label (input `label`): the probabilities' shape when soft, the loss shape when hard.
inline void CheckLabel(const CrossEntropyPlan& p, const Shapes& shapes, int label, const Shape& probs) {
  const Shape& want = p.soft_label ? probs : p.loss_shape;
  if (shapes[label] != want) {
    ThrowInvalid(shape::InputField(label, "shape"), std::string(p.soft_label ? "soft" : "hard") +
                                                        " label must have shape " + shape::ShapeString(want) +
                                                        ", got " + shape::ShapeString(shapes[label]));
  }
}
}  // namespace internal

// cross_entropy_with_softmax (logits, label) -> softmax (logits' shape), loss: a soft
// label has logits' shape, a hard one the loss shape.
inline CrossEntropyPlan PlanCrossEntropy(const Shapes& shapes, const Attrs& attrs) {
  CrossEntropyPlan p = internal::ReadCrossEntropyAttrs(attrs);
  CheckArity(shapes, 2);
  internal::ClassAxis(shapes[0], 0, "logits", p);
  internal::CheckLabel(p, shapes, 1, shapes[0]);
  return p;
}

// cross_entropy_with_softmax_grad (label, softmax, loss_grad) -> input_grad (softmax's shape).
inline CrossEntropyPlan PlanCrossEntropyGrad(const Shapes& shapes, const Attrs& attrs) {
  CrossEntropyPlan p = internal::ReadCrossEntropyAttrs(attrs);
  CheckArity(shapes, 3);
  internal::ClassAxis(shapes[1], 1, "softmax", p);
  internal::CheckLabel(p, shapes, 0, shapes[1]);
  if (shapes[2] != p.loss_shape) {
    ThrowInvalid(shape::InputField(2, "shape"), "loss_grad must have shape " + shape::ShapeString(p.loss_shape) +
                                                    ", got " + shape::ShapeString(shapes[2]));
  }
  return p;
}

}  // namespace spmd::plan
