// Index arithmetic of the strided device loops (box copies, permutes, broadcasts), in plain
// C++ so that the CPU tests run exactly the arithmetic the kernels run.
//
// A StridedPlan walks `dims` (outermost first) in row-major order; element i of the walk
// sits at base[k] + sum_d index_d * strides[k][d] elements in operand k. Plans are
// collapsed before a launch: size-1 dims dropped, neighbours merged where every operand
// walks them as one. A kernel gets at most kMaxStridedDims dims (a StridedIndexer passed
// by value); dims beyond that become a host loop of launches (SplitOuter), so any rank
// works. A box of bytes is moved in the widest unit (16, 8, 4, 2 or 1 bytes) that every
// address, stride and run length allows (ChooseUnit, InUnits).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "rules/model/half.h"  // SPMD_HOST_DEVICE

namespace spmd::kernels::cuda {

inline constexpr int kMaxStridedDims = 10;

// What one kernel launch indexes with: N operands, `rank` <= kMaxStridedDims dims.
template <int N>
struct StridedIndexer {
  int rank = 0;
  int64_t dims[kMaxStridedDims] = {};
  int64_t strides[N][kMaxStridedDims] = {};

  // The offsets (elements, from each operand's base) of element i of the walk.
  SPMD_HOST_DEVICE void Offsets(int64_t i, int64_t (&off)[N]) const {
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t q = i / dims[d];
      const int64_t r = i - q * dims[d];
      i = q;
      for (int k = 0; k < N; ++k) off[k] += r * strides[k][d];
    }
  }
};

struct StridedPlan {
  std::vector<int64_t> dims;                  // outermost first
  std::vector<std::vector<int64_t>> strides;  // [operand][dim], in elements (or units)
  std::vector<int64_t> base;                  // [operand], in elements (or units)

  int64_t numel() const;
  size_t operands() const { return strides.size(); }
};

// Drops size-1 dims and merges dim d into d + 1 where every operand has
// strides[k][d] == strides[k][d + 1] * dims[d + 1]. A plan with no dims left keeps one
// dim of size 1 (one element), as does a 0-d one; a plan with a 0 dim keeps it (0 elements).
StridedPlan Collapse(StridedPlan plan);

// The box copy of Backend::CopyBox: operand 0 the source, 1 the destination, walking
// `extent`; collapsed.
StridedPlan PlanCopyBox(const std::vector<int64_t>& src_shape, const std::vector<int64_t>& src_at,
                        const std::vector<int64_t>& dst_shape, const std::vector<int64_t>& dst_at,
                        const std::vector<int64_t>& extent);

// out = x permuted (out.shape[i] = x.shape[perm[i]]): operand 0 reads x, operand 1 writes
// the contiguous output, walking the output's shape; collapsed.
StridedPlan PlanPermute(const std::vector<int64_t>& x_shape, const std::vector<int64_t>& perm);

// The widest unit u in {16, 8, 4, 2, 1} bytes in which a plan over elements of
// `element_size` bytes can move: every address in `addresses` (one per operand) and every
// base offset a multiple of u; where the innermost dim is contiguous in every operand its
// length in bytes a multiple of u and the other strides in bytes too; elsewhere u divides
// element_size.
size_t ChooseUnit(const StridedPlan& plan, size_t element_size,
                  const std::vector<uintptr_t>& addresses);
// The same walk in units of `unit` bytes (a value ChooseUnit gave): lengths, strides and
// bases rescaled, and where the innermost dim is not contiguous, a trailing dim of
// element_size / unit units.
StridedPlan InUnits(const StridedPlan& plan, size_t element_size, size_t unit);

// Splits off the leading dims beyond `max_inner` (>= 1): `outer` walks those (with the
// plan's bases), `inner` the last max_inner dims (bases 0). With rank <= max_inner, outer
// has one dim of size 1.
struct SplitPlan {
  StridedPlan outer;
  StridedPlan inner;
};
SplitPlan SplitOuter(const StridedPlan& plan, int max_inner = kMaxStridedDims);

// The indexer of a plan of N operands and at most kMaxStridedDims dims (std::logic_error
// otherwise: callers split first).
template <int N>
StridedIndexer<N> MakeIndexer(const StridedPlan& plan);

// The per-operand start offsets of every element of `outer`'s walk, in order (what the
// host loop of launches iterates).
std::vector<std::vector<int64_t>> OuterStarts(const StridedPlan& outer);

// A strided copy (CopyStrided in kernels/cuda/permute.h) as the launches it makes, so the
// CPU tests can run them: each step moves `n` units of `unit` bytes, from src + src_offset
// units to dst + dst_offset units, either as one contiguous run (`contiguous`: a
// cudaMemcpyAsync of n * unit bytes) or as a kernel walking `ix` (operand 0 the source,
// 1 the destination, offsets in units from the step's starts).
struct StridedCopyStep {
  bool contiguous = false;
  size_t unit = 1;
  int64_t src_offset = 0;
  int64_t dst_offset = 0;
  int64_t n = 0;
  StridedIndexer<2> ix;
};
// The steps of copying `plan` (two operands, offsets in elements of `element_size` bytes)
// from address `src` to `dst`; none for an empty plan. `max_inner` (<= kMaxStridedDims)
// bounds the dims of one launch.
std::vector<StridedCopyStep> PlanStridedCopy(const StridedPlan& plan, size_t element_size, uintptr_t src,
                                             uintptr_t dst, int max_inner = kMaxStridedDims);

// A permute whose innermost destination dim is strided in the source while another dim is
// the source's contiguous one: moved in 32 x 32 tiles through shared memory, so that both
// the reads (along `j`) and the writes (along `b`) are coalesced. Offsets in elements.
// Element (batch, j, b) is read at src_batch + j + b * src_b_stride and written at
// dst_batch + j * dst_j_stride + b, where (src_batch, dst_batch) are the offsets of
// `batch` (two operands, at most kMaxStridedDims - 2 dims; one dim of 1 when there is none).
struct TiledTranspose {
  int64_t b = 0;  // the destination's contiguous dim
  int64_t j = 0;  // the source's contiguous dim
  int64_t src_b_stride = 0;
  int64_t dst_j_stride = 0;
  int64_t src_base = 0;
  int64_t dst_base = 0;
  StridedPlan batch;
};
inline constexpr int kTile = 32;
// The tiled form of a collapsed two-operand plan (operand 1 written), when it has one: the
// last dim contiguous in the destination only, another dim contiguous in the source, both
// at least 2 long, the tile grid within CUDA's limits (j's tiles in grid.y <= 65535).
std::optional<TiledTranspose> PlanTiledTranspose(const StridedPlan& plan);

// The walk of an elementwise op over `out_shape` with inputs of `in_shapes` broadcast to
// it: operands 0 .. n-1 the inputs (stride 0 where broadcast), operand n the contiguous
// output; dims collapsed as the CPU's broadcast loop collapses them
// (kernels/cpu/internal.h PlanBroadcast).
StridedPlan PlanBroadcastWalk(const std::vector<int64_t>& out_shape,
                              const std::vector<std::vector<int64_t>>& in_shapes);

}  // namespace spmd::kernels::cuda
