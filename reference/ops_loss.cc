// The softmax cross entropies: cross_entropy_with_softmax, its grad, and Paddle's
// vocabulary-parallel c_softmax_with_cross_entropy and c_softmax_with_multi_label_cross_entropy
// with their phases and grads (docs/OPS.md
// "Loss"; the grad under "Backward ops", the c_ ops under "Paddle's other registered ops").
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "reference/reference.h"
#include "reference/softmax_rows.h"
#include "reference/util.h"
#include "rules/model/attrs.h"
#include "rules/ops/loss_plan.h"
#include "rules/ops/norm_pieces.h"
#include "rules/ops/softmax_pieces.h"

namespace spmd::reference::ops {
namespace {

using internal::AxisView;
using internal::CheckArity;
using internal::InputField;
using internal::ShapeToString;
using rows::SoftmaxAlong;

// Returns `v` as an integral id, or throws naming `field`.
int64_t IdOf(double v, const std::string& field) { return plan::FloatId(v, field); }

}  // namespace

Tensors cross_entropy_with_softmax(const Tensors& inputs, const Attrs& attrs) {
  const plan::CrossEntropyPlan ce = plan::PlanCrossEntropy(plan::ShapesOf(inputs), attrs);
  const bool soft_label = ce.soft_label;
  const bool use_softmax = ce.use_softmax;
  const int64_t ignore_index = ce.ignore_index;
  const Tensor& logits = inputs[0];
  const Tensor& label = inputs[1];
  AxisView view = internal::ViewAlong(logits.shape, ce.axis);
  Tensor softmax_out = use_softmax ? SoftmaxAlong(logits, view) : logits;
  softmax_out.dtype = DType::kFloat64;
  const Shape& loss_shape = ce.loss_shape;
  Tensor loss = internal::Zeros(loss_shape);
  for (int64_t o = 0; o < view.outer; ++o) {
    for (int64_t i = 0; i < view.inner; ++i) {
      int64_t at = o * view.inner + i;  // position in loss (and in a hard label)
      if (soft_label) {
        double total = 0.0;
        for (int64_t a = 0; a < view.len; ++a) {
          total += label.data[view.At(o, a, i)] * std::log(softmax_out.data[view.At(o, a, i)]);
        }
        loss.data[at] = -total;
        continue;
      }
      int64_t id = IdOf(label.data[at], InputField(1, "data"));
      if (id == ignore_index) continue;  // loss stays 0
      if (id < 0 || id >= view.len) {
        plan::ThrowIdOutside(InputField(1, "data"), "label", id, view.len);
      }
      loss.data[at] = -std::log(softmax_out.data[view.At(o, id, i)]);
    }
  }
  return {softmax_out, loss};
}

// ---- cross_entropy_with_softmax's exchange phases (use_softmax; the class axis a piece) ----

namespace {

// The phases' inputs: the plan (norm_pieces' and loss_plan's checks) and the view of the
// logits along the class axis.
struct CrossEntropyPieceView {
  plan::CrossEntropyPiece piece;
  AxisView view;
  int64_t rows() const { return view.outer * view.inner; }
};
CrossEntropyPieceView CheckCrossEntropyPiece(const Tensors& inputs, const Attrs& attrs, size_t arity) {
  CrossEntropyPieceView p;
  p.piece = plan::PlanCrossEntropyPiece(plan::ShapesOf(inputs), attrs, arity);
  p.view = internal::ViewAlong(inputs[0].shape, p.piece.ce.axis);
  return p;
}

}  // namespace

// logits, label -> every row's four numbers over the piece (softmax_pieces::PieceStats for
// a hard label, SoftPieceStats for a soft one), [logits' shape without the class axis, 4].
Tensors cross_entropy_with_softmax_stats(const Tensors& inputs, const Attrs& attrs) {
  const CrossEntropyPieceView p = CheckCrossEntropyPiece(inputs, attrs, 2);
  const AxisView& v = p.view;
  const Tensor& x = inputs[0];
  const Tensor& label = inputs[1];
  Tensor stats = internal::Zeros(norm_pieces::SummaryShape(x.shape, p.piece.ce.axis, softmax_pieces::kStats));
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t i = 0; i < v.inner; ++i) {
      const int64_t r = o * v.inner + i;
      const int64_t at = v.len > 0 ? v.At(o, 0, i) : 0;
      double* st = stats.data.data() + r * softmax_pieces::kStats;
      if (p.piece.ce.soft_label) {
        softmax_pieces::SoftPieceStats(x.data.data() + at, label.data.data() + at, v.len, v.inner, st);
        continue;
      }
      const int64_t id = IdOf(label.data[r], InputField(1, "data"));
      softmax_pieces::PieceStats(x.data.data() + at, v.len, v.inner, id, p.piece.start,
                                 id == p.piece.ce.ignore_index, st);
    }
  }
  return {stats};
}

