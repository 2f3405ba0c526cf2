// The conv family (docs/OPS.md "Paddle's other registered ops"): conv2d, conv3d,
// depthwise_conv2d, their grads and conv2d_transpose. im2col and GEMMs per batch entry and
// group (internal::Gemm: OpenBLAS where built with it); the grads and the transpose
// scatter a column gradient back into x's layout (col2im). One path for 2-D and 3-D: a 2-D
// plan has depth 1. The shape plan and its validation are the reference's
// (rules/ops/conv_shape.h). roi_align and its grad: every roi's sampling checked first, then
// per bin a table of its bilinear taps (x plane offsets and weights, in double), which every
// channel reads (or scatters into).
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/internal.h"
#include "rules/ops/conv_shape.h"
#include "rules/ops/roi_align_plan.h"

namespace spmd::kernels::cpu {
namespace {

using internal::Gemm;
using internal::InputField;
using internal::MatrixView;
using internal::NewOutput;
using internal::ValuesAs;

// Sizes and strides of one batch entry n and group g: its column matrix col [taps =
// cg * kd * kh * kw, positions = od * oh * ow] (below), its filter rows [og, taps], and
// its out channels as an [og, positions] matrix.
struct ConvLayout {
  int64_t cg, og, taps, positions, in_size;
  int64_t sc, sd, sh, sw, sn;  // x's strides in its layout
  int64_t out_rs, out_cs;      // out's [og, positions] strides: channels first (positions, 1), last (1, O)

  explicit ConvLayout(const conv::ConvPlan& p)
      : cg(p.c / p.groups), og(p.o / p.groups), taps(cg * p.k[0] * p.k[1] * p.k[2]),
        positions(p.out[0] * p.out[1] * p.out[2]), in_size(p.in[0] * p.in[1] * p.in[2]),
        sc(p.channels_last ? 1 : in_size), sd(p.in[1] * p.in[2] * (p.channels_last ? p.c : 1)),
        sh(p.in[2] * (p.channels_last ? p.c : 1)), sw(p.channels_last ? p.c : 1), sn(p.c * in_size),
        out_rs(p.channels_last ? 1 : positions), out_cs(p.channels_last ? p.o : 1) {}

