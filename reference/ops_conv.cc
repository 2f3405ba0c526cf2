// The conv family (docs/OPS.md "Paddle's other registered ops"): conv2d, conv3d,
// depthwise_conv2d, their grads and conv2d_transpose, roi_align and its grad, the
// definition as plain loops.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "reference/reference.h"
#include "reference/util.h"
#include "rules/ops/conv_shape.h"
#include "rules/ops/roi_align_plan.h"

namespace spmd::reference::ops {
namespace {

using internal::InputField;

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

// ---- roi_align ----

// The image of every roi from boxes_num's counts (whole numbers >= 0 summing to R, else
// InvalidArgument inputs[2].data), every roi image 0's when boxes_num is absent.
std::vector<int64_t> RoiImages(const Tensor& boxes_num, const roi_plan::RoiAlignPlan& p) {
  std::vector<int64_t> image(static_cast<size_t>(p.rois), 0);
  if (!p.has_boxes_num) return image;
  const std::string field = InputField(2, "data");
  int64_t start = 0;
  for (int64_t b = 0; b < p.n; ++b) {
    const double v = boxes_num.data[static_cast<size_t>(b)];
    if (!std::isfinite(v) || v != std::trunc(v) || v < 0) {
      ThrowInvalid(field, "boxes_num[" + std::to_string(b) + "] = " + std::to_string(v) +
                              " is not a count >= 0");
    }
    if (v > static_cast<double>(p.rois - start)) {
      ThrowInvalid(field, "boxes_num's counts exceed the " + std::to_string(p.rois) + " rois");
    }
    const auto count = static_cast<int64_t>(v);
    for (int64_t r = start; r < start + count; ++r) image[static_cast<size_t>(r)] = b;
    start += count;
  }
  if (start != p.rois) {
    ThrowInvalid(field, "boxes_num's counts sum to " + std::to_string(start) + ", not the " +
                            std::to_string(p.rois) + " rois");
  }
  return image;
}

// Visits every bilinear term of roi_align (Detectron's RoIAlign, as Paddle's kernel): roi r
// of image n(r) is boxes[r] * spatial_scale (minus 0.5 when aligned; not aligned, at least
// 1 x 1), cut into pooled_h x pooled_w bins, each sampled on a grid of gh x gw points
// (sampling_ratio, or ceil(roi size / pooled size) when it is <= 0) at the centres of the
// grid's cells. A sample (y, x) outside [-1, H] x [-1, W] reads 0; inside, y and x below 0
// are taken as 0 and from H - 1 (W - 1) on as H - 1 (W - 1), and the value is the bilinear
// mix of its four neighbours. A bin is the mean of its gh gw samples (0 without samples).
// term(r, n, bin, pixel, weight): bin = ph * pooled_w + pw, pixel = y * W + x, weight the
// neighbour's bilinear weight over the sample count.
template <typename Term>
void ForEachRoiTerm(const Tensor& boxes, const Tensor& boxes_num, const roi_plan::RoiAlignPlan& p, Term&& term) {
  const std::vector<int64_t> image = RoiImages(boxes_num, p);
  const std::string field = InputField(1, "data");
  for (double v : boxes.data) {
    if (!std::isfinite(v)) ThrowInvalid(field, "box coordinate " + std::to_string(v) + " is not finite");
  }
  const double offset = p.aligned ? 0.5 : 0.0;
  const auto h = static_cast<double>(p.h), w = static_cast<double>(p.w);
  for (int64_t r = 0; r < p.rois; ++r) {
    const double* box = &boxes.data[static_cast<size_t>(4 * r)];
    const double x1 = box[0] * p.spatial_scale - offset, y1 = box[1] * p.spatial_scale - offset;
    double roi_w = box[2] * p.spatial_scale - offset - x1, roi_h = box[3] * p.spatial_scale - offset - y1;
    if (!p.aligned) {
      roi_w = std::max(roi_w, 1.0);
      roi_h = std::max(roi_h, 1.0);
    }
    const double bin_h = roi_h / static_cast<double>(p.pooled_h), bin_w = roi_w / static_cast<double>(p.pooled_w);
    const double grid_h = p.sampling_ratio > 0 ? static_cast<double>(p.sampling_ratio) : std::ceil(bin_h);
    const double grid_w = p.sampling_ratio > 0 ? static_cast<double>(p.sampling_ratio) : std::ceil(bin_w);
    if (!(grid_h <= static_cast<double>(roi_plan::kMaxGrid)) || !(grid_w <= static_cast<double>(roi_plan::kMaxGrid))) {
      ThrowInvalid(field, "roi " + std::to_string(r) + " needs more than " + std::to_string(roi_plan::kMaxGrid) +
                              " samples per bin side");
    }
    const int64_t gh = grid_h > 0 ? static_cast<int64_t>(grid_h) : 0;
    const int64_t gw = grid_w > 0 ? static_cast<int64_t>(grid_w) : 0;
    const double count = static_cast<double>(std::max<int64_t>(gh * gw, 1));
    for (int64_t ph = 0; ph < p.pooled_h; ++ph) {
      for (int64_t pw = 0; pw < p.pooled_w; ++pw) {
        const int64_t bin = ph * p.pooled_w + pw;
        for (int64_t iy = 0; iy < gh; ++iy) {
          double y = y1 + bin_h * (static_cast<double>(ph) + (static_cast<double>(iy) + 0.5) / grid_h);
          for (int64_t ix = 0; ix < gw; ++ix) {
            double x = x1 + bin_w * (static_cast<double>(pw) + (static_cast<double>(ix) + 0.5) / grid_w);
            if (!(y >= -1.0 && y <= h && x >= -1.0 && x <= w)) continue;  // outside (or NaN): reads 0
            double sy = std::max(y, 0.0), sx = std::max(x, 0.0);
            int64_t y_lo = static_cast<int64_t>(std::floor(sy)), x_lo = static_cast<int64_t>(std::floor(sx));
            int64_t y_hi = y_lo + 1, x_hi = x_lo + 1;
            if (y_lo >= p.h - 1) {
              y_lo = y_hi = p.h - 1;
              sy = static_cast<double>(y_lo);
            }
            if (x_lo >= p.w - 1) {
              x_lo = x_hi = p.w - 1;
              sx = static_cast<double>(x_lo);
            }
            const double ly = sy - static_cast<double>(y_lo), lx = sx - static_cast<double>(x_lo);
            const int64_t img = image[static_cast<size_t>(r)];
            term(r, img, bin, y_lo * p.w + x_lo, (1 - ly) * (1 - lx) / count);
            term(r, img, bin, y_lo * p.w + x_hi, (1 - ly) * lx / count);
            term(r, img, bin, y_hi * p.w + x_lo, ly * (1 - lx) / count);
            term(r, img, bin, y_hi * p.w + x_hi, ly * lx / count);
          }
        }
      }
    }
  }
}

// A floating dtype for an output computed from `t`: its own, float64 for an integer one.
DType FloatOf(const Tensor& t) { return IsFloating(t.dtype) ? t.dtype : DType::kFloat64; }

}  // namespace

Tensors roi_align(const Tensors& inputs, const Attrs& attrs) {
  internal::CheckArity(inputs, 3);
  const Tensor& x = inputs[0];
  const roi_plan::RoiAlignPlan p = roi_plan::PlanRoiAlign(x.shape, inputs[1].shape, inputs[2].shape, attrs);
  Tensor out = internal::Zeros(p.out, FloatOf(x));
  const int64_t plane = p.h * p.w, bins = p.pooled_h * p.pooled_w;
  ForEachRoiTerm(inputs[1], inputs[2], p, [&](int64_t r, int64_t n, int64_t bin, int64_t pixel, double weight) {
    for (int64_t c = 0; c < p.c; ++c) {
      out.data[static_cast<size_t>((r * p.c + c) * bins + bin)] +=
          weight * x.data[static_cast<size_t>((n * p.c + c) * plane + pixel)];
    }
  });
  return {out};
}

Tensors roi_align_grad(const Tensors& inputs, const Attrs& attrs) {
  internal::CheckArity(inputs, 4);
  const Tensor& g = inputs[3];
  const roi_plan::RoiAlignPlan p =
      roi_plan::PlanRoiAlignGrad(inputs[0].shape, inputs[1].shape, inputs[2].shape, g.shape, attrs);
  Tensor x_grad = internal::Zeros(inputs[0].shape, FloatOf(g));
  const int64_t plane = p.h * p.w, bins = p.pooled_h * p.pooled_w;
  ForEachRoiTerm(inputs[1], inputs[2], p, [&](int64_t r, int64_t n, int64_t bin, int64_t pixel, double weight) {
    for (int64_t c = 0; c < p.c; ++c) {
      x_grad.data[static_cast<size_t>((n * p.c + c) * plane + pixel)] +=
          weight * g.data[static_cast<size_t>((r * p.c + c) * bins + bin)];
    }
  });
  return {x_grad};
}

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
