// The softmax cross entropies: cross_entropy_with_softmax, its grad, and Paddle's
// vocabulary-parallel c_softmax_with_cross_entropy and c_softmax_with_multi_label_cross_entropy
// with their phases and grads (docs/OPS.md
// "Loss"; the grad under "Backward ops", the c_ ops under "Paddle's other registered ops").
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/internal.h"
#include "kernels/cpu/rows.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/vector_math.h"
#include "rules/model/attrs.h"
#include "rules/ops/loss_plan.h"
#include "rules/ops/norm_pieces.h"
#include "rules/ops/softmax_pieces.h"

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
using rows::SoftmaxAlong;
using rows::ViewFromAxisAttr;

}  // namespace

// ---- c_softmax_with_cross_entropy: a piece's statistics, then the piece's outputs -------------

namespace {


// Every label not ignored must name one of `classes` classes.
void CheckLabels(const Ids& ids, int64_t count, int64_t ignore_index, int64_t classes, const std::string& field) {
  for (int64_t at = 0; at < count; ++at) {
    if (ids[at] != ignore_index && (ids[at] < 0 || ids[at] >= classes)) {
      plan::ThrowIdOutside(field, "label", ids[at], classes);
    }
  }
}

// The checks of c_softmax_with_cross_entropy and its phases (as the reference's): the
// attrs, logits [..., C], label [..., 1]. Returns the rows.
int64_t CheckCSoftmax(const TensorArgs& inputs, const Attrs& attrs, size_t arity) {
  return plan::PlanCSoftmax(plan::ShapesOf(inputs), attrs, arity, {1});
}

// Every row's four numbers (softmax_pieces::PieceStats) of the piece starting at `start`,
// computed in T and kept in float64 whatever the logits' dtype, so that no rounding to a
// 2-byte float happens between the pieces (RunCpuKernel rounds float32 outputs only).
template <typename T>
Tensor PieceStatistics(const Tensor& logits, const Ids& ids, int64_t rows, int64_t start,
                       int64_t ignore_index) {
  ValuesAs<T> x(logits);
  const int64_t len = logits.shape().back();
  Shape stats_shape = logits.shape();
  stats_shape.back() = softmax_pieces::kStats;
  Tensor stats = NewOutput(stats_shape, DType::kFloat64);
  double* st = stats.data<double>();
  for (int64_t o = 0; o < rows; ++o) {
    T row[softmax_pieces::kStats];
    softmax_pieces::PieceStats(x.data() + o * len, len, int64_t{1}, ids[o], start,
                               ids[o] == ignore_index, row);
    for (int64_t k = 0; k < softmax_pieces::kStats; ++k) st[o * softmax_pieces::kStats + k] = row[k];
  }
  return stats;
}

// The piece's softmax and every row's loss from `pieces` gathered statistics.
template <typename T>
Tensors FinishPiece(const Tensor& logits, const Ids& ids, int64_t rows, const double* gathered,
                    int64_t pieces, int64_t ignore_index, const std::string& label_field) {
  ValuesAs<T> x(logits);
  const int64_t len = logits.shape().back();
  Tensor softmax = NewOutput(logits.shape(), DTypeOf<T>::value);
  Shape loss_shape = logits.shape();
  loss_shape.back() = 1;
  Tensor loss = NewOutput(loss_shape, DTypeOf<T>::value);
  T* p = softmax.data<T>();
  T* l = loss.data<T>();
  for (int64_t o = 0; o < rows; ++o) {
    const bool ignored = ids[o] == ignore_index;
    const auto row = softmax_pieces::Combine(gathered + o * softmax_pieces::kStats, pieces,
                                             rows * softmax_pieces::kStats);
    if (!ignored && row.holders != 1) {
      ThrowInvalid(label_field, "label " + std::to_string(ids[o]) + " is outside the class axis");
    }
    const T max = static_cast<T>(row.max);
    const T inv = static_cast<T>(1.0 / row.sum);
    for (int64_t j = 0; j < len; ++j) p[o * len + j] = std::exp(x.data()[o * len + j] - max) * inv;
    l[o] = static_cast<T>(softmax_pieces::Loss(row, ignored));
  }
  return TensorList(std::move(softmax), std::move(loss));
}

}  // namespace

