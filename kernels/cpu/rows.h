// Helpers of the CPU kernels shared by the softmax family (kernels/cpu/softmax.cc), the
// embeddings (embedding.cc) and the softmax cross entropies (loss.cc): softmax along one
// axis, the axis of attrs.axis, and ids / labels read as int64.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/internal.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/vector_math.h"
#include "rules/engine/op_plan.h"

namespace spmd::kernels::cpu::rows {

using internal::AxisView;

// softmax of x along `view` into out (same layout).
template <typename T>
void SoftmaxAlong(const T* x, const AxisView& v, T* out) {
  if constexpr (std::is_same_v<T, float>) {
    if (v.inner == 1) {
      simd::SoftmaxRows(x, out, v.outer, v.len);
      return;
    }
  }
  if (v.inner == 1) {
    for (int64_t o = 0; o < v.outer; ++o) {
      const T* row = x + o * v.len;
      T* dst = out + o * v.len;
      T m = -std::numeric_limits<T>::infinity();
      for (int64_t a = 0; a < v.len; ++a) m = row[a] > m ? row[a] : m;
      for (int64_t a = 0; a < v.len; ++a) dst[a] = Exp(row[a] - m);  // vectorises
      T s = T(0);
      for (int64_t a = 0; a < v.len; ++a) s += dst[a];
      for (int64_t a = 0; a < v.len; ++a) dst[a] /= s;
    }
    return;
  }
  std::vector<T> m(static_cast<size_t>(v.inner)), s(static_cast<size_t>(v.inner));
  for (int64_t o = 0; o < v.outer; ++o) {
    const T* block = x + o * v.len * v.inner;
    T* dst = out + o * v.len * v.inner;
    std::fill(m.begin(), m.end(), -std::numeric_limits<T>::infinity());
    std::fill(s.begin(), s.end(), T(0));
    for (int64_t a = 0; a < v.len; ++a) {
      const T* row = block + a * v.inner;
      for (int64_t i = 0; i < v.inner; ++i) m[i] = row[i] > m[i] ? row[i] : m[i];
    }
    for (int64_t a = 0; a < v.len; ++a) {
      const T* row = block + a * v.inner;
      T* d = dst + a * v.inner;
      for (int64_t i = 0; i < v.inner; ++i) {
        d[i] = Exp(row[i] - m[i]);
        s[i] += d[i];
      }
    }
    for (int64_t a = 0; a < v.len; ++a) {
      T* d = dst + a * v.inner;
      for (int64_t i = 0; i < v.inner; ++i) d[i] /= s[i];
    }
  }
}

inline AxisView ViewFromAxisAttr(const Tensor& x, const Attrs& attrs) {
  const int64_t axis =
      internal::NormalizeAxisOrScalar(attrs.GetInt("axis"), x.rank(), "attrs.axis");
  return internal::ViewAlong(x.shape(), axis);
}

// Reads ids / labels of any dtype as int64: int64 and bool as they are; floats must be
// whole numbers of at most 9e15 in magnitude (as the references require). Errors name
// `field`.
class Ids {
 public:
  Ids(const Tensor& t, const std::string& field) {
    if (t.dtype() == DType::kInt64) {
      ptr_ = t.data<int64_t>();
      return;
    }
    const int64_t n = t.numel();
    storage_.resize(static_cast<size_t>(n));
    internal::VisitData(t, [&](const auto* src) {
      using V = std::remove_cv_t<std::remove_pointer_t<decltype(src)>>;
      for (int64_t i = 0; i < n; ++i) {
        if constexpr (std::is_floating_point_v<V>) {
          storage_[i] = plan::FloatId(static_cast<double>(src[i]), field);
        } else {
          storage_[i] = static_cast<int64_t>(src[i]);
        }
      }
    });
    ptr_ = storage_.data();
  }
  int64_t operator[](int64_t i) const { return ptr_[i]; }

 private:
  std::vector<int64_t> storage_;
  const int64_t* ptr_ = nullptr;
};

}  // namespace spmd::kernels::cpu::rows
