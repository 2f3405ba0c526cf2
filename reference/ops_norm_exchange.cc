// The exchange phases (OpDecl::exchange) of the row reductions whose reduced axis may stay
// sharded: softmax, log_softmax, logsumexp, layer_norm, rms_norm, cumsum, layer_norm_grad,
// rms_norm_grad, and the scans cummax and cummin (rules/ops/scan_pieces.h). The stats phase summarises
// every row of the local piece (rules/ops/norm_pieces.h), the checker all-gathers the
// summaries over the axis's mesh axes, and the finish phase gives the piece's outputs from
// the local inputs and the gathered [pieces, rows..., k]. The ops' own references
// (ops_norm.cc, ops_reduction.cc) stay the plain single-device definitions that the
// checker compares these phases with.
#include <cmath>
#include <string>
#include <vector>

#include "reference/reference.h"
#include "reference/util.h"
#include "rules/ops/norm_pieces.h"
#include "rules/ops/reduction_plan.h"
#include "rules/ops/scan_pieces.h"

namespace spmd::reference::ops {
namespace {

using internal::AxisView;
using internal::CheckArity;
using internal::InputField;
using internal::ShapeToString;

using norm_pieces::SummaryShape;

// The gathered summaries (the finish phase's last input). Returns the pieces.
int64_t GatheredPieces(const Tensors& inputs, int64_t rows, int64_t k) {
  const Tensor& gathered = inputs.back();
  return norm_pieces::GatheredPieces(gathered.shape, static_cast<int64_t>(gathered.data.size()),
                                     inputs.size() - 1, rows, k);
}

// softmax / log_softmax / cumsum on a piece: the arity (the op's, plus the gathered tensor
// in the finish phase) and the view along attrs.axis, as the ops check them.
struct AxisPiece {
  int64_t axis = -1;  // -1 on a 0-d x
  AxisView view;
  int64_t rows() const { return view.outer * view.inner; }
};
// The piece's view along the axis that norm_pieces::PlanAxisPiece checked (-1: a 0-d x).
AxisPiece ViewPiece(const Tensors& inputs, int64_t axis) {
  return {axis, internal::ViewAlong(inputs[0].shape, axis < 0 ? 0 : axis)};
}
AxisPiece CheckAxisPiece(const Tensors& inputs, const Attrs& attrs, size_t arity) {
  return ViewPiece(inputs, norm_pieces::PlanAxisPiece(plan::ShapesOf(inputs), attrs, arity));
}

Tensors SoftmaxStatsPhase(const Tensors& inputs, const Attrs& attrs) {
  const AxisPiece p = CheckAxisPiece(inputs, attrs, 1);
  const Tensor& x = inputs[0];
  Tensor stats = internal::Zeros(SummaryShape(x.shape, p.axis, norm_pieces::kSoftmaxStats));
  for (int64_t o = 0; o < p.view.outer; ++o) {
    for (int64_t i = 0; i < p.view.inner; ++i) {
      norm_pieces::SoftmaxStats(x.data.data() + (p.view.len > 0 ? p.view.At(o, 0, i) : 0), p.view.len, p.view.inner,
                                stats.data.data() + (o * p.view.inner + i) * norm_pieces::kSoftmaxStats);
    }
  }
  return {stats};
}

// softmax (exp(x - max) / sum) or log_softmax (x - max - log(sum)) of the piece, from the
// gathered rows' summaries.
Tensors SoftmaxFinishPhase(const Tensors& inputs, const Attrs& attrs, bool log) {
  const AxisPiece p = CheckAxisPiece(inputs, attrs, 2);
  const Tensor& x = inputs[0];
  const int64_t k = norm_pieces::kSoftmaxStats;
  const int64_t pieces = GatheredPieces(inputs, p.rows(), k);
  Tensor out = internal::Zeros(x.shape);
  for (int64_t o = 0; o < p.view.outer; ++o) {
    for (int64_t i = 0; i < p.view.inner; ++i) {
      const int64_t r = o * p.view.inner + i;
      const norm_pieces::SoftmaxRow row =
          norm_pieces::CombineSoftmax(inputs[1].data.data() + r * k, pieces, p.rows() * k);
      for (int64_t a = 0; a < p.view.len; ++a) {
        const int64_t at = p.view.At(o, a, i);
        out.data[at] = log ? x.data[at] - row.max - std::log(row.sum) : std::exp(x.data[at] - row.max) / row.sum;
      }
    }
  }
  return {out};
}

// softmax_grad on a piece: out and out_grad of one shape (as the op checks them), viewed
// along attrs.axis.
AxisPiece CheckSoftmaxGradPiece(const Tensors& inputs, const Attrs& attrs, size_t arity) {
  return ViewPiece(inputs, norm_pieces::PlanSoftmaxGradPiece(plan::ShapesOf(inputs), attrs, arity));
}

using norm_pieces::NormPiece;
// params 2: layer_norm, whose scale and bias may be absent (0-d); 1: rms_norm.
NormPiece CheckNormPiece(const Tensors& inputs, const Attrs& attrs, size_t params, size_t arity) {
  CheckArity(inputs, arity);
  std::vector<Shape> shapes;
  for (const Tensor& t : inputs) shapes.push_back(t.shape);
  return norm_pieces::PlanNormPiece(shapes, attrs, params, params == 2);
}

}  // namespace

Tensors softmax_stats(const Tensors& inputs, const Attrs& attrs) { return SoftmaxStatsPhase(inputs, attrs); }
Tensors softmax_finish(const Tensors& inputs, const Attrs& attrs) { return SoftmaxFinishPhase(inputs, attrs, false); }
Tensors log_softmax_stats(const Tensors& inputs, const Attrs& attrs) { return SoftmaxStatsPhase(inputs, attrs); }
Tensors log_softmax_finish(const Tensors& inputs, const Attrs& attrs) { return SoftmaxFinishPhase(inputs, attrs, true); }

// out, out_grad -> every row's part of sum(out_grad * out) over the piece.
Tensors softmax_grad_stats(const Tensors& inputs, const Attrs& attrs) {
  const AxisPiece p = CheckSoftmaxGradPiece(inputs, attrs, 2);
  Tensor stats = internal::Zeros(SummaryShape(inputs[0].shape, p.axis, norm_pieces::kDotStats));
  for (int64_t o = 0; o < p.view.outer; ++o) {
    for (int64_t i = 0; i < p.view.inner; ++i) {
      const int64_t at = p.view.len > 0 ? p.view.At(o, 0, i) : 0;  // an empty piece's data may be null
      norm_pieces::DotStats(inputs[0].data.data() + at, inputs[1].data.data() + at, p.view.len, p.view.inner,
                            stats.data.data() + (o * p.view.inner + i) * norm_pieces::kDotStats);
    }
  }
  return {stats};
}

// out, out_grad, gathered -> the piece's x_grad = out (out_grad - dot), dot over the row.
Tensors softmax_grad_finish(const Tensors& inputs, const Attrs& attrs) {
  const AxisPiece p = CheckSoftmaxGradPiece(inputs, attrs, 3);
  const int64_t k = norm_pieces::kDotStats;
  const int64_t pieces = GatheredPieces(inputs, p.rows(), k);
  Tensor x_grad = internal::Zeros(inputs[0].shape);
  for (int64_t o = 0; o < p.view.outer; ++o) {
    for (int64_t i = 0; i < p.view.inner; ++i) {
      const int64_t r = o * p.view.inner + i;
      const double dot = norm_pieces::CombineDot(inputs[2].data.data() + r * k, pieces, p.rows() * k);
      for (int64_t a = 0; a < p.view.len; ++a) {
        const int64_t at = p.view.At(o, a, i);
        x_grad.data[at] = inputs[0].data[at] * (inputs[1].data[at] - dot);
      }
    }
  }
  return {x_grad};
}

// x, scale, bias -> every row's {count, mean, M2} over the piece, [x.shape[:begin], 3].
Tensors layer_norm_stats(const Tensors& inputs, const Attrs& attrs) {
  const NormPiece p = CheckNormPiece(inputs, attrs, 2, 3);
  Shape shape = p.stats_shape;
  shape.push_back(norm_pieces::kMomentStats);
  Tensor stats = internal::Zeros(shape);
  for (int64_t r = 0; r < p.rows; ++r) {
    norm_pieces::MomentStats(inputs[0].data.data() + r * p.n, p.n, stats.data.data() + r * norm_pieces::kMomentStats);
  }
  return {stats};
}

// x, scale, bias, gathered -> the piece's out, and the whole rows' mean and variance (an
// absent scale 1, an absent bias 0).
Tensors layer_norm_finish(const Tensors& inputs, const Attrs& attrs) {
  const NormPiece p = CheckNormPiece(inputs, attrs, 2, 4);
  const double epsilon = attrs.GetFloat("epsilon");
  const int64_t k = norm_pieces::kMomentStats;
  const int64_t pieces = GatheredPieces(inputs, p.rows, k);
  const Tensor& x = inputs[0];
  Tensor out = internal::Zeros(x.shape);
  Tensor mean = internal::Zeros(p.stats_shape);
  Tensor variance = internal::Zeros(p.stats_shape);
  for (int64_t r = 0; r < p.rows; ++r) {
    const norm_pieces::Moments m = norm_pieces::CombineMoments(inputs[3].data.data() + r * k, pieces, p.rows * k);
    const double var = m.m2 / m.count;
    const double inv = 1.0 / std::sqrt(var + epsilon);
    for (int64_t j = 0; j < p.n; ++j) {
      out.data[r * p.n + j] = (x.data[r * p.n + j] - m.mean) * inv * (p.has_scale ? inputs[1].data[p.first + j] : 1.0) +
                              (p.has_bias ? inputs[2].data[p.first + j] : 0.0);
    }
    mean.data[r] = m.mean;
    variance.data[r] = var;
  }
  return {out, mean, variance};
}

// x, scale -> every row's {count, sum of squares} over the piece, [x.shape[:begin], 2].
Tensors rms_norm_stats(const Tensors& inputs, const Attrs& attrs) {
  const NormPiece p = CheckNormPiece(inputs, attrs, 1, 2);
  Shape shape = p.stats_shape;
  shape.push_back(norm_pieces::kSquareStats);
  Tensor stats = internal::Zeros(shape);
  for (int64_t r = 0; r < p.rows; ++r) {
    norm_pieces::SquareStats(inputs[0].data.data() + r * p.n, p.n, stats.data.data() + r * norm_pieces::kSquareStats);
  }
  return {stats};
}

// x, scale, gathered -> the piece's out and the whole rows' invvar.
Tensors rms_norm_finish(const Tensors& inputs, const Attrs& attrs) {
  const NormPiece p = CheckNormPiece(inputs, attrs, 1, 3);
  const double epsilon = attrs.GetFloat("epsilon");
  const int64_t k = norm_pieces::kSquareStats;
  const int64_t pieces = GatheredPieces(inputs, p.rows, k);
  const Tensor& x = inputs[0];
  Tensor out = internal::Zeros(x.shape);
  Tensor invvar = internal::Zeros(p.stats_shape);
  for (int64_t r = 0; r < p.rows; ++r) {
    const norm_pieces::Squares s = norm_pieces::CombineSquares(inputs[2].data.data() + r * k, pieces, p.rows * k);
    const double inv = 1.0 / std::sqrt(s.sum / s.count + epsilon);
    for (int64_t j = 0; j < p.n; ++j) out.data[r * p.n + j] = x.data[r * p.n + j] * inv * inputs[1].data[p.first + j];
    invvar.data[r] = inv;
  }
  return {out, invvar};
}

namespace {

// cumsum on a piece: the axis view, refusing flatten (the exchange runs along an axis; the
// rule exchanges nothing with flatten), and the piece's first position along the axis
// (localized local.offset; 0 unsharded).
struct CumsumPiece {
  AxisPiece axis;
  int64_t first = 0;
};
CumsumPiece CheckCumsumPiece(const Tensors& inputs, const Attrs& attrs, size_t arity) {
  const norm_pieces::CumsumPiecePlan p = norm_pieces::PlanCumsumPiece(plan::ShapesOf(inputs), attrs, arity);
  return {ViewPiece(inputs, p.axis), p.first};
}

}  // namespace

// x -> every row's {first position, total} over the piece, [x.shape without axis, 2].
Tensors cumsum_stats(const Tensors& inputs, const Attrs& attrs) {
  const CumsumPiece p = CheckCumsumPiece(inputs, attrs, 1);
  const AxisView& v = p.axis.view;
  const Tensor& x = inputs[0];
  Tensor stats = internal::Zeros(SummaryShape(x.shape, p.axis.axis, norm_pieces::kPrefixStats));
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t i = 0; i < v.inner; ++i) {
      norm_pieces::PrefixStats(x.data.data() + (v.len > 0 ? v.At(o, 0, i) : 0), v.len, v.inner, p.first,
                               stats.data.data() + (o * v.inner + i) * norm_pieces::kPrefixStats);
    }
  }
  return {stats};
}