// logits, label, gathered -> the piece's softmax_out and every row's whole loss.
Tensors cross_entropy_with_softmax_finish(const Tensors& inputs, const Attrs& attrs) {
  const CrossEntropyPieceView p = CheckCrossEntropyPiece(inputs, attrs, 3);
  const AxisView& v = p.view;
  const int64_t k = softmax_pieces::kStats;
  const Tensor& gathered = inputs[2];
  const int64_t pieces = norm_pieces::GatheredPieces(gathered.shape, static_cast<int64_t>(gathered.data.size()), 2,
                                                     p.rows(), k);
  const Tensor& x = inputs[0];
  Tensor softmax_out = internal::Zeros(x.shape);
  Tensor loss = internal::Zeros(p.piece.ce.loss_shape);
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t i = 0; i < v.inner; ++i) {
      const int64_t r = o * v.inner + i;
      const auto row = softmax_pieces::Combine(gathered.data.data() + r * k, pieces, p.rows() * k);
      if (p.piece.ce.soft_label) {
        loss.data[r] = softmax_pieces::SoftLoss(row, softmax_pieces::SoftLabelTotal(gathered.data.data() + r * k,
                                                                                   pieces, p.rows() * k));
      } else {
        const int64_t id = IdOf(inputs[1].data[r], InputField(1, "data"));
        const bool ignored = id == p.piece.ce.ignore_index;
        if (!ignored && row.holders != 1) {
          ThrowInvalid(InputField(1, "data"), "label " + std::to_string(id) + " is outside the class axis");
        }
        loss.data[r] = softmax_pieces::Loss(row, ignored);
      }
      for (int64_t a = 0; a < v.len; ++a) {
        const int64_t at = v.At(o, a, i);
        softmax_out.data[at] = std::exp(x.data[at] - row.max) / row.sum;
      }
    }
  }
  return {softmax_out, loss};
}

namespace {

// c_softmax_with_cross_entropy's inputs: logits [..., C] (the class axis last), label
// [..., 1] of ids; the attrs Paddle passes (ring_id, rank, nranks) are checked for range
// only: spmdkit takes the piece from the layout.
void CheckCSoftmaxInputs(const Tensors& inputs, const Attrs& attrs, size_t arity) {
  (void)plan::PlanCSoftmax(plan::ShapesOf(inputs), attrs, arity, {1});
}

}  // namespace

