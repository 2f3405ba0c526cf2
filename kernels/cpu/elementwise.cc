// Elementwise unary and binary ops, where, and gelu_grad (docs/OPS.md "Elementwise",
// "Backward ops").
//
// Flat loops over contiguous data; broadcasting goes through a collapsed row loop
// (internal::PlanBroadcast) whose inner rows have input strides 0 or 1. The formulas are
// written as the references write them, so float64 results agree to the last bit or so.
// Inside namespace cpu, exp/log/... are ops: math is always std::.
#include <cmath>
#include <cstddef>
#include <limits>
#include <numbers>
#include <optional>
#include <string>
#include <type_traits>

#include "kernels/cpu/elementwise_map.h"
#include "kernels/cpu/internal.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/vector_math.h"
#include "rules/ops/elementwise_plan.h"

namespace spmd::kernels::cpu {
namespace {

using internal::BinaryMap;
using internal::BroadcastShapes;
using internal::CheckArity;
using internal::ComputeDType;
using internal::DispatchFloat;
using internal::ForEachRow;
using internal::NewOutput;
using internal::NoVec;
using internal::PlanBroadcast;
using internal::ValuesAs;

// A double as T, rounded as a conversion rounds, but without an out-of-range conversion:
// beyond float's range the result is +-FLT_MAX or +-inf as round-to-nearest gives.
template <typename T>
T Saturate(double v) {
  if constexpr (std::is_same_v<T, double>) {
    return v;
  } else {
    constexpr double kMax = static_cast<double>(std::numeric_limits<float>::max());
    constexpr double kHalfway = kMax + 0x1p103;  // FLT_MAX + half an ulp
    const double a = std::fabs(v);
    if (!(a > kMax)) return static_cast<float>(v);  // NaN included
    const float r = a < kHalfway ? std::numeric_limits<float>::max()
                                 : std::numeric_limits<float>::infinity();
    return v < 0 ? -r : r;
  }
}

// out[i] = f(x[i]) in the compute dtype of x. `make` gives the functor for a Tag<T>;
// `vec`, when given, is the float32 loop (kernels/cpu/simd.h) that computes the same.
template <typename Make, typename Vec = std::nullptr_t>
Tensors Unary(const TensorArgs& inputs, Make make, Vec vec = nullptr) {
  CheckArity(inputs, 1);
  return DispatchFloat(ComputeDType(inputs, {0}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto f = make(tag);
    ValuesAs<T> x(inputs[0]);
    Tensor out = NewOutput(inputs[0].shape(), DTypeOf<T>::value);
    T* o = out.data<T>();
    const T* p = x.data();
    const int64_t n = out.numel();
    if constexpr (std::is_same_v<T, float> && !std::is_same_v<Vec, std::nullptr_t>) {
      vec(p, o, n);
    } else {
      for (int64_t i = 0; i < n; ++i) o[i] = f(p[i]);
    }
    return TensorList(std::move(out));
  });
}

// The float32 loops of a binary op (kernels/cpu/simd.h) for BinaryMap
// (kernels/cpu/elementwise_map.h): both operands rows, and (where the op allows it
// exactly) a scalar right or left operand.
struct AddVec {
  static void Rows(const float* x, const float* y, float* o, int64_t n) { simd::Add(x, y, o, n); }
  static void RightScalar(const float* x, float b, float* o, int64_t n) { simd::AddScalar(x, b, o, n); }
  static void LeftScalar(float a, const float* y, float* o, int64_t n) { simd::AddScalar(y, a, o, n); }
};
struct SubtractVec {
  static void Rows(const float* x, const float* y, float* o, int64_t n) { simd::Subtract(x, y, o, n); }
  // x - b is x + (-b) exactly.
  static void RightScalar(const float* x, float b, float* o, int64_t n) { simd::AddScalar(x, -b, o, n); }
};
struct MultiplyVec {
  static void Rows(const float* x, const float* y, float* o, int64_t n) { simd::Multiply(x, y, o, n); }
  static void RightScalar(const float* x, float b, float* o, int64_t n) { simd::MultiplyScalar(x, b, o, n); }
  static void LeftScalar(float a, const float* y, float* o, int64_t n) { simd::MultiplyScalar(y, a, o, n); }
};

// A binary op whose output is in the compute dtype.
template <typename F, typename Vec = NoVec>
Tensors Arithmetic(const TensorArgs& inputs, F f, Vec vec = {}) {
  CheckArity(inputs, 2);
  return DispatchFloat(ComputeDType(inputs, {0, 1}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return TensorList(BinaryMap<T, T>(inputs[0], inputs[1], f, vec));
  });
}

// A comparison: bool output.
template <typename F>
Tensors Comparison(const TensorArgs& inputs, F f) {
  CheckArity(inputs, 2);
  return DispatchFloat(ComputeDType(inputs, {0, 1}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return TensorList(BinaryMap<T, bool>(inputs[0], inputs[1], f));
  });
}

template <typename T>
T Sigmoid(T v) {
  return T(1) / (T(1) + Exp(-v));
}

}  // namespace

Tensors relu(const TensorArgs& inputs, const Attrs&) {
  return Unary(inputs, [](auto tag) {
    using T = typename decltype(tag)::type;
    return [](T v) { return v > T(0) ? v : T(0); };
  });
}

Tensors gelu(const TensorArgs& inputs, const Attrs& attrs) {
  const bool approximate = attrs.GetBool("approximate");
  if (approximate) {
    return Unary(inputs, [](auto tag) {
      using T = typename decltype(tag)::type;
      const T c = static_cast<T>(std::sqrt(2.0 / std::numbers::pi));
      return [c](T v) {
        return T(0.5) * v * (T(1) + std::tanh(c * (v + T(0.044715) * v * v * v)));
      };
    });
  }
  return Unary(
      inputs,
      [](auto tag) {
        using T = typename decltype(tag)::type;
        return [](T v) {
          return T(0.5) * v * (T(1) + Erf(v / static_cast<T>(std::numbers::sqrt2)));
        };
      },
      simd::Gelu);
}

// gelu's slope times out_grad: Phi(x) + x phi(x), or the tanh form's derivative.
Tensors gelu_grad(const TensorArgs& inputs, const Attrs& attrs) {
  const bool approximate = plan::PlanGeluGrad(plan::ShapesOf(inputs), attrs);
  return DispatchFloat(ComputeDType(inputs, {0, 1}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> xv(inputs[0]);
    ValuesAs<T> gv(inputs[1]);
    Tensor out = NewOutput(inputs[0].shape(), DTypeOf<T>::value);
    T* o = out.data<T>();
    const T* x = xv.data();
    const T* g = gv.data();
    const int64_t n = out.numel();
    if (approximate) {
      const T c = static_cast<T>(std::sqrt(2.0 / std::numbers::pi));
      const T k = T(0.044715);
      for (int64_t i = 0; i < n; ++i) {
        const T v = x[i];
        const T t = std::tanh(c * (v + k * v * v * v));
        const T slope = T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * c * (T(1) + T(3) * k * v * v);
        o[i] = slope * g[i];
      }
    } else if constexpr (std::is_same_v<T, float>) {
      simd::GeluGrad(x, g, o, n);
    } else {
      const T inv_sqrt2 = static_cast<T>(1.0 / std::numbers::sqrt2);
      const T inv_sqrt_2pi = static_cast<T>(1.0 / std::sqrt(2.0 * std::numbers::pi));
      for (int64_t i = 0; i < n; ++i) {
        const T v = x[i];
        const T slope = T(0.5) * (T(1) + Erf(v * inv_sqrt2)) + v * inv_sqrt_2pi * Exp(T(-0.5) * v * v);
        o[i] = slope * g[i];
      }
    }
    return TensorList(std::move(out));
  });
}

Tensors silu(const TensorArgs& inputs, const Attrs&) {
  return Unary(inputs, [](auto tag) {
    using T = typename decltype(tag)::type;
    return [](T v) { return v * Sigmoid(v); };
  });
}

Tensors exp(const TensorArgs& inputs, const Attrs&) {
  return Unary(
      inputs,
      [](auto tag) {
        using T = typename decltype(tag)::type;
        return [](T v) { return Exp(v); };
      },
      simd::Exp);
}

Tensors log(const TensorArgs& inputs, const Attrs&) {
  return Unary(inputs, [](auto tag) {
    using T = typename decltype(tag)::type;
    return [](T v) { return std::log(v); };
  });
}

Tensors tanh(const TensorArgs& inputs, const Attrs&) {
  return Unary(inputs, [](auto tag) {
    using T = typename decltype(tag)::type;
    return [](T v) { return std::tanh(v); };
  });
}

Tensors sigmoid(const TensorArgs& inputs, const Attrs&) {
  return Unary(inputs, [](auto tag) {
    using T = typename decltype(tag)::type;
    return [](T v) { return Sigmoid(v); };
  });
}

Tensors sqrt(const TensorArgs& inputs, const Attrs&) {
  return Unary(inputs, [](auto tag) {
    using T = typename decltype(tag)::type;
    return [](T v) { return std::sqrt(v); };
  });
}

// pow: the common exponents without std::pow (x * x, sqrt), std::pow otherwise.
Tensors pow(const TensorArgs& inputs, const Attrs& attrs) {
  const double y = attrs.GetFloat("y");
  return Unary(inputs, [y](auto tag) {
    using T = typename decltype(tag)::type;
    return [y](T v) -> T {
      if (y == 1.0) return v;
      if (y == 2.0) return v * v;
      if (y == 0.5) return std::sqrt(v);
      // In double, then rounded once: y need not be representable in T.
      return Saturate<T>(std::pow(static_cast<double>(v), y));
    };
  });
}

Tensors rsqrt(const TensorArgs& inputs, const Attrs&) {
  return Unary(inputs, [](auto tag) {
    using T = typename decltype(tag)::type;
    return [](T v) { return T(1) / std::sqrt(v); };
  });
}

// add_n: out = inputs[0] + inputs[1] + ..., accumulated in the compute dtype in input
// order; every input has inputs[0]'s shape.
Tensors add_n(const TensorArgs& inputs, const Attrs&) {
  plan::PlanAddN(plan::ShapesOf(inputs));
  return DispatchFloat(internal::ComputeDTypeAll(inputs), [&](auto tag) {
    using T = typename decltype(tag)::type;
    Tensor out = NewOutput(inputs[0].shape(), DTypeOf<T>::value);
    T* o = out.data<T>();
    const int64_t n = out.numel();
    {
      ValuesAs<T> first(inputs[0]);
      for (int64_t k = 0; k < n; ++k) o[k] = first[k];
    }
    for (size_t i = 1; i < inputs.size(); ++i) {
      ValuesAs<T> v(inputs[i]);
      const T* p = v.data();
      if constexpr (std::is_same_v<T, float>) {
        simd::Add(o, p, o, n);
      } else {
        for (int64_t k = 0; k < n; ++k) o[k] += p[k];
      }
    }
    return Tensors{std::move(out)};
  });
}

Tensors abs(const TensorArgs& inputs, const Attrs&) {
  return Unary(inputs, [](auto tag) {
    using T = typename decltype(tag)::type;
    return [](T v) { return std::fabs(v); };
  });
}

Tensors scale(const TensorArgs& inputs, const Attrs& attrs) {
  const double s = attrs.GetFloat("scale");
  const double bias = attrs.GetFloat("bias");
  const bool after = attrs.GetBool("bias_after_scale");
  return Unary(
      inputs,
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T ts = Saturate<T>(s);
        const T tb = Saturate<T>(bias);
        return [ts, tb, after](T v) { return after ? ts * v + tb : ts * (v + tb); };
      },
      [&](const float* x, float* o, int64_t n) {
        simd::Scale(x, Saturate<float>(s), Saturate<float>(bias), after, o, n);
      });
}