// x, gathered -> the piece's running sums, started from the pieces before it.
Tensors cumsum_finish(const Tensors& inputs, const Attrs& attrs) {
  const CumsumPiece p = CheckCumsumPiece(inputs, attrs, 2);
  const bool exclusive = attrs.GetBool("exclusive");
  const bool reverse = attrs.GetBool("reverse");
  const AxisView& v = p.axis.view;
  const int64_t k = norm_pieces::kPrefixStats;
  const int64_t pieces = GatheredPieces(inputs, p.axis.rows(), k);
  const Tensor& x = inputs[0];
  Tensor out = internal::Zeros(x.shape);
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t i = 0; i < v.inner; ++i) {
      const int64_t r = o * v.inner + i;
      double running =
          norm_pieces::PrefixBefore(inputs[1].data.data() + r * k, pieces, p.axis.rows() * k, p.first, reverse);
      for (int64_t step = 0; step < v.len; ++step) {
        const int64_t at = v.At(o, reverse ? v.len - 1 - step : step, i);
        if (exclusive) {
          out.data[at] = running;
          running += x.data[at];
        } else {
          running += x.data[at];
          out.data[at] = running;
        }
      }
    }
  }
  return {out};
}

}  // namespace spmd::reference::ops

namespace spmd::reference::ops {
namespace {

// logsumexp on a piece: the reduction (norm_pieces::PlanLogsumexpPiece) and, per output
// element, the piece's x elements it reduces, in x's order.
struct LogsumexpPiece {
  plan::ReduceShape reduce;
  std::vector<std::vector<double>> values;  // per output element
};
LogsumexpPiece CheckLogsumexpPiece(const Tensors& inputs, const Attrs& attrs, size_t arity) {
  LogsumexpPiece p;
  p.reduce = norm_pieces::PlanLogsumexpPiece(plan::ShapesOf(inputs), attrs, arity);
  const Tensor& x = inputs[0];
  // The output's strides over x's kept dims (a reduced dim adds nothing).
  Shape kept;
  for (size_t d = 0; d < x.shape.size(); ++d) kept.push_back(p.reduce.reduced[d] ? 1 : x.shape[d]);
  Shape to_out = internal::Strides(kept);
  for (size_t d = 0; d < x.shape.size(); ++d) {
    if (p.reduce.reduced[d]) to_out[d] = 0;
  }
  p.values.resize(static_cast<size_t>(NumElements(p.reduce.out_shape)));
  for (int64_t i = 0; i < NumElements(x.shape); ++i) {
    p.values[internal::Dot(internal::Unravel(i, x.shape), to_out)].push_back(x.data[i]);
  }
  return p;
}

}  // namespace

// x -> per output element {max, sum of exp(x - max)} over the piece's reduced elements,
// [out_shape..., 2].
Tensors logsumexp_stats(const Tensors& inputs, const Attrs& attrs) {
  const LogsumexpPiece p = CheckLogsumexpPiece(inputs, attrs, 1);
  Shape shape = p.reduce.out_shape;
  shape.push_back(norm_pieces::kSoftmaxStats);
  Tensor stats = internal::Zeros(shape);
  for (size_t o = 0; o < p.values.size(); ++o) {
    norm_pieces::SoftmaxStats(p.values[o].data(), static_cast<int64_t>(p.values[o].size()), 1,
                              stats.data.data() + o * norm_pieces::kSoftmaxStats);
  }
  return {stats};
}

// x, gathered -> max + log(sum) of the whole reduced set, from every piece's summary.
Tensors logsumexp_finish(const Tensors& inputs, const Attrs& attrs) {
  const plan::ReduceShape reduce = norm_pieces::PlanLogsumexpPiece(plan::ShapesOf(inputs), attrs, 2);
  const int64_t rows = NumElements(reduce.out_shape);
  const int64_t k = norm_pieces::kSoftmaxStats;
  const int64_t pieces = GatheredPieces(inputs, rows, k);
  Tensor out = internal::Zeros(reduce.out_shape);
  for (int64_t r = 0; r < rows; ++r) {
    out.data[r] = norm_pieces::LogsumexpOf(norm_pieces::CombineSoftmax(inputs[1].data.data() + r * k, pieces, rows * k));
  }
  return {out};
}

}  // namespace spmd::reference::ops

