// conv2d (docs/OPS.md "Paddle's other registered ops"): the definition as plain loops.
#include <vector>

#include "reference/reference.h"
#include "reference/util.h"
#include "rules/conv_shape.h"

namespace spmd::reference::ops {

// out[n, o, p, q] = sum over the channels c of o's group g = o / (O / groups) and the
// filter taps (i, j) of x[n, g * C/groups + c, p * sh - pad_top + i * dh,
// q * sw - pad_left + j * dw] * filter[o, c, i, j], taps outside x reading zero. NHWC only
// moves the channel dim of x and out to the end.
Tensors conv2d(const Tensors& inputs, const Attrs& attrs) {
  internal::CheckArity(inputs, 2);
  const Tensor& x = inputs[0];
  const Tensor& w = inputs[1];
  const conv::Conv2dPlan p = conv::PlanConv2d(x.shape, w.shape, attrs);
  Tensor out = internal::Zeros(p.out_shape, x.dtype);
  const int64_t cg = p.c / p.groups;
  const int64_t og = p.o / p.groups;
  // Flat offsets of x[n, c, h, w] and out[n, o, p, q] in either layout.
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
          double sum = 0.0;
          for (int64_t c = 0; c < cg; ++c) {
            for (int64_t i = 0; i < p.kh; ++i) {
              const int64_t h = r * p.stride_h - p.pad_top + i * p.dil_h;
              if (h < 0 || h >= p.h) continue;
              for (int64_t j = 0; j < p.kw; ++j) {
                const int64_t ww = s * p.stride_w - p.pad_left + j * p.dil_w;
                if (ww < 0 || ww >= p.w) continue;
                sum += x.data[x_at(n, g * cg + c, h, ww)] * w.data[((o * cg + c) * p.kh + i) * p.kw + j];
              }
            }
          }
          out.data[out_at(n, o, r, s)] = sum;
        }
      }
    }
  }
  return {out};
}

}  // namespace spmd::reference::ops
