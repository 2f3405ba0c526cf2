// The plans of the softmax cross entropy (rules/ops/loss.cc): attr reads, typed validation
// and output shapes of cross_entropy_with_softmax and its grad, written once for the rules,
// the references (reference/ops_loss.cc), the CPU kernels (kernels/cpu/loss.cc) and the CUDA
// kernels (kernels/cuda/loss.cu). Header-only; no value arithmetic.
//
// Example: logits [4, 10], axis -1, a hard label [4, 1] -> softmax [4, 10], loss [4, 1].
// And Paddle's vocabulary-parallel c_softmax_with_cross_entropy, its grad and its phases
// (PlanCSoftmax).
#pragma once

#include <cmath>
#include <cstdint>
#include <algorithm>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "rules/model/attrs.h"
#include "rules/model/error.h"
#include "rules/engine/op_plan.h"
#include "rules/engine/shape_util.h"
#include "rules/ops/softmax_pieces.h"

namespace spmd::plan {

// The class axis of logits (softmax for the grad) and the loss shape (the class dim 1).
struct CrossEntropyPlan {
  bool soft_label = false;
  bool use_softmax = true;
  int64_t ignore_index = -100;
  int axis = 0;
  Shape loss_shape;
  // The grad on a piece of the class axis (PlanCrossEntropyGrad): the piece's first class
  // and the global class count (localized offset and global shape; 0 and the softmax's
  // class dim on a whole axis).
  int64_t class_start = 0;
  int64_t classes = 0;
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
  const Shape& softmax = shapes[1];
  p.classes = softmax[p.axis];
  if (attrs.local().global_shape) {
    const std::vector<int64_t>& global = *attrs.local().global_shape;
    if (global.size() != softmax.size()) {
      ThrowInvalid(LocalFieldName(LocalField::kGlobalShape), "must have softmax's rank");
    }
    p.classes = global[p.axis];
  }
  p.class_start = attrs.local().vocab_start.value_or(0);
  if (p.class_start < 0 || p.class_start + softmax[p.axis] > p.classes) {
    ThrowInvalid(LocalFieldName(LocalField::kVocabStart), "the piece lies outside the class axis");
  }
  return p;
}

// c_softmax_with_cross_entropy (logits, label[, gathered statistics]) and its grad (softmax,
// label, loss_grad): Paddle's ring_id, rank and nranks checked for range, `arity` inputs,
// input 0 of [..., C] (the class dim last) and each input of `rows_of` of [..., 1]. Returns
// the number of rows. The same checks for the rule, the references and the kernels.
inline int64_t PlanCSoftmax(const Shapes& shapes, const Attrs& attrs, size_t arity,
                            std::initializer_list<size_t> rows_of) {
  softmax_pieces::CheckPaddleCommAttrs(attrs);
  CheckArity(shapes, arity);
  if (shapes[0].empty()) ThrowInvalid(shape::InputField(0, "shape"), "needs a class dim, got []");
  Shape row_shape = shapes[0];
  row_shape.back() = 1;
  for (size_t i : rows_of) {
    if (shapes[i] != row_shape) {
      ThrowInvalid(shape::InputField(i, "shape"), "must have shape " + shape::ShapeString(row_shape) +
                                                      ", got " + shape::ShapeString(shapes[i]));
    }
  }
  int64_t rows = 1;
  for (int64_t d : row_shape) rows *= d;
  return rows;
}

// c_softmax_with_multi_label_cross_entropy (logits, label, smooth_weight[, gathered
// statistics]) and its grad (softmax, label, smooth_weight, loss_grad): logits (softmax)
// [..., C], label and smooth_weight [..., k] (k labels per row; logits' leading dims), loss
// [..., 1] with sum_multi_label_loss (the labels' weighted losses summed), else [..., k].
// The piece: its first class (localized vocab_start) and the global class count (localized
// global_shape, read by the grad; the piece's own C on a whole axis).
struct MultiLabelPlan {
  int64_t rows = 0;     // the product of the leading dims
  int64_t classes = 0;  // the piece's C
  int64_t labels = 0;   // k
  bool sum_loss = true;
  Shape loss_shape;
  int64_t start = 0;
  int64_t global_classes = 0;
};
enum class MultiLabelInputs { kForward, kFinish, kGrad };
inline MultiLabelPlan PlanCSoftmaxMultiLabel(const Shapes& shapes, const Attrs& attrs, MultiLabelInputs form) {
  softmax_pieces::CheckPaddleCommAttrs(attrs);
  CheckArity(shapes, form == MultiLabelInputs::kForward ? 3 : 4);
  const Shape& x = shapes[0];
  if (x.empty()) ThrowInvalid(shape::InputField(0, "shape"), "needs a class dim, got []");
  MultiLabelPlan p;
  p.sum_loss = attrs.GetBool("sum_multi_label_loss");
  const Shape& label = shapes[1];
  if (label.size() != x.size() || !std::equal(x.begin(), x.end() - 1, label.begin())) {
    ThrowInvalid(shape::InputField(1, "shape"), "label must be [..., k] with the leading dims of " +
                                                    shape::ShapeString(x) + ", got " + shape::ShapeString(label));
  }
  if (shapes[2] != label) {
    ThrowInvalid(shape::InputField(2, "shape"), "smooth_weight must have label's shape " +
                                                    shape::ShapeString(label) + ", got " +
                                                    shape::ShapeString(shapes[2]));
  }
  p.classes = x.back();
  p.labels = label.back();
  p.loss_shape = x;
  p.loss_shape.back() = p.sum_loss ? 1 : p.labels;
  if (form == MultiLabelInputs::kGrad && shapes[3] != p.loss_shape) {
    ThrowInvalid(shape::InputField(3, "shape"), "loss_grad must have shape " + shape::ShapeString(p.loss_shape) +
                                                    ", got " + shape::ShapeString(shapes[3]));
  }
  p.rows = 1;
  for (size_t d = 0; d + 1 < x.size(); ++d) p.rows *= x[d];
  p.start = attrs.local().vocab_start.value_or(0);
  if (p.start < 0) ThrowInvalid(LocalFieldName(LocalField::kVocabStart), "negative class offset");
  const std::optional<std::vector<int64_t>>& global = attrs.local().global_shape;
  if (global && global->size() != x.size()) {
    ThrowInvalid(LocalFieldName(LocalField::kGlobalShape), "must have logits' rank");
  }
  p.global_classes = global ? global->back() : p.start + p.classes;
  if (p.start + p.classes > p.global_classes) {
    ThrowInvalid(LocalFieldName(LocalField::kVocabStart), "the piece lies outside the class axis");
  }
  return p;
}

// cross_entropy_with_softmax's exchange phases (logits, label[, gathered statistics]): the
// op's checks on its first two inputs, use_softmax (without it the rule exchanges nothing),
// and the piece's first class along the class axis (the localized offset, as
// c_softmax_with_cross_entropy's; 0 on a whole axis).
struct CrossEntropyPiece {
  CrossEntropyPlan ce;
  int64_t start = 0;
};
inline CrossEntropyPiece PlanCrossEntropyPiece(const Shapes& shapes, const Attrs& attrs, size_t arity) {
  CheckArity(shapes, arity);
  CrossEntropyPiece p;
  p.ce = PlanCrossEntropy(Shapes(shapes.begin(), shapes.begin() + 2), attrs);
  if (!p.ce.use_softmax) ThrowInvalid("attrs.use_softmax", "the exchange phases run with use_softmax only");
  p.start = attrs.local().vocab_start.value_or(0);
  if (p.start < 0) ThrowInvalid(LocalFieldName(LocalField::kVocabStart), "negative class offset");
  return p;
}

// label_smooth (Paddle's): out = (1 - epsilon) * label + epsilon * prior_dist, prior_dist
// given per class (its last dim the label's, every other dim 1) and broadcast over the
// rows; without prior_dist, + epsilon / C for C classes (the label's last dim).
struct LabelSmoothPlan {
  double epsilon = 0.0;
  bool has_prior = false;
  int64_t classes = 0;
  Shape out_shape;
};
inline LabelSmoothPlan PlanLabelSmooth(const Shapes& shapes, const Attrs& attrs) {
  LabelSmoothPlan p;
  p.epsilon = attrs.GetFloat("epsilon");
  if (!std::isfinite(p.epsilon)) ThrowInvalid("attrs.epsilon", "must be finite, got " + std::to_string(p.epsilon));
  if (shapes.empty() || shapes.size() > 2) {
    ThrowInvalid("inputs", "label_smooth takes label and an optional prior_dist, got " +
                               std::to_string(shapes.size()) + " inputs");
  }
  const Shape& label = shapes[0];
  if (label.empty()) ThrowInvalid(shape::InputField(0, "shape"), "label needs a class dim, got []");
  p.classes = label.back();
  p.has_prior = shapes.size() == 2;
  if (p.has_prior) {
    const Shape& prior = shapes[1];
    bool ok = !prior.empty() && prior.size() <= label.size() && prior.back() == p.classes;
    for (size_t d = 0; ok && d + 1 < prior.size(); ++d) ok = prior[d] == 1;
    if (!ok) {
      ThrowInvalid(shape::InputField(1, "shape"), "prior_dist must be [..., 1, " + std::to_string(p.classes) +
                                                      "] (one value per class of label " + shape::ShapeString(label) +
                                                      "), got " + shape::ShapeString(prior));
    }
  }
  p.out_shape = label;
  return p;
}

}  // namespace spmd::plan
