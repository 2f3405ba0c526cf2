// conv2d and conv2d_grad (docs/OPS.md "Paddle's other registered ops"): the definition as
// plain loops.
#include <vector>

#include "reference/reference.h"
#include "reference/util.h"
#include "rules/ops/conv_shape.h"

namespace spmd::reference::ops {
namespace {

// Visits every term of conv2d's sums in order: for each out[n, o, r, s] (flat offset
// out_at), each channel c of o's group g = o / (O / groups) and each filter tap (i, j)
// whose input position h = r * sh - pad_top + i * dh, w = s * sw - pad_left + j * dw lies
// inside x, calls term(x offset of x[n, g * C/groups + c, h, w], filter offset of
// filter[o, c, i, j], out offset). Taps outside x read zero, so they are no term. NHWC
// only moves the channel dim of x and out to the end.
template <typename Term>
void ForEachTerm(const conv::Conv2dPlan& p, Term&& term) {
  const int64_t cg = p.c / p.groups;
  const int64_t og = p.o / p.groups;
  auto x_at = [&](int64_t n, int64_t c, int64_t h, int64_t ww) {
    return p.channels_last ? ((n * p.h + h) * p.w + ww) * p.c + c : ((n * p.c + c) * p.h + h) * p.w + ww;
  };
  auto out_at = [&](int64_t n, int64_t o, int64_t r, int64_t s) {
    return p.channels_last ? ((n * p.oh + r) * p.ow + s) * p.o + o : ((n * p.o + o) * p.oh + r) * p.ow + s;
  };
  for (int64_t n = 0; n < p.n; ++n) {
    for (int64_t o = 0; o < p.o; ++o) {
      const int64_t g = o / og;
      for (int64_t r = 0; r < p.oh; ++r) {
        for (int64_t s = 0; s < p.ow; ++s) {
          const int64_t out = out_at(n, o, r, s);
          for (int64_t c = 0; c < cg; ++c) {
            for (int64_t i = 0; i < p.kh; ++i) {
              const int64_t h = r * p.stride_h - p.pad_top + i * p.dil_h;
              if (h < 0 || h >= p.h) continue;
              for (int64_t j = 0; j < p.kw; ++j) {
                const int64_t ww = s * p.stride_w - p.pad_left + j * p.dil_w;
                if (ww < 0 || ww >= p.w) continue;
                term(x_at(n, g * cg + c, h, ww), ((o * cg + c) * p.kh + i) * p.kw + j, out);
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace

// out[n, o, r, s] = the sum of its terms x[...] * filter[o, c, i, j].
Tensors conv2d(const Tensors& inputs, const Attrs& attrs) {
  internal::CheckArity(inputs, 2);
  const Tensor& x = inputs[0];
  const Tensor& w = inputs[1];
  const conv::Conv2dPlan p = conv::PlanConv2d(x.shape, w.shape, attrs);
  Tensor out = internal::Zeros(p.out_shape, x.dtype);
  ForEachTerm(p, [&](int64_t xi, int64_t wi, int64_t oi) { out.data[oi] += x.data[xi] * w.data[wi]; });
  return {out};
}

// Paddle's depthwise_conv2d is conv2d (groups = the input channels).
Tensors depthwise_conv2d(const Tensors& inputs, const Attrs& attrs) { return conv2d(inputs, attrs); }

// The gradients of <out_grad, conv2d(x, filter)>: each term x[xi] * filter[wi] of out[oi]
// adds out_grad[oi] * filter[wi] to input_grad[xi] and out_grad[oi] * x[xi] to
// filter_grad[wi].
Tensors conv2d_grad(const Tensors& inputs, const Attrs& attrs) {
  internal::CheckArity(inputs, 3);
  const Tensor& x = inputs[0];
  const Tensor& w = inputs[1];
  const Tensor& g = inputs[2];
  const conv::Conv2dPlan p = conv::PlanConv2dGrad(x.shape, w.shape, g.shape, attrs);
  Tensor x_grad = internal::Zeros(x.shape);
  Tensor w_grad = internal::Zeros(w.shape);
  ForEachTerm(p, [&](int64_t xi, int64_t wi, int64_t oi) {
    x_grad.data[xi] += g.data[oi] * w.data[wi];
    w_grad.data[wi] += g.data[oi] * x.data[xi];
  });
  return {x_grad, w_grad};
}

}  // namespace spmd::reference::ops