// The op on one device: the class axis is whole, so its one piece's statistics finish it.
Tensors c_softmax_with_cross_entropy(const TensorArgs& inputs, const Attrs& attrs) {
  const int64_t rows = CheckCSoftmax(inputs, attrs, 2);
  const int64_t ignore_index = attrs.GetInt("ignore_index");
  const std::string label_field = InputField(1, "data");
  const Ids ids(inputs[1], label_field);
  CheckLabels(ids, rows, ignore_index, inputs[0].shape().back(), label_field);
  return DispatchFloat(ComputeDType(inputs, {0}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Tensor stats = PieceStatistics<T>(inputs[0], ids, rows, 0, ignore_index);
    return FinishPiece<T>(inputs[0], ids, rows, stats.data<double>(), 1, ignore_index, label_field);
  });
}

// Phase::kStats of c_softmax_with_cross_entropy: the piece [local.vocab_start, + C)'s statistics.
Tensors c_softmax_with_cross_entropy_stats(const TensorArgs& inputs, const Attrs& attrs) {
  const int64_t rows = CheckCSoftmax(inputs, attrs, 2);
  const int64_t start = attrs.local().vocab_start.value_or(0);
  if (start < 0) ThrowInvalid(std::string(LocalFieldName(LocalField::kVocabStart)), "negative class offset");
  const Ids ids(inputs[1], InputField(1, "data"));
  return DispatchFloat(ComputeDType(inputs, {0}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return TensorList(PieceStatistics<T>(inputs[0], ids, rows, start, attrs.GetInt("ignore_index")));
  });
}

// Phase::kFinish of c_softmax_with_cross_entropy: logits, label, the gathered float64
// [P, ..., 4].
Tensors c_softmax_with_cross_entropy_finish(const TensorArgs& inputs, const Attrs& attrs) {
  const int64_t rows = CheckCSoftmax(inputs, attrs, 3);
  const Tensor& gathered = inputs[2];
  if (gathered.dtype() != DType::kFloat64) {
    ThrowInvalid(InputField(2, "dtype"), "the gathered statistics must be float64, got " +
                                             std::string(ToString(gathered.dtype())));
  }
  const int64_t pieces = gathered.rank() == 0 ? 0 : gathered.shape()[0];
  if (pieces < 1 || gathered.numel() != pieces * rows * softmax_pieces::kStats) {
    ThrowInvalid(InputField(2, "shape"), "the gathered statistics must be [pieces, rows, 4], got " +
                                             ShapeToString(gathered.shape()));
  }
  const std::string label_field = InputField(1, "data");
  const Ids ids(inputs[1], label_field);
  return DispatchFloat(ComputeDType(inputs, {0}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return FinishPiece<T>(inputs[0], ids, rows, gathered.data<double>(), pieces,
                          attrs.GetInt("ignore_index"), label_field);
  });
}

// (softmax - onehot(label)) * loss_grad along the last dim, 0 on ignored rows; on a piece
// (localized local.vocab_start, local.global_shape) the one-hot lands where the piece holds the label.
Tensors c_softmax_with_cross_entropy_grad(const TensorArgs& inputs, const Attrs& attrs) {
  const int64_t rows = plan::PlanCSoftmax(plan::ShapesOf(inputs), attrs, 3, {1, 2});
  const int64_t len = inputs[0].shape().back();
  const int64_t start = attrs.local().vocab_start.value_or(0);
  const int64_t classes = attrs.local().global_shape.has_value() ? attrs.local().global_shape->back() : len;
  const int64_t ignore_index = attrs.GetInt("ignore_index");
  const std::string label_field = InputField(1, "data");
  const Ids ids(inputs[1], label_field);
  CheckLabels(ids, rows, ignore_index, classes, label_field);
  return DispatchFloat(ComputeDType(inputs, {0, 2}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> p(inputs[0]);
    ValuesAs<T> g(inputs[2]);
    Tensor grad = NewOutput(inputs[0].shape(), DTypeOf<T>::value);
    T* d = grad.data<T>();
    for (int64_t o = 0; o < rows; ++o) {
      const bool ignored = ids[o] == ignore_index;
      for (int64_t j = 0; j < len; ++j) {
        const T onehot = start + j == ids[o] ? T(1) : T(0);
        d[o * len + j] = ignored ? T(0) : (p[o * len + j] - onehot) * g[o];
      }
    }
    return TensorList(std::move(grad));
  });
}

