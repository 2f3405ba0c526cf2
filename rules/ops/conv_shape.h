// The conv family's shape arithmetic, shared by the rules, the references and the CPU
// kernels of conv2d, conv3d, their grads and conv2d_transpose (as rules/engine/shape_util.h
// is for the other ops): Paddle's attrs (strides, paddings, padding_algorithm, dilations,
// groups, data_format; the transpose's output_padding and output_size) turned into one
// plan, with the same validation and error fields in all of them. Header-only; no value
// arithmetic.
//
// One plan for 2-D and 3-D: the spatial dims are held as depth, height, width, and a 2-D
// convolution's depth is the identity (size 1, kernel 1, stride and dilation 1, no
// padding), so the loops of the reference and the kernels are written once, over three.
//
// Example: x [2, 4, 5, 5] NCHW, filter [6, 2, 3, 3], groups 2, strides [2, 2],
// paddings [1, 1] -> out [2, 6, 3, 3] (each output channel o reads the 2 input channels of
// group o / 3).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "rules/model/attrs.h"
#include "rules/model/error.h"
#include "rules/engine/shape_util.h"

namespace spmd::conv {

// Per spatial dim: depth, height, width.
using Spatial = std::array<int64_t, 3>;
inline constexpr int kMaxSpatial = 3;

struct ConvPlan {
  int spatial = 2;               // 2 (NCHW / NHWC) or 3 (NCDHW / NDHWC)
  bool channels_last = false;    // x and out [N, spatial..., C]
  int64_t n = 0, c = 0;          // x's batch and channels
  int64_t o = 0;                 // filter [o, c / groups, k...]
  int64_t groups = 1;
  Spatial in{1, 1, 1};           // x's spatial sizes
  Spatial k{1, 1, 1};            // the filter's
  Spatial stride{1, 1, 1}, dil{1, 1, 1};
  Spatial pad{0, 0, 0};          // before each dim
  Spatial pad_after{0, 0, 0};    // after each dim (only sets the output size)
  Spatial out{1, 1, 1};          // out's spatial sizes
  std::vector<int64_t> out_shape;  // in x's layout

