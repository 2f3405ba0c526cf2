// flash_attention with Paddle's name, inputs (q, k, v, [fixed_seed_offset, [attn_mask]]),
// attrs and outputs (out, softmax, softmax_lse, seed_offset; softmax is unset, 0-d, without
// return_softmax; seed_offset, the generator state of Paddle's attention dropout, which
// spmdkit never draws, is fixed_seed_offset's pair when given, else [0, 0]). Batch and heads pass
// through; q's sequence may stay sharded (each query row is independent; the localizer
// passes the rows' global offset for the causal mask); the key sequence and q/k's head
// dim are forced replicated (a softmax over the keys, a dot product inside it), and so is
// v's head dim (the outputs without it would be claimed partial over its axes).
// flash_attn_grad, Paddle's backward (q, k, v, out, softmax_lse, seed_offset, attn_mask,
// out_grad; a 0-d seed_offset or attn_mask is absent), has the forward's factors, with
// k_grad and v_grad partial(sum) over q's sequence axes.
#include <cstdint>
#include <string>
#include <vector>

#include "rules/ops/attention_shape.h"
#include "rules/model/error.h"
#include "rules/model/attrs.h"
#include "rules/engine/notation.h"
#include "rules/engine/registry.h"
#include "rules/ops/vjp_util.h"

// The VJPs of this file's ops (rules/engine/vjp.h), attached below with
// `.Vjp(vjps::Name)`.
namespace spmd::vjps {
namespace {

using notation::Ints;
using notation::MakeAttrs;
using Ref = VjpRef;

// flash_attention: flash_attn_grad(q, k, v, out, softmax_lse, seed, mask, g_out) with
// dropout 0 and the forward's causal, plus the softmax_lse and softmax cotangents' terms and the
// mask's gradient, composed (softmax_grad, multiply, einsum, sum); the seeds get none.
// flash_attention. Out's cotangent: flash_attn_grad with dropout 0 (the forward drew no
// dropout: above 0 it is Unsupported unless is_test) and the forward's causal; an absent
// seed or mask is passed as a 0-d placeholder, the sum of softmax_lse. The other terms
// are composed on the scores S = q . k / sqrt(d) + mask, whose gradient they add to:
// X = P g_lse (d lse / dS = P) plus, with return_softmax, softmax_grad(P, g_softmax); q
// and k get X's terms through einsums (scaled by 1 / sqrt(d)); the mask gets all of
// dS = X + softmax_grad(P, g_out . v^T), summed over its broadcast dims. P is the softmax
// output, or recomputed by the forward with return_softmax. Grouped heads (h = g r) split
// q's heads as [g, r].
VjpGraph FlashAttention(const RuleContext& c) {
  const attention::FlashAttentionPlan p = attention::PlanFlashAttention(c.input_shapes, c.attrs);
  const size_t n = c.input_shapes.size();
  VjpGraph g;
  // A 0-d tensor for an absent seed or mask (one call, shared).
  const Ref absent = n < 5 ? g.Add("sum", {Ref::Output(2)}, MakeAttrs({{"axis", Ints{}}})) : Ref::Input(0);
  const Ref seed = n > 3 ? Ref::Input(3) : absent;
  const Ref mask = n > 4 ? Ref::Input(4) : absent;
  const Ref main = g.Add("flash_attn_grad",
                         {Ref::Input(0), Ref::Input(1), Ref::Input(2), Ref::Output(0), Ref::Output(2), seed, mask,
                          Ref::OutputGrad(0)},
                         MakeAttrs({{"dropout", 0.0}, {"causal", p.causal}}));
  const Shape scores = {p.batch, p.heads, p.sq, p.sk};
  Ref probs = Ref::Output(1);
  if (!p.return_softmax) {
    std::vector<Ref> operands;
    for (size_t i = 0; i < n; ++i) operands.push_back(Ref::Input(i));
    probs = Ref::Call(g.Add("flash_attention", operands, c.attrs.With("return_softmax", true)).index, 1);
  }
  const Ref lse_grad = Reshape(g, Ref::OutputGrad(2), p.lse_shape, {p.batch, p.heads, p.sq, 1});
  Ref extra = g.Add("multiply", {probs, lse_grad});
  if (p.return_softmax) {
    extra = g.Add("add", {g.Add("softmax_grad", {probs, Ref::OutputGrad(1)}, MakeAttrs({{"axis", int64_t{-1}}})),
                          extra});
  }
  const bool grouped = p.kv_heads != p.heads;
  const int64_t r = grouped ? p.heads / p.kv_heads : 1;
  const Shape q5 = {p.batch, p.sq, p.kv_heads, r, p.head_dim};
  const Shape o5 = {p.batch, p.sq, p.kv_heads, r, p.v_dim};
  const Shape s5 = {p.batch, p.kv_heads, r, p.sq, p.sk};
  // Letters: the scores' `bhst` (grouped: `bgrst`), q's `bshd` (`bsgrd`), k's `bthd`
  // (`btgd`), out's `bshe` (`bsgre`), v's `bthe` (`btge`).
  const std::string sl = grouped ? "bgrst" : "bhst", ql = grouped ? "bsgrd" : "bshd";
  const std::string kl = grouped ? "btgd" : "bthd", ol = grouped ? "bsgre" : "bshe";
  const std::string vl = grouped ? "btge" : "bthe";
  auto split = [&](Ref x, const Shape& from, const Shape& to) { return grouped ? Reshape(g, x, from, to) : x; };
  const Ref scaled = ScaleBy(g, split(extra, scores, s5), 1.0 / std::sqrt(static_cast<double>(p.head_dim)));
  const Ref q_extra = split(
      g.Add("einsum", {scaled, Ref::Input(1)}, MakeAttrs({{"equation", sl + "," + kl + "->" + ql}})), q5,
      c.input_shapes[0]);
  const Ref k_extra = g.Add("einsum", {scaled, split(Ref::Input(0), c.input_shapes[0], q5)},
                            MakeAttrs({{"equation", sl + "," + ql + "->" + kl}}));
  g.input_grads = {g.Add("add", {Ref::Call(main.index, 0), q_extra}),
                   g.Add("add", {Ref::Call(main.index, 1), k_extra}), Ref::Call(main.index, 2)};
  if (n > 3) g.input_grads.push_back(std::nullopt);  // the seeds: indices
  if (n > 4) {
    if (!p.has_mask) {
      g.input_grads.push_back(std::nullopt);  // 0-d: absent, unread
    } else {
      const Ref dprobs = split(g.Add("einsum", {split(Ref::OutputGrad(0), p.out_shape, o5), Ref::Input(2)},
                                     MakeAttrs({{"equation", ol + "," + vl + "->" + sl}})),
                               s5, scores);
      const Ref dscores =
          g.Add("add", {g.Add("softmax_grad", {probs, dprobs}, MakeAttrs({{"axis", int64_t{-1}}})), extra});
      g.input_grads.push_back(SumToShape(g, dscores, scores, p.mask_shape));
    }
  }
  return g;
}

}  // namespace
}  // namespace spmd::vjps

