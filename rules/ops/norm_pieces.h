// The arithmetic of a row reduction whose reduced axis is split into pieces held by
// different ranks (softmax, log_softmax, logsumexp, layer_norm, rms_norm, cumsum with the reduced axis
// sharded, OpDecl::exchange): each piece summarises every row in a few numbers (its
// Phase::kStats), the summaries are all-gathered, and each rank finishes its own piece from
// them (Phase::kFinish, rules/engine/phase.h). Shared by the phases' float64 references (reference/) and their CPU kernels
// (kernels/cpu/), so that the merge is written once; the ops' references themselves are
// the plain single-device ones, which the checker compares the phases with.
//
// A piece's summary is computed in the kernel's dtype T and kept in float64 (the gathered
// tensor is float64 whatever the inputs' dtype, as c_softmax_with_cross_entropy's).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "rules/model/attrs.h"
#include "rules/model/error.h"
#include "rules/engine/op_plan.h"
#include "rules/engine/shape_util.h"
#include "rules/ops/norm_plan.h"
#include "rules/ops/reduction_plan.h"

namespace spmd::norm_pieces {

// ---- shapes, checked once for the references and the kernels -----------------------------

// The shape of a piece's summary: `shape` without dim `axis` (none when axis < 0), then k.
inline std::vector<int64_t> SummaryShape(const std::vector<int64_t>& shape, int64_t axis, int64_t k) {
  std::vector<int64_t> out;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d != axis) out.push_back(shape[d]);
  }
  out.push_back(k);
  return out;
}

// The number of pieces in the gathered summaries, the finish phase's input `index` of
// shape `gathered` holding `numel` values: [pieces, rows..., k] of `rows` rows. Throws
// InvalidArgument ("inputs[index].shape") otherwise.
inline int64_t GatheredPieces(const std::vector<int64_t>& gathered, int64_t numel, size_t index,
                              int64_t rows, int64_t k) {
  const int64_t pieces = gathered.empty() ? 0 : gathered[0];
  if (pieces < 1 || numel != pieces * rows * k) {
    ThrowInvalid(shape::InputField(index, "shape"),
                 "the gathered statistics must be [pieces, rows, " + std::to_string(k) + "], got " +
                     shape::ShapeString(gathered));
  }
  return pieces;
}

// softmax / log_softmax / cumsum on a piece: the arity (the op's, plus the gathered tensor
// in the finish phase) and attrs.axis, as the ops check them. Returns the axis (-1 on a
// 0-d x).
inline int64_t PlanAxisPiece(const std::vector<std::vector<int64_t>>& shapes, const Attrs& attrs, size_t arity) {
  plan::CheckArity(shapes, arity);
  return shape::NormalizeAxisOrScalar(attrs.GetInt("axis"), static_cast<int64_t>(shapes[0].size()), "attrs.axis");
}

// softmax_grad on a piece: out and out_grad of one shape, along attrs.axis.
inline int64_t PlanSoftmaxGradPiece(const std::vector<std::vector<int64_t>>& shapes, const Attrs& attrs,
                                    size_t arity) {
  plan::CheckArity(shapes, arity);
  if (shapes[1] != shapes[0]) {
    ThrowInvalid(shape::InputField(1, "shape"),
                 "out_grad " + shape::ShapeString(shapes[1]) + " != out " + shape::ShapeString(shapes[0]));
  }
  return PlanAxisPiece(shapes, attrs, arity);
}

// cumsum on a piece: the axis, refusing flatten (the exchange runs along an axis; the rule
// exchanges nothing with flatten), and the piece's first position along the axis
// (localized local.offset; 0 unsharded).
struct CumsumPiecePlan {
  int64_t axis = -1;  // -1 on a 0-d x
  int64_t first = 0;
};
inline CumsumPiecePlan PlanCumsumPiece(const std::vector<std::vector<int64_t>>& shapes, const Attrs& attrs,
                                       size_t arity) {
  (void)attrs.GetBool("exclusive");
  (void)attrs.GetBool("reverse");
  if (attrs.GetBool("flatten")) ThrowInvalid("attrs.flatten", "cumsum's exchange phases run along an axis");
  CumsumPiecePlan piece{PlanAxisPiece(shapes, attrs, arity), 0};
  if (attrs.local().offset.has_value() && piece.axis >= 0) {
    const std::vector<int64_t>& offset = *attrs.local().offset;
    if (offset.size() != shapes[0].size()) ThrowInvalid(LocalFieldName(LocalField::kOffset), "must have x's rank");
    piece.first = offset[piece.axis];
  }
  return piece;
}

