// The conv family (docs/OPS.md "Paddle's other registered ops"): conv2d, conv3d,
// depthwise_conv2d, their grads and conv2d_transpose, the definition as plain loops.
#include <cstdint>
#include <vector>

#include "reference/reference.h"
#include "reference/util.h"
#include "rules/ops/conv_shape.h"

namespace spmd::reference::ops {
namespace {

// Visits every term of a convolution's sums in order: for each out[n, o, a, b, s] (flat
// offset out_at; a 2-D convolution has the one depth a = 0), each channel c of o's group
// g = o / (O / groups) and each filter tap (i, j, l) whose input position z = a * sd -
// pad_d + i * dd, h = b * sh - pad_h + j * dh, w = s * sw - pad_w + l * dw lies inside x,
// calls term(x offset of x[n, g * C/groups + c, z, h, w], filter offset of filter[o, c, i,
// j, l], out offset). Taps outside x read zero, so they are no term. Channels last only
// moves the channel dim of x and out to the end.
template <typename Term>
void ForEachTerm(const conv::ConvPlan& p, Term&& term) {
  const int64_t cg = p.c / p.groups;
  const int64_t og = p.o / p.groups;
  const int64_t in_size = p.in[0] * p.in[1] * p.in[2];
  const int64_t out_size = p.out[0] * p.out[1] * p.out[2];
  auto x_at = [&](int64_t n, int64_t c, int64_t z, int64_t h, int64_t w) {
    const int64_t at = (z * p.in[1] + h) * p.in[2] + w;
    return p.channels_last ? (n * in_size + at) * p.c + c : (n * p.c + c) * in_size + at;
  };
  auto out_at = [&](int64_t n, int64_t o, int64_t a, int64_t b, int64_t s) {
    const int64_t at = (a * p.out[1] + b) * p.out[2] + s;
    return p.channels_last ? (n * out_size + at) * p.o + o : (n * p.o + o) * out_size + at;
  };
  auto inside = [&](int64_t v, size_t d) { return v >= 0 && v < p.in[d]; };
  for (int64_t n = 0; n < p.n; ++n) {
    for (int64_t o = 0; o < p.o; ++o) {
      const int64_t g = o / og;
      for (int64_t a = 0; a < p.out[0]; ++a) {
        for (int64_t b = 0; b < p.out[1]; ++b) {
          for (int64_t s = 0; s < p.out[2]; ++s) {
            const int64_t out = out_at(n, o, a, b, s);
            for (int64_t c = 0; c < cg; ++c) {
              for (int64_t i = 0; i < p.k[0]; ++i) {
                const int64_t z = a * p.stride[0] - p.pad[0] + i * p.dil[0];
                if (!inside(z, 0)) continue;
                for (int64_t j = 0; j < p.k[1]; ++j) {
                  const int64_t h = b * p.stride[1] - p.pad[1] + j * p.dil[1];
                  if (!inside(h, 1)) continue;
                  for (int64_t l = 0; l < p.k[2]; ++l) {
                    const int64_t w = s * p.stride[2] - p.pad[2] + l * p.dil[2];
                    if (!inside(w, 2)) continue;
                    term(x_at(n, g * cg + c, z, h, w), (((o * cg + c) * p.k[0] + i) * p.k[1] + j) * p.k[2] + l,
                         out);
                  }
                }
              }
            }
          }
        }
      }
    }
  }
}

// out = the sum of its terms x[...] * filter[...].
Tensors Convolve(const Tensors& inputs, const conv::ConvPlan& p) {
  const Tensor& x = inputs[0];
  const Tensor& w = inputs[1];
  Tensor out = internal::Zeros(p.out_shape, x.dtype);
  ForEachTerm(p, [&](int64_t xi, int64_t wi, int64_t oi) { out.data[oi] += x.data[xi] * w.data[wi]; });
  return {out};
}

// The gradients of <out_grad, conv(x, filter)>: each term x[xi] * filter[wi] of out[oi]
// adds out_grad[oi] * filter[wi] to input_grad[xi] and out_grad[oi] * x[xi] to
// filter_grad[wi].
Tensors ConvolveGrad(const Tensors& inputs, const conv::ConvPlan& p) {
  const Tensor& x = inputs[0];
  const Tensor& w = inputs[1];
  const Tensor& g = inputs[2];
  Tensor x_grad = internal::Zeros(x.shape);
  Tensor w_grad = internal::Zeros(w.shape);
  ForEachTerm(p, [&](int64_t xi, int64_t wi, int64_t oi) {
    x_grad.data[xi] += g.data[oi] * w.data[wi];
    w_grad.data[wi] += g.data[oi] * x.data[xi];
  });
  return {x_grad, w_grad};
}

}  // namespace

Tensors conv2d(const Tensors& inputs, const Attrs& attrs) {
  internal::CheckArity(inputs, 2);
  return Convolve(inputs, conv::PlanConv2d(inputs[0].shape, inputs[1].shape, attrs));
}

// Paddle's depthwise_conv2d is conv2d (groups = the input channels).
Tensors depthwise_conv2d(const Tensors& inputs, const Attrs& attrs) { return conv2d(inputs, attrs); }

Tensors conv3d(const Tensors& inputs, const Attrs& attrs) {
  internal::CheckArity(inputs, 2);
  return Convolve(inputs, conv::PlanConv3d(inputs[0].shape, inputs[1].shape, attrs));
}

Tensors conv2d_grad(const Tensors& inputs, const Attrs& attrs) {
  internal::CheckArity(inputs, 3);
  return ConvolveGrad(inputs, conv::PlanConv2dGrad(inputs[0].shape, inputs[1].shape, inputs[2].shape, attrs));
}

Tensors conv3d_grad(const Tensors& inputs, const Attrs& attrs) {
  internal::CheckArity(inputs, 3);
  return ConvolveGrad(inputs, conv::PlanConv3dGrad(inputs[0].shape, inputs[1].shape, inputs[2].shape, attrs));
}

// conv2d_transpose: the terms of the convolution it transposes (conv_shape.h), whose
// input is out and whose output is x: each term adds x[at the convolution's out] *
// filter[tap] to out[at the convolution's input].
Tensors conv2d_transpose(const Tensors& inputs, const Attrs& attrs) {
  internal::CheckArity(inputs, 2);
  const Tensor& x = inputs[0];
  const Tensor& w = inputs[1];
  const conv::ConvTransposePlan t = conv::PlanConv2dTranspose(x.shape, w.shape, attrs);
  Tensor out = internal::Zeros(t.out_shape, x.dtype);
  ForEachTerm(t.conv, [&](int64_t oi, int64_t wi, int64_t xi) { out.data[oi] += x.data[xi] * w.data[wi]; });
  return {out};
}

}  // namespace spmd::reference::ops
