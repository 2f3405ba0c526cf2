// Highway kernels of kernels/cpu/simd.h. This file is compiled once per target: Highway's
// foreach_target.h re-includes it with HWY_NAMESPACE set to N_SSE4, N_AVX2, N_AVX3, ...,
// and HWY_EXPORT / HWY_DYNAMIC_DISPATCH (the part under HWY_ONCE) pick one at run time.
//
// Every loop runs whole vectors, then the tail (n not a multiple of the lane count) one
// lane at a time with the same code on a one-lane tag, so a tail gets the same formula.
// Loads and stores are unaligned: rows start anywhere in a tensor.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/cpu/simd.h"

HWY_BEFORE_NAMESPACE();
namespace spmd::kernels::cpu::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// ExpF of kernels/cpu/vector_math.h, lane by lane (see there for the derivation).
template <class D>
HWY_INLINE hn::Vec<D> ExpV(D d, hn::Vec<D> x) {
  const hn::RebindToSigned<D> di;
  const auto round = hn::Set(d, 12582912.0f);  // 1.5 * 2^23
  // NaN compares false and is put back at the end; Min/Max may turn it into a bound.
  const auto xc = hn::Min(hn::Max(x, hn::Set(d, -104.0f)), hn::Set(d, 89.0f));
  const auto kf = hn::Sub(hn::MulAdd(xc, hn::Set(d, 1.44269504088896341f), round), round);
  auto r = hn::NegMulAdd(kf, hn::Set(d, 0.693359375f), xc);
  r = hn::NegMulAdd(kf, hn::Set(d, -2.12194440e-4f), r);
  auto p = hn::Set(d, 1.0f / 5040.0f);
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 720.0f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 120.0f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 24.0f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 6.0f));
  p = hn::MulAdd(p, r, hn::Set(d, 0.5f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f));
  const auto k = hn::ConvertTo(di, kf);
  const auto k1 = hn::ShiftRight<1>(k);
  const auto k2 = hn::Sub(k, k1);
  const auto bias = hn::Set(di, 127);
  const auto s1 = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(k1, bias)));
  const auto s2 = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(k2, bias)));
  const auto y = hn::Mul(hn::Mul(p, s1), s2);
  return hn::IfThenElse(hn::Eq(x, x), y, x);
}

// ErfF of kernels/cpu/vector_math.h, lane by lane, given z = x^2 and e = e^-z (gelu_grad
// needs e^-z itself too).
template <class D>
HWY_INLINE hn::Vec<D> ErfV(D d, hn::Vec<D> x, hn::Vec<D> z, hn::Vec<D> e) {
  const auto one = hn::Set(d, 1.0f);
  const auto a = hn::Abs(x);
  auto s = hn::Set(d, -1.0f / 1320.0f);
  s = hn::MulAdd(s, z, hn::Set(d, 1.0f / 216.0f));
  s = hn::MulAdd(s, z, hn::Set(d, -1.0f / 42.0f));
  s = hn::MulAdd(s, z, hn::Set(d, 1.0f / 10.0f));
  s = hn::MulAdd(s, z, hn::Set(d, -1.0f / 3.0f));
  s = hn::MulAdd(s, z, one);
  const auto small = hn::Mul(hn::Mul(x, s), hn::Set(d, 1.12837916709551257f));
  const auto t = hn::Div(one, hn::MulAdd(hn::Set(d, 0.3275911f), a, one));
  auto q = hn::Set(d, 1.061405429f);
  q = hn::MulAdd(q, t, hn::Set(d, -1.453152027f));
  q = hn::MulAdd(q, t, hn::Set(d, 1.421413741f));
  q = hn::MulAdd(q, t, hn::Set(d, -0.284496736f));
  q = hn::MulAdd(q, t, hn::Set(d, 0.254829592f));
  const auto large = hn::CopySign(hn::NegMulAdd(hn::Mul(q, t), e, one), x);
  return hn::IfThenElse(hn::Lt(a, hn::Set(d, 0.5f)), small, large);
}