// layer_norm / rms_norm on a piece: x split at begin_norm_axis into rows and the piece's
// normalised elements; only dim begin_norm_axis may be a piece (the later ones are whole,
// as the rule requires), so the piece's elements are the contiguous run of the flattened
// normalised dims starting at offset[begin] * inner. The parameters (inputs 1..params) are
// whole: [n] of the global x (localized local.global_shape; x's own shape unsharded), or,
// with `optional_params` (layer_norm, as plan::PlanLayerNorm), 0-d: absent (1 and 0). The
// caller has checked the arity; `shapes` are the inputs' shapes.
struct NormPiece {
  int64_t begin = 0;
  int64_t rows = 1;
  int64_t n = 1;                     // the piece's normalised elements per row
  int64_t first = 0;                 // their position in the flattened normalised dims
  std::vector<int64_t> stats_shape;  // x.shape[:begin]
  bool has_scale = true, has_bias = true;
};
inline NormPiece PlanNormPiece(const std::vector<std::vector<int64_t>>& shapes, const Attrs& attrs,
                               size_t params, bool optional_params) {
  (void)attrs.GetFloat("epsilon");
  const int64_t begin_norm_axis = attrs.GetInt("begin_norm_axis");
  const std::vector<int64_t>& x = shapes[0];
  const auto rank = static_cast<int64_t>(x.size());
  NormPiece piece;
  piece.begin = shape::NormalizeAxis(begin_norm_axis, rank, "attrs.begin_norm_axis");
  const std::vector<int64_t> global =
      attrs.local().global_shape.value_or(x);
  const std::vector<int64_t> offset =
      attrs.local().offset.value_or(std::vector<int64_t>(x.size(), 0));
  if (global.size() != x.size() || offset.size() != x.size()) {
    ThrowInvalid(std::string(LocalFieldName(LocalField::kGlobalShape)), "must have x's rank");
  }
  int64_t inner = 1, global_n = 1;
  for (int64_t d = 0; d < rank; ++d) {
    if (d < piece.begin) {
      piece.rows *= x[d];
      piece.stats_shape.push_back(x[d]);
      continue;
    }
    global_n *= global[d];
    if (d > piece.begin) {
      if (x[d] != global[d]) {
        ThrowInvalid(shape::InputField(0, "shape"), "only dim begin_norm_axis may be a piece of the normalised dims");
      }
      inner *= x[d];
    }
  }
  if (global_n == 0) {
    ThrowInvalid(shape::InputField(0, "shape"),
                 "normalising over an empty set of elements of " + shape::ShapeString(global));
  }
  piece.n = x[piece.begin] * inner;
  piece.first = offset[piece.begin] * inner;
  if (piece.first < 0 || piece.first + piece.n > global_n) {
    ThrowInvalid(std::string(LocalFieldName(LocalField::kOffset)), "the piece lies outside the normalised dims");
  }
  for (size_t p = 1; p <= params; ++p) {
    if (optional_params && shapes[p].empty()) continue;  // 0-d: absent
    if (shapes[p] != std::vector<int64_t>{global_n}) {
      ThrowInvalid(shape::InputField(p, "shape"), "expected [" + std::to_string(global_n) + "]" +
                                                      (optional_params ? " or 0-d (absent)" : "") + ", got " +
                                                      shape::ShapeString(shapes[p]));
    }
  }
  piece.has_scale = !optional_params || !shapes[1].empty();
  piece.has_bias = params > 1 && (!optional_params || !shapes[2].empty());
  return piece;
}

