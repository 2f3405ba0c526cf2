// float32 tolerances: how far a float32 run of an op may be from the float64 reference,
// per op class (u = 2^-24, K = terms reduced per output element, M = max(1, max |input|)).
// Shared by kernel_properties_test and runtime_properties_test.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "reference/reference.h"
#include "rules/attrs.h"

namespace spmd::prop {

inline constexpr double kFloat32Roundoff = 0x1p-24;

enum class F32Rule {
  kExact,          // moves or compares values: kernel == float(reference)
  kPointwise,      // 1e-5 |ref| + 1e-6
  kSumOfProducts,  // 2 (K + 2) u A, A = the reference on |inputs|
  kRelative,       // softmax, p_norm
  kLogDomain,      // logsumexp, log_softmax
  kCrossEntropy,
  kLayerNorm,
  kRmsNorm,
  kSoftmaxGrad,
};

F32Rule RuleOf(const std::string& op);
int64_t Numel(const reference::Shape& s);
double MaxAbs(const std::vector<double>& v);
// The length of the axis attr's dim of x (1 for a 0-d x).
int64_t AxisLength(const reference::Shape& x, const Attrs& attrs);

// What a float32 bound needs, computed once per case.
struct F32Bounds {
  F32Rule rule = F32Rule::kExact;
  double k = 1;                                 // terms per output element
  double m = 1;                                 // max(1, max |float input|)
  std::optional<reference::Tensors> abs_run;    // reference on |inputs| (sum of products)
  std::vector<double> inv;                      // layer_norm: 1/sqrt(var + eps) per row
  int64_t row = 1;
  double scale_max = 0, bias_max = 0;
  double log_max = 0;                           // cross entropy: max |log softmax_out|
  double p_factor = 1;
};

F32Bounds MakeBounds(const std::string& op, const reference::Tensors& inputs, const Attrs& attrs,
                     const reference::Tensors& expected);
// True when x and y are both NaN or the same infinity; false when either is finite.
bool SameSpecial(double x, double y);

// The allowed |float32 run - reference| of element i of output `out` (kExact: 0).
double F32Tolerance(const F32Bounds& b, size_t out, size_t i, double r);

// Compares the values of output `out` of `op`, computed in `dtype`, with the reference's
// `want`: integer and bool outputs exactly, NaN / infinities by kind, float64 within
// f64_rel * max(1, |reference|),
// float32 by the op's F32Rule (bounds from make_bounds, called at most once, on the first
// element that needs them, and kept in `bounds`). Returns "" or "<where> element i: got k,
// reference r (|diff| d, tolerance t)" for the first element that differs.
std::string CompareValues(const std::string& op, size_t out, const std::string& where,
                          DType dtype, const std::vector<double>& got,
                          const std::vector<double>& want, double f64_rel,
                          std::optional<F32Bounds>& bounds,
                          const std::function<F32Bounds()>& make_bounds);

}  // namespace spmd::prop
