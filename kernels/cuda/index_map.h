// Index arithmetic of the CUDA shape, indexing, scatter, sort, fused and random kernels,
// as plain C++ (no CUDA header): the host builds plans (which byte goes where), and the
// per-element functions (SPMD_HOST_DEVICE) are what the device kernels run for element i.
// The tests (kernels/cuda/index_map_test.cc) run the same functions on host buffers over
// every i and compare the result with the CPU kernels, so everything here but the launch
// itself is checked on a machine without a GPU.
//
// All offsets and counts are int64. Shapes reaching here have passed the CPU kernels'
// checks (CheckShape: every byte count below 2^62), so the sums below cannot overflow.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "rules/ops/counter_rng.h"
#include "rules/model/dtype.h"
#include "rules/model/half.h"  // SPMD_HOST_DEVICE, BFloat16, Float16

namespace spmd::kernels::cuda {

// ---- Strided copies -----------------------------------------------------------------------

// The most dims one launch of a copy plan takes (kernel parameters are fixed-size); a plan
// with more is split on the host into launches over its leading dims (PeelPlan).
inline constexpr int kMaxPlanDims = 16;

// A copy over the index space `dims` (row-major): element (c_0, .., c_{r-1}) moves `unit`
// bytes from source unit src_offset + sum_k ((c_k + rot[k]) mod dims[k]) * src[k] to
// destination unit dst_offset + sum_k c_k * dst[k]. Strides and offsets count units.
// Every shape op's copy is one or more of these: slices and range copies (offsets), concat
// and stack (destination strides), expand (source stride 0), tile (a dim split in two, the
// outer one with source stride 0), pad (destination offsets), roll (rot).
struct CopyPlan {
  std::vector<int64_t> dims, src, dst, rot;
  int64_t src_offset = 0, dst_offset = 0;
  int64_t unit = 1;  // bytes moved per element of the index space

  int64_t count() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
  }
};

// The fixed-size form a kernel takes (rank <= kMaxPlanDims).
struct CopyPlanArgs {
  int rank = 0;
  int64_t count = 0;
  int64_t src_offset = 0, dst_offset = 0;
  int64_t dims[kMaxPlanDims] = {};
  int64_t src[kMaxPlanDims] = {};
  int64_t dst[kMaxPlanDims] = {};
  int64_t rot[kMaxPlanDims] = {};
};

// Source and destination unit of element i (0 <= i < count), i in row-major order of dims.
SPMD_HOST_DEVICE inline void PlanOffsets(const CopyPlanArgs& p, int64_t i, int64_t* s, int64_t* d) {
  int64_t so = p.src_offset, dof = p.dst_offset;
  for (int k = p.rank - 1; k >= 0; --k) {
    const int64_t n = p.dims[k];
    const int64_t q = i / n;
    int64_t c = i - q * n;
    i = q;
    dof += c * p.dst[k];
    c += p.rot[k];
    if (c >= n) c -= n;
    so += c * p.src[k];
  }
  *s = so;
  *d = dof;
}

// Row-major strides of `shape` (in elements).
inline std::vector<int64_t> ContiguousStrides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) strides[d - 1] = strides[d] * shape[d];
  return strides;
}

