// The reference's tensor: a row-major float64 buffer with a shape and a dtype tag.
// Integral dtypes (ids, labels, bool) hold exact integral values in the doubles.
#pragma once

#include <cstdint>
#include <vector>

#include "rules/model/dtype.h"

namespace spmd::reference {

using Shape = std::vector<int64_t>;

inline int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

struct Tensor {
  Shape shape;               // [] is a 0-d tensor holding one value
  std::vector<double> data;  // row-major, NumElements(shape) values
  DType dtype = DType::kFloat64;
};

using Tensors = std::vector<Tensor>;

}  // namespace spmd::reference
