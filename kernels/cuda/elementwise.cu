// CUDA kernels of the elementwise family (the ops of kernels/cpu/elementwise.cc): relu,
// gelu, silu, exp, log, tanh, sigmoid, sqrt, abs, scale, clip, cast, add, subtract,
// multiply, divide, maximum, minimum, greater_than, less_than, where, gelu_grad, pow,
// rsqrt, add_n.
//
// Same checks, in the same order, naming the same fields as the CPU kernels (their helpers
// in kernels/cpu/internal.h do the checking), the same compute and output dtypes, and the
// same formulas, so results agree to the last bit for the arithmetic ops and within the
// math library's ulps for the transcendental ones. This file is compiled with --fmad=false
// (CMakeLists.txt): a * b + c stays two roundings, as on the CPU.
//
// Every op takes bfloat16 / float16 natively (HalfInputs::kNative): 2-byte storage
// read into float32, each element computed in float32 and rounded once to the output's
// 2-byte dtype: the CPU's widen / compute / round, without the two extra passes.
//
// One map engine serves them all (kernels/cuda/elementwise_map.cuh, shared with the binary
// math family of kernels/cuda/binary_math.cu): out[i] = f(inputs at i) in the compute type C (float
// for the 2-byte floats), each input read as C (ValueAs: int64 and bool inputs converted
// where they are read; kernels/cuda/convert.h). Inputs of the output's shape take the
// contiguous path, 16-byte vector loads and stores where every pointer is aligned for them;
// broadcast inputs take a strided path over the CPU's collapsed broadcast plan
// (internal::PlanBroadcast), the output one more operand of the indexer.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cpu/internal.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/elementwise_map.cuh"
#include "kernels/cuda/registry.h"
#include "kernels/cuda/strided.h"
#include "rules/ops/elementwise_plan.h"