// The single-device op: softmax along the last dim and the hard-label loss -log p[label]
// (0 where the label is ignore_index), written directly (not from the phases below).
Tensors c_softmax_with_cross_entropy(const Tensors& inputs, const Attrs& attrs) {
  CheckCSoftmaxInputs(inputs, attrs, 2);
  const Tensor& logits = inputs[0];
  const int64_t ignore_index = attrs.GetInt("ignore_index");
  const AxisView view = internal::ViewAlong(logits.shape, internal::Rank(logits) - 1);
  Tensor softmax = SoftmaxAlong(logits, view);
  Shape loss_shape = logits.shape;
  loss_shape.back() = 1;
  Tensor loss = internal::Zeros(loss_shape);
  for (int64_t o = 0; o < view.outer; ++o) {
    const int64_t id = IdOf(inputs[1].data[o], InputField(1, "data"));
    if (id == ignore_index) continue;
    if (id < 0 || id >= view.len) {
      ThrowInvalid(InputField(1, "data"),
                   "label " + std::to_string(id) + " outside [0, " + std::to_string(view.len) + ")");
    }
    loss.data[o] = -std::log(softmax.data[view.At(o, id, 0)]);
  }
  return {softmax, loss};
}

// Phase 1 on a piece (classes [local.vocab_start, + C)): every row's four numbers,
// softmax_pieces::PieceStats, as [..., 4].
Tensors c_softmax_with_cross_entropy_stats(const Tensors& inputs, const Attrs& attrs) {
  CheckCSoftmaxInputs(inputs, attrs, 2);
  const Tensor& logits = inputs[0];
  const int64_t ignore_index = attrs.GetInt("ignore_index");
  const int64_t start = attrs.local().vocab_start.value_or(0);
  const int64_t len = logits.shape.back();
  Shape stats_shape = logits.shape;
  stats_shape.back() = softmax_pieces::kStats;
  Tensor stats = internal::Zeros(stats_shape);
  const int64_t rows = static_cast<int64_t>(inputs[1].data.size());
  for (int64_t o = 0; o < rows; ++o) {
    const int64_t id = IdOf(inputs[1].data[o], InputField(1, "data"));
    softmax_pieces::PieceStats(logits.data.data() + o * len, len, 1, id, start, id == ignore_index,
                               stats.data.data() + o * softmax_pieces::kStats);
  }
  return {stats};
}

// Phase 2: the piece's softmax and every row's loss from the gathered [P, ..., 4].
Tensors c_softmax_with_cross_entropy_finish(const Tensors& inputs, const Attrs& attrs) {
  CheckCSoftmaxInputs(inputs, attrs, 3);
  const Tensor& logits = inputs[0];
  const Tensor& gathered = inputs[2];
  const int64_t ignore_index = attrs.GetInt("ignore_index");
  const int64_t len = logits.shape.back();
  const int64_t rows = static_cast<int64_t>(inputs[1].data.size());
  const int64_t pieces = gathered.shape.empty() ? 0 : gathered.shape[0];
  if (pieces < 1 || static_cast<int64_t>(gathered.data.size()) != pieces * rows * softmax_pieces::kStats) {
    ThrowInvalid(InputField(2, "shape"), "the gathered statistics must be [pieces, rows, 4]");
  }
  Tensor softmax = internal::Zeros(logits.shape);
  Shape loss_shape = logits.shape;
  loss_shape.back() = 1;
  Tensor loss = internal::Zeros(loss_shape);
  for (int64_t o = 0; o < rows; ++o) {
    const int64_t id = IdOf(inputs[1].data[o], InputField(1, "data"));
    const bool ignored = id == ignore_index;
    const auto row = softmax_pieces::Combine(gathered.data.data() + o * softmax_pieces::kStats, pieces,
                                             rows * softmax_pieces::kStats);
    if (!ignored && row.holders != 1) {
      ThrowInvalid(InputField(1, "data"), "label " + std::to_string(id) + " is outside the class axis");
    }
    for (int64_t j = 0; j < len; ++j) {
      softmax.data[o * len + j] = std::exp(logits.data[o * len + j] - row.max) / row.sum;
    }
    loss.data[o] = softmax_pieces::Loss(row, ignored);
  }
  return {softmax, loss};
}

