// conv2d (docs/OPS.md "Paddle's other registered ops"): im2col and one GEMM per batch
// entry and group (internal::Gemm: OpenBLAS where built with it). The shape plan and its
// validation are the reference's (rules/conv_shape.h).
#include <algorithm>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/internal.h"
#include "rules/conv_shape.h"

namespace spmd::kernels::cpu {
namespace {

using internal::Gemm;
using internal::MatrixView;
using internal::NewOutput;
using internal::ValuesAs;

// For batch entry n and group g: col[(c, i, j), (r, s)] = x[n, g * cg + c, r * sh - pt +
// i * dh, s * sw - pl + j * dw] (0 outside x), then out[n, g's channels, (r, s)] +=
// filter_g [og, cg * kh * kw] . col [cg * kh * kw, oh * ow].
template <typename T>
Tensor RunConv2d(const Tensor& xt, const Tensor& wt, const conv::Conv2dPlan& p) {
  ValuesAs<T> xv(xt);
  ValuesAs<T> wv(wt);
  Tensor out = NewOutput(p.out_shape, DTypeOf<T>::value, /*zero=*/true);
  const int64_t cg = p.c / p.groups;
  const int64_t og = p.o / p.groups;
  const int64_t taps = cg * p.kh * p.kw;
  const int64_t positions = p.oh * p.ow;
  if (NumElements(p.out_shape) == 0 || taps == 0) return out;
  const T* x = xv.data();
  const T* w = wv.data();
  T* o = out.data<T>();
  // x's strides in its layout.
  const int64_t sc = p.channels_last ? 1 : p.h * p.w;
  const int64_t sh = p.channels_last ? p.w * p.c : p.w;
  const int64_t sw = p.channels_last ? p.c : 1;
  const int64_t sn = p.c * p.h * p.w;
  internal::CheckOutputShape({taps, positions});  // the im2col buffer
  std::vector<T> col(static_cast<size_t>(taps * positions));
  for (int64_t n = 0; n < p.n; ++n) {
    for (int64_t g = 0; g < p.groups; ++g) {
      T* row = col.data();
      for (int64_t c = 0; c < cg; ++c) {
        const T* xc = x + n * sn + (g * cg + c) * sc;
        for (int64_t i = 0; i < p.kh; ++i) {
          for (int64_t j = 0; j < p.kw; ++j, row += positions) {
            for (int64_t r = 0; r < p.oh; ++r) {
              const int64_t h = r * p.stride_h - p.pad_top + i * p.dil_h;
              T* dst = row + r * p.ow;
              if (h < 0 || h >= p.h) {
                std::fill(dst, dst + p.ow, T(0));
                continue;
              }
              for (int64_t s = 0; s < p.ow; ++s) {
                const int64_t ww = s * p.stride_w - p.pad_left + j * p.dil_w;
                dst[s] = (ww < 0 || ww >= p.w) ? T(0) : xc[h * sh + ww * sw];
              }
            }
          }
        }
      }
      // NCHW: out[n, g * og + k, pos] at ((n * O + g * og + k) * positions + pos);
      // NHWC: at ((n * positions + pos) * O + g * og + k).
      T* dst = p.channels_last ? o + n * positions * p.o + g * og
                               : o + (n * p.o + g * og) * positions;
      const int64_t rs = p.channels_last ? 1 : positions;
      const int64_t cs = p.channels_last ? p.o : 1;
      Gemm<T>(og, positions, taps, MatrixView<T>{w + g * og * taps, taps, 1},
              MatrixView<T>{col.data(), positions, 1}, dst, rs, cs);
    }
  }
  return out;
}

}  // namespace

Tensors conv2d(const TensorArgs& inputs, const Attrs& attrs) {
  internal::CheckArity(inputs, 2);
  const conv::Conv2dPlan plan = conv::PlanConv2d(inputs[0].shape(), inputs[1].shape(), attrs);
  internal::CheckOutputShape(plan.out_shape);
  return internal::DispatchFloat(internal::ComputeDType(inputs, {0, 1}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return TensorList(RunConv2d<T>(inputs[0], inputs[1], plan));
  });
}

}  // namespace spmd::kernels::cpu
