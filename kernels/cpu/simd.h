// The float32 hot loops of the elementwise, softmax and layer_norm kernels, vectorised with
// Highway (libhwy) and dispatched at run time: kernels/cpu/simd.cc is compiled once per x86
// target (SSE4, AVX2, AVX-512, ...) and the first call picks the best one the CPU has, so
// the binary runs on any x86-64 (the build passes no -march) and uses AVX2/AVX-512 where
// they are. The op kernels (elementwise.cc, norm.cc) keep their validation and plans and
// call these on contiguous float32 data; float64 keeps the scalar loops.
//
// Numerics (kernels/cpu/simd_test.cc holds each to a float64 reference, on every target
// the CPU supports, over lengths with tails, 0 and 1):
// - Add, Subtract, Multiply, Scale: the same roundings as the scalar loops (bit-equal).
// - Exp, Gelu, GeluGrad: kernels/cpu/vector_math.h's ExpF / ErfF formulas lane by lane;
//   fused multiply-adds where the target has them, so results may differ from the scalar
//   ones in the last bit or so (ExpF within 2 ulp, ErfF within 4e-7 absolute either way).
// - SoftmaxRows, SoftmaxGradRows, LayerNormRows, LayerNormGradRows: row sums in vector
//   lanes (another summation order than the scalar loops; float32 error of the same size,
//   inside the ops' tolerance classes of rules/model/tolerance.h).
#pragma once

#include <cstdint>

namespace spmd::kernels::cpu::simd {

// out[i] = x[i] op y[i], i < n. out may alias x or y.
void Add(const float* x, const float* y, float* out, int64_t n);
void Subtract(const float* x, const float* y, float* out, int64_t n);
void Multiply(const float* x, const float* y, float* out, int64_t n);
// out[i] = x[i] op b (a scalar right operand; broadcasting's inner rows).
void AddScalar(const float* x, float b, float* out, int64_t n);
void MultiplyScalar(const float* x, float b, float* out, int64_t n);
// out = after ? s x + b : s (x + b) (the op scale: two roundings, no fused multiply-add).
void Scale(const float* x, float s, float b, bool after, float* out, int64_t n);
// e^x (ExpF's formula).
void Exp(const float* x, float* out, int64_t n);
// gelu, erf form: 0.5 x (1 + erf(x / sqrt 2)).
void Gelu(const float* x, float* out, int64_t n);
// gelu_grad, erf form: (Phi(x) + x phi(x)) g.
void GeluGrad(const float* x, const float* g, float* out, int64_t n);
// softmax of each of `rows` contiguous rows of `len`.
void SoftmaxRows(const float* x, float* out, int64_t rows, int64_t len);
// softmax_grad of each row: y (g - sum(g y)).
void SoftmaxGradRows(const float* y, const float* g, float* out, int64_t rows, int64_t len);
// layer_norm of each of `rows` rows of n: out = (x - mean) / sqrt(var + eps) scale + bias,
// mean[r], var[r] the row's mean and (biased) variance (two passes).
void LayerNormRows(const float* x, const float* scale, const float* bias, float eps, int64_t rows,
                   int64_t n, float* out, float* mean, float* var);
// layer_norm_grad: x_grad row by row; scale_grad and bias_grad ([n], zeroed by the caller)
// accumulate g xhat and g over the rows.
void LayerNormGradRows(const float* x, const float* scale, const float* mean, const float* var,
                       const float* g, float eps, int64_t rows, int64_t n, float* x_grad,
                       float* scale_grad, float* bias_grad);

// The name of the target the dispatch picked ("AVX3", "AVX2", "SSE4", ...), for benchmarks
// and the docs' figures.
const char* TargetName();

}  // namespace spmd::kernels::cpu::simd