namespace spmd::reference::ops {
namespace {

// layer_norm_grad (centered: x, scale, bias, mean, variance, out_grad) and rms_norm_grad
// (x, scale, invvar, out_grad) on a piece: every row's mean and inv.
struct NormGradRows {
  norm_pieces::NormGradPiece piece;
  std::vector<double> mean, inv;
};
NormGradRows CheckNormGradPiece(const Tensors& inputs, const Attrs& attrs, bool centered, size_t arity) {
  NormGradRows r;
  const size_t params = centered ? 2 : 1;
  r.piece = norm_pieces::PlanNormGradPiece(plan::ShapesOf(inputs), attrs, params, arity);
  const double epsilon = attrs.GetFloat("epsilon");
  for (int64_t o = 0; o < r.piece.split.outer; ++o) {
    r.mean.push_back(centered ? inputs[3].data[o] : 0.0);
    r.inv.push_back(centered ? 1.0 / std::sqrt(inputs[4].data[o] + epsilon) : inputs[2].data[o]);
  }
  return r;
}

// Every row's {sum(dxhat), sum(dxhat xhat)} over the piece, [x.shape[:begin], 2].
Tensors NormGradStatsPhase(const Tensors& inputs, const Attrs& attrs, bool centered) {
  const NormGradRows r = CheckNormGradPiece(inputs, attrs, centered, centered ? 6 : 4);
  const int64_t n = r.piece.split.n;
  Shape shape = r.piece.split.stats_shape;
  shape.push_back(norm_pieces::kGradStats);
  Tensor stats = internal::Zeros(shape);
  const Tensor& g = inputs[centered ? 5 : 3];
  for (int64_t o = 0; o < r.piece.split.outer; ++o) {
    norm_pieces::GradRowStats(inputs[0].data.data() + o * n,
                              r.piece.split.has_scale ? inputs[1].data.data() : nullptr, g.data.data() + o * n,
                              r.mean[o], r.inv[o], n, stats.data.data() + o * norm_pieces::kGradStats);
  }
  return {stats};
}

// The piece's x_grad from the whole rows' means, and its slice of the parameters'
// gradients over the local rows (a 0-d zero for an absent parameter).
Tensors NormGradFinishPhase(const Tensors& inputs, const Attrs& attrs, bool centered) {
  const size_t own = centered ? 6 : 4;
  const NormGradRows r = CheckNormGradPiece(inputs, attrs, centered, own + 1);
  const int64_t n = r.piece.split.n;
  const int64_t rows = r.piece.split.outer;
  const int64_t k = norm_pieces::kGradStats;
  const int64_t pieces = GatheredPieces(inputs, rows, k);
  const Tensor& x = inputs[0];
  const Tensor& scale = inputs[1];
  const Tensor& g = inputs[own - 1];
  Tensor x_grad = internal::Zeros(x.shape);
  Tensor scale_grad = internal::Zeros({n});
  Tensor bias_grad = internal::Zeros({n});
  for (int64_t o = 0; o < rows; ++o) {
    const norm_pieces::GradMeans m =
        norm_pieces::CombineGrad(inputs[own].data.data() + o * k, pieces, rows * k, r.piece.global_n, centered);
    for (int64_t j = 0; j < n; ++j) {
      const double gv = g.data[o * n + j];
      const double xhat = (x.data[o * n + j] - r.mean[o]) * r.inv[o];
      const double dxhat = r.piece.split.has_scale ? gv * scale.data[j] : gv;
      x_grad.data[o * n + j] = (dxhat - m.dxhat - xhat * m.dxhat_xhat) * r.inv[o];
      scale_grad.data[j] += gv * xhat;
      bias_grad.data[j] += gv;
    }
  }
  if (!centered) return {x_grad, scale_grad};
  if (!r.piece.split.has_scale) scale_grad = internal::Zeros(r.piece.split.ParamGradShape(false));
  if (!r.piece.split.has_bias) bias_grad = internal::Zeros(r.piece.split.ParamGradShape(false));
  return {x_grad, scale_grad, bias_grad};
}

}  // namespace

Tensors layer_norm_grad_stats(const Tensors& inputs, const Attrs& attrs) { return NormGradStatsPhase(inputs, attrs, true); }
Tensors layer_norm_grad_finish(const Tensors& inputs, const Attrs& attrs) {
  return NormGradFinishPhase(inputs, attrs, true);
}
Tensors rms_norm_grad_stats(const Tensors& inputs, const Attrs& attrs) { return NormGradStatsPhase(inputs, attrs, false); }
Tensors rms_norm_grad_finish(const Tensors& inputs, const Attrs& attrs) {
  return NormGradFinishPhase(inputs, attrs, false);
}

namespace {

// cummax / cummin on a piece: the op's checks, the view along its axis and the piece's first
// position (plan::PlanCumExtremePiece).
struct CumExtremePiece {
  AxisPiece axis;
  int64_t first = 0;
};
CumExtremePiece CheckCumExtremePiece(const Tensors& inputs, const Attrs& attrs, const char* name, size_t arity) {
  const plan::CumExtremePiece p = plan::PlanCumExtremePiece(plan::ShapesOf(inputs), attrs, name, arity);
  return {ViewPiece(inputs, p.op.axis), p.first};
}

// An int64 or bool x keeps its values exact: its summaries and outputs are int64 / its own
// dtype (the float64 data of a reference tensor holds them).
bool ExactValues(const Tensor& x) { return x.dtype == DType::kInt64 || x.dtype == DType::kBool; }

// x -> every lane's {first position, length, extreme, where}, [x.shape without axis, 4].
template <typename Beyond>
Tensors CumExtremeStats(const Tensors& inputs, const Attrs& attrs, const char* name, Beyond beyond) {
  const CumExtremePiece p = CheckCumExtremePiece(inputs, attrs, name, 1);
  const AxisView& v = p.axis.view;
  const Tensor& x = inputs[0];
  const int64_t k = scan_pieces::kExtremeStats;
  Tensor stats = internal::Zeros(SummaryShape(x.shape, p.axis.axis, k), ExactValues(x) ? DType::kInt64 : DType::kFloat64);
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t i = 0; i < v.inner; ++i) {
      scan_pieces::ExtremeStats(x.data.data() + (v.len > 0 ? v.At(o, 0, i) : 0), v.len, v.inner, p.first, beyond,
                                stats.data.data() + (o * v.inner + i) * k);
    }
  }
  return {stats};
}

