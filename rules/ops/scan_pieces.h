// The arithmetic of cummax / cummin whose scanned axis is split into pieces held by
// different ranks: each piece summarises every lane (one position of the other dims) in four
// numbers, the pieces' summaries are all-gathered, and each rank restarts its running extreme
// from the pieces before it. Shared by the ops' float64 phases (reference/) and their CPU
// kernel phases (kernels/cpu/), so that the distributed computation is written once; the
// ops' references themselves are the plain single-device scans the checker compares with.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "rules/model/is_nan.h"

namespace spmd::scan_pieces {

// A lane's summary of one piece: its first position along the axis, its length, its extreme
// (the running extreme at its last element; 0 for an empty piece) and the global position
// where that was found. The summary's element type S is float64, or int64 for an int64 or
// bool x, so that every value travels exactly.
inline constexpr int64_t kExtremeStats = 4;

// A running extreme: the value so far, the global position it came from, and whether any
// element was seen.
template <typename V>
struct Running {
  V best{};
  int64_t at = 0;
  bool any = false;
};

// One step of the scan: v at global position `at` takes the extreme's place when it is at
// least as far out (`beyond(v, best)`: a tie goes to the later element) or is the first NaN;
// a NaN extreme keeps its place.
template <typename V, typename Beyond>
void Step(Running<V>& r, V v, int64_t at, Beyond beyond) {
  if (!r.any || (!IsNan(r.best) && (IsNan(v) || beyond(v, r.best)))) {
    r.best = v;
    r.at = at;
    r.any = true;
  }
}

// cummax's and cummin's `beyond`: v takes the place of best.
struct AtLeast {
  template <typename V>
  bool operator()(V v, V best) const { return v >= best; }
};
struct AtMost {
  template <typename V>
  bool operator()(V v, V best) const { return v <= best; }
};

// Summarises one lane of a piece: `len` values at x[0], x[stride], ..., the piece starting at
// global position `first`.
template <typename V, typename S, typename Beyond>
void ExtremeStats(const V* x, int64_t len, int64_t stride, int64_t first, Beyond beyond, S* stats) {
  Running<V> r;
  for (int64_t j = 0; j < len; ++j) Step(r, x[j * stride], first + j, beyond);
  stats[0] = static_cast<S>(first);
  stats[1] = static_cast<S>(len);
  stats[2] = r.any ? static_cast<S>(r.best) : S(0);
  stats[3] = static_cast<S>(r.at);
}

// The running extreme that the pieces before global position `first` hand to the piece
// starting there: their extremes folded in order of position (a later piece wins a tie, as a
// later element does; the step is associative, so a piece's extreme stands for its
// elements). Piece p's summary is at stats[p * piece_stride]; pieces are told apart by their
// first position, so the gather's order does not matter; empty pieces are skipped.
template <typename V, typename S, typename Beyond>
Running<V> ExtremeBefore(const S* stats, int64_t pieces, int64_t piece_stride, int64_t first, Beyond beyond) {
  Running<V> r;
  int64_t last = -1;  // the position of the piece folded last
  for (;;) {
    const S* next = nullptr;
    for (int64_t p = 0; p < pieces; ++p) {
      const S* s = stats + p * piece_stride;
      const auto pos = static_cast<int64_t>(s[0]);
      if (s[1] > S(0) && pos < first && pos > last && (next == nullptr || pos < static_cast<int64_t>(next[0]))) {
        next = s;
      }
    }
    if (next == nullptr) return r;
    Step(r, static_cast<V>(next[2]), static_cast<int64_t>(next[3]), beyond);
    last = static_cast<int64_t>(next[0]);
  }
}

}  // namespace spmd::scan_pieces