namespace spmd::kernels::cuda {
namespace {

namespace internal = ::spmd::kernels::cpu::internal;
using internal::CheckArity;
using internal::ComputeDType;
using elementwise_map::AsOperand;
using elementwise_map::BinaryOp;
using elementwise_map::Map;
using elementwise_map::NewOut;
using elementwise_map::Operand;
using elementwise_map::WithOperand;

// ---- device math: the float / double overloads the CPU's std:: calls pick --------------

__device__ __forceinline__ float Exp(float v) { return expf(v); }
__device__ __forceinline__ double Exp(double v) { return exp(v); }
__device__ __forceinline__ float Log(float v) { return logf(v); }
__device__ __forceinline__ double Log(double v) { return log(v); }
__device__ __forceinline__ float Tanh(float v) { return tanhf(v); }
__device__ __forceinline__ double Tanh(double v) { return tanh(v); }
__device__ __forceinline__ float Erf(float v) { return erff(v); }
__device__ __forceinline__ double Erf(double v) { return erf(v); }
__device__ __forceinline__ float Sqrt(float v) { return sqrtf(v); }  // IEEE (-prec-sqrt=true)
__device__ __forceinline__ double Sqrt(double v) { return sqrt(v); }
__device__ __forceinline__ float Fabs(float v) { return fabsf(v); }
__device__ __forceinline__ double Fabs(double v) { return fabs(v); }

// A double as C, as the CPU's Saturate<T> (float: no out-of-range conversion).
template <class C>
__host__ __device__ __forceinline__ C Saturate(double v) {
  if constexpr (std::is_same_v<C, double>) {
    return v;
  } else {
    return SaturateToFloat(v);
  }
}

// ---- op families ------------------------------------------------------------------------

// out = f(x) in the compute dtype of x; make(C{}) gives the functor.
template <class Make>
Tensors UnaryOp(const TensorArgs& inputs, Make make) {
  CheckArity(inputs, 1);
  const DType dtype = ComputeDType(inputs, {0});
  Tensor out = NewOut(inputs[0], inputs[0].shape(), dtype);
  DispatchFloating(dtype, "inputs[0].dtype", true, [&](auto tag) {
    using T = decltype(tag);
    using C = Compute<T>;
    const Operand x = AsOperand<T>(inputs[0], inputs[0]);
    const auto f = make(C{});
    WithOperand<T>(x, [&](auto* xp) { Map<C, T>(out, f, {inputs[0].shape()}, xp); });
  });
  return TensorList(std::move(out));
}

// ---- functors (C: float or double) ------------------------------------------------------

template <class C>
struct ReluF {
  __device__ C operator()(C v) const { return v > C(0) ? v : C(0); }
};
template <class C>
struct GeluErfF {
  C sqrt2;  // the CPU divides by sqrt(2) rounded to C
  __device__ C operator()(C v) const { return C(0.5) * v * (C(1) + Erf(v / sqrt2)); }
};
template <class C>
struct GeluTanhF {
  C c;
  __device__ C operator()(C v) const { return C(0.5) * v * (C(1) + Tanh(c * (v + C(0.044715) * v * v * v))); }
};
template <class C>
__device__ __forceinline__ C SigmoidOf(C v) {
  return C(1) / (C(1) + Exp(-v));
}
template <class C>
struct SiluF {
  __device__ C operator()(C v) const { return v * SigmoidOf(v); }
};
template <class C>
struct SigmoidF {
  __device__ C operator()(C v) const { return SigmoidOf(v); }
};
template <class C>
struct ExpF {
  __device__ C operator()(C v) const { return Exp(v); }
};
template <class C>
struct LogF {
  __device__ C operator()(C v) const { return Log(v); }
};
template <class C>
struct TanhF {
  __device__ C operator()(C v) const { return Tanh(v); }
};
template <class C>
struct SqrtF {
  __device__ C operator()(C v) const { return Sqrt(v); }
};
template <class C>
struct RsqrtF {
  __device__ C operator()(C v) const { return C(1) / Sqrt(v); }
};
template <class C>
struct AbsF {
  __device__ C operator()(C v) const { return Fabs(v); }
};
template <class C>
struct IdentityF {
  __device__ C operator()(C v) const { return v; }
};
template <class C>
struct PowF {
  double y;
  __device__ C operator()(C v) const {
    if (y == 1.0) return v;
    if (y == 2.0) return v * v;
    if (y == 0.5) return Sqrt(v);
    return Saturate<C>(pow(static_cast<double>(v), y));  // in double, rounded once
  }
};
template <class C>
struct ScaleF {
  C s, b;
  bool after;
  __device__ C operator()(C v) const { return after ? s * v + b : s * (v + b); }
};
template <class C>
struct ClipF {
  C lo, hi;
  __device__ C operator()(C v) const {
    const C r = v < lo ? lo : v;
    return r > hi ? hi : r;
  }
};
template <class C>
struct AddF {
  __device__ C operator()(C a, C b) const { return a + b; }
};
template <class C>
struct SubF {
  __device__ C operator()(C a, C b) const { return a - b; }
};
template <class C>
struct MulF {
  __device__ C operator()(C a, C b) const { return a * b; }
};
template <class C>
struct DivF {
  __device__ C operator()(C a, C b) const { return a / b; }
};
template <class C>
struct MaxF {
  __device__ C operator()(C a, C b) const { return a >= b ? a : b; }
};
template <class C>
struct MinF {
  __device__ C operator()(C a, C b) const { return a <= b ? a : b; }
};
template <class C>
struct GreaterF {
  __device__ bool operator()(C a, C b) const { return a > b; }
};
template <class C>
struct LessF {
  __device__ bool operator()(C a, C b) const { return a < b; }
};
// where: the condition arrives as C 0 / 1 (a bool read as C).
template <class C>
struct WhereF {
  __device__ C operator()(C c, C x, C y) const { return c != C(0) ? x : y; }
};
template <class C>
struct GeluGradErfF {
  C inv_sqrt2, inv_sqrt_2pi;
  __device__ C operator()(C v, C g) const {
    const C slope = C(0.5) * (C(1) + Erf(v * inv_sqrt2)) + v * inv_sqrt_2pi * Exp(C(-0.5) * v * v);
    return slope * g;
  }
};
template <class C>
struct GeluGradTanhF {
  C c, k;
  __device__ C operator()(C v, C g) const {
    const C t = Tanh(c * (v + k * v * v * v));
    const C slope = C(0.5) * (C(1) + t) + C(0.5) * v * (C(1) - t * t) * c * (C(1) + C(3) * k * v * v);
    return slope * g;
  }
};

template <template <class> class F>
auto Plain() {
  return [](auto c) { return F<decltype(c)>{}; };
}

// where's condition as bool (v != 0, NaN true), on t's device and stream.
template <typename S>
__global__ void ConditionKernel(const S* x, bool* y, int64_t n) {
  for (SPMD_GRID_STRIDE(i, n)) y[i] = ConditionOf(x[i]);
}

Tensor AsCondition(const Tensor& t) {
  if (t.dtype() == DType::kBool) return Tensor();  // unused: the caller reads t itself
  Tensor out = NewOutput(t, t.shape(), DType::kBool);  // t is inputs[0]
  const int64_t n = t.numel();
  DispatchAny(t.dtype(), "inputs[0].dtype", [&](auto s) {
    using S = decltype(s);
    LaunchGridStride(ConditionKernel<S>, n, ToCuda(t.stream()), reinterpret_cast<const S*>(t.bytes()),
                     reinterpret_cast<bool*>(out.bytes()), n);
  });
  return out;
}

// ---- the ops ------------------------------------------------------------------------------

Tensors Relu(const TensorArgs& inputs, const Attrs&) { return UnaryOp(inputs, Plain<ReluF>()); }

Tensors Gelu(const TensorArgs& inputs, const Attrs& attrs) {
  if (attrs.GetBool("approximate")) {
    return UnaryOp(inputs, [](auto c) {
      using C = decltype(c);
      return GeluTanhF<C>{static_cast<C>(std::sqrt(2.0 / std::numbers::pi))};
    });
  }
  return UnaryOp(inputs, [](auto c) {
    using C = decltype(c);
    return GeluErfF<C>{static_cast<C>(std::numbers::sqrt2)};
  });
}

Tensors Silu(const TensorArgs& inputs, const Attrs&) { return UnaryOp(inputs, Plain<SiluF>()); }
Tensors ExpOp(const TensorArgs& inputs, const Attrs&) { return UnaryOp(inputs, Plain<ExpF>()); }
Tensors LogOp(const TensorArgs& inputs, const Attrs&) { return UnaryOp(inputs, Plain<LogF>()); }
Tensors TanhOp(const TensorArgs& inputs, const Attrs&) { return UnaryOp(inputs, Plain<TanhF>()); }
Tensors Sigmoid(const TensorArgs& inputs, const Attrs&) { return UnaryOp(inputs, Plain<SigmoidF>()); }
Tensors SqrtOp(const TensorArgs& inputs, const Attrs&) { return UnaryOp(inputs, Plain<SqrtF>()); }
Tensors Rsqrt(const TensorArgs& inputs, const Attrs&) { return UnaryOp(inputs, Plain<RsqrtF>()); }
Tensors Abs(const TensorArgs& inputs, const Attrs&) { return UnaryOp(inputs, Plain<AbsF>()); }

Tensors Pow(const TensorArgs& inputs, const Attrs& attrs) {
  const double y = attrs.GetFloat("y");
  return UnaryOp(inputs, [y](auto c) { return PowF<decltype(c)>{y}; });
}

Tensors Scale(const TensorArgs& inputs, const Attrs& attrs) {
  const double s = attrs.GetFloat("scale");
  const double bias = attrs.GetFloat("bias");
  const bool after = attrs.GetBool("bias_after_scale");
  return UnaryOp(inputs, [&](auto c) {
    using C = decltype(c);
    return ScaleF<C>{Saturate<C>(s), Saturate<C>(bias), after};
  });
}

Tensors Clip(const TensorArgs& inputs, const Attrs& attrs) {
  const plan::ClipPlan clip = plan::PlanClip(attrs);
  const double lo = clip.lo;
  const double hi = clip.hi;
  return UnaryOp(inputs, [&](auto c) {
    using C = decltype(c);
    return ClipF<C>{Saturate<C>(lo), Saturate<C>(hi)};
  });
}

Tensors Cast(const TensorArgs& inputs, const Attrs& attrs) {
  const DType dtype = plan::PlanCastDType(attrs);
  CheckArity(inputs, 1);
  return TensorList(ConvertOnDevice(inputs[0], dtype));
}

Tensors Add(const TensorArgs& inputs, const Attrs&) { return BinaryOp<false>(inputs, Plain<AddF>()); }
Tensors Subtract(const TensorArgs& inputs, const Attrs&) { return BinaryOp<false>(inputs, Plain<SubF>()); }
Tensors Multiply(const TensorArgs& inputs, const Attrs&) { return BinaryOp<false>(inputs, Plain<MulF>()); }
Tensors Divide(const TensorArgs& inputs, const Attrs&) { return BinaryOp<false>(inputs, Plain<DivF>()); }
Tensors Maximum(const TensorArgs& inputs, const Attrs&) { return BinaryOp<false>(inputs, Plain<MaxF>()); }
Tensors Minimum(const TensorArgs& inputs, const Attrs&) { return BinaryOp<false>(inputs, Plain<MinF>()); }
Tensors GreaterThan(const TensorArgs& inputs, const Attrs&) { return BinaryOp<true>(inputs, Plain<GreaterF>()); }
Tensors LessThan(const TensorArgs& inputs, const Attrs&) { return BinaryOp<true>(inputs, Plain<LessF>()); }

Tensors Where(const TensorArgs& inputs, const Attrs&) {
  CheckArity(inputs, 3);
  const Shape shape = internal::BroadcastShapes({inputs[0].shape(), inputs[1].shape(), inputs[2].shape()});
  const DType dtype = ComputeDType(inputs, {1, 2});
  Tensor out = NewOut(inputs[0], shape, dtype);
  const Tensor converted = AsCondition(inputs[0]);
  const bool* cond = reinterpret_cast<const bool*>(inputs[0].dtype() == DType::kBool ? inputs[0].bytes()
                                                                                     : converted.bytes());
  DispatchFloating(dtype, "inputs[1].dtype", true, [&](auto tag) {
    using T = decltype(tag);
    using C = Compute<T>;
    const Operand x = AsOperand<T>(inputs[1], inputs[0]);
    const Operand y = AsOperand<T>(inputs[2], inputs[0]);
    const std::vector<Shape> shapes = {inputs[0].shape(), inputs[1].shape(), inputs[2].shape()};
    WithOperand<T>(x, [&](auto* xp) {
      WithOperand<T>(y, [&](auto* yp) { Map<C, T>(out, WhereF<C>{}, shapes, cond, xp, yp); });
    });
  });
  return TensorList(std::move(out));
}

Tensors GeluGrad(const TensorArgs& inputs, const Attrs& attrs) {
  const bool approximate = plan::PlanGeluGrad(plan::ShapesOf(inputs), attrs);
  const DType dtype = ComputeDType(inputs, {0, 1});
  Tensor out = NewOut(inputs[0], inputs[0].shape(), dtype);
  DispatchFloating(dtype, "inputs[0].dtype", true, [&](auto tag) {
    using T = decltype(tag);
    using C = Compute<T>;
    const Operand x = AsOperand<T>(inputs[0], inputs[0]);
    const Operand g = AsOperand<T>(inputs[1], inputs[0]);
    const std::vector<Shape> shapes = {inputs[0].shape(), inputs[1].shape()};
    WithOperand<T>(x, [&](auto* xp) {
      WithOperand<T>(g, [&](auto* gp) {
        if (approximate) {
          const GeluGradTanhF<C> f{static_cast<C>(std::sqrt(2.0 / std::numbers::pi)), C(0.044715)};
          Map<C, T>(out, f, shapes, xp, gp);
        } else {
          const GeluGradErfF<C> f{static_cast<C>(1.0 / std::numbers::sqrt2),
                                  static_cast<C>(1.0 / std::sqrt(2.0 * std::numbers::pi))};
          Map<C, T>(out, f, shapes, xp, gp);
        }
      });
    });
  });
  return TensorList(std::move(out));
}

// add_n: inputs[0] + inputs[1] + ... in input order, accumulated in C (float32 for a
// 2-byte output, rounded once at the end).
Tensors AddN(const TensorArgs& inputs, const Attrs&) {
  plan::PlanAddN(plan::ShapesOf(inputs));
  const DType dtype = internal::ComputeDTypeAll(inputs);
  const Shape& shape = inputs[0].shape();
  Tensor out = NewOut(inputs[0], shape, dtype);
  DispatchFloating(dtype, "inputs[0].dtype", true, [&](auto tag) {
    using T = decltype(tag);
    using C = Compute<T>;
    Tensor acc_storage;
    Tensor* acc = &out;
    if constexpr (!std::is_same_v<T, C>) {
      acc_storage = NewOutput(inputs[0], shape, DTypeOf<C>::value);
      acc = &acc_storage;
    }
    {
      const Operand first = AsOperand<T>(inputs[0], inputs[0]);
      WithOperand<T>(first, [&](auto* p) { Map<C, C>(*acc, IdentityF<C>{}, {shape}, p); });
    }
    for (size_t i = 1; i < inputs.size(); ++i) {
      const Operand next = AsOperand<T>(inputs[i], inputs[0]);
      const C* a = reinterpret_cast<const C*>(acc->bytes());
      WithOperand<T>(next, [&](auto* p) { Map<C, C>(*acc, AddF<C>{}, {shape, shape}, a, p); });
    }
    if constexpr (!std::is_same_v<T, C>) {
      Map<C, T>(out, IdentityF<C>{}, {shape}, reinterpret_cast<const C*>(acc->bytes()));
    }
  });
  return TensorList(std::move(out));
}

}  // namespace

// The elementwise ops' CUDA kernels, by op name (kernels/cuda/registry.h); every one takes
// bfloat16 / float16 natively.
const CudaKernel ops::relu{&Relu, HalfInputs::kNative};
const CudaKernel ops::gelu{&Gelu, HalfInputs::kNative};
const CudaKernel ops::silu{&Silu, HalfInputs::kNative};
const CudaKernel ops::exp{&ExpOp, HalfInputs::kNative};
const CudaKernel ops::log{&LogOp, HalfInputs::kNative};
const CudaKernel ops::tanh{&TanhOp, HalfInputs::kNative};
const CudaKernel ops::sigmoid{&Sigmoid, HalfInputs::kNative};
const CudaKernel ops::sqrt{&SqrtOp, HalfInputs::kNative};
const CudaKernel ops::abs{&Abs, HalfInputs::kNative};
const CudaKernel ops::scale{&Scale, HalfInputs::kNative};
const CudaKernel ops::clip{&Clip, HalfInputs::kNative};
const CudaKernel ops::cast{&Cast, HalfInputs::kNative};
const CudaKernel ops::add{&Add, HalfInputs::kNative};
const CudaKernel ops::subtract{&Subtract, HalfInputs::kNative};
const CudaKernel ops::multiply{&Multiply, HalfInputs::kNative};
const CudaKernel ops::divide{&Divide, HalfInputs::kNative};
const CudaKernel ops::maximum{&Maximum, HalfInputs::kNative};
const CudaKernel ops::minimum{&Minimum, HalfInputs::kNative};
const CudaKernel ops::greater_than{&GreaterThan, HalfInputs::kNative};
const CudaKernel ops::less_than{&LessThan, HalfInputs::kNative};
const CudaKernel ops::where{&Where, HalfInputs::kNative};
const CudaKernel ops::gelu_grad{&GeluGrad, HalfInputs::kNative};
const CudaKernel ops::pow{&Pow, HalfInputs::kNative};
const CudaKernel ops::rsqrt{&Rsqrt, HalfInputs::kNative};
const CudaKernel ops::add_n{&AddN, HalfInputs::kNative};

}  // namespace spmd::kernels::cuda
