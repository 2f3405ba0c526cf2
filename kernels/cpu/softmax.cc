// The softmax family: softmax, log_softmax, softmax_grad (docs/OPS.md "Softmax"). They work
// on [outer, len, inner]: with inner == 1 a row at a time, else rows of `inner` contiguous
// elements with per-column running max and sum.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/internal.h"
#include "kernels/cpu/rows.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/vector_math.h"
#include "rules/ops/softmax_plan.h"

namespace spmd::kernels::cpu {
namespace {

using internal::AxisView;
using internal::CheckArity;
using internal::ComputeDType;
using internal::DispatchFloat;
using internal::InputField;
using internal::NewOutput;
using internal::ValuesAs;
using rows::SoftmaxAlong;
using rows::ViewFromAxisAttr;

}  // namespace

Tensors softmax(const TensorArgs& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  const AxisView view = ViewFromAxisAttr(inputs[0], attrs);
  return DispatchFloat(ComputeDType(inputs, {0}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> x(inputs[0]);
    Tensor out = NewOutput(inputs[0].shape(), DTypeOf<T>::value);
    SoftmaxAlong(x.data(), view, out.data<T>());
    return TensorList(std::move(out));
  });
}

Tensors log_softmax(const TensorArgs& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  const AxisView v = ViewFromAxisAttr(inputs[0], attrs);
  return DispatchFloat(ComputeDType(inputs, {0}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> xv(inputs[0]);
    Tensor out = NewOutput(inputs[0].shape(), DTypeOf<T>::value);
    const T* x = xv.data();
    T* o = out.data<T>();
    std::vector<T> m(static_cast<size_t>(v.inner)), s(static_cast<size_t>(v.inner));
    for (int64_t r = 0; r < v.outer; ++r) {
      const T* block = x + r * v.len * v.inner;
      T* dst = o + r * v.len * v.inner;
      std::fill(m.begin(), m.end(), -std::numeric_limits<T>::infinity());
      std::fill(s.begin(), s.end(), T(0));
      for (int64_t a = 0; a < v.len; ++a) {
        const T* row = block + a * v.inner;
        for (int64_t i = 0; i < v.inner; ++i) m[i] = row[i] > m[i] ? row[i] : m[i];
      }
      for (int64_t a = 0; a < v.len; ++a) {
        const T* row = block + a * v.inner;
        for (int64_t i = 0; i < v.inner; ++i) s[i] += Exp(row[i] - m[i]);
      }
      for (int64_t i = 0; i < v.inner; ++i) s[i] = std::log(s[i]);
      for (int64_t a = 0; a < v.len; ++a) {
        const T* row = block + a * v.inner;
        T* d = dst + a * v.inner;
        for (int64_t i = 0; i < v.inner; ++i) d[i] = row[i] - m[i] - s[i];
      }
    }
    return TensorList(std::move(out));
  });
}

Tensors softmax_grad(const TensorArgs& inputs, const Attrs& attrs) {
  plan::PlanSoftmaxGrad(plan::ShapesOf(inputs));
  const Tensor& out_t = inputs[0];
  const Tensor& grad_t = inputs[1];
  const AxisView v = ViewFromAxisAttr(out_t, attrs);
  return DispatchFloat(ComputeDType(inputs, {0, 1}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> yv(out_t);
    ValuesAs<T> gv(grad_t);
    Tensor x_grad = NewOutput(out_t.shape(), DTypeOf<T>::value);
    const T* y = yv.data();
    const T* g = gv.data();
    T* o = x_grad.data<T>();
    if constexpr (std::is_same_v<T, float>) {
      if (v.inner == 1) {
        simd::SoftmaxGradRows(y, g, o, v.outer, v.len);
        return TensorList(std::move(x_grad));
      }
    }
    if (v.inner == 1) {
      // The last axis (attention's scores): one dot product per row, summed in 8
      // independent lanes so that the loop vectorises, then the row in one pass.
      for (int64_t r = 0; r < v.outer; ++r) {
        const T* yr = y + r * v.len;
        const T* gr = g + r * v.len;
        T* orow = o + r * v.len;
        T lanes[8] = {};
        int64_t a = 0;
        for (; a + 8 <= v.len; a += 8) {
          for (int l = 0; l < 8; ++l) lanes[l] += gr[a + l] * yr[a + l];
        }
        T dot_row = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
                    ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
        for (; a < v.len; ++a) dot_row += gr[a] * yr[a];
        for (int64_t b = 0; b < v.len; ++b) orow[b] = yr[b] * (gr[b] - dot_row);
      }
      return TensorList(std::move(x_grad));
    }
    std::vector<T> dot(static_cast<size_t>(v.inner));
    for (int64_t r = 0; r < v.outer; ++r) {
      const int64_t base = r * v.len * v.inner;
      std::fill(dot.begin(), dot.end(), T(0));
      for (int64_t a = 0; a < v.len; ++a) {
        const T* yr = y + base + a * v.inner;
        const T* gr = g + base + a * v.inner;
        for (int64_t i = 0; i < v.inner; ++i) dot[i] += gr[i] * yr[i];
      }
      for (int64_t a = 0; a < v.len; ++a) {
        const int64_t at = base + a * v.inner;
        for (int64_t i = 0; i < v.inner; ++i) o[at + i] = y[at + i] * (g[at + i] - dot[i]);
      }
    }
    return TensorList(std::move(x_grad));
  });
}

}  // namespace spmd::kernels::cpu