  // The first used entry of the Spatial arrays: 1 for 2-D, 0 for 3-D.
  size_t first() const { return static_cast<size_t>(kMaxSpatial - spatial); }
};

// [n, ch, sizes...] (channels first) or [n, sizes..., ch], the used entries of `sizes`.
inline std::vector<int64_t> LayoutShape(int64_t n, int64_t ch, const Spatial& sizes, int spatial,
                                        bool channels_last) {
  std::vector<int64_t> shape{n};
  if (!channels_last) shape.push_back(ch);
  for (size_t d = static_cast<size_t>(kMaxSpatial - spatial); d < sizes.size(); ++d) shape.push_back(sizes[d]);
  if (channels_last) shape.push_back(ch);
  return shape;
}

namespace detail {

// data_format for `spatial` dims: NCHW / NHWC (2-D) or NCDHW / NDHWC (3-D); AnyLayout is
// channels first. Returns whether the channels are last.
inline bool ChannelsLast(const Attrs& attrs, int spatial) {
  const std::string& format = attrs.GetString("data_format");
  const std::string first = spatial == 3 ? "NCDHW" : "NCHW";
  const std::string last = spatial == 3 ? "NDHWC" : "NHWC";
  if (format == last) return true;
  if (format != first && format != "AnyLayout") {
    ThrowInvalid("attrs.data_format", "expected " + first + " or " + last + ", got '" + format + "'");
  }
  return false;
}

// x's batch, channels and spatial sizes from its layout; x must have rank spatial + 2.
inline void ReadInput(const std::vector<int64_t>& x, ConvPlan& p, const char* op) {
  const size_t rank = static_cast<size_t>(p.spatial) + 2;
  if (x.size() != rank) {
    ThrowInvalid(shape::InputField(0, "shape"), std::string(op) + " needs a " + std::to_string(rank) +
                                                    "-D input, got " + shape::ShapeString(x));
  }
  p.n = x[0];
  p.c = p.channels_last ? x[rank - 1] : x[1];
  const size_t at = p.channels_last ? 1 : 2;
  for (int s = 0; s < p.spatial; ++s) p.in[p.first() + static_cast<size_t>(s)] = x[at + static_cast<size_t>(s)];
}

// The filter's kernel sizes; the filter must have rank spatial + 2.
inline void ReadKernel(const std::vector<int64_t>& filter, ConvPlan& p, const char* op, const char* dims) {
  const size_t rank = static_cast<size_t>(p.spatial) + 2;
  if (filter.size() != rank) {
    ThrowInvalid(shape::InputField(1, "shape"), std::string(op) + " needs a " + std::to_string(rank) +
                                                    "-D filter " + dims + ", got " + shape::ShapeString(filter));
  }
  for (int s = 0; s < p.spatial; ++s) p.k[p.first() + static_cast<size_t>(s)] = filter[2 + static_cast<size_t>(s)];
}

inline int64_t ReadGroups(const Attrs& attrs) {
  const int64_t groups = attrs.GetInt("groups");
  if (groups < 1) ThrowInvalid("attrs.groups", "groups must be >= 1, got " + std::to_string(groups));
  return groups;
}

// strides, dilations, paddings and padding_algorithm for p.in and p.k, with Paddle's rules:
// paddings give both sides of each dim (one value per dim) or before, after per dim;
// "SAME" pads so that in / stride rounded up positions fit (the odd pad after, dilation
// taken as 1, as Paddle's UpdatePaddingAndDilation), "VALID" pads nothing. Fills p.stride,
// p.dil, p.pad and p.pad_after.
inline void ReadWindow(const Attrs& attrs, ConvPlan& p) {
  const auto spatial = static_cast<size_t>(p.spatial);
  const std::string count = std::to_string(spatial);
  const std::vector<int64_t>& strides = attrs.GetInts("strides");
  const std::vector<int64_t>& dilations = attrs.GetInts("dilations");
  const std::vector<int64_t>& paddings = attrs.GetInts("paddings");
  if (strides.size() != spatial || std::any_of(strides.begin(), strides.end(), [](int64_t v) { return v < 1; })) {
    ThrowInvalid("attrs.strides", "expected " + count + " strides >= 1");
  }
  if (dilations.size() != spatial ||
      std::any_of(dilations.begin(), dilations.end(), [](int64_t v) { return v < 1; })) {
    ThrowInvalid("attrs.dilations", "expected " + count + " dilations >= 1");
  }
  if (paddings.size() != spatial && paddings.size() != 2 * spatial) {
    ThrowInvalid("attrs.paddings", "expected " + count + " or " + std::to_string(2 * spatial) +
                                       " paddings, got " + std::to_string(paddings.size()));
  }
  for (int64_t v : paddings) {
    if (v < 0) ThrowInvalid("attrs.paddings", "paddings must be >= 0");
  }
  // Sizes and attrs far beyond any real convolution would overflow the arithmetic below.
  constexpr int64_t kLimit = int64_t{1} << 30;
  for (size_t d = p.first(); d < p.in.size(); ++d) {
    if (p.in[d] > kLimit) ThrowUnsupported(shape::InputField(0, "shape"), "spatial size above 2^30");
  }
  for (size_t d = p.first(); d < p.k.size(); ++d) {
    if (p.k[d] > kLimit) ThrowUnsupported(shape::InputField(1, "shape"), "filter size above 2^30");
  }
  for (const auto* list : {&strides, &dilations, &paddings}) {
    for (int64_t v : *list) {
      if (v > kLimit) ThrowUnsupported("attrs", "a stride, dilation or padding above 2^30");
    }
  }
  for (size_t s = 0; s < spatial; ++s) {
    const size_t d = p.first() + s;
    p.stride[d] = strides[s];
    p.dil[d] = dilations[s];
    p.pad[d] = paddings.size() == spatial ? paddings[s] : paddings[2 * s];
    p.pad_after[d] = paddings.size() == spatial ? paddings[s] : paddings[2 * s + 1];
  }
  const std::string& algorithm = attrs.GetString("padding_algorithm");
  if (algorithm == "SAME") {
    for (size_t d = p.first(); d < p.in.size(); ++d) {
      const int64_t out = (p.in[d] + p.stride[d] - 1) / p.stride[d];
      const int64_t total = std::max<int64_t>((out - 1) * p.stride[d] + p.k[d] - p.in[d], 0);
      p.pad[d] = total / 2;
      p.pad_after[d] = total - p.pad[d];
      p.dil[d] = 1;
    }
  } else if (algorithm == "VALID") {
    p.pad = p.pad_after = Spatial{0, 0, 0};
  } else if (algorithm != "EXPLICIT") {
    ThrowInvalid("attrs.padding_algorithm", "expected EXPLICIT, SAME or VALID, got '" + algorithm + "'");
  }
}

inline std::string SizesString(const Spatial& sizes, size_t first) {
  std::string text;
  for (size_t d = first; d < sizes.size(); ++d) text += (d > first ? "x" : "") + std::to_string(sizes[d]);
  return text;
}

}  // namespace detail

// conv2d (spatial 2) or conv3d (spatial 3): x [N, C, spatial...] (channels last: [N,
// spatial..., C]), filter [O, C / groups, k...] in every layout (as Paddle); out [N, O,
// out...] in x's layout, out = (in + pads - ((k - 1) dilation + 1)) / stride + 1. Throws
// SpmdError(kInvalidArgument) naming the attr or input at fault.
inline ConvPlan PlanConv(const std::vector<int64_t>& x, const std::vector<int64_t>& filter, const Attrs& attrs,
                         int spatial) {
  ConvPlan p;
  p.spatial = spatial;
  const char* op = spatial == 3 ? "conv3d" : "conv2d";
  p.channels_last = detail::ChannelsLast(attrs, spatial);
  detail::ReadInput(x, p, op);
  detail::ReadKernel(filter, p, op,
                     spatial == 3 ? "[out_channels, in_channels / groups, kd, kh, kw]"
                                  : "[out_channels, in_channels / groups, kh, kw]");
  p.o = filter[0];
  p.groups = detail::ReadGroups(attrs);
  if (p.c % p.groups != 0 || filter[1] != p.c / p.groups) {
    ThrowInvalid(shape::InputField(1, "shape"),
                 "filter " + shape::ShapeString(filter) + " needs in_channels / groups = " +
                     std::to_string(p.c) + " / " + std::to_string(p.groups) + " at dim 1");
  }
  if (p.o % p.groups != 0) {
    ThrowInvalid(shape::InputField(1, "shape"), "out_channels " + std::to_string(p.o) +
                                                    " is not divisible by groups " +
                                                    std::to_string(p.groups));
  }
  detail::ReadWindow(attrs, p);
  Spatial span{1, 1, 1}, padded{1, 1, 1};
  bool fits = true;
  for (size_t d = p.first(); d < p.in.size(); ++d) {
    span[d] = (p.k[d] - 1) * p.dil[d] + 1;
    padded[d] = p.in[d] + p.pad[d] + p.pad_after[d];
    fits = fits && p.k[d] >= 1 && span[d] <= padded[d];
  }
  if (!fits) {
    ThrowInvalid(shape::InputField(1, "shape"), "the dilated filter " + detail::SizesString(span, p.first()) +
                                                    " does not fit the padded input " +
                                                    detail::SizesString(padded, p.first()));
  }
  for (size_t d = p.first(); d < p.in.size(); ++d) p.out[d] = (padded[d] - span[d]) / p.stride[d] + 1;
  p.out_shape = LayoutShape(p.n, p.o, p.out, spatial, p.channels_last);
  return p;
}

inline ConvPlan PlanConv2d(const std::vector<int64_t>& x, const std::vector<int64_t>& filter, const Attrs& attrs) {
  return PlanConv(x, filter, attrs, 2);
}

inline ConvPlan PlanConv3d(const std::vector<int64_t>& x, const std::vector<int64_t>& filter, const Attrs& attrs) {
  return PlanConv(x, filter, attrs, 3);
}

// conv2d_grad's and conv3d_grad's inputs (x, filter, out_grad): the convolution's plan for
// x and the filter, and out_grad of exactly its output shape (else InvalidArgument naming
// inputs[2].shape).
inline ConvPlan PlanConvGrad(const std::vector<int64_t>& x, const std::vector<int64_t>& filter,
                             const std::vector<int64_t>& out_grad, const Attrs& attrs, int spatial) {
  ConvPlan p = PlanConv(x, filter, attrs, spatial);
  if (out_grad != p.out_shape) {
    ThrowInvalid(shape::InputField(2, "shape"), "out_grad " + shape::ShapeString(out_grad) + " is not " +
                                                    (spatial == 3 ? "conv3d" : "conv2d") +
                                                    "'s output shape " + shape::ShapeString(p.out_shape));
  }
  return p;
}

inline ConvPlan PlanConv2dGrad(const std::vector<int64_t>& x, const std::vector<int64_t>& filter,
                               const std::vector<int64_t>& out_grad, const Attrs& attrs) {
  return PlanConvGrad(x, filter, out_grad, attrs, 2);
}

inline ConvPlan PlanConv3dGrad(const std::vector<int64_t>& x, const std::vector<int64_t>& filter,
                               const std::vector<int64_t>& out_grad, const Attrs& attrs) {
  return PlanConvGrad(x, filter, out_grad, attrs, 3);
}

// ---- conv2d_transpose ----

// conv2d_transpose(x, filter): x [N, C, H, W] (NHWC [N, H, W, C]), filter [C, M / groups,
// kh, kw]; out [N, M, OH, OW] in x's layout with OH = (H - 1) sh - pt - pb + (kh - 1) dh +
// 1 + output_padding (output_padding in [0, max(sh, dh))), or output_size when given (in
// [that size without output_padding, + sh)); paddings, SAME and VALID are conv2d's, taken
// on x's spatial sizes (Paddle's ConvTransposeInferMeta).
//
// The op is the input gradient of the convolution `conv`: its input has out's shape, its
// filter is this one read as [C out channels, M / groups in channels, kh, kw], its output
// x's shape (conv.out is H, W even where that convolution's own arithmetic would give more
// rows: output_padding >= stride). out[p] sums x[h] filter[.., i] over the taps with
// p = h sh - pt + i dh.
struct ConvTransposePlan {
  ConvPlan conv;
  std::vector<int64_t> out_shape;  // conv's input shape
  Spatial output_padding{0, 0, 0};  // out's size beyond (H - 1) sh - pads + span, per dim
};

inline ConvTransposePlan PlanConvTranspose(const std::vector<int64_t>& x, const std::vector<int64_t>& filter,
                                           const Attrs& attrs, int spatial) {
  ConvTransposePlan t;
  ConvPlan& p = t.conv;  // x's sizes are read into p.in first, then moved to p.out
  p.spatial = spatial;
  const char* op = spatial == 3 ? "conv3d_transpose" : "conv2d_transpose";
  p.channels_last = detail::ChannelsLast(attrs, spatial);
  detail::ReadInput(x, p, op);
  detail::ReadKernel(filter, p, op, "[in_channels, out_channels / groups, kh, kw]");
  p.groups = detail::ReadGroups(attrs);
  if (filter[0] != p.c || p.c % p.groups != 0) {
    ThrowInvalid(shape::InputField(1, "shape"),
                 "filter " + shape::ShapeString(filter) + " needs x's in_channels " + std::to_string(p.c) +
                     " at dim 0, divisible by groups " + std::to_string(p.groups));
  }
  if (filter[1] > std::numeric_limits<int64_t>::max() / p.groups) {
    ThrowUnsupported(shape::InputField(1, "shape"), "out_channels / groups x groups overflows int64");
  }
  detail::ReadWindow(attrs, p);  // SAME from x's sizes, as Paddle
  for (size_t d = p.first(); d < p.in.size(); ++d) {
    if (p.k[d] < 1) ThrowInvalid(shape::InputField(1, "shape"), "kernel sizes must be >= 1");
    if (p.in[d] < 1) ThrowInvalid(shape::InputField(0, "shape"), "spatial sizes must be >= 1");
  }
  const auto count = static_cast<size_t>(spatial);
  const std::vector<int64_t>& output_padding = attrs.GetInts("output_padding");
  const std::vector<int64_t>& output_size = attrs.GetInts("output_size");
  if (!output_padding.empty() && output_padding.size() != count) {
    ThrowInvalid("attrs.output_padding", "expected none or " + std::to_string(count) + " values");
  }
  if (!output_size.empty() && output_size.size() != count) {
    ThrowInvalid("attrs.output_size", "expected none or " + std::to_string(count) + " values");
  }
  if (!output_size.empty() && !output_padding.empty()) {
    ThrowInvalid("attrs.output_padding", "give output_size or output_padding, not both");
  }
  Spatial out{1, 1, 1};
  for (size_t s = 0; s < count; ++s) {
    const size_t d = p.first() + s;
    const int64_t base = (p.in[d] - 1) * p.stride[d] - p.pad[d] - p.pad_after[d] + (p.k[d] - 1) * p.dil[d] + 1;
    if (!output_size.empty()) {
      if (output_size[s] < base || output_size[s] >= base + p.stride[d]) {
        ThrowInvalid("attrs.output_size", "output_size " + shape::ShapeString(output_size) + " needs dim " +
                                              std::to_string(s) + " in [" + std::to_string(base) + ", " +
                                              std::to_string(base + p.stride[d]) + ")");
      }
      out[d] = output_size[s];
    } else {
      const int64_t extra = output_padding.empty() ? 0 : output_padding[s];
      if (extra < 0 || extra >= std::max(p.stride[d], p.dil[d])) {
        ThrowInvalid("attrs.output_padding", "output_padding " + shape::ShapeString(output_padding) +
                                                 " needs dim " + std::to_string(s) +
                                                 " in [0, max(stride, dilation)) = [0, " +
                                                 std::to_string(std::max(p.stride[d], p.dil[d])) + ")");
      }
      out[d] = base + extra;
    }
    if (out[d] < 1) {
      ThrowInvalid("attrs.paddings", "the paddings leave an output size " + std::to_string(out[d]) + " < 1");
    }
    t.output_padding[d] = out[d] - base;
  }
  // The convolution this transposes: input = out, output = x.
  p.o = p.c;
  p.c = filter[1] * p.groups;
  p.out = p.in;
  p.in = out;
  p.out_shape = x;
  t.out_shape = LayoutShape(p.n, p.c, p.in, spatial, p.channels_last);
  return t;
}

inline ConvTransposePlan PlanConv2dTranspose(const std::vector<int64_t>& x, const std::vector<int64_t>& filter,
                                             const Attrs& attrs) {
  return PlanConvTranspose(x, filter, attrs, 2);
}

}  // namespace spmd::conv
