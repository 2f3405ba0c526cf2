// Helpers shared by the runtime's thread-backend tests (dist_tensor_test.cc,
// reshard_executor_test.cc, dispatch_test.cc): one binary, one copy of each.
#pragma once

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/tensor.h"
#include "rules/model/dist_attr.h"
#include "runtime/comm/communicator.h"

namespace spmd::runtime::testing {

// Options for tests that must not hang: a collective waits at most 20 s.
inline CommOptions Quick() {
  CommOptions options;
  options.timeout_s = 20;
  return options;
}

// 1, 2, 3, ... in row-major order, as float32, float64 or int64.
inline kernels::Tensor Iota(const std::vector<int64_t>& shape, DType dtype = DType::kFloat64) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  kernels::Tensor t = kernels::Tensor::Uninitialized(shape, dtype);
  for (int64_t i = 0; i < n; ++i) {
    const double v = static_cast<double>(i + 1);
    if (dtype == DType::kFloat32) {
      t.data<float>()[i] = static_cast<float>(v);
    } else if (dtype == DType::kFloat64) {
      t.data<double>()[i] = v;
    } else {
      t.data<int64_t>()[i] = static_cast<int64_t>(v);
    }
  }
  return t;
}

// A dist attr from placement text, e.g. Parse("[S(0), R]", 2).
inline DistAttr Parse(const std::string& text, int rank) {
  return ParsePlacementString(text, rank, "test");
}

}  // namespace spmd::runtime::testing