// ---- softmax / log_softmax: the piece's max and sum of exp(x - max) ----------------------

inline constexpr int64_t kSoftmaxStats = 2;

// Summarises `len` values at x[0], x[stride], ...: {max (-inf when empty), sum exp(x - max)}.
template <typename T>
void SoftmaxStats(const T* x, int64_t len, int64_t stride, double* stats) {
  T max = -std::numeric_limits<T>::infinity();
  for (int64_t j = 0; j < len; ++j) max = x[j * stride] > max ? x[j * stride] : max;
  T sum = 0;
  for (int64_t j = 0; j < len; ++j) sum += std::exp(x[j * stride] - max);
  stats[0] = static_cast<double>(max);
  stats[1] = static_cast<double>(sum);
}

struct SoftmaxRow {
  double max;  // the whole row's max
  double sum;  // the whole row's sum of exp(x - max)
};

// The whole row from `pieces` summaries (piece p's at stats[p * piece_stride]): each
// piece's sum is rescaled to the row's max; empty pieces add nothing.
inline SoftmaxRow CombineSoftmax(const double* stats, int64_t pieces, int64_t piece_stride) {
  SoftmaxRow row{-std::numeric_limits<double>::infinity(), 0.0};
  for (int64_t p = 0; p < pieces; ++p) {
    const double m = stats[p * piece_stride];
    row.max = m > row.max ? m : row.max;
  }
  for (int64_t p = 0; p < pieces; ++p) {
    const double* s = stats + p * piece_stride;
    if (s[1] > 0.0) row.sum += s[1] * std::exp(s[0] - row.max);
  }
  return row;
}

// ---- logsumexp: softmax's statistics over every reduced element of an output element ------

// logsumexp on a piece: the arity (the op's, plus the gathered tensor in the finish phase)
// and the reduction the op's own plan gives (plan::PlanReduce: axis, keepdim, reduce_all).
// The summary is [out_shape..., kSoftmaxStats]: one max and sum of exp(x - max) per output
// element over the piece's reduced elements.
inline plan::ReduceShape PlanLogsumexpPiece(const std::vector<std::vector<int64_t>>& shapes, const Attrs& attrs,
                                            size_t arity) {
  plan::CheckArity(shapes, arity);
  return plan::PlanReduceShape(shapes[0], attrs.GetInts("axis"), attrs.GetBool("keepdim"),
                               attrs.GetBool("reduce_all"));
}

// The whole logsumexp from the combined row: max + log(sum); the max itself when it is not
// finite (-inf: nothing, or only -inf, was reduced; +inf), as the op's reference gives it.
inline double LogsumexpOf(const SoftmaxRow& row) {
  return std::isfinite(row.max) ? row.max + std::log(row.sum) : row.max;
}

// ---- softmax_grad: the piece's part of the row's dot product sum(out_grad * out) ----------

inline constexpr int64_t kDotStats = 1;

template <typename T>
void DotStats(const T* out, const T* out_grad, int64_t len, int64_t stride, double* stats) {
  T dot = 0;
  for (int64_t j = 0; j < len; ++j) dot += out_grad[j * stride] * out[j * stride];
  stats[0] = static_cast<double>(dot);
}

inline double CombineDot(const double* stats, int64_t pieces, int64_t piece_stride) {
  double dot = 0.0;
  for (int64_t p = 0; p < pieces; ++p) dot += stats[p * piece_stride];
  return dot;
}

// ---- layer_norm: count, mean and M2 (the sum of squared deviations from the mean) ---------

inline constexpr int64_t kMomentStats = 3;

// Summarises `n` contiguous values: {n, mean, M2}, two passes (no E[x^2] - E[x]^2
// cancellation); {0, 0, 0} when empty.
template <typename T>
void MomentStats(const T* x, int64_t n, double* stats) {
  T mean = 0;
  for (int64_t j = 0; j < n; ++j) mean += x[j];
  mean = n > 0 ? mean / static_cast<T>(static_cast<double>(n)) : T(0);
  T m2 = 0;
  for (int64_t j = 0; j < n; ++j) m2 += (x[j] - mean) * (x[j] - mean);
  stats[0] = static_cast<double>(n);
  stats[1] = static_cast<double>(mean);
  stats[2] = static_cast<double>(m2);
}