// ---- c_softmax_with_multi_label_cross_entropy: k weighted hard labels per row ---------------

namespace {

using plan::MultiLabelInputs;

// Every row's 2 + 2k numbers (softmax_pieces::PieceMaxSum, then PieceLabel for each label)
// of the piece starting at p.start, computed in T and kept in float64 (as PieceStatistics).
template <typename T>
Tensor MultiLabelStatistics(const Tensor& logits, const Ids& ids, const plan::MultiLabelPlan& p,
                            int64_t ignore_index) {
  ValuesAs<T> x(logits);
  const int64_t width = softmax_pieces::MultiLabelStats(p.labels);
  Shape stats_shape = logits.shape();
  stats_shape.back() = width;
  Tensor stats = NewOutput(stats_shape, DType::kFloat64);
  double* st = stats.data<double>();
  std::vector<T> row(static_cast<size_t>(width));
  for (int64_t o = 0; o < p.rows; ++o) {
    const T* xr = x.data() + o * p.classes;
    softmax_pieces::PieceMaxSum(xr, p.classes, int64_t{1}, row.data());
    for (int64_t j = 0; j < p.labels; ++j) {
      const int64_t id = ids[o * p.labels + j];
      softmax_pieces::PieceLabel(xr, p.classes, int64_t{1}, id, p.start, id == ignore_index, row.data() + 2 + 2 * j);
    }
    for (int64_t k = 0; k < width; ++k) st[o * width + k] = row[static_cast<size_t>(k)];
  }
  return stats;
}

// The piece's softmax and every row's loss from `pieces` gathered statistics.
template <typename T>
Tensors MultiLabelFinish(const Tensor& logits, const Ids& ids, const Tensor& weight, const plan::MultiLabelPlan& p,
                         const double* gathered, int64_t pieces, int64_t ignore_index,
                         const std::string& label_field) {
  ValuesAs<T> x(logits);
  ValuesAs<T> w(weight);
  const int64_t width = softmax_pieces::MultiLabelStats(p.labels);
  Tensor softmax = NewOutput(logits.shape(), DTypeOf<T>::value);
  Tensor loss = NewOutput(p.loss_shape, DTypeOf<T>::value, /*zero=*/true);
  T* sm = softmax.data<T>();
  T* l = loss.data<T>();
  for (int64_t o = 0; o < p.rows; ++o) {
    const double* g = gathered + o * width;
    auto row = softmax_pieces::CombineMaxSum(g, pieces, p.rows * width);
    const T max = static_cast<T>(row.max);
    const T inv = static_cast<T>(1.0 / row.sum);
    for (int64_t c = 0; c < p.classes; ++c) sm[o * p.classes + c] = std::exp(x.data()[o * p.classes + c] - max) * inv;
    for (int64_t j = 0; j < p.labels; ++j) {
      const int64_t at = o * p.labels + j;
      const bool ignored = ids[at] == ignore_index;
      softmax_pieces::CombineLabel(g, pieces, p.rows * width, 2 + 2 * j, row);
      if (!ignored && row.holders != 1) {
        ThrowInvalid(label_field, "label " + std::to_string(ids[at]) + " is outside the class axis");
      }
      l[p.sum_loss ? o : at] += static_cast<T>(softmax_pieces::Loss(row, ignored)) * w[at];
    }
  }
  return TensorList(std::move(softmax), std::move(loss));
}

}  // namespace

// The op on one device: the class axis is whole, so its one piece's statistics finish it.
Tensors c_softmax_with_multi_label_cross_entropy(const TensorArgs& inputs, const Attrs& attrs) {
  const plan::MultiLabelPlan p = plan::PlanCSoftmaxMultiLabel(plan::ShapesOf(inputs), attrs, MultiLabelInputs::kForward);
  const int64_t ignore_index = attrs.GetInt("ignore_index");
  const std::string label_field = InputField(1, "data");
  const Ids ids(inputs[1], label_field);
  CheckLabels(ids, p.rows * p.labels, ignore_index, p.classes, label_field);
  return DispatchFloat(ComputeDType(inputs, {0, 2}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Tensor stats = MultiLabelStatistics<T>(inputs[0], ids, p, ignore_index);
    return MultiLabelFinish<T>(inputs[0], ids, inputs[2], p, stats.data<double>(), 1, ignore_index, label_field);
  });
}

