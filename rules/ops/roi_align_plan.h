// roi_align and roi_align_grad's plan (docs/OPS.md "roi_align"): attr reads, validation of
// shapes and attrs (error type and field) and the output shapes, written once for the rules
// (rules/ops/conv.cc), the float64 references (reference/ops_conv.cc), the CPU kernels
// (kernels/cpu/conv.cc) and the host-staged CUDA entries (kernels/cuda/staged.cc). The
// boxes' and boxes_num's values are not planned: each backend reads and checks them (every
// box finite, boxes_num whole, >= 0 and summing to R, a sample grid of at most kMaxGrid per
// side) and computes the samples' geometry its own way. Header-only; no value arithmetic.
//
// Example: x [2, 3, 6, 5], boxes [4, 4], boxes_num [2], pooled 2 x 3 -> out [4, 3, 2, 3].
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "rules/model/attrs.h"
#include "rules/model/error.h"
#include "rules/engine/shape_util.h"

namespace spmd::roi_plan {

using Dims = std::vector<int64_t>;

// The most samples per bin side: sampling_ratio above it is InvalidArgument
// (attrs.sampling_ratio), and so is a roi whose adaptive grid ceil(roi / pooled) exceeds it
// (inputs[1].data; a roi that large spans more than 1024 output bins' worth of pixels).
inline constexpr int64_t kMaxGrid = 1024;

struct RoiAlignPlan {
  int64_t n = 0, c = 0, h = 0, w = 0;  // x [N, C, H, W]
  int64_t rois = 0;                    // boxes [R, 4]
  bool has_boxes_num = false;          // boxes_num [N]; 0-d: absent, every roi is image 0's
  int64_t pooled_h = 1, pooled_w = 1;
  double spatial_scale = 1.0;
  int64_t sampling_ratio = -1;         // <= 0: adaptive, ceil(roi size / pooled size)
  bool aligned = false;
  Dims out;                            // [R, C, pooled_h, pooled_w]
};

// x [N, C, H, W] (H, W >= 1), boxes [R, 4] (x1, y1, x2, y2), boxes_num [N] or 0-d (absent:
// every roi belongs to image 0, which must then exist when R > 0); pooled_height and
// pooled_width >= 1, spatial_scale finite and > 0, sampling_ratio <= kMaxGrid.
inline RoiAlignPlan PlanRoiAlign(const Dims& x, const Dims& boxes, const Dims& boxes_num, const Attrs& attrs) {
  if (x.size() != 4) {
    ThrowInvalid(shape::InputField(0, "shape"), "x must be [N, C, H, W], got " + shape::ShapeString(x));
  }
  if (x[2] < 1 || x[3] < 1) {
    ThrowInvalid(shape::InputField(0, "shape"), "x's H and W must be >= 1, got " + shape::ShapeString(x));
  }
  if (boxes.size() != 2 || boxes[1] != 4) {
    ThrowInvalid(shape::InputField(1, "shape"), "boxes must be [R, 4], got " + shape::ShapeString(boxes));
  }
  RoiAlignPlan p;
  p.n = x[0];
  p.c = x[1];
  p.h = x[2];
  p.w = x[3];
  p.rois = boxes[0];
  p.has_boxes_num = !boxes_num.empty();
  if (p.has_boxes_num && (boxes_num.size() != 1 || boxes_num[0] != p.n)) {
    ThrowInvalid(shape::InputField(2, "shape"), "boxes_num must be [N] = [" + std::to_string(p.n) +
                                                    "] or 0-d (absent), got " + shape::ShapeString(boxes_num));
  }
  if (!p.has_boxes_num && p.rois > 0 && p.n < 1) {
    ThrowInvalid(shape::InputField(0, "shape"), "rois without boxes_num belong to image 0, but x has no image");
  }
  p.pooled_h = attrs.GetInt("pooled_height");
  p.pooled_w = attrs.GetInt("pooled_width");
  if (p.pooled_h < 1) ThrowInvalid("attrs.pooled_height", "pooled_height must be >= 1");
  if (p.pooled_w < 1) ThrowInvalid("attrs.pooled_width", "pooled_width must be >= 1");
  p.spatial_scale = attrs.GetFloat("spatial_scale");
  if (!std::isfinite(p.spatial_scale) || p.spatial_scale <= 0) {
    ThrowInvalid("attrs.spatial_scale", "spatial_scale must be finite and > 0");
  }
  p.sampling_ratio = attrs.GetInt("sampling_ratio");
  if (p.sampling_ratio > kMaxGrid) {
    ThrowInvalid("attrs.sampling_ratio", "sampling_ratio must be at most " + std::to_string(kMaxGrid));
  }
  p.aligned = attrs.GetBool("aligned");
  p.out = {p.rois, p.c, p.pooled_h, p.pooled_w};
  return p;
}

// roi_align_grad(x, boxes, boxes_num, out_grad): roi_align's plan, out_grad of its out shape
// (inputs[3].shape); x_grad has x's shape.
inline RoiAlignPlan PlanRoiAlignGrad(const Dims& x, const Dims& boxes, const Dims& boxes_num, const Dims& out_grad,
                                     const Attrs& attrs) {
  RoiAlignPlan p = PlanRoiAlign(x, boxes, boxes_num, attrs);
  if (out_grad != p.out) {
    ThrowInvalid(shape::InputField(3, "shape"), "out_grad must be roi_align's out " + shape::ShapeString(p.out) +
                                                    ", got " + shape::ShapeString(out_grad));
  }
  return p;
}

}  // namespace spmd::roi_plan