// The same copy with fewer dims and wider units: size-1 dims dropped, a dim merged into
// its outer neighbour where both sides walk them contiguously (and the inner one is not
// rotated), then, when the innermost dim is contiguous on both sides, f consecutive units
// fused into one of f * unit bytes (f a power of two dividing every stride, offset, the
// inner size and its rotation), up to `max_unit` bytes. max_unit <= unit keeps the unit
// (plans whose offsets are not byte offsets: dropout's global indices). An empty index
// space is returned as it is.
inline CopyPlan SimplifyPlan(const CopyPlan& in, int64_t max_unit) {
  CopyPlan p;
  p.unit = in.unit;
  p.src_offset = in.src_offset;
  p.dst_offset = in.dst_offset;
  if (in.count() == 0) return in;
  for (size_t k = 0; k < in.dims.size(); ++k) {
    const int64_t n = in.dims[k];
    if (n == 1) continue;  // c_k is always 0 (rot mod 1 = 0)
    const int64_t r = n == 0 ? 0 : ((in.rot[k] % n) + n) % n;
    if (!p.dims.empty() && r == 0 && p.src.back() == in.src[k] * n && p.dst.back() == in.dst[k] * n) {
      // Merge into the outer dim: index m = c_outer * n + c; rotation scales by n.
      p.rot.back() *= n;
      p.dims.back() *= n;
      p.src.back() = in.src[k];
      p.dst.back() = in.dst[k];
      continue;
    }
    p.dims.push_back(n);
    p.src.push_back(in.src[k]);
    p.dst.push_back(in.dst[k]);
    p.rot.push_back(r);
  }
  if (p.dims.empty() || p.src.back() != 1 || p.dst.back() != 1) return p;
  const auto divides = [&](int64_t f) {
    if (p.dims.back() % f != 0 || p.rot.back() % f != 0) return false;
    if (p.src_offset % f != 0 || p.dst_offset % f != 0) return false;
    for (size_t k = 0; k + 1 < p.dims.size(); ++k) {
      if (p.src[k] % f != 0 || p.dst[k] % f != 0) return false;
    }
    return true;
  };
  int64_t f = 1;
  while (p.unit * f * 2 <= max_unit && divides(f * 2)) f *= 2;
  if (f == 1) return p;
  p.unit *= f;
  p.dims.back() /= f;
  p.rot.back() /= f;
  p.src_offset /= f;
  p.dst_offset /= f;
  for (size_t k = 0; k + 1 < p.dims.size(); ++k) {
    p.src[k] /= f;
    p.dst[k] /= f;
  }
  if (p.dims.back() == 1) {  // the whole inner dim became one unit
    p.dims.pop_back();
    p.src.pop_back();
    p.dst.pop_back();
    p.rot.pop_back();
  }
  return p;
}

// Splits a plan into plans of at most `max_rank` dims over its leading dims (one per
// index of the peeled dims, in row-major order), so any rank reaches the kernel.
inline std::vector<CopyPlan> PeelPlan(const CopyPlan& plan, int max_rank = kMaxPlanDims) {
  std::vector<CopyPlan> out;
  if (static_cast<int>(plan.dims.size()) <= max_rank) {
    out.push_back(plan);
    return out;
  }
  CopyPlan rest = plan;
  const int64_t n = plan.dims[0], r = plan.rot[0];
  rest.dims.erase(rest.dims.begin());
  rest.src.erase(rest.src.begin());
  rest.dst.erase(rest.dst.begin());
  rest.rot.erase(rest.rot.begin());
  for (int64_t c = 0; c < n; ++c) {
    CopyPlan sub = rest;
    int64_t sc = c + r;
    if (sc >= n) sc -= n;
    sub.src_offset += sc * plan.src[0];
    sub.dst_offset += c * plan.dst[0];
    for (CopyPlan& q : PeelPlan(sub, max_rank)) out.push_back(std::move(q));
  }
  return out;
}

// The kernel's parameters for a plan of at most kMaxPlanDims dims.
inline CopyPlanArgs PlanArgs(const CopyPlan& p) {
  CopyPlanArgs a;
  a.rank = static_cast<int>(p.dims.size());
  a.count = p.count();
  a.src_offset = p.src_offset;
  a.dst_offset = p.dst_offset;
  for (int k = 0; k < a.rank && k < kMaxPlanDims; ++k) {
    a.dims[k] = p.dims[k];
    a.src[k] = p.src[k];
    a.dst[k] = p.dst[k];
    a.rot[k] = p.rot[k];
  }
  return a;
}