template <class D>
HWY_INLINE hn::Vec<D> ErfV(D d, hn::Vec<D> x) {
  const auto z = hn::Mul(x, x);
  return ErfV(d, x, z, ExpV(d, hn::Neg(z)));
}

// out[i] = f(d, x[i]) (and f(d, x[i], y[i])): whole vectors, then one lane at a time.
template <class F>
HWY_INLINE void Map1(const float* x, float* out, size_t n, const F& f) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(f(d, hn::LoadU(d, x + i)), d, out + i);
  const hn::CappedTag<float, 1> d1;
  for (; i < n; ++i) hn::StoreU(f(d1, hn::LoadU(d1, x + i)), d1, out + i);
}

template <class F>
HWY_INLINE void Map2(const float* x, const float* y, float* out, size_t n, const F& f) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    hn::StoreU(f(d, hn::LoadU(d, x + i), hn::LoadU(d, y + i)), d, out + i);
  }
  const hn::CappedTag<float, 1> d1;
  for (; i < n; ++i) hn::StoreU(f(d1, hn::LoadU(d1, x + i), hn::LoadU(d1, y + i)), d1, out + i);
}

struct AddOp {
  template <class D, class V>
  HWY_INLINE V operator()(D, V a, V b) const { return hn::Add(a, b); }
};
struct SubOp {
  template <class D, class V>
  HWY_INLINE V operator()(D, V a, V b) const { return hn::Sub(a, b); }
};
struct MulOp {
  template <class D, class V>
  HWY_INLINE V operator()(D, V a, V b) const { return hn::Mul(a, b); }
};
struct AddScalarOp {
  float b;
  template <class D, class V>
  HWY_INLINE V operator()(D d, V a) const { return hn::Add(a, hn::Set(d, b)); }
};
struct MulScalarOp {
  float b;
  template <class D, class V>
  HWY_INLINE V operator()(D d, V a) const { return hn::Mul(a, hn::Set(d, b)); }
};
struct ScaleOp {
  float s, b;
  bool after;
  template <class D, class V>
  HWY_INLINE V operator()(D d, V v) const {
    const V vs = hn::Set(d, s);
    const V vb = hn::Set(d, b);
    return after ? hn::Add(hn::Mul(vs, v), vb) : hn::Mul(vs, hn::Add(v, vb));
  }
};
struct ExpOp {
  template <class D, class V>
  HWY_INLINE V operator()(D d, V v) const { return ExpV(d, v); }
};
struct GeluOp {
  template <class D, class V>
  HWY_INLINE V operator()(D d, V v) const {
    const V e = ErfV(d, hn::Mul(v, hn::Set(d, 0.707106781186547524f)));
    return hn::Mul(hn::Mul(hn::Set(d, 0.5f), v), hn::Add(hn::Set(d, 1.0f), e));
  }
};
struct GeluGradOp {
  template <class D, class V>
  HWY_INLINE V operator()(D d, V v, V g) const {
    // Phi(v) = (1 + erf(x)) / 2 with x = v / sqrt 2, and phi(v) = e^(-x^2) / sqrt(2 pi):
    // one exponential serves both.
    const V half = hn::Set(d, 0.5f);
    const V x = hn::Mul(v, hn::Set(d, 0.707106781186547524f));
    const V z = hn::Mul(x, x);
    const V e = ExpV(d, hn::Neg(z));
    const V cdf = hn::Mul(half, hn::Add(hn::Set(d, 1.0f), ErfV(d, x, z, e)));
    const V slope = hn::MulAdd(hn::Mul(v, hn::Set(d, 0.398942280401432678f)), e, cdf);
    return hn::Mul(slope, g);
  }
};