// Phase::kStats: the piece [local.vocab_start, + C)'s statistics.
Tensors c_softmax_with_multi_label_cross_entropy_stats(const TensorArgs& inputs, const Attrs& attrs) {
  const plan::MultiLabelPlan p = plan::PlanCSoftmaxMultiLabel(plan::ShapesOf(inputs), attrs, MultiLabelInputs::kForward);
  const Ids ids(inputs[1], InputField(1, "data"));
  return DispatchFloat(ComputeDType(inputs, {0, 2}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return TensorList(MultiLabelStatistics<T>(inputs[0], ids, p, attrs.GetInt("ignore_index")));
  });
}

// Phase::kFinish: logits, label, smooth_weight, the gathered float64 [P, ..., 2 + 2k].
Tensors c_softmax_with_multi_label_cross_entropy_finish(const TensorArgs& inputs, const Attrs& attrs) {
  const plan::MultiLabelPlan p = plan::PlanCSoftmaxMultiLabel(plan::ShapesOf(inputs), attrs, MultiLabelInputs::kFinish);
  const Tensor& gathered = inputs[3];
  if (gathered.dtype() != DType::kFloat64) {
    ThrowInvalid(InputField(3, "dtype"), "the gathered statistics must be float64, got " +
                                             std::string(ToString(gathered.dtype())));
  }
  const int64_t width = softmax_pieces::MultiLabelStats(p.labels);
  const int64_t pieces = gathered.rank() == 0 ? 0 : gathered.shape()[0];
  if (pieces < 1 || gathered.numel() != pieces * p.rows * width) {
    ThrowInvalid(InputField(3, "shape"), "the gathered statistics must be [pieces, rows, 2 + 2k]");
  }
  const std::string label_field = InputField(1, "data");
  const Ids ids(inputs[1], label_field);
  return DispatchFloat(ComputeDType(inputs, {0, 2}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return MultiLabelFinish<T>(inputs[0], ids, inputs[2], p, gathered.data<double>(), pieces,
                               attrs.GetInt("ignore_index"), label_field);
  });
}

// For each label j of a row not ignored, weight_j * g_j * (softmax - onehot(label_j)); on a
// piece (localized vocab_start, global_shape) the one-hot lands where the piece holds the label.
Tensors c_softmax_with_multi_label_cross_entropy_grad(const TensorArgs& inputs, const Attrs& attrs) {
  const plan::MultiLabelPlan p = plan::PlanCSoftmaxMultiLabel(plan::ShapesOf(inputs), attrs, MultiLabelInputs::kGrad);
  const int64_t ignore_index = attrs.GetInt("ignore_index");
  const std::string label_field = InputField(1, "data");
  const Ids ids(inputs[1], label_field);
  CheckLabels(ids, p.rows * p.labels, ignore_index, p.global_classes, label_field);
  return DispatchFloat(ComputeDType(inputs, {0, 2, 3}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> sm(inputs[0]);
    ValuesAs<T> w(inputs[2]);
    ValuesAs<T> g(inputs[3]);
    Tensor grad = NewOutput(inputs[0].shape(), DTypeOf<T>::value);
    T* d = grad.data<T>();
    for (int64_t o = 0; o < p.rows; ++o) {
      T scale = 0;
      for (int64_t j = 0; j < p.labels; ++j) {
        const int64_t at = o * p.labels + j;
        if (ids[at] != ignore_index) scale += w[at] * g[p.sum_loss ? o : at];
      }
      for (int64_t c = 0; c < p.classes; ++c) d[o * p.classes + c] = sm[o * p.classes + c] * scale;
      for (int64_t j = 0; j < p.labels; ++j) {
        const int64_t at = o * p.labels + j;
        const int64_t id = ids[at];
        if (id != ignore_index && id >= p.start && id - p.start < p.classes) {
          d[o * p.classes + id - p.start] -= w[at] * g[p.sum_loss ? o : at];
        }
      }
    }
    return TensorList(std::move(grad));
  });
}

