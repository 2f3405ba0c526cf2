// Normalisation and losses: softmax, log_softmax, softmax_grad, layer_norm, rms_norm,
// lookup_table_v2, cross_entropy_with_softmax (docs/OPS.md "Normalisation and losses"),
// and the backward ops embedding_grad, cross_entropy_with_softmax_grad, layer_norm_grad,
// rms_norm_grad ("Backward ops").
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "reference/reference.h"
#include "reference/util.h"
#include "rules/local_attrs.h"
#include "rules/norm_plan.h"
#include "rules/softmax_pieces.h"

namespace spmd::reference::ops {
namespace {

using internal::AxisView;
using internal::CheckArity;
using internal::InputField;
using internal::ShapeToString;

// softmax of x along the dim that `view` describes, written into a tensor of x's shape.
Tensor SoftmaxAlong(const Tensor& x, const AxisView& view) {
  Tensor out = internal::Zeros(x.shape);
  for (int64_t o = 0; o < view.outer; ++o) {
    for (int64_t i = 0; i < view.inner; ++i) {
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t a = 0; a < view.len; ++a) {
        double v = x.data[view.At(o, a, i)];
        if (v > m) m = v;
      }
      double s = 0.0;
      for (int64_t a = 0; a < view.len; ++a) s += std::exp(x.data[view.At(o, a, i)] - m);
      for (int64_t a = 0; a < view.len; ++a) {
        out.data[view.At(o, a, i)] = std::exp(x.data[view.At(o, a, i)] - m) / s;
      }
    }
  }
  return out;
}

AxisView ViewFromAxisAttr(const Tensor& x, const Attrs& attrs) {
  int64_t axis =
      internal::NormalizeAxisOrScalar(attrs.GetInt("axis"), internal::Rank(x), "attrs.axis");
  return internal::ViewAlong(x.shape, axis);
}

using plan::NormSplit;

// The backward of layer_norm (mean and inv per row) or rms_norm (mean 0, inv = invvar;
// `centered` false) through out, row by row: xhat = (x - mean) inv, dxhat = out_grad scale;
// x_grad = inv (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), without the mean(dxhat) term
// when not `centered`; scale_grad and bias_grad sum out_grad xhat and out_grad over the rows.
Tensors NormGrad(const Tensors& inputs, const NormSplit& split, const std::vector<double>& inv,
                 const std::vector<double>& mean, bool centered) {
  const Tensor& x = inputs[0];
  const Tensor& scale = inputs[1];
  const Tensor& out_grad = inputs.back();
  const int64_t n = split.n;
  Tensor x_grad = internal::Zeros(x.shape);
  Tensor scale_grad = internal::Zeros({n});
  Tensor bias_grad = internal::Zeros({n});
  std::vector<double> xhat(static_cast<size_t>(n)), dxhat(static_cast<size_t>(n));
  for (int64_t o = 0; o < split.outer; ++o) {
    double mean_dxhat = 0.0, mean_dxhat_xhat = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      const double g = out_grad.data[o * n + j];
      xhat[j] = (x.data[o * n + j] - mean[o]) * inv[o];
      dxhat[j] = g * scale.data[j];
      mean_dxhat += dxhat[j];
      mean_dxhat_xhat += dxhat[j] * xhat[j];
      scale_grad.data[j] += g * xhat[j];
      bias_grad.data[j] += g;
    }
    mean_dxhat = centered ? mean_dxhat / static_cast<double>(n) : 0.0;
    mean_dxhat_xhat /= static_cast<double>(n);
    for (int64_t j = 0; j < n; ++j) {
      x_grad.data[o * n + j] = (dxhat[j] - mean_dxhat - xhat[j] * mean_dxhat_xhat) * inv[o];
    }
  }
  return {x_grad, scale_grad, bias_grad};
}

// Returns `v` as an integral id, or throws naming `field`.
int64_t IdOf(double v, const std::string& field) { return plan::FloatId(v, field); }

}  // namespace

Tensors softmax(const Tensors& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  AxisView view = ViewFromAxisAttr(inputs[0], attrs);
  return {SoftmaxAlong(inputs[0], view)};
}

Tensors log_softmax(const Tensors& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  AxisView view = ViewFromAxisAttr(x, attrs);
  Tensor out = internal::Zeros(x.shape);
  for (int64_t o = 0; o < view.outer; ++o) {
    for (int64_t i = 0; i < view.inner; ++i) {
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t a = 0; a < view.len; ++a) {
        double v = x.data[view.At(o, a, i)];
        if (v > m) m = v;
      }
      double s = 0.0;
      for (int64_t a = 0; a < view.len; ++a) s += std::exp(x.data[view.At(o, a, i)] - m);
      for (int64_t a = 0; a < view.len; ++a) {
        out.data[view.At(o, a, i)] = x.data[view.At(o, a, i)] - m - std::log(s);
      }
    }
  }
  return {out};
}