namespace spmd::declare {
namespace {

using notation::MakeAttrs;

// q `bshd`, k `btgd`, v `btge`, fixed_seed_offset `f`, attn_mask `bhst` with its size-1
// broadcasting dims `1`. g is h when k has q's heads; grouped (fewer k heads), g
// follows h (EinsumSpec::tied): the two stay sharded together when the axes divide k's
// heads (each shard of q's heads then meets exactly its own k heads, as Paddle's rule
// does), else both are replicated. R(t, d, e, f).
struct AttentionLetters {
  std::string q = "bshd", k, v, seed, mask, forced = "tde";
};

AttentionLetters Letters(const attention::FlashAttentionPlan& p) {
  AttentionLetters l;
  const bool grouped = p.kv_heads != p.heads;
  const std::string kv = grouped ? "btg" : "bth";
  l.k = kv + "d";
  l.v = kv + "e";
  if (p.has_seed_offset) {
    l.seed = "f";
    l.forced += "f";
  }
  if (p.has_mask) {
    const std::string letters = "bhst";
    const std::vector<int64_t> full = {p.batch, p.heads, p.sq, p.sk};
    for (size_t d = 0; d < 4; ++d) l.mask.push_back(p.mask_shape[d] == 1 && full[d] != 1 ? '1' : letters[d]);
  }
  return l;
}

// Grouped heads: k's and v's heads (g, k's dim 2) follow q's heads (h, q's dim 2).
void TieGroupedHeads(EinsumSpec& spec, const attention::FlashAttentionPlan& p) {
  if (p.kv_heads != p.heads) spec.tied.push_back({spec.inputs[1][2], spec.inputs[0][2]});
}

// out `bshe`, softmax `bhst` (return_softmax; else unset: 0-d), softmax_lse `bhs`,
// seed_offset `f` (fixed_seed_offset's letter, or a new factor of size 2). e is replicated
// since softmax and softmax_lse lack it (a sharded e would make them partial). An unset
// softmax and seed_offset are the same on every rank: replicated, never partial.
EinsumSpec FlashAttention(const RuleContext& c) {
  const attention::FlashAttentionPlan p = attention::PlanFlashAttention(c.input_shapes, c.attrs);
  const AttentionLetters l = Letters(p);
  std::vector<std::string> inputs = {l.q, l.k, l.v};
  const size_t n = c.input_shapes.size();
  if (n > 3) inputs.push_back(l.seed);
  if (n > 4) inputs.push_back(l.mask);
  EinsumSpec spec = notation::FromLetters(inputs, {"bshe", p.return_softmax ? "bhst" : "", "bhs", l.seed},
                                          l.forced);
  TieGroupedHeads(spec, p);
  if (!p.has_seed_offset) {
    const FactorId pair = spec.AddFactor(2);
    spec.outputs[3] = {pair};
    spec.forced_replicated.push_back(pair);
  }
  if (!p.return_softmax) spec.whole_outputs.push_back(1);
  spec.whole_outputs.push_back(3);
  return spec;
}

// flash_attn_grad: the forward's letters, out and out_grad `bshe`, softmax_lse `bhs`;
// q_grad `bshd`, k_grad and v_grad k's and v's. k_grad and v_grad sum over the query rows:
// partial(sum) on s's axes. Each row's terms are its own (P and D of row i read row i of
// q, out, softmax_lse, out_grad and the mask), so s may stay sharded.
EinsumSpec FlashAttnGrad(const RuleContext& c) {
  const attention::FlashAttentionPlan p = attention::PlanFlashAttnGrad(c.input_shapes, c.attrs);
  const AttentionLetters l = Letters(p);
  EinsumSpec spec = notation::FromLetters({l.q, l.k, l.v, "bshe", "bhs", l.seed, l.mask, "bshe"},
                                         {l.q, l.k, l.v}, l.forced);
  TieGroupedHeads(spec, p);
  return spec;
}

// The seeds are indices (unused); the rest real.
std::vector<InputValues> SeedIsIndex(const RuleContext& c, size_t seed) {
  std::vector<InputValues> kinds(c.input_shapes.size());
  if (kinds.size() > seed) kinds[seed] = {ValueKind::kIndex, 1 << 20};
  return kinds;
}

// q's rows [offset, offset + sq) of the global q, for the causal mask.
Attrs LocalizeRows(const LocalContext& c) {
  return c.attrs.WithLocal({.offset = c.input_offsets[0], .global_shape = c.global_inputs[0]});
}

}  // namespace

OpDecl flash_attention() {
  return OpBuilder("flash_attention").VariadicInputs("inputs")
      .Outputs({"out", "softmax", "softmax_lse", "seed_offset"})
      .Tolerance(ToleranceClass::kAttention)
      .Attr("dropout", AttrKind::kFloat, 0.0)
      .Attr("causal", AttrKind::kBool, false)
      .Attr("return_softmax", AttrKind::kBool, false)
      .Attr("is_test", AttrKind::kBool, false)
      .Attr("rng_name", AttrKind::kString, std::string(""))
      .Einsum(FlashAttention)
      .Values([](const RuleContext& c) { return SeedIsIndex(c, 3); })
      .Localize({LocalField::kOffset, LocalField::kGlobalShape}, LocalizeRows)
      // Two examples (three to five 4-D inputs multiply the sweep's layouts). Causal with
      // fewer query rows than keys, a mask broadcasting over the heads, the probabilities
      // returned, v's head dim differing from q's; grouped heads with a seed and a whole
      // mask, the probabilities not returned (the VJP recomputes them), dropout given but
      // not drawn (is_test).
      .Examples([](const SizePalette& p) {
        const int64_t b = p[0], s = p[1], h = p[2];
        return std::vector<Example>{
            {{{b, s, h, 4}, {b, s + 1, h, 4}, {b, s + 1, h, 3}, {}, {b, 1, s, s + 1}},
             MakeAttrs({{"causal", true}, {"return_softmax", true}})},
            {{{b, s, 2 * h, 2}, {b, s, h, 2}, {b, s, h, 3}, {2}, {b, 2 * h, s, s}},
             MakeAttrs({{"dropout", 0.5}, {"is_test", true}})}};
      })
      .Vjp(vjps::FlashAttention);
}

// Paddle's flash_attn_grad: q_grad, k_grad, v_grad of <out_grad, out> for the forward's
// out, given out and softmax_lse (P = exp(scores - softmax_lse)). The mask gets no
// gradient, as in Paddle.
OpDecl flash_attn_grad() {
  return OpBuilder("flash_attn_grad")
      .Inputs({"q", "k", "v", "out", "softmax_lse", "seed_offset", "attn_mask", "out_grad"})
      .Outputs({"q_grad", "k_grad", "v_grad"})
      .Tolerance(ToleranceClass::kAttentionGrad)
      .Attr("dropout", AttrKind::kFloat, 0.0)
      .Attr("causal", AttrKind::kBool, false)
      .Einsum(FlashAttnGrad)
      .Values([](const RuleContext& c) { return SeedIsIndex(c, 5); })
      .Localize({LocalField::kOffset, LocalField::kGlobalShape}, LocalizeRows)
      // The forward's first example: causal, fewer rows than keys, v's head dim differing
      // from q's, a mask broadcasting over the heads. One example: eight inputs multiply
      // the sweep's layouts.
      .Examples([](const SizePalette& p) {
        const int64_t b = p[0], s = p[1], h = p[2];
        const Shape out = {b, s, h, 3};
        return std::vector<Example>{
            {{{b, s, h, 4}, {b, s + 1, h, 4}, {b, s + 1, h, 3}, out, {b, h, s}, {2}, {b, 1, s, s + 1}, out},
             MakeAttrs({{"causal", true}})}};
      });
}

}  // namespace spmd::declare