// A plan over `dims` with the given strides, no rotation, element size `es`.
inline CopyPlan MakePlan(std::vector<int64_t> dims, std::vector<int64_t> src, std::vector<int64_t> dst,
                         int64_t es) {
  CopyPlan p;
  p.rot.assign(dims.size(), 0);
  p.dims = std::move(dims);
  p.src = std::move(src);
  p.dst = std::move(dst);
  p.unit = es;
  return p;
}

// x[start : start + len] along `axis` into a contiguous output (split, unbind).
inline CopyPlan PlanTakeRange(const std::vector<int64_t>& x, int64_t axis, int64_t start, int64_t len,
                              int64_t es) {
  std::vector<int64_t> out = x;
  out[axis] = len;
  const std::vector<int64_t> xs = ContiguousStrides(x);
  CopyPlan p = MakePlan(out, xs, ContiguousStrides(out), es);
  p.src_offset = start * xs[axis];
  return p;
}

// A contiguous piece into the output of concat (at its offset `at` along axis) or of stack
// (piece `index` of the new dim at `axis`: out_shape has it inserted).
inline CopyPlan PlanConcatPiece(const std::vector<int64_t>& out, int64_t axis, int64_t at,
                                const std::vector<int64_t>& piece, int64_t es) {
  const std::vector<int64_t> os = ContiguousStrides(out);
  CopyPlan p = MakePlan(piece, ContiguousStrides(piece), os, es);
  p.dst_offset = at * os[axis];
  return p;
}

inline CopyPlan PlanStackPiece(const std::vector<int64_t>& piece, int64_t axis, int64_t index,
                               int64_t count, int64_t es) {
  std::vector<int64_t> out = piece;
  out.insert(out.begin() + axis, count);
  std::vector<int64_t> os = ContiguousStrides(out);
  const int64_t offset = index * os[axis];
  os.erase(os.begin() + axis);
  CopyPlan p = MakePlan(piece, ContiguousStrides(piece), os, es);
  p.dst_offset = offset;
  return p;
}

// slice, strided_slice: `shape` (the sliced sizes, before decrease_axis) taken from x at
// `begin`, `step` apart along each dim (a negative step walks back: a negative source
// stride); an empty step is 1 everywhere (slice: the box at begin).
inline CopyPlan PlanSlice(const std::vector<int64_t>& x, const std::vector<int64_t>& begin,
                          const std::vector<int64_t>& shape, int64_t es, const std::vector<int64_t>& step = {}) {
  std::vector<int64_t> xs = ContiguousStrides(x);
  int64_t offset = 0;
  for (size_t d = 0; d < x.size(); ++d) {
    offset += begin[d] * xs[d];
    if (!step.empty()) xs[d] *= step[d];
  }
  CopyPlan p = MakePlan(shape, xs, ContiguousStrides(shape), es);
  p.src_offset = offset;
  return p;
}

// expand / expand_as: x (right-aligned) broadcast to `out`; a broadcast dim reads with
// stride 0.
inline CopyPlan PlanExpand(const std::vector<int64_t>& x, const std::vector<int64_t>& out, int64_t es) {
  const std::vector<int64_t> xs = ContiguousStrides(x);
  const size_t lead = out.size() - x.size();
  std::vector<int64_t> src(out.size(), 0);
  for (size_t d = lead; d < out.size(); ++d) {
    src[d] = x[d - lead] == 1 ? 0 : xs[d - lead];
  }
  return MakePlan(out, src, ContiguousStrides(out), es);
}

