// What the contraction, reduction and norm kernels share: the call's device and stream,
// the 2-byte dtype rules of RunCpuKernel for kernels that take 2-byte floats themselves,
// scratch memory, and warp / block reductions. Included by kernels/cuda/*.cu only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <deque>
#include <initializer_list>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/backend_checks.h"
#include "kernels/cpu/internal.h"
#include "kernels/cuda/common.cuh"

namespace spmd::kernels::cuda {

// ---- Host side ------------------------------------------------------------------------------

// RunCpuKernel's first check (kernels/backend_checks.h TwoByteDType), for the kernels that
// take 2-byte floats themselves (the others get it from RunCudaKernel's widening): a
// bfloat16 / float16 input next to an input of another floating dtype is InvalidArgument
// naming the first such input ("inputs[i].dtype").
inline void CheckTwoByteMix(const TensorArgs& inputs) { (void)checks::TwoByteDType(inputs); }

// True when the value inputs `which` hold a 2-byte float next to an int64 or bool value:
// RunCpuKernel converts those to float32 (not to the 2-byte type), so such a call runs the
// float32 kernel on widened inputs (WidenTwoByte) to give the same values.
inline bool TwoByteWithIntegerValues(const TensorArgs& inputs, std::initializer_list<size_t> which) {
  bool narrow = false, integer = false;
  for (size_t i : which) {
    if (i >= inputs.size()) continue;
    narrow = narrow || IsTwoByteFloat(inputs[i].dtype());
    integer = integer || !IsFloating(inputs[i].dtype());
  }
  return narrow && integer;
}

// RunCudaKernel's widening, for a kernel that takes 2-byte floats but met a case it leaves
// to the float32 kernel: 2-byte inputs converted to float32, `fn` run, float32 outputs
// rounded once to the 2-byte dtype.
template <typename Fn>
Tensors WidenTwoByte(const TensorArgs& inputs, const Attrs& attrs, Fn fn) {
  DType narrow = DType::kFloat32;
  for (const Tensor& t : inputs) {
    if (IsTwoByteFloat(t.dtype())) {
      narrow = t.dtype();
      break;
    }
  }
  std::deque<Tensor> widened;
  std::vector<const Tensor*> args;
  for (const Tensor& t : inputs) {
    if (t.dtype() == narrow && narrow != DType::kFloat32) {
      widened.push_back(ConvertOnDevice(t, DType::kFloat32));
      args.push_back(&widened.back());
    } else {
      args.push_back(&t);
    }
  }
  Tensors outputs = fn(TensorArgs(std::move(args)), attrs);
  if (narrow == DType::kFloat32) return outputs;
  for (Tensor& t : outputs) {
    if (t.dtype() == DType::kFloat32) t = ConvertOnDevice(t, narrow);
  }
  return outputs;
}

// Every input on inputs[0]'s CUDA device, made current while this lives; the stream the
// call's work goes to.
struct CallContext {
  explicit CallContext(const TensorArgs& inputs)
      : device(CheckOnOneDevice(inputs)), guard(device.index),
        stream(ToCuda(inputs[0].stream())) {}
  Device device;
  DeviceGuard guard;
  cudaStream_t stream;
};

// Tensors made from the inputs on the inputs' own streams (conversions, permutations) and
// read by this call's work on `stream`: Adopt orders `stream` after the tensor's stream,
// and the destructor orders the tensor's stream after `stream`, so that its memory, freed
// on its own stream, is not reused before the reads are done. Nothing happens when the
// streams are the same (the usual case).
class Temporaries {
 public:
  explicit Temporaries(cudaStream_t stream) : stream_(stream) {}
  ~Temporaries() {
    for (const Tensor& t : kept_) {
      if (ToCuda(t.stream()) != stream_) Join(stream_, ToCuda(t.stream()), /*check=*/false);
    }
  }
  Temporaries(const Temporaries&) = delete;
  Temporaries& operator=(const Temporaries&) = delete;

  Tensor& Adopt(Tensor t) {
    kept_.push_back(std::move(t));
    Tensor& kept = kept_.back();
    if (ToCuda(kept.stream()) != stream_) Join(ToCuda(kept.stream()), stream_, /*check=*/true);
    return kept;
  }
  // `t` in `dtype`: t itself when it has it, else a converted copy kept here.
  const Tensor& As(const Tensor& t, DType dtype) {
    if (t.dtype() == dtype) return t;
    return Adopt(ConvertOnDevice(t, dtype));
  }

 private:
  // Work enqueued on `to` after this call waits for the work enqueued on `from` before it.
  static void Join(cudaStream_t from, cudaStream_t to, bool check) {
    cudaEvent_t event;
    cudaError_t e = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
    if (e == cudaSuccess) {
      e = cudaEventRecord(event, from);
      if (e == cudaSuccess) e = cudaStreamWaitEvent(to, event, 0);
      (void)cudaEventDestroy(event);  // released once the recorded work completes
    }
    if (check && e != cudaSuccess) ThrowCuda(e, "cudaStreamWaitEvent", __FILE__, __LINE__);
  }