  // Offsets of x[n, g * cg, 0, ...], filter[g * og, 0, ...] and out[n, g * og, 0, ...].
  int64_t XAt(int64_t n, int64_t g) const { return n * sn + g * cg * sc; }
  int64_t FilterAt(int64_t g) const { return g * og * taps; }
  int64_t OutAt(const conv::ConvPlan& p, int64_t n, int64_t g) const {
    return p.channels_last ? n * positions * p.o + g * og : (n * p.o + g * og) * positions;
  }
};

// The column matrix col[(c, i, j, l), (a, b, s)] = x[n, g * cg + c, a * sd - pd + i * dd,
// b * sh - ph + j * dh, s * sw - pw + l * dw], 0 outside x: calls at(k, off) for its
// elements in order, k the element's index in col and off the x element's offset from
// XAt(n, g) (-1 outside x).
template <typename At>
void ForEachColumn(const conv::ConvPlan& p, const ConvLayout& l, At&& at) {
  int64_t k = 0;
  for (int64_t c = 0; c < l.cg; ++c) {
    for (int64_t i = 0; i < p.k[0]; ++i) {
      for (int64_t j = 0; j < p.k[1]; ++j) {
        for (int64_t t = 0; t < p.k[2]; ++t) {
          for (int64_t a = 0; a < p.out[0]; ++a) {
            const int64_t z = a * p.stride[0] - p.pad[0] + i * p.dil[0];
            const bool plane_inside = z >= 0 && z < p.in[0];
            for (int64_t b = 0; b < p.out[1]; ++b) {
              const int64_t h = b * p.stride[1] - p.pad[1] + j * p.dil[1];
              const bool row_inside = plane_inside && h >= 0 && h < p.in[1];
              for (int64_t s = 0; s < p.out[2]; ++s, ++k) {
                const int64_t w = s * p.stride[2] - p.pad[2] + t * p.dil[2];
                at(k, row_inside && w >= 0 && w < p.in[2] ? c * l.sc + z * l.sd + h * l.sh + w * l.sw : -1);
              }
            }
          }
        }
      }
    }
  }
}

template <typename T>
void Im2Col(const conv::ConvPlan& p, const ConvLayout& l, const T* x, T* col) {
  ForEachColumn(p, l, [&](int64_t k, int64_t off) { col[k] = off < 0 ? T(0) : x[off]; });
}

// col_grad = filter_g^T . G (G: an [og, positions] matrix in out's layout), scattered back
// (added) into dst, x's layout at XAt(n, g) (col2im).
template <typename T>
void Col2ImAdd(const conv::ConvPlan& p, const ConvLayout& l, const T* filter, MatrixView<T> grad,
               std::vector<T>& col_grad, T* dst) {
  Gemm<T>(l.taps, l.positions, l.og, MatrixView<T>{filter, 1, l.taps}, grad, col_grad.data(), l.positions, 1,
          /*overwrite=*/true);
  ForEachColumn(p, l, [&](int64_t k, int64_t off) {
    if (off >= 0) dst[off] += col_grad[static_cast<size_t>(k)];
  });
}

// out[n, g's channels, positions] = filter_g [og, taps] . col [taps, positions].
template <typename T>
Tensor RunConv(const Tensor& xt, const Tensor& wt, const conv::ConvPlan& p) {
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
// filter_grad_g += G . col^T, and col_grad = filter_g^T . G scattered back into
// input_grad at the x elements the columns read (col2im).
template <typename T>
Tensors RunConvGrad(const TensorArgs& inputs, const conv::ConvPlan& p) {
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
      Col2ImAdd(p, l, wv.data() + l.FilterAt(g), grad, col_grad, xg + l.XAt(n, g));
    }
  }
  return TensorList(std::move(x_grad), std::move(w_grad));
}

// The transpose is the input gradient of the convolution t.conv (input: out, output: x):
// per batch entry and group, col = filter_g^T . x_g scattered into out (col2im).
template <typename T>
Tensor RunConvTranspose(const Tensor& xt, const Tensor& wt, const conv::ConvTransposePlan& t) {
  const conv::ConvPlan& p = t.conv;
  ValuesAs<T> xv(xt);
  ValuesAs<T> wv(wt);
  Tensor out = NewOutput(t.out_shape, DTypeOf<T>::value, /*zero=*/true);
  const ConvLayout l(p);
  if (NumElements(t.out_shape) == 0 || NumElements(p.out_shape) == 0 || l.taps == 0) return out;
  T* o = out.data<T>();
  internal::CheckOutputShape({l.taps, l.positions});  // the column buffer
  std::vector<T> col(static_cast<size_t>(l.taps * l.positions));
  for (int64_t n = 0; n < p.n; ++n) {
    for (int64_t g = 0; g < p.groups; ++g) {
      const MatrixView<T> x{xv.data() + l.OutAt(p, n, g), l.out_rs, l.out_cs};
      Col2ImAdd(p, l, wv.data() + l.FilterAt(g), x, col, o + l.XAt(n, g));
    }
  }
  return out;
}

Tensors Convolve(const TensorArgs& inputs, const conv::ConvPlan& plan) {
  internal::CheckOutputShape(plan.out_shape);
  return internal::DispatchFloat(internal::ComputeDType(inputs, {0, 1}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return TensorList(RunConv<T>(inputs[0], inputs[1], plan));
  });
}

Tensors ConvolveGrad(const TensorArgs& inputs, const conv::ConvPlan& plan) {
  return internal::DispatchFloat(internal::ComputeDType(inputs, {0, 1, 2}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return RunConvGrad<T>(inputs, plan);
  });
}

// ---- roi_align ----

// One bilinear tap of a bin: the x plane offset it reads and its weight (the neighbour's
// bilinear weight over the bin's sample count).
struct RoiTap {
  int64_t at;
  double weight;
};

// A roi's sampling, checked and scaled once: its image, the scaled box's corner, the bin
// size, the sample grid (at most kMaxGrid a side) and one sample's share of its bin.
struct RoiSampling {
  int64_t image = 0;
  double start_x = 0, start_y = 0, step_x = 0, step_y = 0, grid_x = 0, grid_y = 0;
  int64_t nx = 0, ny = 0;
  double inv_count = 1;
};

// The image of each roi: boxes_num's counts (whole, >= 0, summing to R; InvalidArgument
// inputs[2].data), image 0 for all when absent.
std::vector<int64_t> RoiImageOf(const TensorArgs& inputs, const roi_plan::RoiAlignPlan& p) {
  std::vector<int64_t> image(static_cast<size_t>(p.rois), 0);
  if (!p.has_boxes_num) return image;
  const std::string field = InputField(2, "data");
  const std::vector<int64_t> counts = internal::ReadIds(inputs[2], field);
  int64_t next = 0;
  for (int64_t b = 0; b < p.n; ++b) {
    const int64_t k = counts[static_cast<size_t>(b)];
    if (k < 0) ThrowInvalid(field, "boxes_num[" + std::to_string(b) + "] = " + std::to_string(k) + " is negative");
    if (k > p.rois - next) ThrowInvalid(field, "boxes_num's counts exceed the " + std::to_string(p.rois) + " rois");
    std::fill(image.begin() + next, image.begin() + next + k, b);
    next += k;
  }
  if (next != p.rois) {
    ThrowInvalid(field, "boxes_num's counts sum to " + std::to_string(next) + ", not " + std::to_string(p.rois));
  }
  return image;
}

// One axis of a sample: from a coordinate v (already inside [-1, size]) the low and high
// neighbours and the high one's weight; below 0 reads 0, from size - 1 on reads size - 1.
struct AxisTap {
  int64_t lo, hi;
  double frac;
};
AxisTap TapAlong(double v, int64_t size) {
  if (v <= 0) return {0, size > 1 ? 1 : 0, 0.0};
  const auto lo = static_cast<int64_t>(v);  // floor: v > 0
  if (lo >= size - 1) return {size - 1, size - 1, 0.0};
  return {lo, lo + 1, v - static_cast<double>(lo)};
}

// Every roi's sampling (roi_align_plan.h; the rule in docs/OPS.md), all checked before
// anything is computed: boxes finite (InvalidArgument inputs[1].data), boxes_num's counts,
// each roi's grid at most kMaxGrid a side.
std::vector<RoiSampling> PlanRoiSampling(const TensorArgs& inputs, const roi_plan::RoiAlignPlan& p) {
  const std::vector<int64_t> image = RoiImageOf(inputs, p);
  const std::string field = InputField(1, "data");
  const internal::ValuesAs<double> boxes(inputs[1]);
  for (int64_t i = 0; i < 4 * p.rois; ++i) {
    if (!std::isfinite(boxes[i])) ThrowInvalid(field, "box coordinate " + std::to_string(boxes[i]) + " is not finite");
  }
  const double shift = p.aligned ? 0.5 : 0.0;
  std::vector<RoiSampling> rois(static_cast<size_t>(p.rois));
  for (int64_t r = 0; r < p.rois; ++r) {
    RoiSampling& roi = rois[static_cast<size_t>(r)];
    roi.image = image[static_cast<size_t>(r)];
    const double* b = boxes.data() + 4 * r;
    roi.start_x = b[0] * p.spatial_scale - shift;
    roi.start_y = b[1] * p.spatial_scale - shift;
    const double end_x = b[2] * p.spatial_scale - shift, end_y = b[3] * p.spatial_scale - shift;
    const double size_x = p.aligned ? end_x - roi.start_x : std::max(end_x - roi.start_x, 1.0);
    const double size_y = p.aligned ? end_y - roi.start_y : std::max(end_y - roi.start_y, 1.0);
    roi.step_y = size_y / static_cast<double>(p.pooled_h);
    roi.step_x = size_x / static_cast<double>(p.pooled_w);
    roi.grid_y = p.sampling_ratio > 0 ? static_cast<double>(p.sampling_ratio) : std::ceil(roi.step_y);
    roi.grid_x = p.sampling_ratio > 0 ? static_cast<double>(p.sampling_ratio) : std::ceil(roi.step_x);
    const auto limit = static_cast<double>(roi_plan::kMaxGrid);
    if (!(roi.grid_y <= limit && roi.grid_x <= limit)) {
      ThrowInvalid(field, "roi " + std::to_string(r) + " needs a sample grid over " +
                              std::to_string(roi_plan::kMaxGrid) + " a side");
    }
    roi.ny = roi.grid_y > 0 ? static_cast<int64_t>(roi.grid_y) : 0;
    roi.nx = roi.grid_x > 0 ? static_cast<int64_t>(roi.grid_x) : 0;
    roi.inv_count = 1.0 / static_cast<double>(std::max<int64_t>(roi.ny * roi.nx, 1));
  }
  return rois;
}

// Bin (ph, pw) of a roi: each sample's four taps into `taps` (cleared first); a sample
// outside [-1, H] x [-1, W] has none. One bin's table at a time: at most kMaxGrid^2 samples,
// whatever the number of rois and bins.
void BinTaps(const RoiSampling& roi, const roi_plan::RoiAlignPlan& p, int64_t ph, int64_t pw,
             std::vector<RoiTap>& taps) {
  taps.clear();
  for (int64_t iy = 0; iy < roi.ny; ++iy) {
    const double y =
        roi.start_y + roi.step_y * (static_cast<double>(ph) + (static_cast<double>(iy) + 0.5) / roi.grid_y);
    if (!(y >= -1.0 && y <= static_cast<double>(p.h))) continue;
    const AxisTap ty = TapAlong(y, p.h);
    for (int64_t ix = 0; ix < roi.nx; ++ix) {
      const double x =
          roi.start_x + roi.step_x * (static_cast<double>(pw) + (static_cast<double>(ix) + 0.5) / roi.grid_x);
      if (!(x >= -1.0 && x <= static_cast<double>(p.w))) continue;
      const AxisTap tx = TapAlong(x, p.w);
      taps.push_back({ty.lo * p.w + tx.lo, (1 - ty.frac) * (1 - tx.frac) * roi.inv_count});
      taps.push_back({ty.lo * p.w + tx.hi, (1 - ty.frac) * tx.frac * roi.inv_count});
      taps.push_back({ty.hi * p.w + tx.lo, ty.frac * (1 - tx.frac) * roi.inv_count});
      taps.push_back({ty.hi * p.w + tx.hi, ty.frac * tx.frac * roi.inv_count});
    }
  }
}

// Every roi's bins in order, each with its tap table (BinTaps): fn(r, image, bin, taps).
template <typename Fn>
void ForEachBin(const std::vector<RoiSampling>& rois, const roi_plan::RoiAlignPlan& p, Fn fn) {
  std::vector<RoiTap> taps;
  for (int64_t r = 0; r < p.rois; ++r) {
    const RoiSampling& roi = rois[static_cast<size_t>(r)];
    for (int64_t bin = 0; bin < p.pooled_h * p.pooled_w; ++bin) {
      BinTaps(roi, p, bin / p.pooled_w, bin % p.pooled_w, taps);
      fn(r, roi.image, bin, taps);
    }
  }
}

}  // namespace

