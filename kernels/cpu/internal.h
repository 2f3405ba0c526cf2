// Helpers shared by the CPU kernels: arity and axis checks (the same fields and order as
// the references), the compute dtype and typed dispatch, the (outer, axis, inner) view,
// and a broadcasting row loop. Internal to kernels/cpu.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "kernels/tensor.h"
#include "rules/model/error.h"
#include "rules/model/attrs.h"
#include "rules/model/is_nan.h"
#include "rules/engine/shape_util.h"

namespace spmd::kernels::cpu::internal {

// "inputs[i]" or "inputs[i].what".
inline std::string InputField(size_t i, const std::string& what = "") {
  std::string field = "inputs[" + std::to_string(i) + "]";
  return what.empty() ? field : field + "." + what;
}

inline void CheckArity(const TensorArgs& inputs, size_t n) {
  if (inputs.size() != n) {
    ThrowInvalid("inputs",
                 "expected " + std::to_string(n) + " inputs, got " + std::to_string(inputs.size()));
  }
}

inline void CheckArityAtLeast(const TensorArgs& inputs, size_t n) {
  if (inputs.size() < n) {
    ThrowInvalid("inputs", "expected at least " + std::to_string(n) + " inputs, got " +
                               std::to_string(inputs.size()));
  }
}

// Returns `axis` in [0, rank); negative counts from the end. Throws naming `field`.
// (The shared validation of rules/engine/shape_util.h.)
inline int64_t NormalizeAxis(int64_t axis, int64_t rank, const std::string& field) {
  return shape::NormalizeAxis(axis, rank, field);
}

// As NormalizeAxis; a 0-d tensor accepts 0 and -1 (viewed as [1]) and gives 0.
inline int64_t NormalizeAxisOrScalar(int64_t axis, int64_t rank, const std::string& field) {
  if (rank == 0) {
    if (axis != 0 && axis != -1) {
      ThrowInvalid(field, "axis " + std::to_string(axis) + " out of range for a 0-d tensor");
    }
    return 0;
  }
  return NormalizeAxis(axis, rank, field);
}

// A tensor seen as [outer, len, inner] around one dim (a 0-d tensor is [1, 1, 1]).
struct AxisView {
  int64_t outer = 1;
  int64_t len = 1;
  int64_t inner = 1;
};

inline AxisView ViewAlong(const Shape& shape, int64_t axis) {
  AxisView v;
  if (shape.empty()) return v;
  v.outer = NumElements(Shape(shape.begin(), shape.begin() + axis));
  v.len = shape[axis];
  v.inner = NumElements(Shape(shape.begin() + axis + 1, shape.end()));
  return v;
}

// The most elements one kernel output may have; beyond it Unsupported ("outputs") rather
// than an allocation the machine cannot hold.
inline constexpr int64_t kMaxOutputElements = int64_t{1} << 34;
// The most output tensors one call may return (split_with_num, unbind), as the references.
inline constexpr int64_t kMaxOutputs = int64_t{1} << 16;

// Throws Unsupported ("outputs") when a (non-negative) output shape has more than
// kMaxOutputElements elements; the count saturates, so huge dims cannot overflow.
inline void CheckOutputShape(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) ThrowInvalid("outputs", "negative dim in " + ShapeToString(shape));
  }
  for (int64_t d : shape) {
    if (d == 0) return;
  }
  for (int64_t d : shape) {
    n = (n > kMaxOutputElements / d) ? kMaxOutputElements + 1 : n * d;
  }
  if (n > kMaxOutputElements) {
    ThrowUnsupported("outputs", "an output of shape " + ShapeToString(shape) +
                                    " exceeds the kernels' limit of 2^34 elements");
  }
}

// A new output tensor (uninitialised unless `zero`); Unsupported ("outputs") beyond
// kMaxOutputElements.
inline Tensor NewOutput(const Shape& shape, DType dtype, bool zero = false) {
  CheckOutputShape(shape);
  return zero ? Tensor(shape, dtype) : Tensor::Uninitialized(shape, dtype);
}

inline void CheckOutputCount(int64_t n) {
  if (n > kMaxOutputs) {
    ThrowUnsupported("outputs",
                     std::to_string(n) + " outputs exceed the kernels' limit of 2^16");
  }
}