// tile: `in` (x left-padded with 1 to the rank of `repeats`) repeated; each output dim d
// is the pair (repeat, position) with source strides (0, in stride).
inline CopyPlan PlanTile(const std::vector<int64_t>& in, const std::vector<int64_t>& repeats, int64_t es) {
  std::vector<int64_t> out(in.size());
  for (size_t d = 0; d < in.size(); ++d) out[d] = in[d] * repeats[d];
  const std::vector<int64_t> is = ContiguousStrides(in), os = ContiguousStrides(out);
  std::vector<int64_t> dims, src, dst;
  for (size_t d = 0; d < in.size(); ++d) {
    dims.push_back(repeats[d]);
    src.push_back(0);
    dst.push_back(in[d] * os[d]);
    dims.push_back(in[d]);
    src.push_back(is[d]);
    dst.push_back(os[d]);
  }
  return MakePlan(dims, src, dst, es);
}

// pad: x into the padded output at (before_0, before_1, ..); paddings as the attr
// (before, after per dim).
inline CopyPlan PlanPad(const std::vector<int64_t>& x, const std::vector<int64_t>& paddings, int64_t es) {
  std::vector<int64_t> out = x;
  for (size_t d = 0; d < x.size(); ++d) out[d] += paddings[2 * d] + paddings[2 * d + 1];
  const std::vector<int64_t> os = ContiguousStrides(out);
  CopyPlan p = MakePlan(x, ContiguousStrides(x), os, es);
  for (size_t d = 0; d < x.size(); ++d) p.dst_offset += paddings[2 * d] * os[d];
  return p;
}

// roll: out[c] = x[(c - shift) mod n] per dim; `shifts` per dim already in [0, n).
inline CopyPlan PlanRoll(const std::vector<int64_t>& x, const std::vector<int64_t>& shifts, int64_t es) {
  const std::vector<int64_t> xs = ContiguousStrides(x);
  CopyPlan p = MakePlan(x, xs, xs, es);
  for (size_t d = 0; d < x.size(); ++d) p.rot[d] = x[d] == 0 ? 0 : (x[d] - shifts[d]) % x[d];
  return p;
}

// ---- Reading values and ids of any dtype ----------------------------------------------------

// Element i of `p` (of `dtype`) as T, converted as the CPU kernels' ValuesAs<T> converts
// (static_cast from the stored type; 2-byte floats through float).
template <typename T>
SPMD_HOST_DEVICE inline T LoadAs(const void* p, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kFloat64: return static_cast<T>(static_cast<const double*>(p)[i]);
    case DType::kFloat32: return static_cast<T>(static_cast<const float*>(p)[i]);
    case DType::kInt64: return static_cast<T>(static_cast<const int64_t*>(p)[i]);
    case DType::kBool: return static_cast<T>(static_cast<const bool*>(p)[i]);
    case DType::kBFloat16: return static_cast<T>(static_cast<float>(static_cast<const BFloat16*>(p)[i]));
    case DType::kFloat16: return static_cast<T>(static_cast<float>(static_cast<const Float16*>(p)[i]));
  }
  return T(0);
}

// An id read on the device: `ok` is false where the CPU kernel refuses the value itself
// (a float that is not a whole number; with `limit`, one beyond 9e15 in magnitude, as
// index_select / gather / one_hot). Whole floats of 2^62 or more read as +-2^62 (beyond
// every bound a tensor can have).
struct Id {
  int64_t value = 0;
  bool ok = false;
};

SPMD_HOST_DEVICE inline Id DecodeId(const void* p, DType dtype, int64_t i, bool limit) {
  if (dtype == DType::kInt64) return {static_cast<const int64_t*>(p)[i], true};
  if (dtype == DType::kBool) return {static_cast<const bool*>(p)[i] ? 1 : 0, true};
  const double v = LoadAs<double>(p, dtype, i);
  if (!(v - v == 0)) return {0, false};  // NaN or infinite
  if (limit && (v > 9.0e15 || v < -9.0e15)) return {0, false};
  constexpr double kBig = 4611686018427387904.0;  // 2^62
  if (v >= kBig) return {int64_t{1} << 62, true};
  if (v <= -kBig) return {-(int64_t{1} << 62), true};
  const int64_t w = static_cast<int64_t>(v);
  if (static_cast<double>(w) != v) return {0, false};
  return {w, true};
}