Tensors softmax_grad(const Tensors& inputs, const Attrs& attrs) {
  plan::PlanSoftmaxGrad(plan::ShapesOf(inputs));
  const Tensor& out = inputs[0];
  const Tensor& out_grad = inputs[1];
  AxisView view = ViewFromAxisAttr(out, attrs);
  Tensor x_grad = internal::Zeros(out.shape);
  for (int64_t o = 0; o < view.outer; ++o) {
    for (int64_t i = 0; i < view.inner; ++i) {
      double dot = 0.0;
      for (int64_t a = 0; a < view.len; ++a) {
        dot += out_grad.data[view.At(o, a, i)] * out.data[view.At(o, a, i)];
      }
      for (int64_t a = 0; a < view.len; ++a) {
        int64_t at = view.At(o, a, i);
        x_grad.data[at] = out.data[at] * (out_grad.data[at] - dot);
      }
    }
  }
  return {x_grad};
}

Tensors layer_norm(const Tensors& inputs, const Attrs& attrs) {
  const NormSplit split = plan::PlanNorm(plan::ShapesOf(inputs), attrs, 2);
  const double epsilon = attrs.GetFloat("epsilon");
  const Tensor& x = inputs[0];
  const Tensor& scale = inputs[1];
  const Tensor& bias = inputs[2];
  Tensor out = internal::Zeros(x.shape);
  Tensor mean = internal::Zeros(split.stats_shape);  // x.shape[:begin]
  Tensor variance = internal::Zeros(split.stats_shape);
  for (int64_t o = 0; o < split.outer; ++o) {
    const double* row = x.data.data() + o * split.n;
    double mu = 0.0;
    for (int64_t j = 0; j < split.n; ++j) mu += row[j];
    mu /= static_cast<double>(split.n);
    double var = 0.0;
    for (int64_t j = 0; j < split.n; ++j) var += (row[j] - mu) * (row[j] - mu);
    var /= static_cast<double>(split.n);
    double inv = 1.0 / std::sqrt(var + epsilon);
    for (int64_t j = 0; j < split.n; ++j) {
      out.data[o * split.n + j] = (row[j] - mu) * inv * scale.data[j] + bias.data[j];
    }
    mean.data[o] = mu;
    variance.data[o] = var;
  }
  return {out, mean, variance};
}

Tensors rms_norm(const Tensors& inputs, const Attrs& attrs) {
  const NormSplit split = plan::PlanNorm(plan::ShapesOf(inputs), attrs, 1);
  const double epsilon = attrs.GetFloat("epsilon");
  const Tensor& x = inputs[0];
  const Tensor& scale = inputs[1];
  Tensor out = internal::Zeros(x.shape);
  Tensor invvar = internal::Zeros(split.stats_shape);  // x.shape[:begin]
  for (int64_t o = 0; o < split.outer; ++o) {
    const double* row = x.data.data() + o * split.n;
    double sq = 0.0;
    for (int64_t j = 0; j < split.n; ++j) sq += row[j] * row[j];
    double inv = 1.0 / std::sqrt(sq / static_cast<double>(split.n) + epsilon);
    for (int64_t j = 0; j < split.n; ++j) out.data[o * split.n + j] = row[j] * inv * scale.data[j];
    invvar.data[o] = inv;
  }
  return {out, invvar};
}

// x, scale, bias (not read), mean, variance, out_grad -> x_grad, scale_grad, bias_grad:
// inv = 1/sqrt(variance + epsilon) per row.
Tensors layer_norm_grad(const Tensors& inputs, const Attrs& attrs) {
  const NormSplit split = plan::PlanNormGrad(plan::ShapesOf(inputs), attrs, 2, 2);
  const double epsilon = attrs.GetFloat("epsilon");
  std::vector<double> inv;
  for (double variance : inputs[4].data) inv.push_back(1.0 / std::sqrt(variance + epsilon));
  return NormGrad(inputs, split, inv, inputs[3].data, true);
}

