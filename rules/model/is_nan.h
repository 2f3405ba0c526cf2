// Whether a value of any element type is NaN: the one test the references, the CPU kernels
// and the shared plan pieces (rules/ops/scan_pieces.h) use where an order or an equality
// treats NaN apart (cummax, cummin, argsort, topk, unique).
#pragma once

#include <cmath>
#include <type_traits>

namespace spmd {

// Never true for an integral or bool T.
template <typename T>
bool IsNan(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::isnan(v);
  } else {
    return false;
  }
}

}  // namespace spmd