Tensors cross_entropy_with_softmax(const TensorArgs& inputs, const Attrs& attrs) {
  const plan::CrossEntropyPlan ce = plan::PlanCrossEntropy(plan::ShapesOf(inputs), attrs);
  const bool soft_label = ce.soft_label;
  const bool use_softmax = ce.use_softmax;
  const int64_t ignore_index = ce.ignore_index;
  const Tensor& logits = inputs[0];
  const Tensor& label = inputs[1];
  const AxisView v = internal::ViewAlong(logits.shape(), ce.axis);
  const Shape& loss_shape = ce.loss_shape;
  const DType dtype = soft_label ? ComputeDType(inputs, {0, 1}) : ComputeDType(inputs, {0});
  return DispatchFloat(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> xv(logits);
    Tensor softmax_out = NewOutput(logits.shape(), DTypeOf<T>::value);
    T* p = softmax_out.data<T>();
    if (use_softmax) {
      SoftmaxAlong(xv.data(), v, p);
    } else if (logits.numel() > 0) {
      std::memcpy(p, xv.data(), static_cast<size_t>(logits.numel()) * sizeof(T));
    }
    Tensor loss = NewOutput(loss_shape, DTypeOf<T>::value, /*zero=*/true);
    T* lo = loss.data<T>();
    if (soft_label) {
      ValuesAs<T> lv(label);
      const T* l = lv.data();
      for (int64_t o = 0; o < v.outer; ++o) {
        T* dst = lo + o * v.inner;
        for (int64_t a = 0; a < v.len; ++a) {
          const int64_t at = (o * v.len + a) * v.inner;
          for (int64_t i = 0; i < v.inner; ++i) dst[i] += l[at + i] * std::log(p[at + i]);
        }
        for (int64_t i = 0; i < v.inner; ++i) dst[i] = -dst[i];
      }
      return TensorList(std::move(softmax_out), std::move(loss));
    }
    const std::string label_field = InputField(1, "data");
    const Ids ids(label, label_field);
    for (int64_t o = 0; o < v.outer; ++o) {
      for (int64_t i = 0; i < v.inner; ++i) {
        const int64_t at = o * v.inner + i;
        const int64_t id = ids[at];
        if (id == ignore_index) continue;  // loss stays 0
        if (id < 0 || id >= v.len) {
          plan::ThrowIdOutside(label_field, "label", id, v.len);
        }
        lo[at] = -std::log(p[(o * v.len + id) * v.inner + i]);
      }
    }
    return TensorList(std::move(softmax_out), std::move(loss));
  });
}

Tensors cross_entropy_with_softmax_grad(const TensorArgs& inputs, const Attrs& attrs) {
  const plan::CrossEntropyPlan ce = plan::PlanCrossEntropyGrad(plan::ShapesOf(inputs), attrs);
  const bool soft_label = ce.soft_label;
  const bool use_softmax = ce.use_softmax;
  const int64_t ignore_index = ce.ignore_index;
  const Tensor& label = inputs[0];
  const Tensor& softmax = inputs[1];
  const Tensor& loss_grad = inputs[2];
  const AxisView v = internal::ViewAlong(softmax.shape(), ce.axis);
  const DType dtype = soft_label ? ComputeDType(inputs, {0, 1, 2}) : ComputeDType(inputs, {1, 2});
  return DispatchFloat(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> pv(softmax);
    ValuesAs<T> gv(loss_grad);
    Tensor input_grad = NewOutput(softmax.shape(), DTypeOf<T>::value, /*zero=*/true);
    T* o = input_grad.data<T>();
    const T* p = pv.data();
    const T* g = gv.data();
    if (soft_label) {
      ValuesAs<T> lv(label);
      const T* l = lv.data();
      for (int64_t r = 0; r < v.outer; ++r) {
        for (int64_t a = 0; a < v.len; ++a) {
          const int64_t at = (r * v.len + a) * v.inner;
          const T* gr = g + r * v.inner;
          for (int64_t i = 0; i < v.inner; ++i) {
            o[at + i] = use_softmax ? (p[at + i] - l[at + i]) * gr[i] : -(l[at + i] * gr[i]) / p[at + i];
          }
        }
      }
      return TensorList(std::move(input_grad));
    }
    const std::string label_field = InputField(0, "data");
    const Ids ids(label, label_field);
    for (int64_t r = 0; r < v.outer; ++r) {
      for (int64_t i = 0; i < v.inner; ++i) {
        const int64_t row = r * v.inner + i;
        const int64_t id = ids[row];
        if (id == ignore_index) continue;  // the row stays 0
        if (id < 0 || id >= ce.classes) {
          plan::ThrowIdOutside(label_field, "label", id, ce.classes);
        }
        const T gr = g[row];
        const int64_t local = id - ce.class_start;  // the label's place in this piece
        const bool holds = local >= 0 && local < v.len;
        const int64_t at_label = (r * v.len + (holds ? local : 0)) * v.inner + i;
        if (!use_softmax) {
          if (holds) o[at_label] = -gr / p[at_label];
          continue;
        }
        for (int64_t a = 0; a < v.len; ++a) {
          const int64_t at = (r * v.len + a) * v.inner + i;
          o[at] = p[at] * gr;
        }
        if (holds) o[at_label] = (p[at_label] - T(1)) * gr;
      }
    }
    return TensorList(std::move(input_grad));
  });
}

