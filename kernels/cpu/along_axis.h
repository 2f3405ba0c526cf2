// take_along_axis's and put_along_axis's positions (docs/OPS.md): for each element of
// index, in row-major order, the flat offset in x of its own position with the axis
// coordinate replaced by its id (index has x's rank and, off the axis, no larger dims).
// One odometer over index's shape with x's strides; the ids are checked by the caller.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace spmd::kernels::cpu {

inline std::vector<int64_t> AlongAxisOffsets(const std::vector<int64_t>& x, const std::vector<int64_t>& index,
                                             size_t axis, const std::vector<int64_t>& ids) {
  const size_t rank = x.size();
  std::vector<int64_t> strides(rank, 1);
  for (size_t d = rank - 1; d > 0; --d) strides[d - 1] = strides[d] * x[d];
  std::vector<int64_t> offsets(ids.size());
  std::vector<int64_t> at(rank, 0);
  int64_t base = 0;  // x's offset of `at` without the axis term
  for (size_t i = 0; i < ids.size(); ++i) {
    offsets[i] = base + ids[i] * strides[axis];
    for (size_t d = rank; d-- > 0;) {
      if (d != axis) base += strides[d];
      if (++at[d] < index[d]) break;
      if (d != axis) base -= at[d] * strides[d];
      at[d] = 0;
    }
  }
  return offsets;
}

}  // namespace spmd::kernels::cpu