// x, gathered -> the piece's running extremes and their global positions, each lane's scan
// started from the extreme of the pieces before it.
template <typename Beyond>
Tensors CumExtremeFinish(const Tensors& inputs, const Attrs& attrs, const char* name, Beyond beyond) {
  const CumExtremePiece p = CheckCumExtremePiece(inputs, attrs, name, 2);
  const AxisView& v = p.axis.view;
  const Tensor& x = inputs[0];
  const int64_t k = scan_pieces::kExtremeStats;
  const int64_t pieces = GatheredPieces(inputs, p.axis.rows(), k);
  Tensor out = internal::Zeros(x.shape, ExactValues(x) ? x.dtype : DType::kFloat64);
  Tensor indices = internal::Zeros(x.shape, DType::kInt64);
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t i = 0; i < v.inner; ++i) {
      const int64_t r = o * v.inner + i;
      auto run = scan_pieces::ExtremeBefore<double>(inputs[1].data.data() + r * k, pieces, p.axis.rows() * k,
                                                    p.first, beyond);
      for (int64_t a = 0; a < v.len; ++a) {
        const int64_t at = v.At(o, a, i);
        scan_pieces::Step(run, x.data[at], p.first + a, beyond);
        out.data[at] = run.best;
        indices.data[at] = static_cast<double>(run.at);
      }
    }
  }
  return {out, indices};
}

}  // namespace

Tensors cummax_stats(const Tensors& inputs, const Attrs& attrs) {
  return CumExtremeStats(inputs, attrs, "cummax", scan_pieces::AtLeast{});
}
Tensors cummax_finish(const Tensors& inputs, const Attrs& attrs) {
  return CumExtremeFinish(inputs, attrs, "cummax", scan_pieces::AtLeast{});
}
Tensors cummin_stats(const Tensors& inputs, const Attrs& attrs) {
  return CumExtremeStats(inputs, attrs, "cummin", scan_pieces::AtMost{});
}
Tensors cummin_finish(const Tensors& inputs, const Attrs& attrs) {
  return CumExtremeFinish(inputs, attrs, "cummin", scan_pieces::AtMost{});
}

}  // namespace spmd::reference::ops