// ---- index_select / gather ------------------------------------------------------------------

// What an output element reads.
inline constexpr int64_t kReadZero = -1;  // a zero (another shard's row)
inline constexpr int64_t kReadBad = -2;   // a zero, and an index fault (an id the CPU refuses)

// x as [outer, len, inner], out as [outer, ids, inner]; sharded: x holds rows
// [start, start + len) of the global x, other ids read zeros.
struct SelectArgs {
  int64_t outer = 0, len = 0, inner = 0, ids = 0, start = 0;
  bool sharded = false;
  const void* index = nullptr;
  DType index_dtype = DType::kInt64;
};

// The element of x output element i reads (inner counts units), or kReadZero / kReadBad.
SPMD_HOST_DEVICE inline int64_t SelectSource(const SelectArgs& a, int64_t i) {
  const int64_t t = i % a.inner;
  const int64_t rest = i / a.inner;
  const int64_t k = rest % a.ids;
  const int64_t o = rest / a.ids;
  const Id id = DecodeId(a.index, a.index_dtype, k, true);
  if (!id.ok || id.value < 0 || (!a.sharded && id.value >= a.len)) return kReadBad;
  const int64_t r = id.value - a.start;
  if (r < 0 || r >= a.len) return kReadZero;
  return (o * a.len + r) * a.inner + t;
}

// one_hot: output element i (of ids * classes) is 1 when the id of its row is its class.
// Sets *bad for an id the CPU kernel refuses (the row stays zero).
SPMD_HOST_DEVICE inline bool OneHotValue(const void* index, DType dtype, int64_t classes, int64_t i,
                                         bool* bad) {
  const int64_t row = i / classes, c = i - row * classes;
  const Id id = DecodeId(index, dtype, row, true);
  *bad = !id.ok || id.value < 0 || id.value >= classes;
  return !*bad && id.value == c;
}

// ---- gather_nd / scatter_nd_add --------------------------------------------------------------

// The flat slice of x (x viewed as [slices, slice]) that index row r addresses, computed
// over the index dims [j0, j0 + chunk) (chunks of at most kMaxPlanDims keep the
// parameters fixed-size): acc + sum_j id_j * (product of x's dims j+1 .. depth-1), or -1
// when an id is refused (not whole, negative, or >= x.shape[j]); -1 stays -1.
struct NdChunk {
  int j0 = 0, chunk = 0;
  int64_t depth = 0;
  int64_t dims[kMaxPlanDims] = {};     // x.shape[j0 + j]
  int64_t strides[kMaxPlanDims] = {};  // slices per step of dim j0 + j
  const void* index = nullptr;
  DType index_dtype = DType::kInt64;
};

SPMD_HOST_DEVICE inline int64_t NdSliceStep(const NdChunk& c, int64_t r, int64_t acc) {
  if (acc < 0) return acc;
  for (int j = 0; j < c.chunk; ++j) {
    const Id id = DecodeId(c.index, c.index_dtype, r * c.depth + c.j0 + j, false);
    if (!id.ok || id.value < 0 || id.value >= c.dims[j]) return -1;
    acc += id.value * c.strides[j];
  }
  return acc;
}

// The chunks for x's first `depth` dims.
inline std::vector<NdChunk> NdChunks(const std::vector<int64_t>& x, int64_t depth, const void* index,
                                     DType index_dtype) {
  std::vector<int64_t> strides(static_cast<size_t>(depth), 1);
  for (int64_t j = depth - 1; j > 0; --j) strides[j - 1] = strides[j] * x[j];
  std::vector<NdChunk> chunks;
  for (int64_t j0 = 0; j0 < depth; j0 += kMaxPlanDims) {
    NdChunk c;
    c.j0 = static_cast<int>(j0);
    c.chunk = static_cast<int>(std::min<int64_t>(kMaxPlanDims, depth - j0));
    c.depth = depth;
    for (int j = 0; j < c.chunk; ++j) {
      c.dims[j] = x[j0 + j];
      c.strides[j] = strides[j0 + j];
    }
    c.index = index;
    c.index_dtype = index_dtype;
    chunks.push_back(c);
  }
  return chunks;
}

