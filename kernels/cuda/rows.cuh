// Helpers of the CUDA kernels shared by the softmax family (kernels/cuda/softmax.cu), the
// normalisations (norm.cu), the embeddings (embedding.cu) and the softmax cross entropies
// (loss.cu): row launch shapes, ids checked on the device as the CPU kernels check them, and
// the running (max, sum of exponentials) of a row.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "kernels/cpu/internal.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/math_util.cuh"
#include "rules/engine/op_plan.h"

namespace spmd::kernels::cuda::rows {

constexpr unsigned kBlock = 256;
constexpr unsigned long long kNone = ~0ull;

template <typename T>
__device__ __forceinline__ T QuietNan() {
  return std::numeric_limits<T>::quiet_NaN();
}

// ---- Launch shapes ---------------------------------------------------------------------------

// A warp per row (8 rows per 256-thread block) for rows of up to 256 elements, else a block
// per row (RowsConfig: the warp multiple covering the row, at most 1024 threads).
struct RowLaunch {
  bool warp = true;
  unsigned grid = 0;
  unsigned block = 0;
};
inline RowLaunch PlanRows(int64_t rows, int64_t len) {
  RowLaunch l;
  if (rows <= 0) return l;
  if (len <= 256) {
    l.warp = true;
    l.block = kBlock;
    l.grid = GridFor((rows + 7) / 8, 1);
    return l;
  }
  const LaunchConfig c = RowsConfig(rows, len);
  l.warp = false;
  l.grid = c.grid;
  l.block = c.block;
  return l;
}

// ---- Ids ------------------------------------------------------------------------------------

template <typename V>
constexpr bool kFloatId = !std::is_same_v<V, int64_t> && !std::is_same_v<V, bool>;

template <typename V>
__device__ __forceinline__ double IdValue(V v) {
  return static_cast<double>(static_cast<Compute<V>>(v));
}

// Writes ids[t] as int64 and records the first position of a float id that is not a whole
// number within 9e15 (status[0]) and of an id outside [0, limit) (status[1]; limit < 0: no
// upper bound; ids equal to `ignore` are not checked when has_ignore).
template <typename V>
__global__ void ValidateIds(const V* ids, int64_t n, int64_t limit, bool has_ignore,
                            int64_t ignore, int64_t* out, unsigned long long* status) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < n;
       t += step) {
    int64_t id;
    if constexpr (kFloatId<V>) {
      const double v = IdValue(ids[t]);
      if (!(v - v == 0.0) || v != trunc(v) || fabs(v) > 9.0e15) {
        atomicMin(&status[0], static_cast<unsigned long long>(t));
        out[t] = 0;
        continue;
      }
      id = static_cast<int64_t>(v);
    } else {
      id = static_cast<int64_t>(ids[t]);
    }
    out[t] = id;
    if (has_ignore && id == ignore) continue;
    if (id < 0 || (limit >= 0 && id >= limit)) {
      atomicMin(&status[1], static_cast<unsigned long long>(t));
    }
  }
}

struct IdRules {
  std::string field;      // inputs[i].data
  std::string noun;       // "id" or "label" in the range message
  int64_t limit = -1;     // ids must be < limit (none when negative)
  bool has_ignore = false;
  int64_t ignore = 0;
};

// The first id outside the range, when one is (CheckedIds with a deferred range check).
struct IdVerdict {
  bool bad = false;
  int64_t id = 0;
  void ThrowIfBad(const IdRules& rules) const {
    if (bad) plan::ThrowIdOutside(rules.field, rules.noun, id, rules.limit);
  }
};

// `ids` (any dtype) as int64 on `like`'s stream, after the CPU kernels' checks: a float id
// that is not a whole number or beyond 9e15 (plan::ThrowBadFloatId), the first in order;
// then the first id outside the range, thrown here or, with `deferred`, left there for the
// caller to throw where the CPU kernel checks ranges (after allocating its output). Reads
// the verdict back: synchronizes `stream`.
inline Tensor CheckedIds(const Tensor& ids, const IdRules& rules, const Tensor& like,
                  cudaStream_t stream, IdVerdict* deferred = nullptr) {
  Tensor out = NewOutput(like, ids.shape(), DType::kInt64);
  const int64_t n = ids.numel();
  if (n == 0) return out;
  Tensor status = Scratch(like, 2 * static_cast<int64_t>(sizeof(unsigned long long)));
  auto* st = reinterpret_cast<unsigned long long*>(status.bytes());
  SPMD_CUDA_CHECK(cudaMemsetAsync(st, 0xff, 2 * sizeof(unsigned long long), stream));
  DispatchAny(ids.dtype(), rules.field, [&](auto zero) {
    using V = decltype(zero);
    ValidateIds<V><<<GridFor(n, kBlock), kBlock, 0, stream>>>(
        DataOf<V>(ids), n, rules.limit, rules.has_ignore, rules.ignore, DataOf<int64_t>(out), st);
    SPMD_CUDA_CHECK_LAUNCH();
  });
  unsigned long long verdict[2] = {kNone, kNone};
  SPMD_CUDA_CHECK(cudaMemcpyAsync(verdict, st, sizeof verdict, cudaMemcpyDeviceToHost, stream));
  SPMD_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (verdict[0] != kNone) {
    double v = 0.0;
    DispatchAny(ids.dtype(), rules.field, [&](auto zero) {
      using V = decltype(zero);
      V host{};
      SPMD_CUDA_CHECK(cudaMemcpy(&host, DataOf<V>(ids) + verdict[0], sizeof(V),
                                 cudaMemcpyDeviceToHost));
      if constexpr (kFloatId<V>) v = static_cast<double>(static_cast<Compute<V>>(host));
    });
    plan::ThrowBadFloatId(rules.field, v);
  }
  if (verdict[1] != kNone) {
    int64_t id = 0;
    SPMD_CUDA_CHECK(cudaMemcpy(&id, DataOf<int64_t>(out) + verdict[1], sizeof id,
                               cudaMemcpyDeviceToHost));
    if (deferred == nullptr) plan::ThrowIdOutside(rules.field, rules.noun, id, rules.limit);
    *deferred = {true, id};
  }
  return out;
}

// ---- (max, sum of exponentials) of a row -------------------------------------------------------

// The running max m of a set and the sum s of exp(v - m) over it. An element v is {v, 1};
// a NaN is {-inf, NaN} and +inf is {+inf, NaN}: the CPU's sum of exp(v - max) is NaN then
// (exp(NaN), exp(inf - inf)), and so is every output; -inf is {-inf, 1}, which the merge
// turns into exp(-inf - m) = 0 unless every element is -inf (then every output is NaN, as
// exp(-inf + inf) on the CPU).
template <typename T>
struct MaxSum {
  T m;
  T s;
};
template <typename T>
__device__ __forceinline__ MaxSum<T> LoadMaxSum(T v) {
  if (v != v) return {-Infinity<T>(), QuietNan<T>()};
  if (v == Infinity<T>()) return {v, QuietNan<T>()};
  return {v, T(1)};
}
template <typename T>
struct MergeMaxSum {
  __device__ MaxSum<T> operator()(MaxSum<T> p, MaxSum<T> q) const {
    const T m = q.m > p.m ? q.m : p.m;
    const T s = (p.m == m ? p.s : p.s * Exp(p.m - m)) + (q.m == m ? q.s : q.s * Exp(q.m - m));
    return {m, s};
  }
};
template <typename T>
__device__ __forceinline__ MaxSum<T> NoMaxSum() {
  return {-Infinity<T>(), T(0)};
}

}  // namespace spmd::kernels::cuda::rows
