// What the byte-moving and index-driven CUDA kernels share (shape.cu, indexing.cu,
// scatter.cu, sort.cu, fused.cu, random.cu): the CPU kernels' checks (kernels/cpu/internal.h,
// so both refuse the same requests naming the same fields), device copies driven by the
// plans of kernels/cuda/index_map.h, fills, and unit-type dispatch. Included by .cu files.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/backend_checks.h"
#include "kernels/cpu/internal.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/index_fault.h"
#include "kernels/cuda/index_map.h"
#include "kernels/cuda/launch.h"

namespace spmd::kernels::cuda::detail {

namespace ci = ::spmd::kernels::cpu::internal;

// Every input on inputs[0]'s device; for a kernel that takes 2-byte floats as they are
// (HalfInputs::kNative: `takes_half`), also the check RunCpuKernel makes before any kernel
// (kernels/backend_checks.h TwoByteDType): a 2-byte float next to another floating dtype is
// InvalidArgument naming that input's dtype. (RunCudaKernel makes both checks before any
// kernel; these are for a kernel called on its own.)
inline void CheckInputs(const TensorArgs& inputs, bool takes_half) {
  if (!inputs.empty()) CheckOnOneDevice(inputs);
  if (takes_half) (void)checks::TwoByteDType(inputs);
}

inline cudaStream_t StreamOf(const Tensor& t) { return ToCuda(t.stream()); }

// An output on `like`'s device and stream; Unsupported ("outputs") beyond the CPU kernels'
// limit of 2^34 elements.
inline Tensor NewOut(const Tensor& like, const Shape& shape, DType dtype) {
  ci::CheckOutputShape(shape);
  return NewOutput(like, shape, dtype);
}

inline void CopyBytes(void* dst, const void* src, size_t n, cudaStream_t stream) {
  if (n > 0) SPMD_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, stream));
}

// x's bytes under another shape (same count), in a new buffer.
inline Tensor CopyAs(const Tensor& x, const Shape& shape) {
  Tensor out = NewOutput(x, shape, x.dtype());
  CopyBytes(out.bytes(), x.bytes(), x.nbytes(), StreamOf(x));
  return out;
}

// The largest power of two up to 16 dividing the address (null: 16).
inline int64_t Alignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  int64_t u = 1;
  while (u < 16 && a % static_cast<uintptr_t>(u * 2) == 0) u *= 2;
  return u;
}

// Calls f(U{}) with U the unsigned type of `bytes` (1, 2, 4, 8; 16: uint4), for units up to
// kMaxBytes; else Unsupported ("dtype").
template <int kMaxBytes = 16, typename F>
void DispatchUnit(int64_t bytes, F&& f) {
  switch (bytes) {
    case 1: f(uint8_t{}); return;
    case 2: f(uint16_t{}); return;
    case 4: f(uint32_t{}); return;
    case 8: f(uint64_t{}); return;
    case 16:
      if constexpr (kMaxBytes >= 16) {
        f(uint4{});
        return;
      }
      break;
    default: break;
  }
  ThrowUnsupported("dtype", "no CUDA kernel moves " + std::to_string(bytes) + "-byte units here");
}

template <typename U>
__global__ void CopyPlanKernel(CopyPlanArgs a, U* dst, const U* src) {
  for (SPMD_GRID_STRIDE(i, a.count)) {
    int64_t s = 0, d = 0;
    PlanOffsets(a, i, &s, &d);
    dst[d] = src[s];
  }
}

// Runs a copy plan (plan.unit: the element size) from src to dst on `stream`: simplified,
// widened as far as both pointers' alignment allows, split into launches of at most
// kMaxPlanDims dims; a single contiguous run is one cudaMemcpyAsync.
inline void RunCopyPlan(const CopyPlan& plan, std::byte* dst, const std::byte* src, cudaStream_t stream) {
  if (plan.count() == 0) return;
  const CopyPlan simple = SimplifyPlan(plan, std::min(Alignment(dst), Alignment(src)));
  for (const CopyPlan& q : PeelPlan(simple)) {
    const CopyPlanArgs a = PlanArgs(q);
    const int64_t unit = q.unit;
    if (a.rank == 0 || (a.rank == 1 && a.src[0] == 1 && a.dst[0] == 1 && a.rot[0] == 0)) {
      CopyBytes(dst + a.dst_offset * unit, src + a.src_offset * unit,
                static_cast<size_t>(a.count * unit), stream);
      continue;
    }
    const LaunchConfig cfg = GridStride(a.count);
    DispatchUnit(unit, [&](auto u) {
      using U = decltype(u);
      CopyPlanKernel<U><<<cfg.grid, cfg.block, 0, stream>>>(a, reinterpret_cast<U*>(dst),
                                                            reinterpret_cast<const U*>(src));
      SPMD_CUDA_CHECK_LAUNCH();
    });
  }
}

template <typename U>
__global__ void FillKernel(U* p, int64_t n, U v) {
  for (SPMD_GRID_STRIDE(i, n)) { p[i] = v; }
}

// n elements of `es` bytes at p, each the bytes of `pattern` (its low es bytes).
inline void FillElements(std::byte* p, int64_t n, int64_t es, uint64_t pattern, cudaStream_t stream) {
  if (n <= 0) return;
  const LaunchConfig cfg = GridStride(n);
  DispatchUnit<8>(es, [&](auto u) {  // a pattern has 8 bytes at most
    using U = decltype(u);
    U v;
    std::memcpy(&v, &pattern, sizeof v);  // little-endian: the low bytes
    FillKernel<U><<<cfg.grid, cfg.block, 0, stream>>>(reinterpret_cast<U*>(p), n, v);
    SPMD_CUDA_CHECK_LAUNCH();
  });
}

// Records `op` in the current device's fault word (index_fault.h).
__device__ __forceinline__ void RecordFault(uint32_t* word, IndexFaultOp op) {
  atomicOr(word, static_cast<uint32_t>(op));
}

}  // namespace spmd::kernels::cuda::detail
