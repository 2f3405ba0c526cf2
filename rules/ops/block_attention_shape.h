// block_attention's and block_attention_grad's shapes and masks, shared by their rules,
// references and kernels (as rules/ops/attention_shape.h is for flash_attention): one query
// block against one key/value block of a longer sequence, the blocks' rows placed at
// global sequence positions by the attrs, for ring attention (train/sequence_attention.h).
// Header-only.
//
// The rows of a block are equal segments, segment s starting at global position
// starts[s] (q_starts for q's rows, k_starts for k's and v's; empty: one segment at 0):
// a plain ring block is one segment, a zigzag block two (chunks r and 2n-1-r). With
// `causal`, query row i sees key row j when KeyPosition(j) <= QueryPosition(i).
//
// Example: q [2, 4, 3, 8] with q_starts [0, 12] holds positions 0, 1, 12, 13; k [2, 4, 3, 8]
// with k_starts [4] holds 4..7: causal, rows 0 and 1 see no key, rows 2 and 3 all four.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "rules/model/attrs.h"
#include "rules/model/error.h"
#include "rules/engine/shape_util.h"

namespace spmd::attention {

struct BlockAttentionPlan {
  int64_t batch = 0, sq = 0, sk = 0, heads = 0, head_dim = 0, v_dim = 0;
  double scale = 1;  // the scores' factor (attr 0: 1 / sqrt(head_dim))
  bool causal = false;
  std::vector<int64_t> q_starts, k_starts;  // never empty here
  int64_t q_segment = 0, k_segment = 0;     // rows per segment
  std::vector<int64_t> out_shape, lse_shape;

  int64_t QueryPosition(int64_t i) const { return q_starts[i / q_segment] + i % q_segment; }
  int64_t KeyPosition(int64_t j) const { return k_starts[j / k_segment] + j % k_segment; }
  bool Visible(int64_t i, int64_t j) const { return !causal || KeyPosition(j) <= QueryPosition(i); }
};

namespace detail {

// The starts of `rows` rows from attr `name` (empty: {0}); InvalidArgument "attrs.NAME"
// for a negative start or a count not dividing the rows.
inline std::vector<int64_t> Starts(const Attrs& attrs, const char* name, int64_t rows, int64_t& segment) {
  std::vector<int64_t> starts = attrs.GetInts(name);
  if (starts.empty()) starts = {0};
  const std::string field = std::string("attrs.") + name;
  for (int64_t s : starts) {
    if (s < 0) ThrowInvalid(field, "segment start " + std::to_string(s) + " is negative");
  }
  const int64_t n = static_cast<int64_t>(starts.size());
  if (rows % n != 0) {
    ThrowInvalid(field, std::to_string(n) + " segments do not divide " + std::to_string(rows) + " rows");
  }
  segment = rows / n;
  return starts;
}

// q, k, v, out (the state's output) and lse (the state's log-sum-exp): the plan.
inline BlockAttentionPlan Plan(const std::vector<std::vector<int64_t>>& shapes, const Attrs& attrs) {
  using shape::InputField;
  using shape::ShapeString;
  for (size_t i = 0; i < 4; ++i) {
    if (shapes[i].size() != 4) {
      ThrowInvalid(InputField(i, "shape"), "q, k, v and out must be [batch, seq, heads, head_dim], got " +
                                               ShapeString(shapes[i]));
    }
  }
  const std::vector<int64_t>& q = shapes[0];
  const std::vector<int64_t>& k = shapes[1];
  const std::vector<int64_t>& v = shapes[2];
  BlockAttentionPlan p;
  p.batch = q[0];
  p.sq = q[1];
  p.heads = q[2];
  p.head_dim = q[3];
  p.sk = k[1];
  p.v_dim = v[3];
  if (k[0] != p.batch || k[2] != p.heads || k[3] != p.head_dim) {
    ThrowInvalid(InputField(1, "shape"), "k " + ShapeString(k) + " does not fit q " + ShapeString(q) +
                                             " (same batch, heads and head_dim)");
  }
  if (v[0] != p.batch || v[1] != p.sk || v[2] != p.heads) {
    ThrowInvalid(InputField(2, "shape"), "v " + ShapeString(v) + " does not fit k " + ShapeString(k));
  }
  p.out_shape = {p.batch, p.sq, p.heads, p.v_dim};
  p.lse_shape = {p.batch, p.heads, p.sq};
  if (shapes[3] != p.out_shape) {
    ThrowInvalid(InputField(3, "shape"), "out " + ShapeString(shapes[3]) + " is not " + ShapeString(p.out_shape));
  }
  if (shapes[4] != p.lse_shape) {
    ThrowInvalid(InputField(4, "shape"), "lse " + ShapeString(shapes[4]) + " is not " + ShapeString(p.lse_shape));
  }
  const double scale = attrs.GetFloat("scale");
  if (!std::isfinite(scale) || scale < 0) {
    ThrowInvalid("attrs.scale", "must be finite and not negative (0: 1 / sqrt(head_dim)), got " +
                                    std::to_string(scale));
  }
  p.scale = scale != 0 ? scale : 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(1, p.head_dim)));
  p.causal = attrs.GetBool("causal");
  p.q_starts = Starts(attrs, "q_starts", p.sq, p.q_segment);
  p.k_starts = Starts(attrs, "k_starts", p.sk, p.k_segment);
  return p;
}

}  // namespace detail

// block_attention (q, k, v, out, lse; attrs scale, causal, q_starts, k_starts). Throws
// SpmdError(kInvalidArgument) naming the field: "inputs" (not 5 inputs),
// "inputs[i].shape" (q, k, v, out not 4-D or not fitting q: same batch and heads, k's
// head_dim q's, v's rows k's; out not [batch, sq, heads, v_dim]; lse not [batch, heads,
// sq]), "attrs.scale" (negative or not finite), "attrs.q_starts" / "attrs.k_starts" (a
// negative start, or a count not dividing the rows).
inline BlockAttentionPlan PlanBlockAttention(const std::vector<std::vector<int64_t>>& shapes,
                                             const Attrs& attrs) {
  if (shapes.size() != 5) {
    ThrowInvalid("inputs", "expected q, k, v, out, lse: 5 inputs, got " + std::to_string(shapes.size()));
  }
  return detail::Plan(shapes, attrs);
}

// block_attention_grad (q, k, v, out, lse, out_grad): the forward's plan, out_grad of
// out's shape (else InvalidArgument "inputs[5].shape"), "inputs" when not 6 inputs.
inline BlockAttentionPlan PlanBlockAttentionGrad(const std::vector<std::vector<int64_t>>& shapes,
                                                 const Attrs& attrs) {
  if (shapes.size() != 6) {
    ThrowInvalid("inputs", "expected q, k, v, out, lse, out_grad: 6 inputs, got " + std::to_string(shapes.size()));
  }
  const BlockAttentionPlan p = detail::Plan(shapes, attrs);
  if (shapes[5] != p.out_shape) {
    ThrowInvalid(shape::InputField(5, "shape"), "out_grad " + shape::ShapeString(shapes[5]) + " is not out's " +
                                                    shape::ShapeString(p.out_shape));
  }
  return p;
}

}  // namespace spmd::attention
