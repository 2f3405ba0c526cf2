// The CPU's broadcasting binary map, shared by the elementwise ops
// (kernels/cpu/elementwise.cc) and the binary math family (kernels/cpu/binary_math.cc):
// out = f(x, y) with numpy broadcasting over the collapsed row loop of PlanBroadcast,
// each input read as the compute type T (ValuesAs), the output of element type Out.
#pragma once

#include <type_traits>

#include "kernels/cpu/internal.h"

namespace spmd::kernels::cpu::internal {

// No float32 row loops (a binary op's Vec, kernels/cpu/elementwise.cc).
struct NoVec {};

// out = f(x, y) with numpy broadcasting; T the compute dtype, Out the output element type.
template <typename T, typename Out, typename F, typename Vec = NoVec>
Tensor BinaryMap(const Tensor& xt, const Tensor& yt, F f, Vec = {}) {
  constexpr bool kVec = std::is_same_v<T, float> && std::is_same_v<Out, float> &&
                        !std::is_same_v<Vec, NoVec>;
  Shape shape = BroadcastShapes({xt.shape(), yt.shape()});
  ValuesAs<T> xv(xt);
  ValuesAs<T> yv(yt);
  Tensor out = NewOutput(shape, DTypeOf<Out>::value);
  Out* __restrict o = out.data<Out>();
  const T* __restrict x = xv.data();
  const T* __restrict y = yv.data();
  if (xt.shape() == yt.shape()) {
    const int64_t n = out.numel();
    if constexpr (kVec) {
      Vec::Rows(x, y, o, n);
    } else {
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], y[i]);
    }
    return out;
  }
  const internal::BroadcastLoop plan = PlanBroadcast(shape, {xt.shape(), yt.shape()});
  const int64_t sx = plan.inner_stride(0);
  const int64_t sy = plan.inner_stride(1);
  ForEachRow(plan, [&](int64_t oo, const int64_t* off, int64_t len) {
    const T* xp = x + off[0];
    const T* yp = y + off[1];
    Out* op = o + oo;
    if (sx == 1 && sy == 1) {
      if constexpr (kVec) {
        Vec::Rows(xp, yp, op, len);
      } else {
        for (int64_t j = 0; j < len; ++j) op[j] = f(xp[j], yp[j]);
      }
    } else if (sx == 0 && sy == 1) {
      const T a = xp[0];
      if constexpr (kVec && requires { Vec::LeftScalar(a, yp, op, len); }) {
        Vec::LeftScalar(a, yp, op, len);
      } else {
        for (int64_t j = 0; j < len; ++j) op[j] = f(a, yp[j]);
      }
    } else if (sx == 1 && sy == 0) {
      const T b = yp[0];
      if constexpr (kVec) {
        Vec::RightScalar(xp, b, op, len);
      } else {
        for (int64_t j = 0; j < len; ++j) op[j] = f(xp[j], b);
      }
    } else {
      for (int64_t j = 0; j < len; ++j) op[j] = f(xp[j * sx], yp[j * sy]);
    }
  });
  return out;
}

}  // namespace spmd::kernels::cpu::internal
