// CudaBackend and EnableCuda.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <string>
#include <type_traits>

#include "kernels/backend_checks.h"
#include "kernels/cuda/allocator.h"
#include "kernels/cuda/backend.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/index_fault.h"
#include "kernels/cuda/permute.h"
#include "kernels/cuda/registry.h"
#include "kernels/cuda/strided.h"

namespace spmd::kernels::cuda {
namespace {

// The CUDA device `p` lives on; InvalidArgument (`field`) when it is not CUDA memory.
int DeviceOf(const void* p, const char* field) {
  cudaPointerAttributes attr{};
  const cudaError_t error = cudaPointerGetAttributes(&attr, p);
  if (error != cudaSuccess) {
    (void)cudaGetLastError();
    ThrowInvalid(field, std::string("not a CUDA buffer: ") + cudaGetErrorString(error));
  }
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged) {
    ThrowInvalid(field, "the CUDA backend works on CUDA device memory, got a host address");
  }
  return attr.device;
}

// ---- element loops ---------------------------------------------------------------------

template <typename T>
__global__ void FillKernel(T* __restrict__ p, T v, int64_t n) {
  for (SPMD_GRID_STRIDE(i, n)) p[i] = v;
}

template <typename T>
__global__ void ScaleKernel(T* __restrict__ p, int64_t n, Compute<T> factor, bool divide) {
  for (SPMD_GRID_STRIDE(i, n)) {
    const Compute<T> v = Load(p, i);
    Store(p, i, divide ? v / factor : v * factor);
  }
}

enum class Combine { kAdd, kMul, kMax, kMin, kOr, kAnd };

// acc[i] = acc[i] op in[i], as CpuBackend: max / min as std::max / std::min (the first
// argument kept unless the second compares greater / less: a NaN accumulator stays),
// 2-byte floats in float32 rounded once, bool as or / and. `acc` may be `in`.
template <typename T, Combine kOp>
__global__ void ReduceKernel(T* acc, const T* in, int64_t n) {
  for (SPMD_GRID_STRIDE(i, n)) {
    if constexpr (std::is_same_v<T, bool>) {  // bytewise, as CpuBackend
      auto* a8 = reinterpret_cast<uint8_t*>(acc);
      const auto* b8 = reinterpret_cast<const uint8_t*>(in);
      a8[i] = kOp == Combine::kOr ? (a8[i] | b8[i]) : (a8[i] & b8[i]);
    } else {
      const Compute<T> a = Load(acc, i), b = Load(in, i);
      Compute<T> r;
      if constexpr (kOp == Combine::kAdd) r = a + b;
      else if constexpr (kOp == Combine::kMul) r = a * b;
      else if constexpr (kOp == Combine::kMax) r = a < b ? b : a;
      else r = b < a ? b : a;
      Store(acc, i, r);
    }
  }
}

template <typename T>
__global__ void TruthKernel(const T* in, T* out, int64_t n) {
  for (SPMD_GRID_STRIDE(i, n)) {
    if constexpr (std::is_same_v<T, BFloat16>) {
      out[i] = BFloat16::FromBits((in[i].bits & 0x7fffu) != 0 ? 0x3f80u : 0u);
    } else if constexpr (std::is_same_v<T, Float16>) {
      out[i] = Float16::FromBits((in[i].bits & 0x7fffu) != 0 ? 0x3c00u : 0u);
    } else if constexpr (std::is_same_v<T, bool>) {
      reinterpret_cast<uint8_t*>(out)[i] = reinterpret_cast<const uint8_t*>(in)[i] != 0 ? 1 : 0;
    } else {
      out[i] = in[i] != T(0) ? T(1) : T(0);  // NaN != 0
    }
  }
}

}  // namespace

Allocator& CudaBackend::AllocatorFor(Device device) {
  checks::CheckDeviceKind(device, DeviceKind::kCuda, "device", "the CUDA backend's allocator");
  return CudaAllocatorFor(device.index);
}

Tensors CudaBackend::RunKernel(const KernelRef& kernel, const TensorArgs& inputs, const Attrs& attrs) {
  return RunCudaKernel(kernel, inputs, attrs);
}