// (softmax - onehot(label)) * loss_grad along the last dim, 0 on ignored rows. On a piece
// (localized local.vocab_start, local.global_shape) the one-hot lands only where the piece holds
// the label; labels are checked against the global class count.
Tensors c_softmax_with_cross_entropy_grad(const Tensors& inputs, const Attrs& attrs) {
  (void)plan::PlanCSoftmax(plan::ShapesOf(inputs), attrs, 3, {1, 2});
  const Tensor& softmax = inputs[0];
  const int64_t len = softmax.shape.back();
  const int64_t start = attrs.local().vocab_start.value_or(0);
  const int64_t classes = attrs.local().global_shape.has_value() ? attrs.local().global_shape->back() : len;
  const int64_t ignore_index = attrs.GetInt("ignore_index");
  Tensor grad = internal::Zeros(softmax.shape);
  const int64_t rows = static_cast<int64_t>(inputs[1].data.size());
  for (int64_t o = 0; o < rows; ++o) {
    const int64_t id = IdOf(inputs[1].data[o], InputField(1, "data"));
    if (id == ignore_index) continue;  // the row stays 0
    if (id < 0 || id >= classes) {
      ThrowInvalid(InputField(1, "data"),
                   "label " + std::to_string(id) + " outside [0, " + std::to_string(classes) + ")");
    }
    const double g = inputs[2].data[o];
    for (int64_t j = 0; j < len; ++j) {
      const double onehot = start + j == id ? 1.0 : 0.0;
      grad.data[o * len + j] = (softmax.data[o * len + j] - onehot) * g;
    }
  }
  return {grad};
}

// ---- c_softmax_with_multi_label_cross_entropy: k weighted hard labels per row ---------------

namespace {

using plan::MultiLabelInputs;

plan::MultiLabelPlan PlanMultiLabel(const Tensors& inputs, const Attrs& attrs, MultiLabelInputs form) {
  return plan::PlanCSoftmaxMultiLabel(plan::ShapesOf(inputs), attrs, form);
}

// Label `at` of the label tensor as an id, or -1 with `ignored` set where it is ignore_index.
int64_t LabelAt(const Tensor& label, int64_t at, int64_t ignore_index, bool& ignored) {
  const int64_t id = IdOf(label.data[at], InputField(1, "data"));
  ignored = id == ignore_index;
  return id;
}

}  // namespace

// The single-device op: softmax along the last dim; label j of a row costs weight_j * (the
// row's log-sum-exp minus its logit) = weight_j * -log p[label_j], 0 where it is ignore_index
// (a p that underflows to 0 still gives a finite cost); summed over the row's
// labels (sum_multi_label_loss) or one per label. Written directly, not from the phases.
Tensors c_softmax_with_multi_label_cross_entropy(const Tensors& inputs, const Attrs& attrs) {
  const plan::MultiLabelPlan p = PlanMultiLabel(inputs, attrs, MultiLabelInputs::kForward);
  const int64_t ignore_index = attrs.GetInt("ignore_index");
  const AxisView view = internal::ViewAlong(inputs[0].shape, internal::Rank(inputs[0]) - 1);
  Tensor softmax = SoftmaxAlong(inputs[0], view);
  Tensor loss = internal::Zeros(p.loss_shape);
  for (int64_t o = 0; o < p.rows; ++o) {
    const double* x = inputs[0].data.data() + o * p.classes;
    double max = -std::numeric_limits<double>::infinity(), sum = 0;
    for (int64_t c = 0; c < p.classes; ++c) max = std::max(max, x[c]);
    for (int64_t c = 0; c < p.classes; ++c) sum += std::exp(x[c] - max);
    const double lse = max + std::log(sum);
    for (int64_t j = 0; j < p.labels; ++j) {
      const int64_t at = o * p.labels + j;
      bool ignored = false;
      const int64_t id = LabelAt(inputs[1], at, ignore_index, ignored);
      if (ignored) continue;
      if (id < 0 || id >= p.classes) plan::ThrowIdOutside(InputField(1, "data"), "label", id, p.classes);
      loss.data[p.sum_loss ? o : at] += (lse - x[id]) * inputs[2].data[at];
    }
  }
  return {softmax, loss};
}