struct Moments {
  double count;
  double mean;
  double m2;
};

// The whole row's moments from `pieces` summaries, merged pairwise in piece order (Chan,
// Golub and LeVeque): the mean moves by the count-weighted difference and M2 gains the
// between-piece term, so no piece's squares are subtracted from another's.
inline Moments CombineMoments(const double* stats, int64_t pieces, int64_t piece_stride) {
  Moments all{0.0, 0.0, 0.0};
  for (int64_t p = 0; p < pieces; ++p) {
    const double* s = stats + p * piece_stride;
    const double count = s[0];
    if (count <= 0.0) continue;
    const double total = all.count + count;
    const double delta = s[1] - all.mean;
    all.mean += delta * (count / total);
    all.m2 += s[2] + delta * delta * (all.count * count / total);
    all.count = total;
  }
  return all;
}

// batch_norm on a piece of the batch: every channel's {count, mean, M2} over the piece's
// elements of that channel (x laid out as `layout`, `numel` elements; two passes), as
// [C, 3] at `stats`.
template <typename T>
void ChannelMomentStats(const T* x, int64_t numel, const plan::ChannelLayout& layout, double* stats) {
  const auto channels = static_cast<size_t>(layout.c);
  const int64_t count = layout.c > 0 ? numel / layout.c : 0;
  std::vector<T> mean(channels, T(0)), m2(channels, T(0));
  for (int64_t i = 0; i < numel; ++i) mean[static_cast<size_t>(layout.ChannelOf(i))] += x[i];
  for (T& m : mean) m = count > 0 ? m / static_cast<T>(static_cast<double>(count)) : T(0);
  for (int64_t i = 0; i < numel; ++i) {
    const auto c = static_cast<size_t>(layout.ChannelOf(i));
    m2[c] += (x[i] - mean[c]) * (x[i] - mean[c]);
  }
  for (size_t c = 0; c < channels; ++c) {
    stats[c * kMomentStats] = static_cast<double>(count);
    stats[c * kMomentStats + 1] = static_cast<double>(mean[c]);
    stats[c * kMomentStats + 2] = static_cast<double>(m2[c]);
  }
}

// ---- layer_norm_grad / rms_norm_grad: the piece's parts of the row sums of dxhat and dxhat xhat

// layer_norm_grad / rms_norm_grad on a piece: the op's own checks on its inputs (all but
// the gathered tensor of the finish phase; the scale is the piece's slice, as the rule ties
// the parameters' factor to the exchanged dim; layer_norm_grad's absent (0-d) parameters as
// plan::PlanLayerNormGrad's), and the whole row's normalised count,
// prod(global x.shape[begin:]) (localized local.global_shape; the piece's own unsharded).
struct NormGradPiece {
  plan::NormSplit split;
  int64_t global_n = 1;
};
inline NormGradPiece PlanNormGradPiece(const std::vector<std::vector<int64_t>>& shapes, const Attrs& attrs,
                                       size_t params, size_t arity) {
  plan::CheckArity(shapes, arity);
  const size_t own = 2 + 2 * params;  // x, the parameters, the statistics, out_grad
  NormGradPiece p;
  const plan::Shapes own_shapes(shapes.begin(), shapes.begin() + static_cast<std::ptrdiff_t>(own));
  // A piece may hold none of the row's elements (an uneven split of dim begin: layer_norm_grad
  // without parameters has no N to keep the split even); the whole row may not be empty.
  p.split = params == 2 ? plan::PlanLayerNormGrad(own_shapes, attrs, /*piece=*/true)
                        : plan::PlanRmsNormGrad(own_shapes, attrs, /*piece=*/true);
  p.global_n = p.split.n;
  std::vector<int64_t> global = shapes[0];
  if (attrs.local().global_shape) {
    global = *attrs.local().global_shape;
    if (global.size() != shapes[0].size()) ThrowInvalid(LocalFieldName(LocalField::kGlobalShape), "must have x's rank");
    p.global_n = 1;
    for (size_t d = static_cast<size_t>(p.split.begin); d < global.size(); ++d) p.global_n *= global[d];
  }
  if (p.global_n == 0) {
    ThrowInvalid(shape::InputField(0, "shape"),
                 "normalising over an empty set of elements of " + shape::ShapeString(global));
  }
  if (p.global_n < p.split.n || p.global_n < 1) {
    ThrowInvalid(LocalFieldName(LocalField::kGlobalShape), "the piece is larger than the normalised dims");
  }
  return p;
}