// The compute dtype: the dtype of the floating inputs among `which` (float32 or float64;
// InvalidArgument "inputs[i].dtype" when they mix), float64 when none is floating.
template <typename Indices>
inline DType ComputeDTypeOver(const TensorArgs& inputs, const Indices& which) {
  bool found = false;
  DType dtype = DType::kFloat64;
  size_t first = 0;
  for (size_t i : which) {
    if (i >= inputs.size() || !IsFloating(inputs[i].dtype())) continue;
    if (!found) {
      found = true;
      dtype = inputs[i].dtype();
      first = i;
    } else if (inputs[i].dtype() != dtype) {
      ThrowInvalid(InputField(i, "dtype"),
                   std::string(ToString(inputs[i].dtype())) + " mixed with " +
                       std::string(ToString(dtype)) + " of " + InputField(first));
    }
  }
  return dtype;
}

inline DType ComputeDType(const TensorArgs& inputs, std::initializer_list<size_t> which) {
  return ComputeDTypeOver(inputs, which);
}

// As above over every input.
inline DType ComputeDTypeAll(const TensorArgs& inputs) {
  std::vector<size_t> all(inputs.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  return ComputeDTypeOver(inputs, all);
}

template <typename T>
struct Tag {
  using type = T;
};

// Calls fn(Tag<float>) or fn(Tag<double>) for a float compute dtype.
template <typename F>
decltype(auto) DispatchFloat(DType dtype, F&& fn) {
  if (dtype == DType::kFloat32) return fn(Tag<float>{});
  return fn(Tag<double>{});
}

// The sorting ops' total order (argsort, topk, unique): whether value a (at position ia)
// comes before value b (at ib), ascending (descending: reversed) with NaN above every
// number, then by position.
template <typename T>
bool SortsBefore(T a, int64_t ia, T b, int64_t ib, bool descending) {
  const bool a_nan = IsNan(a), b_nan = IsNan(b);
  if (a_nan != b_nan) return descending ? a_nan : b_nan;
  if (!a_nan && a != b) return descending ? b < a : a < b;
  return ia < ib;
}

// Calls fn(const T* data) with the tensor's own element type.
template <typename F>
decltype(auto) VisitData(const Tensor& t, F&& fn) {
  switch (t.dtype()) {
    case DType::kFloat32: return fn(t.data<float>());
    case DType::kInt64: return fn(t.data<int64_t>());
    case DType::kBool: return fn(t.data<bool>());
    case DType::kFloat64:
    case DType::kBFloat16:  // never here: RunCpuKernel hands the kernels float32 instead
    case DType::kFloat16: break;
  }
  return fn(t.data<double>());
}

// A tensor's values as T: borrowed when it already holds T, converted otherwise (bool
// from a number is v != 0).
template <typename T>
class ValuesAs {
 public:
  explicit ValuesAs(const Tensor& t) {
    if (t.dtype() == DTypeOf<T>::value) {
      ptr_ = t.data<T>();
      return;
    }
    const int64_t n = t.numel();
    storage_.reset(new T[static_cast<size_t>(n > 0 ? n : 1)]);
    T* dst = storage_.get();
    VisitData(t, [&](const auto* src) {
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<T>(src[i]);
    });
    ptr_ = dst;
  }
  const T* data() const { return ptr_; }
  const T& operator[](int64_t i) const { return ptr_[i]; }

 private:
  std::unique_ptr<T[]> storage_;
  const T* ptr_ = nullptr;
};

// Ids of any dtype as int64: int64 and bool as they are; floats must be whole numbers of
// at most 9e15 in magnitude (as the references require). Errors name `field`.
inline std::vector<int64_t> ReadIds(const Tensor& t, const std::string& field) {
  const int64_t n = t.numel();
  std::vector<int64_t> ids(static_cast<size_t>(n));
  internal::VisitData(t, [&](const auto* src) {
    using V = std::remove_cv_t<std::remove_pointer_t<decltype(src)>>;
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (std::is_floating_point_v<V>) {
        const double v = static_cast<double>(src[i]);
        if (!std::isfinite(v) || v != std::trunc(v)) {
          ThrowInvalid(field, "id " + std::to_string(v) + " is not an integer");
        }
        if (std::fabs(v) > 9.0e15) ThrowInvalid(field, "id " + std::to_string(v) + " is out of range");
        ids[i] = static_cast<int64_t>(v);
      } else {
        ids[i] = static_cast<int64_t>(src[i]);
      }
    }
  });
  return ids;
}

// ---- Broadcasting --------------------------------------------------------------------------

// numpy broadcasting of several shapes; throws naming inputs[i].shape of the first input
// that does not fit the ones before it (as the references do).
inline Shape BroadcastShapes(const std::vector<Shape>& shapes) {
  return shape::BroadcastShapes(shapes);  // the shared validation of rules/engine/shape_util.h
}