// ---- Segments of sorted keys (scatter, scatter_nd_add) --------------------------------------

// [lo, hi) of `key` in keys[0, n) sorted ascending.
SPMD_HOST_DEVICE inline void EqualRange(const int64_t* keys, int64_t n, int64_t key, int64_t* lo,
                                        int64_t* hi) {
  int64_t a = 0, b = n;
  while (a < b) {
    const int64_t m = a + (b - a) / 2;
    if (keys[m] < key) a = m + 1; else b = m;
  }
  *lo = a;
  b = n;
  while (a < b) {
    const int64_t m = a + (b - a) / 2;
    if (keys[m] <= key) a = m + 1; else b = m;
  }
  *hi = a;
}

// scatter's key of update i: its row in x (id - start), or `rows` (sorted last, never
// read) for an id of another shard; *bad for an id the CPU kernel refuses (not whole,
// negative, or >= rows unsharded).
SPMD_HOST_DEVICE inline int64_t ScatterKey(const void* index, DType dtype, int64_t i, int64_t rows,
                                           int64_t start, bool sharded, bool* bad) {
  const Id id = DecodeId(index, dtype, i, false);
  *bad = !id.ok || id.value < 0 || (!sharded && id.value >= rows);
  if (*bad) return rows;
  const int64_t r = id.value - start;
  return (r < 0 || r >= rows) ? rows : r;
}

// scatter's output element e (x as [rows, row]): the updates of its row in index order
// (keys / order: the rows sorted stably, with the update positions), summed from zero
// (overwrite: the last one), or x where no update lands. T: float or double.
template <typename T>
SPMD_HOST_DEVICE inline T ScatterValue(int64_t e, int64_t row, const int64_t* keys, const int64_t* order,
                                       int64_t n, bool overwrite, const void* x, DType x_dtype,
                                       const void* updates, DType u_dtype) {
  const int64_t r = e / row, t = e - (e / row) * row;
  int64_t lo = 0, hi = 0;
  EqualRange(keys, n, r, &lo, &hi);
  if (lo == hi) return LoadAs<T>(x, x_dtype, e);
  if (overwrite) return LoadAs<T>(updates, u_dtype, order[hi - 1] * row + t);
  T acc = T(0);
  for (int64_t j = lo; j < hi; ++j) acc = acc + LoadAs<T>(updates, u_dtype, order[j] * row + t);
  return acc;
}

// scatter_nd_add's output element e (x as [slices, slice]): x plus the updates of its
// slice in index order.
template <typename T>
SPMD_HOST_DEVICE inline T ScatterNdValue(int64_t e, int64_t slice, const int64_t* keys, const int64_t* order,
                                         int64_t n, const void* x, DType x_dtype, const void* updates,
                                         DType u_dtype) {
  const int64_t s = e / slice, t = e - s * slice;
  int64_t lo = 0, hi = 0;
  EqualRange(keys, n, s, &lo, &hi);
  T acc = LoadAs<T>(x, x_dtype, e);
  for (int64_t j = lo; j < hi; ++j) acc = acc + LoadAs<T>(updates, u_dtype, order[j] * slice + t);
  return acc;
}

// ---- Sorting (argsort, topk) -------------------------------------------------------------------

