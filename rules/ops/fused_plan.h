// The plan of fused_rotary_position_embedding (rules/ops/fused.cc): attr reads, typed
// validation and shapes, written once for the reference (reference/ops_fused.cc), the CPU
// kernel (kernels/cpu/fused.cc) and the CUDA kernel (kernels/cuda/fused.cu). bmm_grad's
// plan is with matmul's (rules/ops/contraction_plan.h). Header-only; no value arithmetic.
//
// Example: q, k [2, 8, 4, 16] (batch, seq, heads, head_dim), sin, cos [8, 16] -> out q, k
// (the rotated tensors keep their shapes); time_major: q [seq, batch, heads, head_dim].
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rules/model/attrs.h"
#include "rules/model/error.h"
#include "rules/engine/op_plan.h"
#include "rules/engine/shape_util.h"

namespace spmd::plan {

struct RopePlan {
  bool neox = false;        // use_neox_rotary_style: pairs (2i, 2i + 1); else rotate half
  bool time_major = false;  // q [seq, batch, heads, head_dim]; else [batch, seq, ...]
  size_t rotated = 1;       // q, k, v: inputs [0, rotated); sin, cos the next two
  int64_t head_dim = 0;     // even
  int seq_dim = 1;          // q's sequence dim
};

namespace internal {
// The sequence length of sin / cos (input i): [seq, head_dim], or 4-D with the sequence at
// dim 1 and 1 on the other leading dims.
inline int64_t RopeTableSeq(const Shape& table, size_t i) {
  constexpr int kSeqDim = 1;
  const std::string field = shape::InputField(i, "shape");
  if (table.size() == 2) return table[0];
  if (table.size() != 4) ThrowInvalid(field, "sin and cos must be [seq, head_dim] or 4-D");
  for (int d = 0; d < 3; ++d) {
    if (d != kSeqDim && table[d] != 1) {
      ThrowInvalid(field, "sin and cos must be 1 on every dim but the sequence and head dims");
    }
  }
  return table[kSeqDim];
}
}  // namespace internal

// fused_rotary_position_embedding (q, [k, [v,]] sin, cos) -> the rotated tensors.
inline RopePlan PlanRope(const Shapes& shapes, const Attrs& attrs) {
  const size_t n = shapes.size();
  if (n < 3 || n > 5) {
    ThrowInvalid("inputs", "expected q, [k, [v,]] sin, cos: 3 to 5 inputs, got " + std::to_string(n));
  }
  RopePlan p;
  p.neox = attrs.GetBool("use_neox_rotary_style");
  p.time_major = attrs.GetBool("time_major");
  p.rotated = n - 2;
  for (size_t i = 0; i < p.rotated; ++i) {
    if (shapes[i].size() != 4) ThrowInvalid(shape::InputField(i, "shape"), "q, k and v must be 4-D");
  }
  const Shape& q = shapes[0];
  p.head_dim = q[3];
  if (p.head_dim % 2 != 0) {
    ThrowInvalid(shape::InputField(0, "shape"), "head_dim " + std::to_string(p.head_dim) + " must be even");
  }
  p.seq_dim = p.time_major ? 0 : 1;
  const int64_t table_seq[2] = {internal::RopeTableSeq(shapes[n - 2], n - 2),
                                internal::RopeTableSeq(shapes[n - 1], n - 1)};
  for (size_t i = 1; i < p.rotated; ++i) {
    if (shapes[i] != q) {
      ThrowInvalid(shape::InputField(i, "shape"),
                   shape::ShapeString(shapes[i]) + " does not fit q " + shape::ShapeString(q));
    }
  }
  for (size_t t = 0; t < 2; ++t) {
    const size_t i = n - 2 + t;
    if (table_seq[t] != q[p.seq_dim] || shapes[i].back() != p.head_dim) {
      ThrowInvalid(shape::InputField(i, "shape"), shape::ShapeString(shapes[i]) + " does not fit seq " +
                                                      std::to_string(q[p.seq_dim]) + ", head_dim " +
                                                      std::to_string(p.head_dim));
    }
  }
  return p;
}

}  // namespace spmd::plan