// Each out[r, c, bin] = the sum of its taps' x values times their weights, in double.
Tensors roi_align(const TensorArgs& inputs, const Attrs& attrs) {
  internal::CheckArity(inputs, 3);
  const roi_plan::RoiAlignPlan p =
      roi_plan::PlanRoiAlign(inputs[0].shape(), inputs[1].shape(), inputs[2].shape(), attrs);
  internal::CheckOutputShape(p.out);
  const std::vector<RoiSampling> rois = PlanRoiSampling(inputs, p);
  return internal::DispatchFloat(internal::ComputeDType(inputs, {0}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const internal::ValuesAs<T> x(inputs[0]);
    Tensor out = NewOutput(p.out, DTypeOf<T>::value);
    T* o = out.data<T>();
    const int64_t plane = p.h * p.w, bins = p.pooled_h * p.pooled_w;
    ForEachBin(rois, p, [&](int64_t r, int64_t image, int64_t bin, const std::vector<RoiTap>& taps) {
      for (int64_t c = 0; c < p.c; ++c) {
        const T* src = x.data() + (image * p.c + c) * plane;
        double sum = 0;
        for (const RoiTap& t : taps) sum += t.weight * static_cast<double>(src[t.at]);
        o[(r * p.c + c) * bins + bin] = static_cast<T>(sum);
      }
    });
    return TensorList(std::move(out));
  });
}

