// flash_attention's and flash_attn_grad's shapes, shared by their rules, references and
// CPU kernels (as rules/engine/shape_util.h is for the other ops): Paddle's inputs q, k, v,
// [fixed_seed_offset, [attn_mask]] and attrs (dropout, causal, return_softmax, is_test,
// rng_name) turned into one plan, with the same validation and error fields in all of
// them. Header-only.
//
// Example: q [2, 5, 4, 8], k and v [2, 7, 2, 8] (grouped: 2 query heads per key head),
// mask [2, 1, 5, 7] -> out [2, 5, 4, 8], softmax_lse [2, 4, 5], seed_offset [2] (int64);
// with return_softmax, softmax [2, 4, 5, 7], else unset: 0-d (Paddle's rule tests pass an
// unset tensor as a 0-d spec; spmdkit's absent optional inputs are 0-d too).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rules/model/attrs.h"
#include "rules/model/error.h"
#include "rules/engine/shape_util.h"

namespace spmd::attention {

struct FlashAttentionPlan {
  int64_t batch = 0, sq = 0, sk = 0, heads = 0, kv_heads = 0, head_dim = 0, v_dim = 0;
  bool causal = false;
  bool return_softmax = false;
  bool has_seed_offset = false;  // input 3 given (not 0-d): accepted, unused
  bool has_mask = false;         // input 4 given (not 0-d)
  std::vector<int64_t> mask_shape;  // [b or 1, heads or 1, sq or 1, sk or 1]
  // The q rows this call holds: global rows [row_offset, row_offset + sq) of global_sq
  // (localized local.offset / local.global_shape; the whole q when absent). The causal mask is
  // aligned to the bottom right: global row i sees keys j <= i + sk - global_sq.
  int64_t row_offset = 0, global_sq = 0;
  std::vector<int64_t> out_shape, softmax_shape, lse_shape;
  std::vector<int64_t> seed_offset_shape = {2};  // Paddle's [seed, offset], int64
};

namespace detail {

// The plan of q, k, v (inputs 0 to 2) and the optional seed and mask at `seed_at` and
// `mask_at` (absent when past the end or 0-d): flash_attention's 3 and 4, flash_attn_grad's
// 5 and 6, so that each op's errors name its own inputs. `grad`: flash_attn_grad's attrs
// (dropout and causal only: it is a training op, and returns no probabilities).
inline FlashAttentionPlan Plan(const std::vector<std::vector<int64_t>>& shapes, const Attrs& attrs,
                               size_t seed_at, size_t mask_at, bool grad) {
  using shape::InputField;
  using shape::ShapeString;
  const size_t n = shapes.size();
  for (size_t i = 0; i < 3; ++i) {
    if (shapes[i].size() != 4) {
      ThrowInvalid(InputField(i, "shape"), "q, k and v must be [batch, seq, heads, head_dim], got " +
                                               ShapeString(shapes[i]));
    }
  }
  const std::vector<int64_t>& q = shapes[0];
  const std::vector<int64_t>& k = shapes[1];
  const std::vector<int64_t>& v = shapes[2];
  FlashAttentionPlan p;
  p.batch = q[0];
  p.sq = q[1];
  p.heads = q[2];
  p.head_dim = q[3];
  p.sk = k[1];
  p.kv_heads = k[2];
  p.v_dim = v[3];
  // (A shard may hold no heads: 0 query heads over 0 key heads.)
  const bool heads_fit = p.kv_heads == 0 ? p.heads == 0 : p.heads % p.kv_heads == 0;
  if (k[0] != p.batch || k[3] != p.head_dim || !heads_fit) {
    ThrowInvalid(InputField(1, "shape"), "k " + ShapeString(k) + " does not fit q " + ShapeString(q) +
                                             " (same batch and head_dim; heads dividing q's)");
  }
  if (v[0] != p.batch || v[1] != p.sk || v[2] != p.kv_heads) {
    ThrowInvalid(InputField(2, "shape"), "v " + ShapeString(v) + " does not fit k " + ShapeString(k));
  }
  if (p.sk < 1) ThrowInvalid(InputField(1, "shape"), "no keys: softmax over an empty sequence");
  if (n > seed_at && !shapes[seed_at].empty()) {
    if (shapes[seed_at] != std::vector<int64_t>{2}) {
      ThrowInvalid(InputField(seed_at, "shape"), std::string(grad ? "seed_offset" : "fixed_seed_offset") +
                                                     " must be [2] (or 0-d: absent), got " +
                                                     ShapeString(shapes[seed_at]));
    }
    p.has_seed_offset = true;
  }
  if (n > mask_at && !shapes[mask_at].empty()) {
    const std::vector<int64_t>& m = shapes[mask_at];
    const std::vector<int64_t> full = {p.batch, p.heads, p.sq, p.sk};
    bool fits = m.size() == 4;
    for (size_t d = 0; fits && d < 4; ++d) fits = m[d] == full[d] || m[d] == 1;
    if (!fits) {
      ThrowInvalid(InputField(mask_at, "shape"), "attn_mask " + ShapeString(m) + " does not broadcast to " +
                                               ShapeString(full) + " (or 0-d: absent)");
    }
    p.has_mask = true;
    p.mask_shape = m;
  }
  const double dropout = attrs.GetFloat("dropout");
  if (!(dropout >= 0.0 && dropout <= 1.0)) {
    ThrowInvalid("attrs.dropout", "dropout must be in [0, 1], got " + std::to_string(dropout));
  }
  if (dropout > 0.0 && (grad || !attrs.GetBool("is_test"))) {
    ThrowUnsupported("attrs.dropout", grad ? "attention dropout is not drawn by spmdkit; dropout must be 0"
                                           : "attention dropout is not drawn by spmdkit; dropout must be 0 "
                                             "(or is_test)");
  }
  p.causal = attrs.GetBool("causal");
  p.return_softmax = !grad && attrs.GetBool("return_softmax");
  p.global_sq = p.sq;
  if (attrs.local().offset.has_value() || attrs.local().global_shape.has_value()) {
    const std::string field = std::string(LocalFieldName(LocalField::kOffset));
    if (!attrs.local().offset.has_value() || !attrs.local().global_shape.has_value()) {
      ThrowInvalid(field, "local.offset and local.global_shape come together");
    }
    const std::vector<int64_t>& offset = *attrs.local().offset;
    const std::vector<int64_t>& global = *attrs.local().global_shape;
    if (offset.size() != 4 || global.size() != 4 || offset[1] < 0 || global[1] < 0 ||
        offset[1] > global[1] - p.sq) {
      ThrowInvalid(field, "q's rows [" + std::to_string(offset.size() == 4 ? offset[1] : -1) +
                              ", +" + std::to_string(p.sq) + ") are not inside the global q");
    }
    p.row_offset = offset[1];
    p.global_sq = global[1];
  }
  if (p.causal && p.global_sq > p.sk) {
    ThrowInvalid("attrs.causal", "causal attention with " + std::to_string(p.global_sq) +
                                     " query rows and " + std::to_string(p.sk) +
                                     " keys: the first rows would see no key");
  }
  p.out_shape = {p.batch, p.sq, p.heads, p.v_dim};
  p.softmax_shape = p.return_softmax ? std::vector<int64_t>{p.batch, p.heads, p.sq, p.sk}
                                     : std::vector<int64_t>{};  // unset
  p.lse_shape = {p.batch, p.heads, p.sq};
  return p;
}

}  // namespace detail

// Throws SpmdError naming the field at fault: "inputs" (not 3 to 5 inputs),
// "inputs[i].shape" (q, k, v not 4-D or not fitting q; no keys; fixed_seed_offset not 0-d
// or [2]; a mask not 0-d or not broadcasting to [batch, heads, sq, sk]), "attrs.dropout"
// (outside [0, 1]: InvalidArgument; above 0 in training: Unsupported, spmdkit draws no
// attention dropout), "attrs.causal" (more query rows than keys: the first rows would see
// no key), "local.offset" (a localized block outside q).
inline FlashAttentionPlan PlanFlashAttention(const std::vector<std::vector<int64_t>>& shapes,
                                             const Attrs& attrs) {
  if (shapes.size() < 3 || shapes.size() > 5) {
    ThrowInvalid("inputs", "expected q, k, v, [fixed_seed_offset, [attn_mask]]: 3 to 5 inputs, got " +
                               std::to_string(shapes.size()));
  }
  return detail::Plan(shapes, attrs, 3, 4, /*grad=*/false);
}

// The last key global row `row` may see: row + sk - global_sq when causal, else sk - 1.
inline int64_t LastKey(const FlashAttentionPlan& p, int64_t row) {
  return p.causal ? row + p.sk - p.global_sq : p.sk - 1;
}

// flash_attn_grad's inputs (q, k, v, out, softmax_lse, seed_offset, attn_mask, out_grad;
// a 0-d seed_offset or attn_mask is absent) and attrs (dropout, causal): the forward's plan
// for q, k, v, seed_offset and attn_mask (dropout > 0 is Unsupported: the grad op is a
// training op), out and out_grad of the forward's out shape and softmax_lse of its
// softmax_lse shape (else InvalidArgument naming the input).
inline FlashAttentionPlan PlanFlashAttnGrad(const std::vector<std::vector<int64_t>>& shapes,
                                            const Attrs& attrs) {
  if (shapes.size() != 8) {
    ThrowInvalid("inputs", "expected q, k, v, out, softmax_lse, seed_offset, attn_mask, out_grad: "
                           "8 inputs, got " + std::to_string(shapes.size()));
  }
  const FlashAttentionPlan p = detail::Plan(shapes, attrs, 5, 6, /*grad=*/true);
  auto expect = [&](size_t i, const std::vector<int64_t>& want, const char* what) {
    if (shapes[i] != want) {
      ThrowInvalid(shape::InputField(i, "shape"), std::string(what) + " " + shape::ShapeString(shapes[i]) +
                                                      " is not the forward's " + shape::ShapeString(want));
    }
  };
  expect(3, p.out_shape, "out");
  expect(4, p.lse_shape, "softmax_lse");
  expect(7, p.out_shape, "out_grad");
  return p;
}

}  // namespace spmd::attention
