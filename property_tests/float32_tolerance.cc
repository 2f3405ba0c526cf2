// float32 tolerances for comparing a float32 run with the float64 reference, shared by
// the kernel properties and the runtime properties (the derivation is in the header of
// property_tests/kernel_properties_test.cc).
#include "property_tests/float32_tolerance.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

namespace spmd::prop {
namespace {

namespace ref = reference;
using Shape = reference::Shape;
constexpr double kU = kFloat32Roundoff;

}  // namespace

F32Rule RuleOf(const std::string& op) {
  static const std::set<std::string> pointwise = {
      "gelu", "silu", "exp", "log", "tanh", "sigmoid", "sqrt", "scale",
      "add", "subtract", "multiply", "divide"};
  static const std::set<std::string> sums = {"matmul", "bmm", "einsum", "matmul_grad", "sum",
                                             "cumsum", "squared_l2_norm", "mean", "mean_all",
                                             "prod"};
  if (pointwise.count(op)) return F32Rule::kPointwise;
  if (sums.count(op)) return F32Rule::kSumOfProducts;
  if (op == "softmax" || op == "p_norm") return F32Rule::kRelative;
  if (op == "logsumexp" || op == "log_softmax") return F32Rule::kLogDomain;
  if (op == "cross_entropy_with_softmax") return F32Rule::kCrossEntropy;
  if (op == "layer_norm") return F32Rule::kLayerNorm;
  if (op == "rms_norm") return F32Rule::kRmsNorm;
  if (op == "softmax_grad") return F32Rule::kSoftmaxGrad;
  return F32Rule::kExact;
}

int64_t Numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

double MaxAbs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// The length of the axis attr's dim of x (1 for a 0-d x).
int64_t AxisLength(const Shape& x, const Attrs& attrs) {
  if (x.empty()) return 1;
  int64_t a = attrs.GetInt("axis");
  if (a < 0) a += static_cast<int64_t>(x.size());
  return x[static_cast<size_t>(a)];
}

F32Bounds MakeBounds(const std::string& op, const ref::Tensors& inputs, const Attrs& attrs,
                     const ref::Tensors& expected) {
  F32Bounds b;
  b.rule = RuleOf(op);
  for (const ref::Tensor& t : inputs) {
    if (IsFloating(t.dtype)) b.m = std::max(b.m, MaxAbs(t.data));
  }
  const ref::ReferenceFn fn = ref::FindReference(op);
  auto ratio = [&](const Shape& x, const Shape& out) {
    return static_cast<double>(std::max<int64_t>(1, Numel(x) / std::max<int64_t>(1, Numel(out))));
  };
  switch (b.rule) {
    case F32Rule::kSumOfProducts: {
      ref::Tensors abs_inputs = inputs, ones = inputs;
      for (ref::Tensor& t : abs_inputs) {
        for (double& v : t.data) v = std::fabs(v);
      }
      b.abs_run = fn(abs_inputs, attrs);
      if (op == "mean" || op == "mean_all" || op == "prod") {
        b.k = ratio(inputs[0].shape, expected[0].shape);
      } else {
        for (ref::Tensor& t : ones) std::fill(t.data.begin(), t.data.end(), 1.0);
        const ref::Tensors counted = fn(ones, attrs);
        for (const ref::Tensor& t : counted) b.k = std::max(b.k, MaxAbs(t.data));
      }
      break;
    }
    case F32Rule::kRelative:
      if (op == "softmax") {
        b.k = static_cast<double>(AxisLength(inputs[0].shape, attrs));
      } else {
        b.k = ratio(inputs[0].shape, expected[0].shape);
        b.p_factor = std::max(1.0, 1.0 / std::fabs(attrs.GetFloat("porder")));
      }
      break;
    case F32Rule::kLogDomain:
      b.k = op == "log_softmax" ? static_cast<double>(AxisLength(inputs[0].shape, attrs))
                                : ratio(inputs[0].shape, expected[0].shape);
      break;
    case F32Rule::kCrossEntropy:
      b.k = static_cast<double>(AxisLength(inputs[0].shape, attrs));
      for (double p : expected[0].data) {
        if (p > 0) b.log_max = std::max(b.log_max, std::fabs(std::log(p)));
      }
      break;
    case F32Rule::kLayerNorm: {
      b.k = ratio(inputs[0].shape, expected[1].shape);
      b.row = static_cast<int64_t>(b.k);
      const double eps = attrs.GetFloat("epsilon");
      for (double var : expected[2].data) b.inv.push_back(1.0 / std::sqrt(var + eps));
      b.scale_max = MaxAbs(inputs[1].data);
      b.bias_max = MaxAbs(inputs[2].data);
      break;
    }
    case F32Rule::kRmsNorm:
      b.k = ratio(inputs[0].shape, expected[1].shape);
      break;
    case F32Rule::kSoftmaxGrad:
      b.k = static_cast<double>(AxisLength(inputs[0].shape, attrs));
      break;
    default:
      break;
  }
  b.k = std::max(b.k, 1.0);
  return b;
}

// The allowed |kernel - ref| of element i of output `out` in a float32 run (the exact rule
// is handled by the caller).
double F32Tolerance(const F32Bounds& b, size_t out, size_t i, double r) {
  constexpr double kFloor = 1e-30;
  const double a = std::fabs(r);
  const double k = b.k, m = b.m;
  switch (b.rule) {
    case F32Rule::kExact: return 0;
    case F32Rule::kPointwise: return 1e-5 * a + 1e-6;
    case F32Rule::kSumOfProducts:
      return 2 * (k + 2) * kU * std::fabs((*b.abs_run)[out].data[i]) + kFloor;
    case F32Rule::kRelative: return 2 * (k + 8 + 2 * m) * kU * a * b.p_factor + kFloor;
    case F32Rule::kLogDomain: return 2 * (k + 8 + 2 * m) * kU * (a + m + 1) + kFloor;
    case F32Rule::kCrossEntropy:
      if (out == 0) return 2 * (k + 8 + 2 * m) * kU * a + kFloor;
      return 2 * (k + 8 + 2 * m) * kU * (a + 1 + k * m * b.log_max) + kFloor;
    case F32Rule::kLayerNorm:
      if (out == 1) return 2 * (k + 8) * kU * (a + m) + kFloor;
      if (out == 2) return 2 * (k + 8) * kU * a + 4 * (k * m * kU) * (k * m * kU) + kFloor;
      return 2 * (k + 8 + 2 * m) * kU *
                 (a + b.bias_max + b.inv[i / static_cast<size_t>(b.row)] * b.scale_max * 3 * m) +
             kFloor;
    case F32Rule::kRmsNorm: return 2 * (k + 8 + 2 * m) * kU * a + kFloor;
    case F32Rule::kSoftmaxGrad: return 2 * (k + 8) * kU * (a + m * (m + k * m * m)) + kFloor;
  }
  return 0;
}

bool SameSpecial(double x, double y) {
  if (std::isnan(x) || std::isnan(y)) return std::isnan(x) && std::isnan(y);
  if (std::isinf(x) || std::isinf(y)) return x == y;
  return false;
}

std::string CompareValues(const std::string& op, size_t out, const std::string& where,
                          DType dtype, const std::vector<double>& got,
                          const std::vector<double>& want, double f64_rel,
                          std::optional<F32Bounds>& bounds,
                          const std::function<F32Bounds()>& make_bounds) {
  for (size_t i = 0; i < got.size(); ++i) {
    const double r = want[i], k = got[i];
    double tolerance = 0;
    bool ok;
    if (!IsFloating(dtype)) {
      ok = k == r;
    } else if (SameSpecial(k, r)) {
      ok = true;
    } else if (dtype == DType::kFloat64) {
      tolerance = f64_rel * std::max(1.0, std::fabs(r));
      ok = std::fabs(k - r) <= tolerance;
    } else if (RuleOf(op) == F32Rule::kExact) {
      ok = k == static_cast<double>(static_cast<float>(r));
    } else {
      if (!bounds) bounds = make_bounds();
      tolerance = F32Tolerance(*bounds, out, i, r);
      ok = std::fabs(k - r) <= tolerance ||
           (std::isinf(static_cast<float>(r)) && k == static_cast<double>(static_cast<float>(r)));
    }
    if (!ok) {
      std::ostringstream os;
      os.precision(17);
      os << where << " element " << i << ": got " << k << ", reference " << r << " (|diff| "
         << std::fabs(k - r) << ", tolerance " << tolerance << ")";
      return os.str();
    }
  }
  return "";
}

}  // namespace spmd::prop