// x_grad: every tap adds its weight times its bin's out_grad to the x element it reads,
// accumulated in double; x's values are not read.
Tensors roi_align_grad(const TensorArgs& inputs, const Attrs& attrs) {
  internal::CheckArity(inputs, 4);
  const roi_plan::RoiAlignPlan p = roi_plan::PlanRoiAlignGrad(inputs[0].shape(), inputs[1].shape(),
                                                              inputs[2].shape(), inputs[3].shape(), attrs);
  internal::CheckOutputShape(inputs[0].shape());
  const std::vector<RoiSampling> rois = PlanRoiSampling(inputs, p);
  return internal::DispatchFloat(internal::ComputeDType(inputs, {3}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const internal::ValuesAs<T> g(inputs[3]);
    const int64_t plane = p.h * p.w, bins = p.pooled_h * p.pooled_w;
    std::vector<double> acc(static_cast<size_t>(p.n * p.c * plane), 0.0);
    ForEachBin(rois, p, [&](int64_t r, int64_t image, int64_t bin, const std::vector<RoiTap>& taps) {
      for (int64_t c = 0; c < p.c; ++c) {
        const auto gv = static_cast<double>(g.data()[(r * p.c + c) * bins + bin]);
        double* dst = acc.data() + (image * p.c + c) * plane;
        for (const RoiTap& t : taps) dst[t.at] += t.weight * gv;
      }
    });
    Tensor x_grad = NewOutput(inputs[0].shape(), DTypeOf<T>::value);
    T* o = x_grad.data<T>();
    for (size_t i = 0; i < acc.size(); ++i) o[i] = static_cast<T>(acc[i]);
    return TensorList(std::move(x_grad));
  });
}