// Inputs broadcast to an output, with the dims collapsed: size-1 output dims dropped and
// neighbours merged where every input walks them contiguously. Each input's stride per
// collapsed dim is 0 where it is broadcast. The last collapsed dim is the inner loop.
struct BroadcastLoop {
  Shape dims;                                // collapsed output dims, at least one
  std::vector<std::vector<int64_t>> strides;  // per input, per collapsed dim
  int64_t numel = 0;

  int64_t inner() const { return dims.back(); }
  int64_t inner_stride(size_t input) const { return strides[input].back(); }
};

inline BroadcastLoop PlanBroadcast(const Shape& out_shape, const std::vector<Shape>& in_shapes) {
  const size_t rank = out_shape.size();
  const size_t n = in_shapes.size();
  BroadcastLoop plan;
  plan.numel = NumElements(out_shape);
  plan.strides.assign(n, {});
  // Per input: strides of each output dim (right-aligned; 0 where broadcast).
  std::vector<std::vector<int64_t>> full(n, std::vector<int64_t>(rank, 0));
  for (size_t k = 0; k < n; ++k) {
    const Shape& s = in_shapes[k];
    const size_t shift = rank - s.size();
    int64_t stride = 1;
    for (size_t d = s.size(); d-- > 0;) {
      full[k][d + shift] = s[d] == 1 ? 0 : stride;
      stride *= s[d];
    }
  }
  for (size_t d = 0; d < rank; ++d) {
    if (out_shape[d] == 1) continue;
    bool merge = !plan.dims.empty();
    for (size_t k = 0; k < n && merge; ++k) {
      merge = plan.strides[k].back() == full[k][d] * out_shape[d];
    }
    if (merge) {
      plan.dims.back() *= out_shape[d];
      for (size_t k = 0; k < n; ++k) plan.strides[k].back() = full[k][d];
    } else {
      plan.dims.push_back(out_shape[d]);
      for (size_t k = 0; k < n; ++k) plan.strides[k].push_back(full[k][d]);
    }
  }
  if (plan.dims.empty()) {
    plan.dims.push_back(1);
    for (size_t k = 0; k < n; ++k) plan.strides[k].push_back(0);
  }
  return plan;
}

// Calls fn(out_offset, in_offsets, len) for every row of the inner collapsed dim, in
// output order. in_offsets has one entry per input.
template <typename F>
void ForEachRow(const BroadcastLoop& plan, F&& fn) {
  if (plan.numel == 0) return;
  const size_t r = plan.dims.size();
  const size_t n = plan.strides.size();
  const int64_t len = plan.dims[r - 1];
  int64_t rows = plan.numel / len;
  std::vector<int64_t> index(r, 0);
  std::vector<int64_t> offsets(n, 0);
  int64_t out = 0;
  for (int64_t row = 0; row < rows; ++row) {
    fn(out, offsets.data(), len);
    out += len;
    for (size_t d = r - 1; d-- > 0;) {
      ++index[d];
      for (size_t k = 0; k < n; ++k) offsets[k] += plan.strides[k][d];
      if (index[d] < plan.dims[d]) break;
      for (size_t k = 0; k < n; ++k) offsets[k] -= plan.strides[k][d] * plan.dims[d];
      index[d] = 0;
    }
  }
}

// Copies `count` elements of `size` bytes from `src` (stride `src_stride` elements; 0
// repeats one element) to contiguous `dst`.
inline void CopyStrided(std::byte* dst, const std::byte* src, int64_t count, int64_t src_stride,
                        size_t size) {
  if (count <= 0) return;
  if (src_stride == 1) {
    std::memcpy(dst, src, static_cast<size_t>(count) * size);
    return;
  }
  auto typed = [&](auto zero) {
    using U = decltype(zero);
    U* d = reinterpret_cast<U*>(dst);
    const U* s = reinterpret_cast<const U*>(src);
    if (src_stride == 0) {
      const U v = s[0];
      for (int64_t j = 0; j < count; ++j) d[j] = v;
    } else {
      for (int64_t j = 0; j < count; ++j) d[j] = s[j * src_stride];
    }
  };
  switch (size) {
    case 1: typed(uint8_t{}); return;
    case 2: typed(uint16_t{}); return;
    case 4: typed(uint32_t{}); return;
    case 8: typed(uint64_t{}); return;
    default:
      for (int64_t j = 0; j < count; ++j) {
        std::memcpy(dst + j * size, src + j * src_stride * static_cast<int64_t>(size), size);
      }
  }
}

}  // namespace spmd::kernels::cpu::internal