// Phase 1 on a piece (classes [local.vocab_start, + C)): every row's 2 + 2k numbers
// (softmax_pieces::PieceMaxSum, then PieceLabel for each label), as [..., 2 + 2k].
Tensors c_softmax_with_multi_label_cross_entropy_stats(const Tensors& inputs, const Attrs& attrs) {
  const plan::MultiLabelPlan p = PlanMultiLabel(inputs, attrs, MultiLabelInputs::kForward);
  const int64_t ignore_index = attrs.GetInt("ignore_index");
  const int64_t width = softmax_pieces::MultiLabelStats(p.labels);
  Shape stats_shape = inputs[0].shape;
  stats_shape.back() = width;
  Tensor stats = internal::Zeros(stats_shape);
  for (int64_t o = 0; o < p.rows; ++o) {
    const double* x = inputs[0].data.data() + o * p.classes;
    double* st = stats.data.data() + o * width;
    softmax_pieces::PieceMaxSum(x, p.classes, 1, st);
    for (int64_t j = 0; j < p.labels; ++j) {
      bool ignored = false;
      const int64_t id = LabelAt(inputs[1], o * p.labels + j, ignore_index, ignored);
      softmax_pieces::PieceLabel(x, p.classes, 1, id, p.start, ignored, st + 2 + 2 * j);
    }
  }
  return {stats};
}

// Phase 2: the piece's softmax and every row's loss from the gathered [P, ..., 2 + 2k].
Tensors c_softmax_with_multi_label_cross_entropy_finish(const Tensors& inputs, const Attrs& attrs) {
  const plan::MultiLabelPlan p = PlanMultiLabel(inputs, attrs, MultiLabelInputs::kFinish);
  const int64_t ignore_index = attrs.GetInt("ignore_index");
  const int64_t width = softmax_pieces::MultiLabelStats(p.labels);
  const Tensor& gathered = inputs[3];
  const int64_t pieces = gathered.shape.empty() ? 0 : gathered.shape[0];
  if (pieces < 1 || static_cast<int64_t>(gathered.data.size()) != pieces * p.rows * width) {
    ThrowInvalid(InputField(3, "shape"), "the gathered statistics must be [pieces, rows, 2 + 2k]");
  }
  Tensor softmax = internal::Zeros(inputs[0].shape);
  Tensor loss = internal::Zeros(p.loss_shape);
  for (int64_t o = 0; o < p.rows; ++o) {
    const double* g = gathered.data.data() + o * width;
    auto row = softmax_pieces::CombineMaxSum(g, pieces, p.rows * width);
    for (int64_t c = 0; c < p.classes; ++c) {
      softmax.data[o * p.classes + c] = std::exp(inputs[0].data[o * p.classes + c] - row.max) / row.sum;
    }
    for (int64_t j = 0; j < p.labels; ++j) {
      const int64_t at = o * p.labels + j;
      bool ignored = false;
      const int64_t id = LabelAt(inputs[1], at, ignore_index, ignored);
      softmax_pieces::CombineLabel(g, pieces, p.rows * width, 2 + 2 * j, row);
      if (!ignored && row.holders != 1) {
        ThrowInvalid(InputField(1, "data"), "label " + std::to_string(id) + " is outside the class axis");
      }
      loss.data[p.sum_loss ? o : at] += softmax_pieces::Loss(row, ignored) * inputs[2].data[at];
    }
  }
  return {softmax, loss};
}