Tensors conv2d(const TensorArgs& inputs, const Attrs& attrs) {
  internal::CheckArity(inputs, 2);
  return Convolve(inputs, conv::PlanConv2d(inputs[0].shape(), inputs[1].shape(), attrs));
}

// Paddle's depthwise_conv2d is conv2d (groups = the input channels).
Tensors depthwise_conv2d(const TensorArgs& inputs, const Attrs& attrs) { return conv2d(inputs, attrs); }

Tensors conv3d(const TensorArgs& inputs, const Attrs& attrs) {
  internal::CheckArity(inputs, 2);
  return Convolve(inputs, conv::PlanConv3d(inputs[0].shape(), inputs[1].shape(), attrs));
}

Tensors conv2d_grad(const TensorArgs& inputs, const Attrs& attrs) {
  internal::CheckArity(inputs, 3);
  return ConvolveGrad(inputs,
                      conv::PlanConv2dGrad(inputs[0].shape(), inputs[1].shape(), inputs[2].shape(), attrs));
}

Tensors conv3d_grad(const TensorArgs& inputs, const Attrs& attrs) {
  internal::CheckArity(inputs, 3);
  return ConvolveGrad(inputs,
                      conv::PlanConv3dGrad(inputs[0].shape(), inputs[1].shape(), inputs[2].shape(), attrs));
}

Tensors conv2d_transpose(const TensorArgs& inputs, const Attrs& attrs) {
  internal::CheckArity(inputs, 2);
  const conv::ConvTransposePlan plan = conv::PlanConv2dTranspose(inputs[0].shape(), inputs[1].shape(), attrs);
  internal::CheckOutputShape(plan.out_shape);
  return internal::DispatchFloat(internal::ComputeDType(inputs, {0, 1}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return TensorList(RunConvTranspose<T>(inputs[0], inputs[1], plan));
  });
}

}  // namespace spmd::kernels::cpu