void AddImpl(const float* x, const float* y, float* out, int64_t n) {
  Map2(x, y, out, static_cast<size_t>(n), AddOp{});
}
void SubtractImpl(const float* x, const float* y, float* out, int64_t n) {
  Map2(x, y, out, static_cast<size_t>(n), SubOp{});
}
void MultiplyImpl(const float* x, const float* y, float* out, int64_t n) {
  Map2(x, y, out, static_cast<size_t>(n), MulOp{});
}
void AddScalarImpl(const float* x, float b, float* out, int64_t n) {
  Map1(x, out, static_cast<size_t>(n), AddScalarOp{b});
}
void MultiplyScalarImpl(const float* x, float b, float* out, int64_t n) {
  Map1(x, out, static_cast<size_t>(n), MulScalarOp{b});
}
void ScaleImpl(const float* x, float s, float b, bool after, float* out, int64_t n) {
  Map1(x, out, static_cast<size_t>(n), ScaleOp{s, b, after});
}
void ExpImpl(const float* x, float* out, int64_t n) {
  Map1(x, out, static_cast<size_t>(n), ExpOp{});
}
void GeluImpl(const float* x, float* out, int64_t n) {
  Map1(x, out, static_cast<size_t>(n), GeluOp{});
}
void GeluGradImpl(const float* x, const float* g, float* out, int64_t n) {
  Map2(x, g, out, static_cast<size_t>(n), GeluGradOp{});
}

// Row reductions: `body(d, i)` returns the vector to add (or take the max of) at i.
template <class Body>
HWY_INLINE float RowSum(size_t n, const Body& body) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  auto acc0 = hn::Zero(d);
  auto acc1 = hn::Zero(d);
  size_t i = 0;
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    acc0 = hn::Add(acc0, body(d, i));
    acc1 = hn::Add(acc1, body(d, i + lanes));
  }
  for (; i + lanes <= n; i += lanes) acc0 = hn::Add(acc0, body(d, i));
  float sum = hn::GetLane(hn::SumOfLanes(d, hn::Add(acc0, acc1)));
  const hn::CappedTag<float, 1> d1;
  for (; i < n; ++i) sum += hn::GetLane(body(d1, i));
  return sum;
}

void SoftmaxRowsImpl(const float* x, float* out, int64_t rows, int64_t len) {
  const size_t n = static_cast<size_t>(len);
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * len;
    float* dst = out + r * len;
    auto vmax = hn::Set(d, -std::numeric_limits<float>::infinity());
    size_t i = 0;
    for (; i + lanes <= n; i += lanes) vmax = hn::Max(vmax, hn::LoadU(d, row + i));
    float m = hn::GetLane(hn::MaxOfLanes(d, vmax));
    for (; i < n; ++i) m = row[i] > m ? row[i] : m;
    const float s = RowSum(n, [&](auto dd, size_t j) {
      const auto e = ExpV(dd, hn::Sub(hn::LoadU(dd, row + j), hn::Set(dd, m)));
      hn::StoreU(e, dd, dst + j);
      return e;
    });
    Map1(dst, dst, n, [s](auto dd, auto e) { return hn::Div(e, hn::Set(dd, s)); });
  }
}

void SoftmaxGradRowsImpl(const float* y, const float* g, float* out, int64_t rows, int64_t len) {
  const size_t n = static_cast<size_t>(len);
  for (int64_t r = 0; r < rows; ++r) {
    const float* yr = y + r * len;
    const float* gr = g + r * len;
    const float dot = RowSum(n, [&](auto dd, size_t j) {
      return hn::Mul(hn::LoadU(dd, gr + j), hn::LoadU(dd, yr + j));
    });
    Map2(yr, gr, out + r * len, n, [dot](auto dd, auto yv, auto gv) {
      return hn::Mul(yv, hn::Sub(gv, hn::Set(dd, dot)));
    });
  }
}

