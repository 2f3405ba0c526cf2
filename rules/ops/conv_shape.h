// conv2d's shape arithmetic, shared by the rules, the references and the CPU kernels of
// conv2d and conv2d_grad (as rules/engine/shape_util.h is for the other ops): Paddle's attrs
// (strides, paddings, padding_algorithm, dilations, groups, data_format) turned into one
// plan, with the same validation and error fields in all of them. Header-only; no value
// arithmetic.
//
// Example: x [2, 4, 5, 5] NCHW, filter [6, 2, 3, 3], groups 2, strides [2, 2],
// paddings [1, 1] -> out [2, 6, 3, 3] (each output channel o reads the 2 input channels of
// group o / 3).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rules/model/attrs.h"
#include "rules/model/error.h"
#include "rules/engine/shape_util.h"

namespace spmd::conv {

struct Conv2dPlan {
  bool channels_last = false;  // data_format NHWC (x and out [N, H, W, C])
  int64_t n = 0, c = 0, h = 0, w = 0;  // x
  int64_t o = 0, kh = 0, kw = 0;        // filter [o, c / groups, kh, kw]
  int64_t groups = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t dil_h = 1, dil_w = 1;
  int64_t pad_top = 0, pad_left = 0;  // the bottom and right pads only set the output size
  int64_t oh = 0, ow = 0;
  std::vector<int64_t> out_shape;  // in x's layout
};

// Paddle's padding: 2 values (both sides of H, of W) or 4 (top, bottom, left, right);
// "SAME" pads so that out = ceil(in / stride) (the odd pad after, dilation taken as 1, as
// Paddle's UpdatePaddingAndDilation); "VALID" pads nothing. Throws
// SpmdError(kInvalidArgument) naming the attr or input at fault.
inline Conv2dPlan PlanConv2d(const std::vector<int64_t>& x, const std::vector<int64_t>& filter,
                             const Attrs& attrs) {
  Conv2dPlan p;
  const std::string& format = attrs.GetString("data_format");
  if (format == "NHWC") {
    p.channels_last = true;
  } else if (format != "NCHW" && format != "AnyLayout") {
    ThrowInvalid("attrs.data_format", "expected NCHW or NHWC, got '" + format + "'");
  }
  if (x.size() != 4) {
    ThrowInvalid(shape::InputField(0, "shape"), "conv2d needs a 4-D input, got " + shape::ShapeString(x));
  }
  if (filter.size() != 4) {
    ThrowInvalid(shape::InputField(1, "shape"), "conv2d needs a 4-D filter [out_channels, "
                 "in_channels / groups, kh, kw], got " + shape::ShapeString(filter));
  }
  p.n = x[0];
  p.c = p.channels_last ? x[3] : x[1];
  p.h = p.channels_last ? x[1] : x[2];
  p.w = p.channels_last ? x[2] : x[3];
  p.o = filter[0];
  p.kh = filter[2];
  p.kw = filter[3];
  p.groups = attrs.GetInt("groups");
  if (p.groups < 1) ThrowInvalid("attrs.groups", "groups must be >= 1, got " + std::to_string(p.groups));
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
  const std::vector<int64_t>& strides = attrs.GetInts("strides");
  const std::vector<int64_t>& dilations = attrs.GetInts("dilations");
  const std::vector<int64_t>& paddings = attrs.GetInts("paddings");
  if (strides.size() != 2 || strides[0] < 1 || strides[1] < 1) {
    ThrowInvalid("attrs.strides", "expected two strides >= 1");
  }
  if (dilations.size() != 2 || dilations[0] < 1 || dilations[1] < 1) {
    ThrowInvalid("attrs.dilations", "expected two dilations >= 1");
  }
  if (paddings.size() != 2 && paddings.size() != 4) {
    ThrowInvalid("attrs.paddings", "expected 2 or 4 paddings, got " + std::to_string(paddings.size()));
  }
  for (int64_t v : paddings) {
    if (v < 0) ThrowInvalid("attrs.paddings", "paddings must be >= 0");
  }
  // Sizes and attrs far beyond any real convolution would overflow the arithmetic below.
  constexpr int64_t kLimit = int64_t{1} << 30;
  if (p.h > kLimit || p.w > kLimit) ThrowUnsupported(shape::InputField(0, "shape"), "spatial size above 2^30");
  if (p.kh > kLimit || p.kw > kLimit) ThrowUnsupported(shape::InputField(1, "shape"), "filter size above 2^30");
  for (const auto* list : {&strides, &dilations, &paddings}) {
    for (int64_t v : *list) {
      if (v > kLimit) ThrowUnsupported("attrs", "a stride, dilation or padding above 2^30");
    }
  }
  p.stride_h = strides[0];
  p.stride_w = strides[1];
  p.dil_h = dilations[0];
  p.dil_w = dilations[1];
  int64_t pad_bottom = 0, pad_right = 0;
  if (paddings.size() == 2) {
    p.pad_top = pad_bottom = paddings[0];
    p.pad_left = pad_right = paddings[1];
  } else {
    p.pad_top = paddings[0];
    pad_bottom = paddings[1];
    p.pad_left = paddings[2];
    pad_right = paddings[3];
  }
  const std::string& algorithm = attrs.GetString("padding_algorithm");
  if (algorithm == "SAME") {
    auto same = [](int64_t in, int64_t stride, int64_t k, int64_t& before, int64_t& after) {
      const int64_t out = (in + stride - 1) / stride;
      const int64_t total = std::max<int64_t>((out - 1) * stride + k - in, 0);
      before = total / 2;
      after = total - before;
    };
    same(p.h, p.stride_h, p.kh, p.pad_top, pad_bottom);
    same(p.w, p.stride_w, p.kw, p.pad_left, pad_right);
    p.dil_h = p.dil_w = 1;
  } else if (algorithm == "VALID") {
    p.pad_top = pad_bottom = p.pad_left = pad_right = 0;
  } else if (algorithm != "EXPLICIT") {
    ThrowInvalid("attrs.padding_algorithm",
                 "expected EXPLICIT, SAME or VALID, got '" + algorithm + "'");
  }
  const int64_t span_h = (p.kh - 1) * p.dil_h + 1;
  const int64_t span_w = (p.kw - 1) * p.dil_w + 1;
  const int64_t in_h = p.h + p.pad_top + pad_bottom;
  const int64_t in_w = p.w + p.pad_left + pad_right;
  if (p.kh < 1 || p.kw < 1 || span_h > in_h || span_w > in_w) {
    ThrowInvalid(shape::InputField(1, "shape"),
                 "the dilated filter " + std::to_string(span_h) + "x" + std::to_string(span_w) +
                     " does not fit the padded input " + std::to_string(in_h) + "x" +
                     std::to_string(in_w));
  }
  p.oh = (in_h - span_h) / p.stride_h + 1;
  p.ow = (in_w - span_w) / p.stride_w + 1;
  p.out_shape = p.channels_last ? std::vector<int64_t>{p.n, p.oh, p.ow, p.o}
                                : std::vector<int64_t>{p.n, p.o, p.oh, p.ow};
  return p;
}

// conv2d_grad's inputs (x, filter, out_grad): conv2d's plan for x and the filter, and
// out_grad of exactly conv2d's output shape for them (else InvalidArgument naming
// inputs[2].shape).
inline Conv2dPlan PlanConv2dGrad(const std::vector<int64_t>& x, const std::vector<int64_t>& filter,
                                 const std::vector<int64_t>& out_grad, const Attrs& attrs) {
  Conv2dPlan p = PlanConv2d(x, filter, attrs);
  if (out_grad != p.out_shape) {
    ThrowInvalid(shape::InputField(2, "shape"), "out_grad " + shape::ShapeString(out_grad) +
                                                    " is not conv2d's output shape " +
                                                    shape::ShapeString(p.out_shape));
  }
  return p;
}

}  // namespace spmd::conv
