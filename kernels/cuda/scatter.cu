// CUDA kernels of the scatter family (the ops of kernels/cpu/scatter.cc): gather_nd (any
// dtype, bytes moved), scatter and scatter_nd_add (float32 / float64, 2-byte floats
// through RunCudaKernel's widening, as on the CPU).
//
// Duplicates: scatter and scatter_nd_add give exactly the CPU kernels' results, in every
// run. The updates are sorted by their destination (a stable CUB radix sort of (row,
// position) pairs), and each output element is computed by one thread from the run of
// updates aimed at it, in index order: scatter sums them from zero (overwrite: takes the
// last one), scatter_nd_add adds them to x in index order. No atomics, so no order-
// dependent rounding.
//
// Ids the CPU kernel refuses (not whole, negative, beyond x's dim; scatter unsharded:
// >= rows) are found on the device: gather_nd writes a zero slice for the row, scatter /
// scatter_nd_add drop the update, and the op's bit is set in the index-fault word
// (index_fault.h).
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/cub_sort.cuh"
#include "kernels/cuda/family_util.cuh"
#include "kernels/cuda/registry.h"
#include "rules/ops/indexing_plan.h"

namespace spmd::kernels::cuda {
namespace {

using detail::CheckInputs;
using detail::ci::CheckArity;

// keys[r] (r < rows): the flat slice index row r of the index addresses, accumulated
// chunk by chunk; a refused id makes it -1 and records the fault once.
__global__ void NdSliceKernel(NdChunk c, int64_t rows, int64_t* keys, bool first, uint32_t* faults,
                              IndexFaultOp op) {
  for (SPMD_GRID_STRIDE(r, rows)) {
    const int64_t before = first ? 0 : keys[r];
    const int64_t after = NdSliceStep(c, r, before);
    keys[r] = after;
    if (before >= 0 && after < 0) detail::RecordFault(faults, op);
  }
}

// The flat slice index of every index row (x viewed as [slices, slice]), -1 for a row with
// a refused id; nullptr-free: a buffer of `rows` int64s.
Tensor SliceKeys(const Tensor& x, const Tensor& index, int64_t depth, int64_t rows, IndexFaultOp op) {
  Tensor keys = detail::Int64Buffer(x, rows);
  if (rows == 0) return keys;
  int64_t* k = reinterpret_cast<int64_t*>(keys.bytes());
  const LaunchConfig cfg = GridStride(rows);
  const std::vector<NdChunk> chunks = NdChunks(x.shape(), depth, index.bytes(), index.dtype());
  if (chunks.empty()) {  // depth 0: every row addresses the whole of x (slice 0)
    SPMD_CUDA_CHECK(cudaMemsetAsync(k, 0, static_cast<size_t>(rows) * sizeof(int64_t), detail::StreamOf(x)));
    return keys;
  }
  for (size_t j = 0; j < chunks.size(); ++j) {
    NdSliceKernel<<<cfg.grid, cfg.block, 0, detail::StreamOf(x)>>>(chunks[j], rows, k, j == 0, IndexFaultWord(), op);
    SPMD_CUDA_CHECK_LAUNCH();
  }
  return keys;
}

template <typename U>
__global__ void GatherNdKernel(const int64_t* keys, int64_t slice_units, const U* x, U* out, int64_t n) {
  for (SPMD_GRID_STRIDE(i, n)) {
    const int64_t r = i / slice_units, t = i - r * slice_units;
    const int64_t s = keys[r];
    out[i] = s < 0 ? U{} : x[s * slice_units + t];
  }
}

Tensors GatherNd(const TensorArgs& inputs, const Attrs&) {
  CheckInputs(inputs, true);
  CheckArity(inputs, 2);
  const Tensor& x = inputs[0];
  const Tensor& index = inputs[1];
  const indexing_plan::NdPlan plan = indexing_plan::PlanGatherNd(x.shape(), index.shape());
  const int64_t rows = plan.rows;
  Tensor out = detail::NewOut(x, plan.gathered, x.dtype());  // host errors before any launch
  const Tensor keys = SliceKeys(x, index, plan.depth, rows, IndexFaultOp::kGatherNd);
  const int64_t es = static_cast<int64_t>(x.element_size());
  const int64_t slice = plan.slice;
  if (out.numel() == 0) return TensorList(std::move(out));
  const int64_t unit =
      RowUnit(slice * es, std::min(detail::Alignment(x.bytes()), detail::Alignment(out.bytes())));
  const int64_t slice_units = slice * es / unit;
  const int64_t n = rows * slice_units;
  const LaunchConfig cfg = GridStride(n);
  detail::DispatchUnit(unit, [&](auto u) {
    using U = decltype(u);
    GatherNdKernel<U><<<cfg.grid, cfg.block, 0, detail::StreamOf(x)>>>(
        reinterpret_cast<const int64_t*>(keys.bytes()), slice_units, reinterpret_cast<const U*>(x.bytes()),
        reinterpret_cast<U*>(out.bytes()), n);
    SPMD_CUDA_CHECK_LAUNCH();
  });
  return TensorList(std::move(out));
}

// ---- scatter ---------------------------------------------------------------------------------

__global__ void ScatterKeysKernel(const void* index, DType dtype, int64_t n, int64_t rows, int64_t start,
                                  bool sharded, uint64_t* keys, int64_t* order, uint32_t* faults) {
  for (SPMD_GRID_STRIDE(i, n)) {
    bool bad = false;
    keys[i] = static_cast<uint64_t>(ScatterKey(index, dtype, i, rows, start, sharded, &bad));
    order[i] = i;
    if (bad) detail::RecordFault(faults, IndexFaultOp::kScatter);
  }
}

template <typename T>
__global__ void ScatterKernel(int64_t n, int64_t row, const int64_t* keys, const int64_t* order, int64_t k,
                              bool overwrite, const void* x, DType xd, const void* updates, DType ud, T* out) {
  for (SPMD_GRID_STRIDE(e, n)) {
    out[e] = ScatterValue<T>(e, row, keys, order, k, overwrite, x, xd, updates, ud);
  }
}

// Sorted (key, position) pairs of `k` keys in [0, max_key] computed into keys / order.
struct SortedKeys {
  Tensor keys, order;
};
SortedKeys SortKeys(const Tensor& like, Tensor& keys, Tensor& order, int64_t k, uint64_t max_key) {
  SortedKeys sorted{detail::Int64Buffer(like, k), detail::Int64Buffer(like, k)};
  detail::StableSortPairs(like, reinterpret_cast<const uint64_t*>(keys.bytes()),
                          reinterpret_cast<uint64_t*>(sorted.keys.bytes()),
                          reinterpret_cast<const int64_t*>(order.bytes()),
                          reinterpret_cast<int64_t*>(sorted.order.bytes()), k, max_key);
  return sorted;
}

template <typename F>
void DispatchCompute(DType dtype, F&& f) {
  if (dtype == DType::kFloat32) f(float{}); else f(double{});
}

Tensors Scatter(const TensorArgs& inputs, const Attrs& attrs) {
  CheckInputs(inputs, false);
  CheckArity(inputs, 3);
  const Tensor& x = inputs[0];
  const Tensor& index = inputs[1];
  const Tensor& updates = inputs[2];
  const indexing_plan::ScatterPlan plan =
      indexing_plan::PlanScatter(x.shape(), index.shape(), updates.shape(), attrs);
  const int64_t rows = plan.rows, k = index.numel();
  const DType dtype = detail::ci::ComputeDType(inputs, {0, 2});
  Tensor out = detail::NewOut(x, x.shape(), dtype);  // host errors before any launch
  const cudaStream_t stream = detail::StreamOf(x);
  Tensor keys = detail::Int64Buffer(x, k), order = detail::Int64Buffer(x, k);
  if (k > 0) {
    const LaunchConfig cfg = GridStride(k);
    ScatterKeysKernel<<<cfg.grid, cfg.block, 0, stream>>>(
        index.bytes(), index.dtype(), k, rows, plan.start, plan.sharded, reinterpret_cast<uint64_t*>(keys.bytes()),
        reinterpret_cast<int64_t*>(order.bytes()), IndexFaultWord());
    SPMD_CUDA_CHECK_LAUNCH();
  }
  const int64_t n = out.numel();
  if (n == 0) return TensorList(std::move(out));
  const SortedKeys sorted = SortKeys(x, keys, order, k, static_cast<uint64_t>(rows));
  const int64_t row = n / rows;
  const LaunchConfig cfg = GridStride(n);
  DispatchCompute(dtype, [&](auto zero) {
    using T = decltype(zero);
    ScatterKernel<T><<<cfg.grid, cfg.block, 0, stream>>>(
        n, row, reinterpret_cast<const int64_t*>(sorted.keys.bytes()),
        reinterpret_cast<const int64_t*>(sorted.order.bytes()), k, plan.overwrite, x.bytes(), x.dtype(), updates.bytes(),
        updates.dtype(), reinterpret_cast<T*>(out.bytes()));
    SPMD_CUDA_CHECK_LAUNCH();
  });
  return TensorList(std::move(out));
}

// ---- scatter_nd_add ---------------------------------------------------------------------------

// keys[r] of SliceKeys with -1 (a refused row) moved to `slices` (never read), positions.
__global__ void NdKeysKernel(const int64_t* slice_keys, int64_t rows, int64_t slices, uint64_t* keys,
                             int64_t* order) {
  for (SPMD_GRID_STRIDE(r, rows)) {
    const int64_t s = slice_keys[r];
    keys[r] = static_cast<uint64_t>(s < 0 ? slices : s);
    order[r] = r;
  }
}

template <typename T>
__global__ void ScatterNdKernel(int64_t n, int64_t slice, const int64_t* keys, const int64_t* order, int64_t k,
                                const void* x, DType xd, const void* updates, DType ud, T* out) {
  for (SPMD_GRID_STRIDE(e, n)) { out[e] = ScatterNdValue<T>(e, slice, keys, order, k, x, xd, updates, ud); }
}

Tensors ScatterNdAdd(const TensorArgs& inputs, const Attrs&) {
  CheckInputs(inputs, false);
  CheckArity(inputs, 3);
  const Tensor& x = inputs[0];
  const Tensor& index = inputs[1];
  const Tensor& updates = inputs[2];
  const indexing_plan::NdPlan plan = indexing_plan::PlanScatterNdAdd(x.shape(), index.shape(), updates.shape());
  const int64_t rows = plan.rows;
  const DType dtype = detail::ci::ComputeDType(inputs, {0, 2});
  Tensor out = detail::NewOut(x, x.shape(), dtype);  // host errors before any launch
  const Tensor slice_keys = SliceKeys(x, index, plan.depth, rows, IndexFaultOp::kScatterNdAdd);
  const int64_t slice = plan.slice;
  const int64_t slices = plan.slices;
  const int64_t n = out.numel();
  if (n == 0) return TensorList(std::move(out));
  const cudaStream_t stream = detail::StreamOf(x);
  Tensor keys = detail::Int64Buffer(x, rows), order = detail::Int64Buffer(x, rows);
  if (rows > 0) {
    const LaunchConfig cfg = GridStride(rows);
    NdKeysKernel<<<cfg.grid, cfg.block, 0, stream>>>(reinterpret_cast<const int64_t*>(slice_keys.bytes()), rows,
                                                     slices, reinterpret_cast<uint64_t*>(keys.bytes()),
                                                     reinterpret_cast<int64_t*>(order.bytes()));
    SPMD_CUDA_CHECK_LAUNCH();
  }
  const SortedKeys sorted = SortKeys(x, keys, order, rows, static_cast<uint64_t>(slices));
  const LaunchConfig cfg = GridStride(n);
  DispatchCompute(dtype, [&](auto zero) {
    using T = decltype(zero);
    ScatterNdKernel<T><<<cfg.grid, cfg.block, 0, stream>>>(
        n, slice, reinterpret_cast<const int64_t*>(sorted.keys.bytes()),
        reinterpret_cast<const int64_t*>(sorted.order.bytes()), rows, x.bytes(), x.dtype(), updates.bytes(),
        updates.dtype(), reinterpret_cast<T*>(out.bytes()));
    SPMD_CUDA_CHECK_LAUNCH();
  });
  return TensorList(std::move(out));
}

}  // namespace

// The scatter and gather ops' CUDA kernels, by op name (kernels/cuda/registry.h).
const CudaKernel ops::gather_nd{&GatherNd, HalfInputs::kNative};
const CudaKernel ops::scatter{&Scatter, HalfInputs::kWidened};
const CudaKernel ops::scatter_nd_add{&ScatterNdAdd, HalfInputs::kWidened};

}  // namespace spmd::kernels::cuda
