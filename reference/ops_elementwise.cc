// Elementwise unary and binary ops, where, and gelu_grad (docs/OPS.md "Elementwise",
// "Backward ops").
//
// Note: inside namespace ops, exp/log/abs/sqrt/tanh/max/min are ops; math is always std::.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <string>

#include "reference/reference.h"
#include "reference/util.h"
#include "rules/ops/elementwise_plan.h"

namespace spmd::reference::ops {
namespace {

using internal::BroadcastOffset;
using internal::BroadcastShapes;
using internal::CheckArity;
using internal::Unravel;

// out[i] = f(x[i]), same shape, dtype `out_dtype`.
template <typename F>
Tensors Unary(const Tensors& inputs, F f, DType out_dtype = DType::kFloat64) {
  CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  Tensor out;
  out.shape = x.shape;
  out.dtype = out_dtype;
  out.data.reserve(x.data.size());
  for (double v : x.data) out.data.push_back(f(v));
  return {out};
}

// out = f(x, y) with numpy broadcasting.
template <typename F>
Tensors Binary(const Tensors& inputs, F f, DType out_dtype = DType::kFloat64) {
  CheckArity(inputs, 2);
  const Tensor& x = inputs[0];
  const Tensor& y = inputs[1];
  Shape shape = BroadcastShapes({x.shape, y.shape});
  Tensor out = internal::Zeros(shape, out_dtype);
  for (int64_t i = 0; i < NumElements(shape); ++i) {
    std::vector<int64_t> index = Unravel(i, shape);
    out.data[i] =
        f(x.data[BroadcastOffset(index, x.shape)], y.data[BroadcastOffset(index, y.shape)]);
  }
  return {out};
}

double Sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

}  // namespace

Tensors relu(const Tensors& inputs, const Attrs&) {
  return Unary(inputs, [](double v) { return v > 0.0 ? v : 0.0; });
}

Tensors gelu(const Tensors& inputs, const Attrs& attrs) {
  bool approximate = attrs.GetBool("approximate");
  if (approximate) {
    return Unary(inputs, [](double v) {
      double c = std::sqrt(2.0 / std::numbers::pi);
      return 0.5 * v * (1.0 + std::tanh(c * (v + 0.044715 * v * v * v)));
    });
  }
  return Unary(inputs,
               [](double v) { return 0.5 * v * (1.0 + std::erf(v / std::numbers::sqrt2)); });
}

// d gelu / dx times out_grad. Exact: Phi(x) + x phi(x), Phi written with erfc (the kernel
// uses erf); tanh form: 0.5 (1 + t) + 0.5 x sech^2(u) u', u = c (x + 0.044715 x^3).
Tensors gelu_grad(const Tensors& inputs, const Attrs& attrs) {
  const bool approximate = plan::PlanGeluGrad(plan::ShapesOf(inputs), attrs);
  const Tensor& x = inputs[0];
  const Tensor& out_grad = inputs[1];
  Tensor x_grad = internal::Zeros(x.shape);
  for (size_t i = 0; i < x.data.size(); ++i) {
    double v = x.data[i];
    double slope;
    if (approximate) {
      double c = std::sqrt(2.0 / std::numbers::pi);
      double u = c * (v + 0.044715 * v * v * v);
      double sech = 1.0 / std::cosh(u);
      slope = 0.5 * (1.0 + std::tanh(u)) + 0.5 * v * sech * sech * c * (1.0 + 3 * 0.044715 * v * v);
    } else {
      double cdf = 0.5 * std::erfc(-v / std::numbers::sqrt2);
      double pdf = std::exp(-0.5 * v * v) / std::sqrt(2.0 * std::numbers::pi);
      slope = cdf + v * pdf;
    }
    x_grad.data[i] = slope * out_grad.data[i];
  }
  return {x_grad};
}

Tensors silu(const Tensors& inputs, const Attrs&) {
  return Unary(inputs, [](double v) { return v * Sigmoid(v); });
}

Tensors exp(const Tensors& inputs, const Attrs&) {
  return Unary(inputs, [](double v) { return std::exp(v); });
}

Tensors log(const Tensors& inputs, const Attrs&) {
  return Unary(inputs, [](double v) { return std::log(v); });
}

Tensors tanh(const Tensors& inputs, const Attrs&) {
  return Unary(inputs, [](double v) { return std::tanh(v); });
}

Tensors sigmoid(const Tensors& inputs, const Attrs&) { return Unary(inputs, Sigmoid); }

Tensors sqrt(const Tensors& inputs, const Attrs&) {
  return Unary(inputs, [](double v) { return std::sqrt(v); });
}

// pow: std::pow of the float64 values (NaN for a negative x and a fractional y, as C).
Tensors pow(const Tensors& inputs, const Attrs& attrs) {
  const double y = attrs.GetFloat("y");
  return Unary(inputs, [y](double v) { return std::pow(v, y); });
}

// rsqrt as a power (the kernel divides 1 by sqrt).
Tensors rsqrt(const Tensors& inputs, const Attrs&) {
  return Unary(inputs, [](double v) { return std::pow(v, -0.5); });
}

// add_n: the inputs summed element by element, in input order; one shape for all.
Tensors add_n(const Tensors& inputs, const Attrs&) {
  plan::PlanAddN(plan::ShapesOf(inputs));
  Tensor out = internal::Zeros(inputs[0].shape, DType::kFloat64);
  for (size_t i = 0; i < inputs.size(); ++i) {
    for (size_t k = 0; k < out.data.size(); ++k) out.data[k] += inputs[i].data[k];
  }
  return {out};
}

Tensors abs(const Tensors& inputs, const Attrs&) {
  return Unary(inputs, [](double v) { return std::fabs(v); });
}

Tensors scale(const Tensors& inputs, const Attrs& attrs) {
  double s = attrs.GetFloat("scale");
  double bias = attrs.GetFloat("bias");
  bool after = attrs.GetBool("bias_after_scale");
  if (after) return Unary(inputs, [=](double v) { return s * v + bias; });
  return Unary(inputs, [=](double v) { return s * (v + bias); });
}

Tensors clip(const Tensors& inputs, const Attrs& attrs) {
  const plan::ClipPlan clip = plan::PlanClip(attrs);
  const double lo = clip.lo;
  const double hi = clip.hi;
  return Unary(inputs, [=](double v) {
    double r = v < lo ? lo : v;
    return r > hi ? hi : r;
  });
}

// `v` rounded to nearest (ties to even) in a binary format of `precision` significant bits,
// smallest normal exponent `emin` and largest finite value `max_finite`: the quantum of
// v's binade (fixed below 2^emin: subnormals), a division by it (exact: a power of two),
// nearbyint, and infinity past the largest finite value. Written from the format's
// parameters, not from the kernels' bit conversions (rules/model/half.h) that it checks.
namespace {
double RoundToFormat(double v, int precision, int emin, double max_finite) {
  if (!std::isfinite(v) || v == 0) return v;
  int e = 0;
  std::frexp(v, &e);  // |v| in [2^(e-1), 2^e)
  const double quantum = std::ldexp(1.0, std::max(e - 1, emin) - (precision - 1));
  const double r = std::nearbyint(v / quantum) * quantum;
  if (std::fabs(r) > max_finite) return std::copysign(std::numeric_limits<double>::infinity(), v);
  return r;
}
}  // namespace

Tensors cast(const Tensors& inputs, const Attrs& attrs) {
  const DType dtype = plan::PlanCastDType(attrs);
  switch (dtype) {
    case DType::kFloat64:
      return Unary(
          inputs, [](double v) { return v; }, dtype);
    case DType::kFloat32:
      return Unary(
          inputs, [](double v) { return static_cast<double>(static_cast<float>(v)); }, dtype);
    case DType::kInt64:
      return Unary(
          inputs, [](double v) { return std::trunc(v); }, dtype);
    case DType::kBool:
      return Unary(
          inputs, [](double v) { return v != 0.0 ? 1.0 : 0.0; }, dtype);
    case DType::kBFloat16:  // 8 significant bits, float32's exponent range
      return Unary(
          inputs, [](double v) { return RoundToFormat(v, 8, -126, 0x1.fep127); }, dtype);
    case DType::kFloat16:  // IEEE binary16: 11 significant bits, normals from 2^-14
      return Unary(
          inputs, [](double v) { return RoundToFormat(v, 11, -14, 65504.0); }, dtype);
  }
  ThrowInvalid("attrs.dtype", "unknown dtype " + std::string(ToString(dtype)));
}

Tensors add(const Tensors& inputs, const Attrs&) {
  return Binary(inputs, [](double a, double b) { return a + b; });
}

Tensors subtract(const Tensors& inputs, const Attrs&) {
  return Binary(inputs, [](double a, double b) { return a - b; });
}

Tensors multiply(const Tensors& inputs, const Attrs&) {
  return Binary(inputs, [](double a, double b) { return a * b; });
}

Tensors divide(const Tensors& inputs, const Attrs&) {
  return Binary(inputs, [](double a, double b) { return a / b; });
}

Tensors maximum(const Tensors& inputs, const Attrs&) {
  return Binary(inputs, [](double a, double b) { return a >= b ? a : b; });
}

Tensors minimum(const Tensors& inputs, const Attrs&) {
  return Binary(inputs, [](double a, double b) { return a <= b ? a : b; });
}

Tensors greater_than(const Tensors& inputs, const Attrs&) {
  return Binary(
      inputs, [](double a, double b) { return a > b ? 1.0 : 0.0; }, DType::kBool);
}

Tensors less_than(const Tensors& inputs, const Attrs&) {
  return Binary(
      inputs, [](double a, double b) { return a < b ? 1.0 : 0.0; }, DType::kBool);
}

Tensors where(const Tensors& inputs, const Attrs&) {
  CheckArity(inputs, 3);
  const Tensor& cond = inputs[0];
  const Tensor& x = inputs[1];
  const Tensor& y = inputs[2];
  Shape shape = BroadcastShapes({cond.shape, x.shape, y.shape});
  Tensor out = internal::Zeros(shape);
  for (int64_t i = 0; i < NumElements(shape); ++i) {
    std::vector<int64_t> index = Unravel(i, shape);
    bool c = cond.data[BroadcastOffset(index, cond.shape)] != 0.0;
    out.data[i] =
        c ? x.data[BroadcastOffset(index, x.shape)] : y.data[BroadcastOffset(index, y.shape)];
  }
  return {out};
}

}  // namespace spmd::reference::ops
