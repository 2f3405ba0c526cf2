// The arithmetic of a softmax cross entropy whose class axis is split into pieces held by
// different ranks (c_softmax_with_cross_entropy, and cross_entropy_with_softmax with
// use_softmax, its class axis exchanged): each piece summarises every row in four
// numbers, the pieces' summaries are gathered, and each rank finishes its own piece from
// them. Shared by the op's float64 phases (reference/) and its CPU kernel phases
// (kernels/cpu/), so that the distributed computation is written once; the op's reference
// itself is the plain single-device softmax cross entropy, which the checker compares it
// with.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "rules/model/attrs.h"
#include "rules/model/error.h"

namespace spmd::softmax_pieces {

// The attrs of Paddle's c_softmax ops besides ignore_index: ring_id, rank and nranks name
// Paddle's communicator and piece; spmdkit takes both from the layout, so they are checked
// for range only (InvalidArgument naming the attr).
inline void CheckPaddleCommAttrs(const Attrs& attrs) {
  (void)attrs.GetInt("ignore_index");
  if (attrs.GetInt("ring_id") < 0) ThrowInvalid("attrs.ring_id", "must be >= 0");
  const int64_t rank = attrs.GetInt("rank");
  const int64_t nranks = attrs.GetInt("nranks");
  if (nranks < 0) ThrowInvalid("attrs.nranks", "must be >= 0");
  if (rank < 0 || (nranks > 0 && rank >= nranks)) {
    ThrowInvalid("attrs.rank", "must be in [0, nranks) (0 when nranks is 0)");
  }
}

// A row's summary of one piece: the piece's max logit (-inf for an empty piece), the sum
// of exp(logit - max) over the piece, the label's logit if the piece holds the label (else
// 0), and whether it does (1 or 0).
inline constexpr int64_t kStats = 4;

// Summarises one row of a piece: `len` logits at x[0], x[stride], ...; the piece holds the
// classes [start, start + len); `label` is the row's class, `ignored` when it is the
// ignore_index (then no piece holds it).
// The first two of them: the piece's max logit and sum of exp(logit - max), into stats[0]
// and stats[1].
template <typename T>
void PieceMaxSum(const T* x, int64_t len, int64_t stride, T* stats) {
  T max = -std::numeric_limits<T>::infinity();
  for (int64_t j = 0; j < len; ++j) max = x[j * stride] > max ? x[j * stride] : max;
  T sum = 0;
  for (int64_t j = 0; j < len; ++j) sum += std::exp(x[j * stride] - max);
  stats[0] = max;
  stats[1] = sum;
}

// A label's pair: its logit where the piece holds it (else 0), and whether it does, into
// pair[0] and pair[1].
template <typename T>
void PieceLabel(const T* x, int64_t len, int64_t stride, int64_t label, int64_t start, bool ignored, T* pair) {
  const bool holds = !ignored && label >= start && label - start < len;
  pair[0] = holds ? x[(label - start) * stride] : T(0);
  pair[1] = holds ? T(1) : T(0);
}

template <typename T>
void PieceStats(const T* x, int64_t len, int64_t stride, int64_t label, int64_t start, bool ignored,
                T* stats) {
  PieceMaxSum(x, len, stride, stats);
  PieceLabel(x, len, stride, label, start, ignored, stats + 2);
}

// The whole row from its pieces' summaries (piece p's at stats[p * piece_stride]), combined
// in piece order: the row's max, the sum of exp(logit - max), the label's logit and the
// number of pieces that held the label.
template <typename T>
struct Row {
  T max;
  T sum;
  T target;
  int64_t holders;
};

// The row's max and sum alone (target and holders left 0), from the pieces' first two
// numbers.
template <typename T>
Row<T> CombineMaxSum(const T* stats, int64_t pieces, int64_t piece_stride) {
  Row<T> row{-std::numeric_limits<T>::infinity(), T(0), T(0), 0};
  for (int64_t p = 0; p < pieces; ++p) {
    const T m = stats[p * piece_stride];
    row.max = m > row.max ? m : row.max;
  }
  for (int64_t p = 0; p < pieces; ++p) {
    const T* s = stats + p * piece_stride;
    if (s[1] > T(0)) row.sum += s[1] * std::exp(s[0] - row.max);  // empty pieces add nothing
  }
  return row;
}

// One label's pair (PieceLabel) at offset `at` of every piece's numbers, combined into
// row.target and row.holders.
template <typename T>
void CombineLabel(const T* stats, int64_t pieces, int64_t piece_stride, int64_t at, Row<T>& row) {
  row.target = T(0);
  row.holders = 0;
  for (int64_t p = 0; p < pieces; ++p) {
    const T* s = stats + p * piece_stride + at;
    row.target += s[0];
    row.holders += s[1] > T(0) ? 1 : 0;
  }
}

template <typename T>
Row<T> Combine(const T* stats, int64_t pieces, int64_t piece_stride) {
  Row<T> row = CombineMaxSum(stats, pieces, piece_stride);
  CombineLabel(stats, pieces, piece_stride, 2, row);
  return row;
}

// The loss of a row: log(sum) + max - target (0 for an ignored row).
template <typename T>
T Loss(const Row<T>& row, bool ignored) {
  return ignored ? T(0) : std::log(row.sum) + row.max - row.target;
}

// ---- soft labels (cross_entropy_with_softmax with soft_label) ------------------------------
//
// The same four numbers with a soft label: the piece's max and sum of exp(logit - max) as
// PieceStats gives them, then sum(label * logit) in place of the label's logit and
// sum(label) in place of the holder flag. Combine then sums the first into Row::target; the
// label's total is SoftLabelTotal. The row's loss is -sum(label * log softmax) =
// sum(label) (max + log(sum)) - sum(label * logit).
template <typename T>
void SoftPieceStats(const T* x, const T* label, int64_t len, int64_t stride, T* stats) {
  PieceStats(x, len, stride, int64_t{0}, int64_t{0}, /*ignored=*/true, stats);
  T dot = 0, total = 0;
  for (int64_t j = 0; j < len; ++j) {
    dot += label[j * stride] * x[j * stride];
    total += label[j * stride];
  }
  stats[2] = dot;
  stats[3] = total;
}

template <typename T>
T SoftLabelTotal(const T* stats, int64_t pieces, int64_t piece_stride) {
  T total = 0;
  for (int64_t p = 0; p < pieces; ++p) total += stats[p * piece_stride + 3];
  return total;
}

// The soft-label loss of a row from its combined Row and its label total (0 for a row of
// no classes).
template <typename T>
T SoftLoss(const Row<T>& row, T label_total) {
  if (!(row.sum > T(0))) return T(0);
  return label_total * (row.max + std::log(row.sum)) - row.target;
}

// ---- several hard labels per row (c_softmax_with_multi_label_cross_entropy) -----------------
//
// A row's summary of one piece with k labels: the piece's max and sum (PieceMaxSum), then
// each label's pair (PieceLabel): 2 + 2k numbers. Combined, CombineMaxSum gives the row's
// max and sum, CombineLabel at 2 + 2j label j's logit and holder count; label j's loss is
// Loss(row, ignored) times its weight.
inline constexpr int64_t MultiLabelStats(int64_t labels) { return 2 + 2 * labels; }

}  // namespace spmd::softmax_pieces