Tensors clip(const TensorArgs& inputs, const Attrs& attrs) {
  const plan::ClipPlan clip = plan::PlanClip(attrs);
  const double lo = clip.lo;
  const double hi = clip.hi;
  return Unary(inputs, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T tlo = Saturate<T>(lo);
    const T thi = Saturate<T>(hi);
    return [tlo, thi](T v) {
      const T r = v < tlo ? tlo : v;
      return r > thi ? thi : r;
    };
  });
}

// cast: from any dtype to attrs.dtype, element by element. float32 is produced as the
// reference does (through double, then rounded); int64 truncates toward zero and refuses
// values int64 cannot hold (NaN, +-inf, |v| >= 2^63: InvalidArgument "inputs[0].data",
// where the float64 reference would keep them); bool is v != 0; bfloat16 and float16 are
// rounded once from the double value (rules/model/half.h). A 2-byte float x reaches this kernel
// as float32 (RunCpuKernel converts it, exactly).
Tensors cast(const TensorArgs& inputs, const Attrs& attrs) {
  const std::optional<DType> dtype = plan::PlanCastDType(attrs);
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  Tensor out = NewOutput(x.shape(), *dtype);
  const int64_t n = x.numel();
  internal::VisitData(x, [&](const auto* src) {
    using S = std::remove_cv_t<std::remove_pointer_t<decltype(src)>>;
    switch (*dtype) {
      case DType::kFloat64: {
        double* o = out.data<double>();
        for (int64_t i = 0; i < n; ++i) o[i] = static_cast<double>(src[i]);
        return;
      }
      case DType::kFloat32: {
        float* o = out.data<float>();
        for (int64_t i = 0; i < n; ++i) o[i] = Saturate<float>(static_cast<double>(src[i]));
        return;
      }
      case DType::kInt64: {
        int64_t* o = out.data<int64_t>();
        if constexpr (std::is_floating_point_v<S>) {
          for (int64_t i = 0; i < n; ++i) {
            const double t = std::trunc(static_cast<double>(src[i]));
            if (!(t >= -9223372036854775808.0 && t < 9223372036854775808.0)) {
              plan::ThrowCastOutsideInt64(t, i);
            }
            o[i] = static_cast<int64_t>(t);
          }
        } else {
          for (int64_t i = 0; i < n; ++i) o[i] = static_cast<int64_t>(src[i]);
        }
        return;
      }
      case DType::kBool: {
        bool* o = out.data<bool>();
        for (int64_t i = 0; i < n; ++i) o[i] = src[i] != S(0);
        return;
      }
      case DType::kBFloat16: {  // rounded once from the double value
        BFloat16* o = out.data<BFloat16>();
        for (int64_t i = 0; i < n; ++i) {
          o[i] = BFloat16::FromBits(DoubleToBFloat16Bits(static_cast<double>(src[i])));
        }
        return;
      }
      case DType::kFloat16: {
        Float16* o = out.data<Float16>();
        for (int64_t i = 0; i < n; ++i) {
          o[i] = Float16::FromBits(DoubleToFloat16Bits(static_cast<double>(src[i])));
        }
        return;
      }
    }
  });
  return TensorList(std::move(out));
}