void LayerNormRowsImpl(const float* x, const float* scale, const float* bias, float eps,
                       int64_t rows, int64_t len, float* out, float* mean, float* var) {
  const size_t n = static_cast<size_t>(len);
  const float tn = static_cast<float>(len);
  const hn::ScalableTag<float> d;
  const hn::CappedTag<float, 1> d1;
  const size_t lanes = hn::Lanes(d);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * len;
    float* dst = out + r * len;
    const float mu = RowSum(n, [&](auto dd, size_t j) { return hn::LoadU(dd, row + j); }) / tn;
    const float v = RowSum(n, [&](auto dd, size_t j) {
                      const auto c = hn::Sub(hn::LoadU(dd, row + j), hn::Set(dd, mu));
                      return hn::Mul(c, c);
                    }) / tn;
    const float inv = 1.0f / std::sqrt(v + eps);
    auto step = [&](auto dd, size_t j) {
      const auto xhat = hn::Mul(hn::Sub(hn::LoadU(dd, row + j), hn::Set(dd, mu)), hn::Set(dd, inv));
      hn::StoreU(hn::MulAdd(xhat, hn::LoadU(dd, scale + j), hn::LoadU(dd, bias + j)), dd, dst + j);
    };
    size_t i = 0;
    for (; i + lanes <= n; i += lanes) step(d, i);
    for (; i < n; ++i) step(d1, i);
    mean[r] = mu;
    var[r] = v;
  }
}

void LayerNormGradRowsImpl(const float* x, const float* scale, const float* mean,
                           const float* var, const float* g, float eps, int64_t rows,
                           int64_t len, float* x_grad, float* scale_grad, float* bias_grad) {
  const size_t n = static_cast<size_t>(len);
  const float tn = static_cast<float>(len);
  const hn::ScalableTag<float> d;
  const hn::CappedTag<float, 1> d1;
  const size_t lanes = hn::Lanes(d);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * len;
    const float* gr = g + r * len;
    const float inv = 1.0f / std::sqrt(var[r] + eps);
    const float mu = mean[r];
    // One pass: the row's two sums and the parameter gradients.
    auto sums = [&](auto dd, size_t begin, size_t end, size_t step, float& sd, float& sdx) {
      auto acc_d = hn::Zero(dd);
      auto acc_dx = hn::Zero(dd);
      for (size_t j = begin; j + step <= end; j += step) {
        const auto gv = hn::LoadU(dd, gr + j);
        const auto xhat = hn::Mul(hn::Sub(hn::LoadU(dd, xr + j), hn::Set(dd, mu)), hn::Set(dd, inv));
        const auto dxhat = hn::Mul(gv, hn::LoadU(dd, scale + j));
        acc_d = hn::Add(acc_d, dxhat);
        acc_dx = hn::MulAdd(dxhat, xhat, acc_dx);
        hn::StoreU(hn::MulAdd(gv, xhat, hn::LoadU(dd, scale_grad + j)), dd, scale_grad + j);
        hn::StoreU(hn::Add(hn::LoadU(dd, bias_grad + j), gv), dd, bias_grad + j);
      }
      sd += hn::GetLane(hn::SumOfLanes(dd, acc_d));
      sdx += hn::GetLane(hn::SumOfLanes(dd, acc_dx));
    };
    float sum_d = 0.0f, sum_dx = 0.0f;
    const size_t whole = n / lanes * lanes;
    sums(d, 0, whole, lanes, sum_d, sum_dx);
    sums(d1, whole, n, 1, sum_d, sum_dx);
    const float mean_d = sum_d / tn;
    const float mean_dx = sum_dx / tn;
    float* dst = x_grad + r * len;
    auto out = [&](auto dd, size_t j) {
      const auto xhat = hn::Mul(hn::Sub(hn::LoadU(dd, xr + j), hn::Set(dd, mu)), hn::Set(dd, inv));
      const auto dxhat = hn::Mul(hn::LoadU(dd, gr + j), hn::LoadU(dd, scale + j));
      const auto c = hn::NegMulAdd(xhat, hn::Set(dd, mean_dx), hn::Sub(dxhat, hn::Set(dd, mean_d)));
      hn::StoreU(hn::Mul(c, hn::Set(dd, inv)), dd, dst + j);
    };
    size_t i = 0;
    for (; i + lanes <= n; i += lanes) out(d, i);
    for (; i < n; ++i) out(d1, i);
  }
}