// x, scale, invvar, out_grad -> x_grad, scale_grad: xhat = x invvar, no mean(dxhat) term.
Tensors rms_norm_grad(const Tensors& inputs, const Attrs& attrs) {
  const NormSplit split = plan::PlanNormGrad(plan::ShapesOf(inputs), attrs, 1, 1);
  Tensors grads = NormGrad(inputs, split, inputs[2].data,
                           std::vector<double>(inputs[2].data.size(), 0.0), false);
  grads.pop_back();  // no bias
  return grads;
}

Tensors lookup_table_v2(const Tensors& inputs, const Attrs& attrs) {
  const plan::EmbeddingPlan p = plan::PlanLookupTable(plan::ShapesOf(inputs), attrs);
  const Tensor& ids = inputs[0];
  const Tensor& weight = inputs[1];
  const int64_t padding_idx = p.padding_idx;
  const bool sharded = p.id_limit < 0;  // a __vocab_start: ids outside this shard read zeros
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

namespace {

// c_softmax_with_cross_entropy's inputs: logits [..., C] (the class axis last), label
// [..., 1] of ids; the attrs Paddle passes (ring_id, rank, nranks) are checked for range
// only: spmdkit takes the piece from the layout.
void CheckCSoftmaxInputs(const Tensors& inputs, const Attrs& attrs, size_t arity) {
  softmax_pieces::CheckPaddleCommAttrs(attrs);
  CheckArity(inputs, arity);
  const Tensor& logits = inputs[0];
  if (logits.shape.empty()) ThrowInvalid(InputField(0, "shape"), "logits need a class dim, got []");
  Shape label_shape = logits.shape;
  label_shape.back() = 1;
  if (inputs[1].shape != label_shape) {
    ThrowInvalid(InputField(1, "shape"), "label must have shape " + ShapeToString(label_shape) +
                                             ", got " + ShapeToString(inputs[1].shape));
  }
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

// Phase 1 on a piece (classes [__vocab_start, + C)): every row's four numbers,
// softmax_pieces::PieceStats, as [..., 4].
Tensors c_softmax_with_cross_entropy_stats(const Tensors& inputs, const Attrs& attrs) {
  CheckCSoftmaxInputs(inputs, attrs, 2);
  const Tensor& logits = inputs[0];
  const int64_t ignore_index = attrs.GetInt("ignore_index");
  const int64_t start = attrs.Has(kLocalVocabStart) ? attrs.GetInt(kLocalVocabStart) : 0;
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
// (localized __vocab_start, __global_shape) the one-hot lands only where the piece holds
// the label; labels are checked against the global class count.
Tensors c_softmax_with_cross_entropy_grad(const Tensors& inputs, const Attrs& attrs) {
  softmax_pieces::CheckPaddleCommAttrs(attrs);
  CheckArity(inputs, 3);
  const Tensor& softmax = inputs[0];
  if (softmax.shape.empty()) ThrowInvalid(InputField(0, "shape"), "softmax needs a class dim, got []");
  Shape row_shape = softmax.shape;
  row_shape.back() = 1;
  for (size_t i : {size_t{1}, size_t{2}}) {
    if (inputs[i].shape != row_shape) {
      ThrowInvalid(InputField(i, "shape"), "must have shape " + ShapeToString(row_shape) + ", got " +
                                               ShapeToString(inputs[i].shape));
    }
  }
  const int64_t len = softmax.shape.back();
  const int64_t start = attrs.Has(kLocalVocabStart) ? attrs.GetInt(kLocalVocabStart) : 0;
  const int64_t classes = attrs.Has(kLocalGlobalShape) ? attrs.GetInts(kLocalGlobalShape).back() : len;
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

Tensors embedding_grad(const Tensors& inputs, const Attrs& attrs) {
  const plan::EmbeddingPlan p = plan::PlanEmbeddingGrad(plan::ShapesOf(inputs), attrs);
  const Tensor& ids = inputs[0];
  const Tensor& weight = inputs[1];
  const Tensor& out_grad = inputs[2];
  const int64_t padding_idx = p.padding_idx;
  const bool sharded = p.id_limit < 0;  // a __vocab_start: ids outside this shard are skipped
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
      if (id < 0 || id >= view.len) {
        plan::ThrowIdOutside(InputField(0, "data"), "label", id, view.len);
      }
      for (int64_t a = 0; a < view.len; ++a) {
        int64_t at = view.At(o, a, i);
        double p = softmax.data[at];
        if (use_softmax) {
          input_grad.data[at] = g * (a == id ? p - 1.0 : p);
        } else if (a == id) {
          input_grad.data[at] = -g / p;
        }
      }
    }
  }
  return {input_grad};
}

}  // namespace spmd::reference::ops
