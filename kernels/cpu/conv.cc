// conv2d and conv2d_grad (docs/OPS.md "Paddle's other registered ops"): im2col and GEMMs
// per batch entry and group (internal::Gemm: OpenBLAS where built with it); conv2d_grad
// scatters the columns' gradient back into x's (col2im). The shape plan and its validation
// are the reference's (rules/ops/conv_shape.h).
#include <utility>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/internal.h"
#include "rules/ops/conv_shape.h"

namespace spmd::kernels::cpu {
namespace {

using internal::Gemm;
using internal::MatrixView;
using internal::NewOutput;
using internal::ValuesAs;

// Sizes and strides of one batch entry n and group g: its column matrix col [taps =
// cg * kh * kw, positions = oh * ow] (below), its filter rows [og, taps], and its out
// channels as an [og, positions] matrix.
struct ConvLayout {
  int64_t cg, og, taps, positions;
  int64_t sc, sh, sw, sn;  // x's strides in its layout
  int64_t out_rs, out_cs;  // out's [og, positions] strides: NCHW (positions, 1), NHWC (1, O)

  explicit ConvLayout(const conv::Conv2dPlan& p)
      : cg(p.c / p.groups), og(p.o / p.groups), taps(cg * p.kh * p.kw), positions(p.oh * p.ow),
        sc(p.channels_last ? 1 : p.h * p.w), sh(p.channels_last ? p.w * p.c : p.w),
        sw(p.channels_last ? p.c : 1), sn(p.c * p.h * p.w),
        out_rs(p.channels_last ? 1 : positions), out_cs(p.channels_last ? p.o : 1) {}