// The logits' gradient: for each label j of a row not ignored, weight_j * g_j * (softmax -
// onehot(label_j)), g_j the row's loss_grad (summed loss) or label j's. On a piece (localized
// vocab_start, global_shape) the one-hot lands where the piece holds the label; labels are
// checked against the global class count.
Tensors c_softmax_with_multi_label_cross_entropy_grad(const Tensors& inputs, const Attrs& attrs) {
  const plan::MultiLabelPlan p = PlanMultiLabel(inputs, attrs, MultiLabelInputs::kGrad);
  const int64_t ignore_index = attrs.GetInt("ignore_index");
  const Tensor& softmax = inputs[0];
  Tensor grad = internal::Zeros(softmax.shape);
  for (int64_t o = 0; o < p.rows; ++o) {
    double scale = 0;  // the sum of weight_j * g_j over the row's labels not ignored
    for (int64_t j = 0; j < p.labels; ++j) {
      const int64_t at = o * p.labels + j;
      bool ignored = false;
      const int64_t id = LabelAt(inputs[1], at, ignore_index, ignored);
      if (ignored) continue;
      if (id < 0 || id >= p.global_classes) {
        plan::ThrowIdOutside(InputField(1, "data"), "label", id, p.global_classes);
      }
      const double wg = inputs[2].data[at] * inputs[3].data[p.sum_loss ? o : at];
      scale += wg;
      if (id >= p.start && id - p.start < p.classes) grad.data[o * p.classes + id - p.start] -= wg;
    }
    for (int64_t c = 0; c < p.classes; ++c) grad.data[o * p.classes + c] += softmax.data[o * p.classes + c] * scale;
  }
  return {grad};
}

Tensors cross_entropy_with_softmax_grad(const Tensors& inputs, const Attrs& attrs) {
  const plan::CrossEntropyPlan ce = plan::PlanCrossEntropyGrad(plan::ShapesOf(inputs), attrs);
  const bool soft_label = ce.soft_label;
  const bool use_softmax = ce.use_softmax;
  const int64_t ignore_index = ce.ignore_index;
  const Tensor& label = inputs[0];
  const Tensor& softmax = inputs[1];
  const Tensor& loss_grad = inputs[2];
  AxisView view = internal::ViewAlong(softmax.shape, ce.axis);
  Tensor input_grad = internal::Zeros(softmax.shape);
  for (int64_t o = 0; o < view.outer; ++o) {
    for (int64_t i = 0; i < view.inner; ++i) {
      int64_t row = o * view.inner + i;  // position in loss_grad (and in a hard label)
      double g = loss_grad.data[row];
      if (soft_label) {
        for (int64_t a = 0; a < view.len; ++a) {
          int64_t at = view.At(o, a, i);
          double p = softmax.data[at];
          double l = label.data[at];
          input_grad.data[at] = use_softmax ? g * (p - l) : -(g * l) / p;
        }
        continue;
      }
      int64_t id = IdOf(label.data[row], InputField(0, "data"));
      if (id == ignore_index) continue;  // the row stays 0
      if (id < 0 || id >= ce.classes) {
        plan::ThrowIdOutside(InputField(0, "data"), "label", id, ce.classes);
      }
      const int64_t local = id - ce.class_start;  // the label's place in this piece
      for (int64_t a = 0; a < view.len; ++a) {
        int64_t at = view.At(o, a, i);
        double p = softmax.data[at];
        if (use_softmax) {
          input_grad.data[at] = g * (a == local ? p - 1.0 : p);
        } else if (a == local) {
          input_grad.data[at] = -g / p;
        }
      }
    }
  }
  return {input_grad};
}

Tensors label_smooth(const Tensors& inputs, const Attrs& attrs) {
  const plan::LabelSmoothPlan p = plan::PlanLabelSmooth(plan::ShapesOf(inputs), attrs);
  const Tensor& label = inputs[0];
  Tensor out = internal::Zeros(p.out_shape, DType::kFloat64);
  for (size_t i = 0; i < out.data.size(); ++i) {
    const int64_t c = static_cast<int64_t>(i) % p.classes;  // the element's class
    const double prior = p.has_prior ? inputs[1].data[static_cast<size_t>(c)] : 1.0 / static_cast<double>(p.classes);
    out.data[i] = (1.0 - p.epsilon) * label.data[i] + p.epsilon * prior;
  }
  return {out};
}

}  // namespace spmd::reference::ops