int64_t TargetImpl() { return HWY_TARGET; }

}  // namespace HWY_NAMESPACE
}  // namespace spmd::kernels::cpu::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace spmd::kernels::cpu::simd {

HWY_EXPORT(AddImpl);
HWY_EXPORT(SubtractImpl);
HWY_EXPORT(MultiplyImpl);
HWY_EXPORT(AddScalarImpl);
HWY_EXPORT(MultiplyScalarImpl);
HWY_EXPORT(ScaleImpl);
HWY_EXPORT(ExpImpl);
HWY_EXPORT(GeluImpl);
HWY_EXPORT(GeluGradImpl);
HWY_EXPORT(SoftmaxRowsImpl);
HWY_EXPORT(SoftmaxGradRowsImpl);
HWY_EXPORT(LayerNormRowsImpl);
HWY_EXPORT(LayerNormGradRowsImpl);
HWY_EXPORT(TargetImpl);

void Add(const float* x, const float* y, float* out, int64_t n) {
  HWY_DYNAMIC_DISPATCH(AddImpl)(x, y, out, n);
}
void Subtract(const float* x, const float* y, float* out, int64_t n) {
  HWY_DYNAMIC_DISPATCH(SubtractImpl)(x, y, out, n);
}
void Multiply(const float* x, const float* y, float* out, int64_t n) {
  HWY_DYNAMIC_DISPATCH(MultiplyImpl)(x, y, out, n);
}
void AddScalar(const float* x, float b, float* out, int64_t n) {
  HWY_DYNAMIC_DISPATCH(AddScalarImpl)(x, b, out, n);
}
void MultiplyScalar(const float* x, float b, float* out, int64_t n) {
  HWY_DYNAMIC_DISPATCH(MultiplyScalarImpl)(x, b, out, n);
}
void Scale(const float* x, float s, float b, bool after, float* out, int64_t n) {
  HWY_DYNAMIC_DISPATCH(ScaleImpl)(x, s, b, after, out, n);
}
void Exp(const float* x, float* out, int64_t n) { HWY_DYNAMIC_DISPATCH(ExpImpl)(x, out, n); }
void Gelu(const float* x, float* out, int64_t n) { HWY_DYNAMIC_DISPATCH(GeluImpl)(x, out, n); }
void GeluGrad(const float* x, const float* g, float* out, int64_t n) {
  HWY_DYNAMIC_DISPATCH(GeluGradImpl)(x, g, out, n);
}
void SoftmaxRows(const float* x, float* out, int64_t rows, int64_t len) {
  HWY_DYNAMIC_DISPATCH(SoftmaxRowsImpl)(x, out, rows, len);
}
void SoftmaxGradRows(const float* y, const float* g, float* out, int64_t rows, int64_t len) {
  HWY_DYNAMIC_DISPATCH(SoftmaxGradRowsImpl)(y, g, out, rows, len);
}
void LayerNormRows(const float* x, const float* scale, const float* bias, float eps, int64_t rows,
                   int64_t n, float* out, float* mean, float* var) {
  HWY_DYNAMIC_DISPATCH(LayerNormRowsImpl)(x, scale, bias, eps, rows, n, out, mean, var);
}
void LayerNormGradRows(const float* x, const float* scale, const float* mean, const float* var,
                       const float* g, float eps, int64_t rows, int64_t n, float* x_grad,
                       float* scale_grad, float* bias_grad) {
  HWY_DYNAMIC_DISPATCH(LayerNormGradRowsImpl)(x, scale, mean, var, g, eps, rows, n, x_grad,
                                              scale_grad, bias_grad);
}
const char* TargetName() { return hwy::TargetName(HWY_DYNAMIC_DISPATCH(TargetImpl)()); }

}  // namespace spmd::kernels::cpu::simd
#endif  // HWY_ONCE
