#include "kernels/cpu/cpu_backend.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>

#include "kernels/backend_checks.h"
#include "kernels/cpu/kernels.h"
#include "rules/model/half.h"
#include "rules/model/error.h"

namespace spmd::kernels {
namespace {

// Calls fn(static_cast<T*>(nullptr)) with T the C++ element type of `dtype` (bool as
// uint8_t: the loops below treat it as bytes 0 / 1; the 2-byte floats as their storage
// types, which the loops compute on in float32).
template <class Fn>
void VisitType(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat64: fn(static_cast<double*>(nullptr)); return;
    case DType::kFloat32: fn(static_cast<float*>(nullptr)); return;
    case DType::kInt64: fn(static_cast<int64_t*>(nullptr)); return;
    case DType::kBool: fn(static_cast<uint8_t*>(nullptr)); return;
    case DType::kBFloat16: fn(static_cast<BFloat16*>(nullptr)); return;
    case DType::kFloat16: fn(static_cast<Float16*>(nullptr)); return;
  }
  ThrowUnsupported("dtype", "no element loops for dtype " + std::to_string(static_cast<int>(dtype)));
}

template <class T>
constexpr bool kTwoByteFloat = std::is_same_v<T, BFloat16> || std::is_same_v<T, Float16>;

// The arithmetic type of element type T: float for the 2-byte floats, T otherwise.
template <class T>
using ComputeType = std::conditional_t<kTwoByteFloat<T>, float, T>;

// Reads and writes an element as its ComputeType (writing rounds a 2-byte float once).
template <class T>
ComputeType<T> Load(const T& x) {
  return static_cast<ComputeType<T>>(x);
}
template <class T>
void Store(T& x, ComputeType<T> v) {
  x = T(v);
}

// a op b for floating T; for integer T on the unsigned type of its width (wrapping).
template <class T, class Op>
T Wrapped(T a, T b, Op op) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(op(static_cast<U>(a), static_cast<U>(b)));
  } else {
    return op(a, b);
  }
}

template <class T>
void ReduceTyped(T* acc, const T* in, int64_t count, ReduceOp op) {
  if constexpr (kTwoByteFloat<T>) {
    // Each step in float32, rounded once: the 2-byte storage has no arithmetic.
    using F = ComputeType<T>;
    auto apply = [&](auto f) {
      for (int64_t i = 0; i < count; ++i) Store(acc[i], f(Load(acc[i]), Load(in[i])));
    };
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: apply([](F a, F b) { return a + b; }); return;
      case ReduceOp::kProd: apply([](F a, F b) { return a * b; }); return;
      case ReduceOp::kMax:
      case ReduceOp::kAny: apply([](F a, F b) { return std::max(a, b); }); return;
      case ReduceOp::kMin:
      case ReduceOp::kAll: apply([](F a, F b) { return std::min(a, b); }); return;
    }
    return;
  } else {
  // Integer sums and products wrap modulo 2^64 (two's complement), as MPI's and NCCL's
  // integer reductions do on the hardware, instead of overflowing a signed type (undefined
  // behaviour): Wrapped does them on the unsigned type of the same width.
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      for (int64_t i = 0; i < count; ++i) acc[i] = Wrapped(acc[i], in[i], std::plus<>());
      return;
    case ReduceOp::kProd:
      for (int64_t i = 0; i < count; ++i) acc[i] = Wrapped(acc[i], in[i], std::multiplies<>());
      return;
    case ReduceOp::kMax:
    case ReduceOp::kAny:
      for (int64_t i = 0; i < count; ++i) acc[i] = std::max(acc[i], in[i]);
      return;
    case ReduceOp::kMin:
    case ReduceOp::kAll:
      for (int64_t i = 0; i < count; ++i) acc[i] = std::min(acc[i], in[i]);
      return;
  }
  }
}

// Bool buffers reduce by or (max, any) or and (min, all, prod); sum and avg are refused
// before (checks::CheckReducible).
void ReduceBool(uint8_t* acc, const uint8_t* in, int64_t count, ReduceOp op) {
  const bool is_or = op == ReduceOp::kMax || op == ReduceOp::kAny;
  for (int64_t i = 0; i < count; ++i) acc[i] = is_or ? (acc[i] | in[i]) : (acc[i] & in[i]);
}

}  // namespace

Allocator& CpuBackend::AllocatorFor(Device device) {
  checks::CheckDeviceKind(device, DeviceKind::kHost, "device", "the CPU backend's allocator");
  return HostAllocator();
}

Tensors CpuBackend::RunKernel(const KernelRef& kernel, const TensorArgs& inputs, const Attrs& attrs) {
  (void)checks::CheckOnOneDevice(inputs, DeviceKind::kHost);
  return RunCpuKernel(kernel, inputs, attrs);
}

void CpuBackend::Copy(void* dst, const void* src, size_t nbytes, Stream) {
  if (nbytes > 0 && dst != src) std::memmove(dst, src, nbytes);
}

