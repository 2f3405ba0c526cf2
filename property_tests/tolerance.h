// Tolerances for comparing a run of an op with its float64 reference, shared by the
// kernel properties and the runtime properties. The op's declaration gives its tolerance
// class (rules/model/tolerance.h); this file holds each class's bound, in units of the unit
// roundoff u of the precision the kernel computes in (the derivation is in the header of
// property_tests/kernel_properties_test.cc).
//
// Per dtype:
// - float32: the class bound with u = 2^-24 (kExact: the kernel equals (float) ref).
// - bfloat16, float16 (stored narrow, computed in float32 as the CPU kernels do): the
//   float32 class bound plus one rounding of the result to the dtype, u_d (|ref| + bound)
//   with u_d = 2^-8 / 2^-11, plus half the smallest subnormal (2^-134 / 2^-25) for a
//   result that underflows (kExact: the kernel equals ref rounded to the dtype). A kernel
//   that computes in the narrow dtype itself passes compute_u = u_d: the same class bound
//   with 2^-8 / 2^-11 in place of 2^-24.
// - float64: f64_rel max(1, |ref|), whatever the class: the reference rounds at the same
//   precision as the kernel, so a class bound would have to count both; the callers use
//   1e-12 (one kernel) and 1e-9 (Dispatch, partial sums across ranks).
// - int64, bool: equal.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "reference/reference.h"
#include "rules/model/attrs.h"
#include "rules/engine/op_decl.h"
#include "rules/model/tolerance.h"

namespace spmd::prop {

int64_t Numel(const reference::Shape& s);
double MaxAbs(const std::vector<double>& v);

// The unit roundoffs a run in `dtype` is held to: compute_u, of the precision its
// kernel computes in (float32 for anything narrower), and storage_u, of one final
// rounding to `dtype` when that is narrower than the compute precision (else 0).
struct Precision {
  double compute_u = 0;
  double storage_u = 0;
  // Half the dtype's smallest subnormal where storage_u applies: the final rounding's
  // absolute error below the normal range (2^-25 float16, 2^-134 bfloat16).
  double storage_abs = 0;
};
Precision PrecisionOf(DType dtype);

// Returns `v` rounded to nearest-even in `dtype` (float64: v; float32: (float) v; float16
// and bfloat16 by their significand bits, subnormals and overflow included; int64 and
// bool: v).
double RoundToDType(double v, DType dtype);

// What a class bound needs, computed once per case from the op's inputs and reference
// outputs (nothing per op name: K and the rest come from shapes and declared attrs).
struct Bounds {
  ToleranceClass tolerance = ToleranceClass::kExact;
  double k = 1;                                 // terms per output element
  double m = 1;                                 // max(1, max |float input|)
  std::optional<reference::Tensors> abs_run;    // reference on |inputs| (sum of products)
  std::vector<double> inv;                      // layer_norm: 1/sqrt(var + eps) per row
  int64_t row = 1;
  double scale_max = 0, bias_max = 0;
  double log_max = 0;                           // cross entropy: max |log softmax_out|
  double p_factor = 1;                          // a root of order p: max(1, 1/|p|)
  double head_dim = 1;                          // attention: the dot products' length
  size_t lse_output = 2;                        // attention: the log-sum-exp's output (the last)
  double v_dim = 0;                             // attention_grad: v's head dim
  // layer_norm_grad, rms_norm_grad, attention_grad: per output, the terms each element
  // sums (K of that output) and per element the size of the values its rounding errors
  // scale with.
  std::vector<double> terms;
  std::vector<std::vector<double>> magnitude;
};

// Throws std::logic_error when `op` declares no tolerance class.
Bounds MakeBounds(const OpDecl& op, const reference::Tensors& inputs, const Attrs& attrs,
                  const reference::Tensors& expected);
// True when x and y are both NaN or the same infinity; false when either is finite.
bool SameSpecial(double x, double y);

// The allowed |run - reference| of element i of output `out` by the class bound, for a
// kernel computing with unit roundoff `u` (kExact: 0).
double ClassTolerance(const Bounds& b, size_t out, size_t i, double r, double u);

// Compares the values of output `out` of `op`, computed in `dtype`, with the reference's
// `want`: integer and bool outputs exactly, NaN / infinities by kind, float64 within
// f64_rel * max(1, |reference|), narrower floats by the op's tolerance class (bounds from
// make_bounds, called at most once, on the first element that needs them, and kept in
// `bounds`). Returns "" or "<where> element i: got k, reference r (|diff| d, tolerance t
// [, class c])" for the first element that differs.
std::string CompareValues(const OpDecl& op, size_t out, const std::string& where, DType dtype,
                          const std::vector<double>& got, const std::vector<double>& want,
                          double f64_rel, std::optional<Bounds>& bounds,
                          const std::function<Bounds()>& make_bounds);

}  // namespace spmd::prop
