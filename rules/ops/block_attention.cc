// block_attention and block_attention_grad: one query block against one key/value block
// at given global positions, the steps of ring attention (train/sequence_attention.h).
// block_attention folds the block into an online-softmax state (out, lse): the state is
// the attention over the keys seen so far, normalised, and its log-sum-exp. The grad op
// is one block pair's share of the attention backward given the final out and lse (as
// FlashAttention-2's backward): q_grad, k_grad, v_grad of that pair, to be summed over
// the pairs. Both run per rank on whole blocks: batch and heads pass through (sharded
// alike on every input); the sequences and head dims are forced replicated (the segment
// starts name the block's global rows, a softmax over the keys, a dot product).
#include <cstdint>
#include <string>
#include <vector>

#include "rules/ops/block_attention_shape.h"
#include "rules/engine/notation.h"
#include "rules/engine/registry.h"

namespace spmd::declare {
namespace {

using notation::MakeAttrs;

// q `bshd`, k `bthd`, v `bthe`, out `bshe`, lse `bhs`; R(s, t, d, e).
EinsumSpec BlockAttention(const RuleContext& c) {
  attention::PlanBlockAttention(c.input_shapes, c.attrs);
  return notation::FromLetters({"bshd", "bthd", "bthe", "bshe", "bhs"}, {"bshe", "bhs"}, "stde");
}

// The forward's letters and out_grad `bshe`; q_grad, k_grad, v_grad q's, k's and v's.
EinsumSpec BlockAttentionGrad(const RuleContext& c) {
  attention::PlanBlockAttentionGrad(c.input_shapes, c.attrs);
  return notation::FromLetters({"bshd", "bthd", "bthe", "bshe", "bhs", "bshe"}, {"bshd", "bthd", "bthe"},
                               "stde");
}

OpBuilder& BlockAttrs(OpBuilder& b) {
  return b.Attr("scale", AttrKind::kFloat, 0.0)
      .Attr("causal", AttrKind::kBool, false)
      .Attr("q_starts", AttrKind::kInts, std::vector<int64_t>{})
      .Attr("k_starts", AttrKind::kInts, std::vector<int64_t>{});
}

// Causal with the keys partly after the queries (q at 1.., k at 0..: row i sees keys
// j <= i + 1, the last key hidden from the first row when there are enough); two
// segments each, non-causal, an explicit scale.
std::vector<Example> BlockExamples(const SizePalette& p, bool grad) {
  const int64_t b = p[0], s = p[1], h = p[2];
  std::vector<Shape> first = {{b, s, h, 4}, {b, s + 1, h, 4}, {b, s + 1, h, 3}, {b, s, h, 3}, {b, h, s}};
  std::vector<Shape> second = {{b, 2 * s, h, 2}, {b, 2, h, 2}, {b, 2, h, 3}, {b, 2 * s, h, 3}, {b, h, 2 * s}};
  if (grad) {
    first.push_back(first[3]);
    second.push_back(second[3]);
  }
  return {{first, MakeAttrs({{"causal", true}, {"q_starts", std::vector<int64_t>{1}}})},
          {second, MakeAttrs({{"causal", true},
                              {"q_starts", std::vector<int64_t>{0, 3 * s}},
                              {"k_starts", std::vector<int64_t>{s, 5 * s}}})},
          {second, MakeAttrs({{"scale", 0.5}})}};
}

}  // namespace

// (q, k, v, out, lse) -> (out, lse): the state (out, lse) with the block's keys folded in.
OpDecl block_attention() {
  OpBuilder b("block_attention");
  b.Inputs({"q", "k", "v", "out", "lse"}).Outputs({"out", "lse"}).Tolerance(ToleranceClass::kAttention);
  return BlockAttrs(b)
      .Einsum(BlockAttention)
      .Examples([](const SizePalette& p) { return BlockExamples(p, false); });
}

// (q, k, v, out, lse, out_grad) -> (q_grad, k_grad, v_grad) of one block pair.
OpDecl block_attention_grad() {
  OpBuilder b("block_attention_grad");
  b.Inputs({"q", "k", "v", "out", "lse", "out_grad"})
      .Outputs({"q_grad", "k_grad", "v_grad"})
      .Tolerance(ToleranceClass::kAttentionGrad);
  return BlockAttrs(b)
      .Einsum(BlockAttentionGrad)
      .Examples([](const SizePalette& p) { return BlockExamples(p, true); });
}

}  // namespace spmd::declare