// ---- cross_entropy_with_softmax's exchange phases (use_softmax; the class axis a piece) ----
// The same checks, in the same order, as the float64 phases in reference/ops_loss.cc; the
// statistics are computed in T and kept in float64, as c_softmax_with_cross_entropy's.

namespace {

struct CrossEntropyPieceView {
  plan::CrossEntropyPiece piece;
  AxisView view;
  int64_t rows() const { return view.outer * view.inner; }
  DType dtype;  // the compute dtype: the logits', and a soft label's
};
CrossEntropyPieceView CheckCrossEntropyPiece(const TensorArgs& inputs, const Attrs& attrs, size_t arity) {
  CrossEntropyPieceView p;
  p.piece = plan::PlanCrossEntropyPiece(plan::ShapesOf(inputs), attrs, arity);
  p.view = internal::ViewAlong(inputs[0].shape(), p.piece.ce.axis);
  p.dtype = p.piece.ce.soft_label ? ComputeDType(inputs, {0, 1}) : ComputeDType(inputs, {0});
  return p;
}

}  // namespace

Tensors cross_entropy_with_softmax_stats(const TensorArgs& inputs, const Attrs& attrs) {
  const CrossEntropyPieceView p = CheckCrossEntropyPiece(inputs, attrs, 2);
  const AxisView& v = p.view;
  const bool soft = p.piece.ce.soft_label;
  const std::string label_field = InputField(1, "data");
  return DispatchFloat(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> x(inputs[0]);
    Tensor stats = NewOutput(norm_pieces::SummaryShape(inputs[0].shape(), p.piece.ce.axis, softmax_pieces::kStats),
                             DType::kFloat64);
    double* st = stats.data<double>();
    if (soft) {
      ValuesAs<T> label(inputs[1]);
      for (int64_t o = 0; o < v.outer; ++o) {
        for (int64_t i = 0; i < v.inner; ++i) {
          const int64_t r = o * v.inner + i;
          const int64_t at = v.len > 0 ? (o * v.len) * v.inner + i : 0;
          T row[softmax_pieces::kStats];
          softmax_pieces::SoftPieceStats(x.data() + at, label.data() + at, v.len, v.inner, row);
          for (int64_t k = 0; k < softmax_pieces::kStats; ++k) st[r * softmax_pieces::kStats + k] = row[k];
        }
      }
      return TensorList(std::move(stats));
    }
    const Ids ids(inputs[1], label_field);
    for (int64_t o = 0; o < v.outer; ++o) {
      for (int64_t i = 0; i < v.inner; ++i) {
        const int64_t r = o * v.inner + i;
        const int64_t at = v.len > 0 ? (o * v.len) * v.inner + i : 0;
        T row[softmax_pieces::kStats];
        softmax_pieces::PieceStats(x.data() + at, v.len, v.inner, ids[r], p.piece.start,
                                   ids[r] == p.piece.ce.ignore_index, row);
        for (int64_t k = 0; k < softmax_pieces::kStats; ++k) st[r * softmax_pieces::kStats + k] = row[k];
      }
    }
    return TensorList(std::move(stats));
  });
}