Tensors add(const TensorArgs& inputs, const Attrs&) {
  return Arithmetic(inputs, [](auto a, auto b) { return a + b; }, AddVec{});
}

Tensors subtract(const TensorArgs& inputs, const Attrs&) {
  return Arithmetic(inputs, [](auto a, auto b) { return a - b; }, SubtractVec{});
}

Tensors multiply(const TensorArgs& inputs, const Attrs&) {
  return Arithmetic(inputs, [](auto a, auto b) { return a * b; }, MultiplyVec{});
}

Tensors divide(const TensorArgs& inputs, const Attrs&) {
  return Arithmetic(inputs, [](auto a, auto b) { return a / b; });
}

Tensors maximum(const TensorArgs& inputs, const Attrs&) {
  return Arithmetic(inputs, [](auto a, auto b) { return a >= b ? a : b; });
}

Tensors minimum(const TensorArgs& inputs, const Attrs&) {
  return Arithmetic(inputs, [](auto a, auto b) { return a <= b ? a : b; });
}

Tensors greater_than(const TensorArgs& inputs, const Attrs&) {
  return Comparison(inputs, [](auto a, auto b) { return a > b; });
}

Tensors less_than(const TensorArgs& inputs, const Attrs&) {
  return Comparison(inputs, [](auto a, auto b) { return a < b; });
}