void CpuBackend::CopyFromHost(void* dst, const void* host_src, size_t nbytes, Stream stream) {
  if (nbytes == 0) return;
  checks::CheckHostBuffer(host_src, "host_src");
  Copy(dst, host_src, nbytes, stream);
}

void CpuBackend::CopyToHost(void* host_dst, const void* src, size_t nbytes, Stream stream) {
  if (nbytes == 0) return;
  checks::CheckHostBuffer(host_dst, "host_dst");
  Copy(host_dst, src, nbytes, stream);
}

// Contiguous runs are copied with one memcpy each (trailing dims that both arrays hold
// whole are merged into the run).
void CpuBackend::CopyBox(const std::byte* src, const std::vector<int64_t>& src_shape,
                         const std::vector<int64_t>& src_at, std::byte* dst,
                         const std::vector<int64_t>& dst_shape, const std::vector<int64_t>& dst_at,
                         const std::vector<int64_t>& extent, size_t element_size, Stream) {
  const int rank = static_cast<int>(extent.size());
  for (int64_t x : extent) {
    if (x == 0) return;
  }
  if (rank == 0) {
    std::memcpy(dst, src, element_size);
    return;
  }
  std::vector<int64_t> ss(rank, 1), ds(rank, 1);
  for (int d = rank - 2; d >= 0; --d) {
    ss[d] = ss[d + 1] * src_shape[d + 1];
    ds[d] = ds[d + 1] * dst_shape[d + 1];
  }
  // The contiguous run: dims k..rank-1, where every dim after k is whole in both arrays.
  int k = rank - 1;
  int64_t run = extent[k];
  while (k > 0 && extent[k] == src_shape[k] && extent[k] == dst_shape[k]) {
    --k;
    run *= extent[k];
  }
  int64_t so = 0, dof = 0;
  for (int d = 0; d < rank; ++d) {
    so += src_at[d] * ss[d];
    dof += dst_at[d] * ds[d];
  }
  const size_t run_bytes = static_cast<size_t>(run) * element_size;
  std::vector<int64_t> index(k, 0);
  while (true) {
    std::memcpy(dst + dof * element_size, src + so * element_size, run_bytes);
    int d = k - 1;
    for (; d >= 0; --d) {
      if (++index[d] < extent[d]) {
        so += ss[d];
        dof += ds[d];
        break;
      }
      so -= (extent[d] - 1) * ss[d];
      dof -= (extent[d] - 1) * ds[d];
      index[d] = 0;
    }
    if (d < 0) break;
  }
}

void CpuBackend::Fill(void* dst, int64_t count, DType dtype, double value, Stream) {
  VisitType(dtype, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    T v;
    if constexpr (std::is_same_v<T, BFloat16>) {
      v = BFloat16::FromBits(DoubleToBFloat16Bits(value));
    } else if constexpr (std::is_same_v<T, Float16>) {
      v = Float16::FromBits(DoubleToFloat16Bits(value));
    } else {
      v = std::is_same_v<T, uint8_t> ? static_cast<T>(value != 0) : static_cast<T>(value);
    }
    std::fill_n(static_cast<T*>(dst), count, v);
  });
}

void CpuBackend::Scale(void* buffer, int64_t count, DType dtype, int64_t n, bool divide, Stream) {
  checks::CheckScalable(dtype);
  VisitType(dtype, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    T* p = static_cast<T*>(buffer);
    const auto factor = static_cast<ComputeType<T>>(n);
    if (divide) {
      for (int64_t i = 0; i < count; ++i) Store(p[i], Load(p[i]) / factor);
    } else if constexpr (std::is_integral_v<T>) {
      // Wraps modulo 2^64 as Reduce's integer sums do (no signed overflow).
      for (int64_t i = 0; i < count; ++i) p[i] = Wrapped(p[i], static_cast<T>(n), std::multiplies<>());
    } else {
      for (int64_t i = 0; i < count; ++i) Store(p[i], Load(p[i]) * factor);
    }
  });
}

void CpuBackend::Reduce(void* acc, const void* in, int64_t count, DType dtype, ReduceOp op, Stream) {
  checks::CheckReducible(dtype, op);
  VisitType(dtype, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    if constexpr (std::is_same_v<T, uint8_t>) {
      ReduceBool(static_cast<uint8_t*>(acc), static_cast<const uint8_t*>(in), count, op);
    } else {
      ReduceTyped(static_cast<T*>(acc), static_cast<const T*>(in), count, op);
    }
  });
}

void CpuBackend::ToTruth(const void* in, void* out, int64_t count, DType dtype, Stream) {
  VisitType(dtype, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T* x = static_cast<const T*>(in);
    T* y = static_cast<T*>(out);
    if constexpr (kTwoByteFloat<T>) {
      const T one(1.0f), zero(0.0f);
      for (int64_t i = 0; i < count; ++i) y[i] = (x[i].bits & 0x7fffu) != 0 ? one : zero;  // +-0 only
    } else {
      for (int64_t i = 0; i < count; ++i) y[i] = x[i] != T{0} ? T{1} : T{0};  // NaN != 0
    }
  });
}

}  // namespace spmd::kernels