Tensors cross_entropy_with_softmax_finish(const TensorArgs& inputs, const Attrs& attrs) {
  const CrossEntropyPieceView p = CheckCrossEntropyPiece(inputs, attrs, 3);
  const AxisView& v = p.view;
  const int64_t k = softmax_pieces::kStats;
  const Tensor& gathered = inputs[2];
  if (gathered.dtype() != DType::kFloat64) {
    ThrowInvalid(InputField(2, "dtype"), "the gathered statistics must be float64, got " +
                                             std::string(ToString(gathered.dtype())));
  }
  const int64_t pieces = norm_pieces::GatheredPieces(gathered.shape(), gathered.numel(), 2, p.rows(), k);
  const bool soft = p.piece.ce.soft_label;
  const std::string label_field = InputField(1, "data");
  return DispatchFloat(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> xv(inputs[0]);
    const T* x = xv.data();
    Tensor softmax_out = NewOutput(inputs[0].shape(), DTypeOf<T>::value);
    Tensor loss = NewOutput(p.piece.ce.loss_shape, DTypeOf<T>::value);
    T* out = softmax_out.data<T>();
    T* lo = loss.data<T>();
    const double* g = gathered.data<double>();
    std::vector<int64_t> ids;
    if (!soft) {
      const Ids read(inputs[1], label_field);
      for (int64_t r = 0; r < p.rows(); ++r) ids.push_back(read[r]);
    }
    for (int64_t o = 0; o < v.outer; ++o) {
      for (int64_t i = 0; i < v.inner; ++i) {
        const int64_t r = o * v.inner + i;
        const auto row = softmax_pieces::Combine(g + r * k, pieces, p.rows() * k);
        if (soft) {
          lo[r] = static_cast<T>(softmax_pieces::SoftLoss(row, softmax_pieces::SoftLabelTotal(g + r * k, pieces, p.rows() * k)));
        } else {
          const bool ignored = ids[r] == p.piece.ce.ignore_index;
          if (!ignored && row.holders != 1) {
            ThrowInvalid(label_field, "label " + std::to_string(ids[r]) + " is outside the class axis");
          }
          lo[r] = static_cast<T>(softmax_pieces::Loss(row, ignored));
        }
        const T max = static_cast<T>(row.max);
        const T inv = static_cast<T>(1.0 / row.sum);
        for (int64_t a = 0; a < v.len; ++a) {
          const int64_t at = (o * v.len + a) * v.inner + i;
          out[at] = std::exp(x[at] - max) * inv;
        }
      }
    }
    return TensorList(std::move(softmax_out), std::move(loss));
  });
}

Tensors label_smooth(const TensorArgs& inputs, const Attrs& attrs) {
  const plan::LabelSmoothPlan p = plan::PlanLabelSmooth(plan::ShapesOf(inputs), attrs);
  const DType dtype = p.has_prior ? ComputeDType(inputs, {0, 1}) : ComputeDType(inputs, {0});
  return DispatchFloat(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> label(inputs[0]);
    std::unique_ptr<ValuesAs<T>> prior;
    if (p.has_prior) prior = std::make_unique<ValuesAs<T>>(inputs[1]);
    Tensor out = NewOutput(p.out_shape, DTypeOf<T>::value);
    T* o = out.data<T>();
    const T* l = label.data();
    const T keep = static_cast<T>(1.0 - p.epsilon), eps = static_cast<T>(p.epsilon);
    const T uniform = static_cast<T>(p.epsilon / static_cast<double>(p.classes > 0 ? p.classes : 1));
    const int64_t n = out.numel(), classes = p.classes;
    for (int64_t r = 0; r < n; r += classes) {  // row by row: the class runs along the last dim
      for (int64_t c = 0; c < classes; ++c) {
        o[r + c] = keep * l[r + c] + (prior ? eps * prior->data()[c] : uniform);
      }
    }
    return TensorList(std::move(out));
  });
}

}  // namespace spmd::kernels::cpu
