// Generators and CPU-side helpers shared by the CUDA family tests (index_map_test.cc on
// the CPU, families_gpu_test.cc on a GPU): random shapes, dtypes, tensors, ids; the CPU
// kernel's result or error. Test-only.
#pragma once

#include <rapidcheck.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "kernels/cuda/index_map.h"
#include "kernels/tensor.h"
#include "rules/model/error.h"
#include "rules/engine/op_decl.h"
#include "rules/engine/registry.h"

namespace spmd::kernels::cuda::family_test {

inline Attrs Norm(const std::string& op, const Attrs& given) { return FindOp(op)->NormalizeAttrs(given); }

constexpr DType kAllDTypes[] = {DType::kFloat64, DType::kFloat32, DType::kInt64,
                                DType::kBool,    DType::kBFloat16, DType::kFloat16};

inline DType GenDType() { return *rc::gen::elementOf(std::vector<DType>(std::begin(kAllDTypes), std::end(kAllDTypes))); }

inline Shape GenShape(int min_rank, int max_rank, int max_dim = 5) {
  const int rank = *rc::gen::inRange(min_rank, max_rank + 1);
  Shape s;
  for (int d = 0; d < rank; ++d) s.push_back(*rc::gen::inRange<int64_t>(0, max_dim + 1));
  return s;
}

// A tensor of random bytes (bool: 0 or 1; 2-byte floats: no NaN, whose payload the CPU's
// float32 round trip may quiet).
inline Tensor RandomTensor(const Shape& shape, DType dtype) {
  Tensor t = Tensor::Uninitialized(shape, dtype);
  const size_t n = t.nbytes();
  const std::vector<uint8_t> bytes = *rc::gen::container<std::vector<uint8_t>>(n, rc::gen::arbitrary<uint8_t>());
  if (n > 0) std::memcpy(t.bytes(), bytes.data(), n);
  if (dtype == DType::kBool) {
    for (size_t i = 0; i < n; ++i) reinterpret_cast<uint8_t*>(t.bytes())[i] &= 1;
  }
  if (dtype == DType::kBFloat16 || dtype == DType::kFloat16) {
    uint16_t* h = reinterpret_cast<uint16_t*>(t.bytes());
    for (int64_t i = 0; i < t.numel(); ++i) h[i] &= 0x3fff;  // finite, no NaN
  }
  return t;
}

inline bool SameBytes(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.bytes(), b.bytes(), a.nbytes()) == 0;
}

// Runs a plan as RunCopyPlan does on the device (simplified with units up to max_unit
// bytes, split into launches of at most max_rank dims), each launch element by element.
inline void RunPlanHost(const CopyPlan& plan, std::byte* dst, const std::byte* src, int64_t max_unit, int max_rank) {
  if (plan.count() == 0) return;
  const CopyPlan simple = SimplifyPlan(plan, max_unit);
  for (const CopyPlan& q : PeelPlan(simple, max_rank)) {
    RC_ASSERT(static_cast<int>(q.dims.size()) <= max_rank);
    const CopyPlanArgs a = PlanArgs(q);
    for (int64_t i = 0; i < a.count; ++i) {
      int64_t s = 0, d = 0;
      PlanOffsets(a, i, &s, &d);
      std::memcpy(dst + d * q.unit, src + s * q.unit, static_cast<size_t>(q.unit));
    }
  }
}

inline int64_t GenMaxUnit() { return *rc::gen::element<int64_t>(1, 2, 4, 8, 16); }
inline int GenMaxRank() { return *rc::gen::inRange(1, kMaxPlanDims + 1); }

// The CPU kernel's outputs, or the error it throws.
struct CpuResult {
  Tensors outputs;
  std::optional<SpmdError> error;
};
// True when the CPU refused a 2-byte float beside another floating dtype (RunCpuKernel's
// check, made on the host by RunCudaKernel too): nothing for the index maps to match.
inline bool RefusedMix(const CpuResult& r) {
  const std::string& f = r.error ? r.error->field() : std::string();
  return f.size() > 6 && f.compare(f.size() - 6, 6, ".dtype") == 0;
}

inline CpuResult RunCpu(const std::string& op, const Tensors& inputs, const Attrs& attrs) {
  CpuResult r;
  try {
    r.outputs = RunCpuKernel(op, TensorArgs(inputs), attrs);
  } catch (const SpmdError& e) {
    r.error = e;
  }
  return r;
}

inline int64_t Es(DType d) { return ElementSize(d); }

// Ids of a random dtype: mostly in [lo, hi), sometimes fractional (float dtypes).
inline Tensor GenIds(const Shape& shape, int64_t lo, int64_t hi) {
  const DType dtype = *rc::gen::element(DType::kInt64, DType::kFloat64, DType::kFloat32, DType::kBool);
  Tensor t = Tensor::Uninitialized(shape, dtype);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const int64_t v = *rc::gen::inRange<int64_t>(lo, std::max(lo + 1, hi));
    switch (dtype) {
      case DType::kInt64: t.data<int64_t>()[i] = v; break;
      case DType::kBool: t.data<bool>()[i] = (v & 1) != 0; break;
      case DType::kFloat64: t.data<double>()[i] = *rc::gen::inRange(0, 12) == 0 ? v + 0.5 : double(v); break;
      default: t.data<float>()[i] = *rc::gen::inRange(0, 12) == 0 ? float(v) + 0.5f : float(v); break;
    }
  }
  return t;
}

// A float tensor with few distinct values (so duplicates add up in telling orders).
inline Tensor GenValues(const Shape& shape, DType dtype) {
  Tensor t = Tensor::Uninitialized(shape, dtype);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double v = *rc::gen::element(0.1, -0.3, 1e8, -1e8, 3.0, 0.7, -0.0);
    if (dtype == DType::kFloat64) t.data<double>()[i] = v;
    else if (dtype == DType::kFloat32) t.data<float>()[i] = static_cast<float>(v);
    else t.data<int64_t>()[i] = static_cast<int64_t>(v);
  }
  return t;
}

}  // namespace spmd::kernels::cuda::family_test