  cudaStream_t stream_;
  std::deque<Tensor> kept_;
};

// `bytes` bytes of device memory on `like`'s device and stream (a byte tensor).
inline Tensor Scratch(const Tensor& like, int64_t bytes) {
  return NewOutput(like, Shape{bytes > 0 ? bytes : 0}, DType::kBool);
}

// An output of `shape` and `dtype` on `like`'s device and stream; Unsupported ("outputs")
// beyond the kernels' limit, as the CPU kernels.
inline Tensor NewChecked(const Tensor& like, const Shape& shape, DType dtype) {
  cpu::internal::CheckOutputShape(shape);
  return NewOutput(like, shape, dtype);
}

template <typename T>
T* DataOf(Tensor& t) {
  return reinterpret_cast<T*>(t.bytes());
}
template <typename T>
const T* DataOf(const Tensor& t) {
  return reinterpret_cast<const T*>(t.bytes());
}

// The grid of a grid-stride launch over `n` items in blocks of `block` threads.
inline unsigned GridFor(int64_t n, unsigned block, unsigned max_blocks = 65535u * 16u) {
  return GridStride(n, block, max_blocks).grid;
}

// ---- Device side ----------------------------------------------------------------------------

template <typename T>
__device__ __forceinline__ T Infinity() {
  return std::numeric_limits<T>::infinity();
}

// __shfl_down_sync / __shfl_sync of any trivially copyable value (word by word); bool
// through an int.
template <typename T>
__device__ __forceinline__ T ShuffleDown(T v, int delta) {
  if constexpr (std::is_same_v<T, bool>) {
    return __shfl_down_sync(0xffffffffu, static_cast<int>(v), delta) != 0;
  } else {
    static_assert(sizeof(T) % 4 == 0, "shuffled values are whole words");
    unsigned words[sizeof(T) / 4];
    memcpy(words, &v, sizeof(T));
#pragma unroll
    for (int i = 0; i < static_cast<int>(sizeof(T) / 4); ++i) {
      words[i] = __shfl_down_sync(0xffffffffu, words[i], delta);
    }
    memcpy(&v, words, sizeof(T));
    return v;
  }
}
template <typename T>
__device__ __forceinline__ T ShuffleFrom(T v, int lane) {
  if constexpr (std::is_same_v<T, bool>) {
    return __shfl_sync(0xffffffffu, static_cast<int>(v), lane) != 0;
  } else {
    unsigned words[sizeof(T) / 4];
    memcpy(words, &v, sizeof(T));
#pragma unroll
    for (int i = 0; i < static_cast<int>(sizeof(T) / 4); ++i) {
      words[i] = __shfl_sync(0xffffffffu, words[i], lane);
    }
    memcpy(&v, words, sizeof(T));
    return v;
  }
}

// Folds the warp's values with `op`; lane 0 gets the result (lanes fold in a fixed tree, so
// the result does not depend on timing). Every lane of the warp must call it.
template <typename T, typename Op>
__device__ __forceinline__ T WarpReduce(T v, Op op) {
#pragma unroll
  for (int delta = 16; delta > 0; delta >>= 1) v = op(v, ShuffleDown(v, delta));
  return v;
}

// As WarpReduce, every lane getting lane 0's result.
template <typename T, typename Op>
__device__ __forceinline__ T WarpAllReduce(T v, Op op) {
  return ShuffleFrom(WarpReduce(v, op), 0);
}

// Folds the block's values (blockDim.x a multiple of 32, at most 1024); every thread gets
// the result. Every thread of the block must call it. `identity` fills the unused slots.
template <typename T, typename Op>
__device__ T BlockAllReduce(T v, Op op, T identity) {
  __shared__ T partial[32];
  __shared__ T result;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  v = WarpReduce(v, op);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int warps = static_cast<int>(blockDim.x >> 5);
    v = lane < warps ? partial[lane] : identity;
    v = WarpReduce(v, op);
    if (lane == 0) result = v;
  }
  __syncthreads();
  v = result;
  __syncthreads();  // `partial` and `result` may be reused by the next call
  return v;
}

// The threads that share one row: a warp (kWarp) or the whole block.
template <bool kWarp>
struct RowGroup {
  int64_t first_row;
  int64_t row_step;
  int lane;
  int size;
};
template <bool kWarp>
__device__ __forceinline__ RowGroup<kWarp> MakeRowGroup() {
  if constexpr (kWarp) {
    const int64_t warps = blockDim.x >> 5;
    return {static_cast<int64_t>(blockIdx.x) * warps + (threadIdx.x >> 5),
            static_cast<int64_t>(gridDim.x) * warps, static_cast<int>(threadIdx.x & 31), 32};
  } else {
    return {static_cast<int64_t>(blockIdx.x), static_cast<int64_t>(gridDim.x),
            static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x)};
  }
}
template <bool kWarp, typename T, typename Op>
__device__ __forceinline__ T GroupAllReduce(T v, Op op, T identity) {
  if constexpr (kWarp) {
    return WarpAllReduce(v, op);
  } else {
    return BlockAllReduce(v, op, identity);
  }
}

// Overloads for float and double (float math in float, as the CPU kernels' std:: calls).
__device__ __forceinline__ float Exp(float v) { return expf(v); }
__device__ __forceinline__ double Exp(double v) { return exp(v); }
__device__ __forceinline__ float Log(float v) { return logf(v); }
__device__ __forceinline__ double Log(double v) { return log(v); }
__device__ __forceinline__ float Sqrt(float v) { return sqrtf(v); }
__device__ __forceinline__ double Sqrt(double v) { return sqrt(v); }
__device__ __forceinline__ float Pow(float v, float p) { return powf(v, p); }
__device__ __forceinline__ double Pow(double v, double p) { return pow(v, p); }
__device__ __forceinline__ float Fabs(float v) { return fabsf(v); }
__device__ __forceinline__ double Fabs(double v) { return fabs(v); }
template <typename T>
__device__ __forceinline__ bool IsNan(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return v != v;
  } else {
    return false;
  }
}
template <typename T>
__device__ __forceinline__ bool IsFinite(T v) {
  return v - v == T(0);  // false for inf and NaN
}

struct AddOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return a + b;
  }
};

}  // namespace spmd::kernels::cuda