  // Offsets of x[n, g * cg, 0, 0], filter[g * og, 0, 0, 0] and out[n, g * og, 0, 0].
  int64_t XAt(int64_t n, int64_t g) const { return n * sn + g * cg * sc; }
  int64_t FilterAt(int64_t g) const { return g * og * taps; }
  int64_t OutAt(const conv::Conv2dPlan& p, int64_t n, int64_t g) const {
    return p.channels_last ? n * positions * p.o + g * og : (n * p.o + g * og) * positions;
  }
};

// The column matrix col[(c, i, j), (r, s)] = x[n, g * cg + c, r * sh - pt + i * dh,
// s * sw - pl + j * dw], 0 outside x: calls at(k, off) for its elements in order, k the
// element's index in col and off the x element's offset from XAt(n, g) (-1 outside x).
template <typename At>
void ForEachColumn(const conv::Conv2dPlan& p, const ConvLayout& l, At&& at) {
  int64_t k = 0;
  for (int64_t c = 0; c < l.cg; ++c) {
    for (int64_t i = 0; i < p.kh; ++i) {
      for (int64_t j = 0; j < p.kw; ++j) {
        for (int64_t r = 0; r < p.oh; ++r) {
          const int64_t h = r * p.stride_h - p.pad_top + i * p.dil_h;
          const bool row_inside = h >= 0 && h < p.h;
          for (int64_t s = 0; s < p.ow; ++s, ++k) {
            const int64_t ww = s * p.stride_w - p.pad_left + j * p.dil_w;
            at(k, row_inside && ww >= 0 && ww < p.w ? c * l.sc + h * l.sh + ww * l.sw : -1);
          }
        }
      }
    }
  }
}

template <typename T>
void Im2Col(const conv::Conv2dPlan& p, const ConvLayout& l, const T* x, T* col) {
  ForEachColumn(p, l, [&](int64_t k, int64_t off) { col[k] = off < 0 ? T(0) : x[off]; });
}

// out[n, g's channels, (r, s)] = filter_g [og, taps] . col [taps, positions].
template <typename T>
Tensor RunConv2d(const Tensor& xt, const Tensor& wt, const conv::Conv2dPlan& p) {
  ValuesAs<T> xv(xt);
  ValuesAs<T> wv(wt);
  Tensor out = NewOutput(p.out_shape, DTypeOf<T>::value, /*zero=*/true);
  const ConvLayout l(p);
  if (NumElements(p.out_shape) == 0 || l.taps == 0) return out;
  T* o = out.data<T>();
  internal::CheckOutputShape({l.taps, l.positions});  // the im2col buffer
  std::vector<T> col(static_cast<size_t>(l.taps * l.positions));
  for (int64_t n = 0; n < p.n; ++n) {
    for (int64_t g = 0; g < p.groups; ++g) {
      Im2Col(p, l, xv.data() + l.XAt(n, g), col.data());
      Gemm<T>(l.og, l.positions, l.taps, MatrixView<T>{wv.data() + l.FilterAt(g), l.taps, 1},
              MatrixView<T>{col.data(), l.positions, 1}, o + l.OutAt(p, n, g), l.out_rs, l.out_cs);
    }
  }
  return out;
}

// Per batch entry and group, with G = out_grad's [og, positions] matrix:
// filter_grad_g += G . col^T, col_grad = filter_g^T . G, then col_grad scattered back
// into input_grad at the x elements the columns read (col2im).
template <typename T>
Tensors RunConv2dGrad(const TensorArgs& inputs, const conv::Conv2dPlan& p) {
  ValuesAs<T> xv(inputs[0]);
  ValuesAs<T> wv(inputs[1]);
  ValuesAs<T> gv(inputs[2]);
  Tensor x_grad = NewOutput(inputs[0].shape(), DTypeOf<T>::value, /*zero=*/true);
  Tensor w_grad = NewOutput(inputs[1].shape(), DTypeOf<T>::value, /*zero=*/true);
  const ConvLayout l(p);
  if (NumElements(p.out_shape) == 0 || l.taps == 0) {  // no terms: zero gradients
    return TensorList(std::move(x_grad), std::move(w_grad));
  }
  T* xg = x_grad.data<T>();
  T* wg = w_grad.data<T>();
  internal::CheckOutputShape({l.taps, l.positions});  // the im2col buffers
  std::vector<T> col(static_cast<size_t>(l.taps * l.positions));
  std::vector<T> col_grad(col.size());
  for (int64_t n = 0; n < p.n; ++n) {
    for (int64_t g = 0; g < p.groups; ++g) {
      const MatrixView<T> grad{gv.data() + l.OutAt(p, n, g), l.out_rs, l.out_cs};
      Im2Col(p, l, xv.data() + l.XAt(n, g), col.data());
      Gemm<T>(l.og, l.taps, l.positions, grad, MatrixView<T>{col.data(), 1, l.positions},
              wg + l.FilterAt(g), l.taps, 1);
      Gemm<T>(l.taps, l.positions, l.og, MatrixView<T>{wv.data() + l.FilterAt(g), 1, l.taps}, grad,
              col_grad.data(), l.positions, 1, /*overwrite=*/true);
      T* dst = xg + l.XAt(n, g);
      ForEachColumn(p, l, [&](int64_t k, int64_t off) {
        if (off >= 0) dst[off] += col_grad[static_cast<size_t>(k)];
      });
    }
  }
  return TensorList(std::move(x_grad), std::move(w_grad));
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

// Paddle's depthwise_conv2d is conv2d (groups = the input channels).
Tensors depthwise_conv2d(const TensorArgs& inputs, const Attrs& attrs) { return conv2d(inputs, attrs); }

Tensors conv2d_grad(const TensorArgs& inputs, const Attrs& attrs) {
  internal::CheckArity(inputs, 3);
  const conv::Conv2dPlan plan =
      conv::PlanConv2dGrad(inputs[0].shape(), inputs[1].shape(), inputs[2].shape(), attrs);
  return internal::DispatchFloat(internal::ComputeDType(inputs, {0, 1, 2}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return RunConv2dGrad<T>(inputs, plan);
  });
}

}  // namespace spmd::kernels::cpu