// An unsigned key whose ascending order is the CPU kernels' order of values: numbers
// ascending with -0 equal to +0, every NaN above every number (descending: the bits
// inverted, so NaN first and numbers descending). Ties keep their positions under a
// stable sort, as the CPU's tie order by index.
SPMD_HOST_DEVICE inline uint64_t OrderKeyDouble(double v) {
  if (v != v) return ~uint64_t{0};
  if (v == 0) v = 0.0;
  uint64_t b;
  std::memcpy(&b, &v, sizeof b);
  return (b >> 63) ? ~b : (b | (uint64_t{1} << 63));
}
SPMD_HOST_DEVICE inline uint32_t OrderKeyFloat(float v) {
  if (v != v) return ~uint32_t{0};
  if (v == 0) v = 0.0f;
  uint32_t b;
  std::memcpy(&b, &v, sizeof b);
  return (b >> 31) ? ~b : (b | (uint32_t{1} << 31));
}
SPMD_HOST_DEVICE inline uint64_t OrderKeyInt(int64_t v) {
  return static_cast<uint64_t>(v) ^ (uint64_t{1} << 63);
}

// x as [outer, len, inner]; the sort sees lines (o, i) of len values, line-major.
struct SortView {
  int64_t outer = 1, len = 1, inner = 1, k = 1;
};
// Key slot q (line q / len, position q % len) reads x element:
SPMD_HOST_DEVICE inline int64_t SortInput(const SortView& v, int64_t q, int64_t* pos) {
  const int64_t line = q / v.len, a = q - line * v.len;
  const int64_t o = line / v.inner, i = line - o * v.inner;
  *pos = a;
  return (o * v.len + a) * v.inner + i;
}
// Output element e (of [outer, k, inner]) takes the value at sorted slot:
SPMD_HOST_DEVICE inline int64_t SortOutputSlot(const SortView& v, int64_t e) {
  const int64_t i = e % v.inner, rest = e / v.inner;
  const int64_t j = rest % v.k, o = rest / v.k;
  return (o * v.inner + i) * v.len + j;
}
// ... and reads x at position `pos` of its line:
SPMD_HOST_DEVICE inline int64_t SortOutputSource(const SortView& v, int64_t e, int64_t pos) {
  const int64_t i = e % v.inner, o = e / v.inner / v.k;
  return (o * v.len + pos) * v.inner + i;
}

// ---- triu / tril ---------------------------------------------------------------------------------

// Whether element (r, c) of a matrix becomes zero: triu (lower false) zeroes c < r + d,
// tril zeroes c > r + d. d is the CPU's clamped diagonal, so r + d cannot overflow.
SPMD_HOST_DEVICE inline bool TriZero(int64_t r, int64_t c, int64_t d, bool lower) {
  return lower ? c > r + d : c < r + d;
}

// ---- Rounded double arithmetic -----------------------------------------------------------------

// One IEEE operation each, rounded to nearest: on the device explicit intrinsics, so nvcc
// cannot fuse a product into an add (the CPU kernels run separately rounded operations).
SPMD_HOST_DEVICE inline double MulRn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
SPMD_HOST_DEVICE inline double AddRn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
SPMD_HOST_DEVICE inline double DivRn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}

// ---- fused_rotary_position_embedding ----------------------------------------------------------

// x as [d0, d1, heads, head_dim]; the sin / cos row of element e is its sequence index
// (d0 time-major, else d1). The element's partner and sign (neox: pairs (2m, 2m + 1);
// else halves).
struct RopeArgs {
  int64_t d1 = 1, heads = 1, head_dim = 2;
  bool time_major = false, neox = false;
};
SPMD_HOST_DEVICE inline void RopeIndex(const RopeArgs& a, int64_t e, int64_t* table, int64_t* partner,
                                       double* sign) {
  const int64_t j = e % a.head_dim, row = e / a.head_dim;
  const int64_t pos = row / a.heads;
  const int64_t s = a.time_major ? pos / a.d1 : pos % a.d1;
  const int64_t half = a.head_dim / 2;
  int64_t pj = 0;
  if (a.neox) {
    pj = j % 2 == 0 ? j + 1 : j - 1;
    *sign = j % 2 == 0 ? -1.0 : 1.0;
  } else {
    pj = j < half ? j + half : j - half;
    *sign = j < half ? -1.0 : 1.0;
  }
  *table = s * a.head_dim + j;
  *partner = row * a.head_dim + pj;
}