void CudaBackend::Copy(void* dst, const void* src, size_t nbytes, Stream stream) {
  if (nbytes == 0 || dst == src) return;
  const int device = DeviceOf(dst, "dst");
  (void)DeviceOf(src, "src");
  DeviceGuard guard(device);
  cudaStream_t s = ToCuda(stream);
  const auto* d = static_cast<std::byte*>(dst);
  const auto* sp = static_cast<const std::byte*>(src);
  const bool overlap = d < sp + nbytes && sp < d + nbytes;
  if (!overlap) {
    SPMD_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, s));
    return;
  }
  // cudaMemcpyAsync leaves overlapping ranges undefined: through a pool buffer instead.
  Allocator& pool = CudaAllocatorFor(device);
  void* tmp = pool.Allocate(nbytes, stream);
  try {
    SPMD_CUDA_CHECK(cudaMemcpyAsync(tmp, src, nbytes, cudaMemcpyDefault, s));
    SPMD_CUDA_CHECK(cudaMemcpyAsync(dst, tmp, nbytes, cudaMemcpyDefault, s));
  } catch (...) {
    pool.Deallocate(tmp, nbytes, stream);
    throw;
  }
  pool.Deallocate(tmp, nbytes, stream);
}

// The contract says host_src is read before the call returns: a pageable buffer is staged
// by cudaMemcpyAsync itself, a pinned one is not, so the stream is synchronized.
void CudaBackend::CopyFromHost(void* dst, const void* host_src, size_t nbytes, Stream stream) {
  if (nbytes == 0) return;
  checks::CheckHostBuffer(host_src, "host_src");
  DeviceGuard guard(DeviceOf(dst, "dst"));
  cudaStream_t s = ToCuda(stream);
  SPMD_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, nbytes, cudaMemcpyHostToDevice, s));
  SPMD_CUDA_CHECK(cudaStreamSynchronize(s));
}

void CudaBackend::CopyToHost(void* host_dst, const void* src, size_t nbytes, Stream stream) {
  if (nbytes == 0) return;
  checks::CheckHostBuffer(host_dst, "host_dst");
  DeviceGuard guard(DeviceOf(src, "src"));
  SPMD_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, nbytes, cudaMemcpyDeviceToHost, ToCuda(stream)));
}

void CudaBackend::CopyBox(const std::byte* src, const std::vector<int64_t>& src_shape,
                          const std::vector<int64_t>& src_at, std::byte* dst,
                          const std::vector<int64_t>& dst_shape, const std::vector<int64_t>& dst_at,
                          const std::vector<int64_t>& extent, size_t element_size, Stream stream) {
  for (int64_t x : extent) {
    if (x == 0) return;
  }
  const StridedPlan plan = PlanCopyBox(src_shape, src_at, dst_shape, dst_at, extent);
  DeviceGuard guard(DeviceOf(dst, "dst"));
  CopyStrided(src, dst, plan, element_size, stream);
}

void CudaBackend::Fill(void* dst, int64_t count, DType dtype, double value, Stream stream) {
  const int64_t size = ElementSize(dtype);
  if (count <= 0) return;
  DeviceGuard guard(DeviceOf(dst, "dst"));
  const uint64_t bits = FillBits(dtype, value);
  bool same_bytes = true;
  for (int64_t b = 1; b < size; ++b) same_bytes = same_bytes && ((bits >> (8 * b)) & 0xff) == (bits & 0xff);
  cudaStream_t s = ToCuda(stream);
  if (same_bytes) {
    SPMD_CUDA_CHECK(cudaMemsetAsync(dst, static_cast<int>(bits & 0xff), static_cast<size_t>(count * size), s));
    return;
  }
  switch (size) {
    case 8: LaunchGridStride(FillKernel<uint64_t>, count, s, static_cast<uint64_t*>(dst), bits, count); return;
    case 4:
      LaunchGridStride(FillKernel<uint32_t>, count, s, static_cast<uint32_t*>(dst), static_cast<uint32_t>(bits), count);
      return;
    case 2:
      LaunchGridStride(FillKernel<uint16_t>, count, s, static_cast<uint16_t*>(dst), static_cast<uint16_t>(bits), count);
      return;
    default: return;  // one byte: always same_bytes
  }
}