inline constexpr int64_t kGradStats = 2;  // sum(dxhat), sum(dxhat xhat)

// One row of a piece: xhat = (x - mean) inv, dxhat = g scale (g where scale is null:
// absent); sets stats[0..1] to the row's sums.
template <typename T>
void GradRowStats(const T* x, const T* scale, const T* g, T mean, T inv, int64_t n, double* stats) {
  T sum_dxhat = 0, sum_dxhat_xhat = 0;
  for (int64_t j = 0; j < n; ++j) {
    const T xhat = (x[j] - mean) * inv;
    const T dxhat = scale != nullptr ? g[j] * scale[j] : g[j];
    sum_dxhat += dxhat;
    sum_dxhat_xhat += dxhat * xhat;
  }
  stats[0] = static_cast<double>(sum_dxhat);
  stats[1] = static_cast<double>(sum_dxhat_xhat);
}

// The whole row's means of dxhat (0 for rms_norm_grad, not centered) and dxhat xhat.
struct GradMeans {
  double dxhat;
  double dxhat_xhat;
};
inline GradMeans CombineGrad(const double* stats, int64_t pieces, int64_t piece_stride, int64_t global_n,
                             bool centered) {
  double s0 = 0.0, s1 = 0.0;
  for (int64_t p = 0; p < pieces; ++p) {
    s0 += stats[p * piece_stride];
    s1 += stats[p * piece_stride + 1];
  }
  const double n = static_cast<double>(global_n);
  return {centered ? s0 / n : 0.0, s1 / n};
}

// ---- rms_norm: count and sum of squares ---------------------------------------------------

inline constexpr int64_t kSquareStats = 2;

template <typename T>
void SquareStats(const T* x, int64_t n, double* stats) {
  T sq = 0;
  for (int64_t j = 0; j < n; ++j) sq += x[j] * x[j];
  stats[0] = static_cast<double>(n);
  stats[1] = static_cast<double>(sq);
}

struct Squares {
  double count;
  double sum;
};

inline Squares CombineSquares(const double* stats, int64_t pieces, int64_t piece_stride) {
  Squares all{0.0, 0.0};
  for (int64_t p = 0; p < pieces; ++p) {
    all.count += stats[p * piece_stride];
    all.sum += stats[p * piece_stride + 1];
  }
  return all;
}

// ---- cumsum: the piece's first position along the axis and its total ----------------------

inline constexpr int64_t kPrefixStats = 2;

template <typename T>
void PrefixStats(const T* x, int64_t len, int64_t stride, int64_t first, double* stats) {
  T total = 0;
  for (int64_t j = 0; j < len; ++j) total += x[j * stride];
  stats[0] = static_cast<double>(first);
  stats[1] = static_cast<double>(total);
}

// What the pieces before the piece starting at `first` add to its running sums: the totals
// of the pieces that start before it (after it when `reverse`: the sum runs from the end).
// Pieces are told apart by their first position, so the gather's order does not matter; an
// empty piece adds 0 wherever it claims to start.
inline double PrefixBefore(const double* stats, int64_t pieces, int64_t piece_stride, int64_t first,
                           bool reverse) {
  double prefix = 0.0;
  const double own = static_cast<double>(first);
  for (int64_t p = 0; p < pieces; ++p) {
    const double* s = stats + p * piece_stride;
    if (reverse ? s[0] > own : s[0] < own) prefix += s[1];
  }
  return prefix;
}

}  // namespace spmd::norm_pieces