// ---- dropout ---------------------------------------------------------------------------------------

// The plan whose source offsets are global linear indices: element c of the local block
// (local shape `local`, at `offset` in a tensor of `global` shape) has global index
// sum_d (offset_d + c_d) * global_stride_d, its destination the local linear index.
// Unit 1: the offsets are indices, never widened (SimplifyPlan(plan, 1) only merges dims).
inline CopyPlan PlanGlobalIndex(const std::vector<int64_t>& local, const std::vector<int64_t>& offset,
                                const std::vector<int64_t>& global) {
  const std::vector<int64_t> gs = ContiguousStrides(global);
  CopyPlan p = MakePlan(local, gs, ContiguousStrides(local), 1);
  for (size_t d = 0; d < local.size(); ++d) p.src_offset += offset[d] * gs[d];
  return p;
}

// The rotated value: cos * x + sign * sin * x_partner, each operation rounded once (in this
// order, as the CPU kernel computes it).
SPMD_HOST_DEVICE inline double RopeValue(double c, double t, double x, double x_partner, double sign) {
  return AddRn(MulRn(c, x), MulRn(MulRn(sign, t), x_partner));
}

// dropout's element: kept where Uniform(seed, global index) >= p, then scaled as the CPU
// kernel scales (in double, rounded once to T).
struct DropoutArgs {
  double p = 0.5;
  bool is_test = false, upscale = true;
  int64_t seed = 0;
};
template <typename T>
SPMD_HOST_DEVICE inline T DropoutValue(const DropoutArgs& a, int64_t global, T x, bool* keep) {
  const double v = static_cast<double>(x);
  if (a.is_test) {
    *keep = true;
    return a.upscale ? x : static_cast<T>(MulRn(v, 1.0 - a.p));
  }
  *keep = counter_rng::Uniform(a.seed, global) >= a.p;
  return *keep ? static_cast<T>(a.upscale ? DivRn(v, 1.0 - a.p) : v) : T(0);
}

// pad's fill: pad_value in `dtype`, as the low bytes of a word, what the CPU kernel fills
// with (beyond float's range float's infinity of its sign; int64 truncated; bool v != 0;
// 2-byte floats the float32 fill rounded once, as RunCpuKernel rounds its output).
inline uint64_t PadFillBits(DType dtype, double value) {
  const float inf = __builtin_huge_valf();
  const float fill32 = (value > 3.4028235677973366e38 || value < -3.4028235677973366e38)
                           ? (value > 0 ? inf : -inf)
                           : static_cast<float>(value);
  uint64_t bits = 0;
  const auto put = [&](auto v) { std::memcpy(&bits, &v, sizeof v); };
  switch (dtype) {
    case DType::kFloat32: put(fill32); break;
    case DType::kInt64: put(static_cast<int64_t>(value)); break;
    case DType::kBool: put(static_cast<uint8_t>(value != 0.0 ? 1 : 0)); break;
    case DType::kBFloat16: put(BFloat16(fill32).bits); break;
    case DType::kFloat16: put(Float16(fill32).bits); break;
    case DType::kFloat64: put(value); break;
  }
  return bits;
}

// ---- Widest unit for a row copy --------------------------------------------------------------------

// The widest unit (a power of two up to 16 bytes, and up to `align`, the alignment both
// base pointers share) dividing `row_bytes`: a row of row_bytes / unit units.
inline int64_t RowUnit(int64_t row_bytes, int64_t align) {
  int64_t u = 1;
  while (u * 2 <= 16 && u * 2 <= align && row_bytes % (u * 2) == 0) u *= 2;
  return u;
}

}  // namespace spmd::kernels::cuda