// where(condition, x, y): condition != 0 (of any dtype) picks x. Output: the compute dtype
// of x and y.
Tensors where(const TensorArgs& inputs, const Attrs&) {
  CheckArity(inputs, 3);
  const Shape shape = BroadcastShapes({inputs[0].shape(), inputs[1].shape(), inputs[2].shape()});
  return DispatchFloat(ComputeDType(inputs, {1, 2}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<bool> cv(inputs[0]);
    ValuesAs<T> xv(inputs[1]);
    ValuesAs<T> yv(inputs[2]);
    Tensor out = NewOutput(shape, DTypeOf<T>::value);
    T* __restrict o = out.data<T>();
    const bool* c = cv.data();
    const T* x = xv.data();
    const T* y = yv.data();
    if (inputs[0].shape() == shape && inputs[1].shape() == shape && inputs[2].shape() == shape) {
      const int64_t n = out.numel();
      for (int64_t i = 0; i < n; ++i) o[i] = c[i] ? x[i] : y[i];
      return TensorList(std::move(out));
    }
    const internal::BroadcastLoop plan =
        PlanBroadcast(shape, {inputs[0].shape(), inputs[1].shape(), inputs[2].shape()});
    const int64_t sc = plan.inner_stride(0);
    const int64_t sx = plan.inner_stride(1);
    const int64_t sy = plan.inner_stride(2);
    ForEachRow(plan, [&](int64_t oo, const int64_t* off, int64_t len) {
      const bool* cp = c + off[0];
      const T* xp = x + off[1];
      const T* yp = y + off[2];
      T* op = o + oo;
      for (int64_t j = 0; j < len; ++j) op[j] = cp[j * sc] ? xp[j * sx] : yp[j * sy];
    });
    return TensorList(std::move(out));
  });
}

}  // namespace spmd::kernels::cpu