void CudaBackend::Scale(void* buffer, int64_t count, DType dtype, int64_t n, bool divide, Stream stream) {
  checks::CheckScalable(dtype);
  (void)ElementSize(dtype);  // Unsupported for a dtype outside the enum
  if (count <= 0) return;
  DeviceGuard guard(DeviceOf(buffer, "buffer"));
  cudaStream_t s = ToCuda(stream);
  DispatchAny(dtype, "dtype", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) {
      LaunchGridStride(ScaleKernel<T>, count, s, static_cast<T*>(buffer), count,
                       static_cast<Compute<T>>(n), divide);
    }
  });
}

void CudaBackend::Reduce(void* acc, const void* in, int64_t count, DType dtype, ReduceOp op,
                         Stream stream) {
  checks::CheckReducible(dtype, op);
  (void)ElementSize(dtype);
  if (count <= 0) return;
  DeviceGuard guard(DeviceOf(acc, "acc"));
  (void)DeviceOf(in, "in");
  cudaStream_t s = ToCuda(stream);
  DispatchAny(dtype, "dtype", [&](auto tag) {
    using T = decltype(tag);
    T* a = static_cast<T*>(acc);
    const T* b = static_cast<const T*>(in);
    if constexpr (std::is_same_v<T, bool>) {
      if (op == ReduceOp::kMax || op == ReduceOp::kAny) {
        LaunchGridStride(ReduceKernel<T, Combine::kOr>, count, s, a, b, count);
      } else {
        LaunchGridStride(ReduceKernel<T, Combine::kAnd>, count, s, a, b, count);
      }
    } else {
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kAvg: LaunchGridStride(ReduceKernel<T, Combine::kAdd>, count, s, a, b, count); return;
        case ReduceOp::kProd: LaunchGridStride(ReduceKernel<T, Combine::kMul>, count, s, a, b, count); return;
        case ReduceOp::kMax:
        case ReduceOp::kAny: LaunchGridStride(ReduceKernel<T, Combine::kMax>, count, s, a, b, count); return;
        case ReduceOp::kMin:
        case ReduceOp::kAll: LaunchGridStride(ReduceKernel<T, Combine::kMin>, count, s, a, b, count); return;
      }
    }
  });
}

void CudaBackend::ToTruth(const void* in, void* out, int64_t count, DType dtype, Stream stream) {
  (void)ElementSize(dtype);
  if (count <= 0) return;
  DeviceGuard guard(DeviceOf(out, "out"));
  (void)DeviceOf(in, "in");
  cudaStream_t s = ToCuda(stream);
  DispatchAny(dtype, "dtype", [&](auto tag) {
    using T = decltype(tag);
    LaunchGridStride(TruthKernel<T>, count, s, static_cast<const T*>(in), static_cast<T*>(out), count);
  });
}

void CudaBackend::Synchronize(Stream stream) {
  SPMD_CUDA_CHECK(cudaStreamSynchronize(ToCuda(stream)));
  // Ids a kernel on this device found bad since the last look (index_fault.h): the host
  // is about to rely on the results, so the CPU kernel's error is thrown here.
  int device = 0;
  if (stream.handle != nullptr) {
    SPMD_CUDA_CHECK(cudaStreamGetDevice(ToCuda(stream), &device));
  } else {
    SPMD_CUDA_CHECK(cudaGetDevice(&device));
  }
  CheckIndexFaults(Device::Cuda(device));
}

Backend& EnableCuda() {
  std::string why;
  if (DeviceCount(&why) == 0) ThrowUnsupported("device", "EnableCuda: " + why);
  static CudaBackend* backend = new CudaBackend;  // never destroyed: tensors may outlive statics
  static std::once_flag registered;
  std::call_once(registered, [] { SetBackend(DeviceKind::kCuda, backend); });
  return *backend;
}

}  // namespace spmd::kernels::cuda
