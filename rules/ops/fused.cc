// Fused ops with Paddle's names, attrs and argument orders: fused_rotary_position_embedding
// (rotary position embedding with given sin and cos). Its head dim is read in pairs
// (interleaved) or halves (neox), so it is forced replicated; batch, sequence and heads
// pass through, the sequence dim shared with sin and cos.
#include <cstdint>
#include <string>
#include <vector>

#include "rules/model/error.h"
#include "rules/ops/fused_plan.h"
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

// fused_rotary_position_embedding: the same op on the cotangents with sin's head dim
// permuted by the partner and negated; cos: sum of g x, sin: sum of g R(x) over the
// rotated tensors, batch and heads.
// out = cos x + sin R(x), R the rotation of pairs (use_neox_rotary_style) or of halves:
// R(x)[j] = sign_j x[p(j)] with p the partner and sign_{p(j)} = -sign_j, so R^T = -R and
// g_x[j] = cos[j] g[j] - sign_j sin[p(j)] g[p(j)]: the same op on the cotangents with
// sin' = -sin[p(.)] (sin's head dim permuted by the partner: a roll by half the head dim,
// or a swap within each pair through a reshape to [..., d/2, 2]). cos: sum of g x over
// the rotated tensors, batch and heads; sin: of g R(x) (Paddle's fused_rope_grad gives
// sin and cos none).
VjpGraph FusedRope(const RuleContext& c) {
  VjpGraph g;
  const size_t n = c.input_shapes.size();
  if (n < 3) ThrowInvalid("inputs", "expected q, [k, [v,]] sin, cos");
  const Shape& sin = c.input_shapes[n - 2];
  if (sin.empty()) ThrowInvalid("inputs[" + std::to_string(n - 2) + "].shape", "sin must have rank >= 2");
  const int64_t d = sin.back();
  const bool neox = c.attrs.GetBool("use_neox_rotary_style");
  Ref permuted;
  if (neox) {
    Shape pairs = sin;
    pairs.back() = d / 2;
    pairs.push_back(2);
    const Ref split = Reshape(g, Ref::Input(n - 2), sin, pairs);
    const Ref swapped = g.Add("roll", {split}, MakeAttrs({{"shifts", Ints{1}}, {"axis", Ints{-1}}}));
    permuted = Reshape(g, swapped, pairs, sin);
  } else {
    permuted = g.Add("roll", {Ref::Input(n - 2)}, MakeAttrs({{"shifts", Ints{d / 2}}, {"axis", Ints{-1}}}));
  }
  std::vector<Ref> operands;
  for (size_t o = 0; o + 2 < n; ++o) operands.push_back(Ref::OutputGrad(o));
  operands.push_back(ScaleBy(g, permuted, -1));
  operands.push_back(Ref::Input(n - 1));
  const Ref rotated = g.Add("fused_rotary_position_embedding", operands,
                            MakeAttrs({{"use_neox_rotary_style", neox}, {"time_major", c.attrs.GetBool("time_major")}}));
  for (size_t o = 0; o + 2 < n; ++o) g.input_grads.push_back(Ref::Call(rotated.index, o));
  // cos: the sum over rotated tensors, batch and heads of g x; sin: of g R(x), R(x) the same
  // op with sin = 1 and cos = 0 (scale by 0 plus a bias, exact for finite tables).
  const Ref ones = g.Add("scale", {Ref::Input(n - 2)}, MakeAttrs({{"scale", 0.0}, {"bias", 1.0}}));
  const Ref zeros = g.Add("scale", {Ref::Input(n - 1)}, MakeAttrs({{"scale", 0.0}, {"bias", 0.0}}));
  std::vector<Ref> inputs;
  for (size_t i = 0; i + 2 < n; ++i) inputs.push_back(Ref::Input(i));
  inputs.push_back(ones);
  inputs.push_back(zeros);
  const Ref turned = g.Add("fused_rotary_position_embedding", inputs,
                           MakeAttrs({{"use_neox_rotary_style", neox}, {"time_major", c.attrs.GetBool("time_major")}}));
  std::optional<Ref> cos_terms, sin_terms;
  for (size_t i = 0; i + 2 < n; ++i) {
    const Ref gx = g.Add("multiply", {Ref::OutputGrad(i), Ref::Input(i)});
    const Ref grx = g.Add("multiply", {Ref::OutputGrad(i), Ref::Call(turned.index, i)});
    cos_terms = cos_terms ? g.Add("add", {*cos_terms, gx}) : gx;
    sin_terms = sin_terms ? g.Add("add", {*sin_terms, grx}) : grx;
  }
  const bool time_major = c.attrs.GetBool("time_major");
  const Shape& q = c.input_shapes[0];
  const Ints batch_and_heads = time_major ? Ints{1, 2} : Ints{0, 2};
  const Shape kept = time_major ? Shape{q[0], 1, 1, d} : Shape{1, q[1], 1, d};
  for (const auto& [terms, table] : {std::pair{*sin_terms, n - 2}, std::pair{*cos_terms, n - 1}}) {
    const Ref summed = g.Add("sum", {terms}, MakeAttrs({{"axis", batch_and_heads}, {"keep_dim", true}}));
    g.input_grads.push_back(Reshape(g, summed, kept, c.input_shapes[table]));
  }
  return g;
}

}  // namespace
}  // namespace spmd::vjps

namespace spmd::declare {
namespace {

using notation::MakeAttrs;

// The letters of sin / cos (checked by plan::PlanRope): [s, d], or [1, s, 1, d] (Paddle's
// layout whatever time_major says), over the tensors' `s` and `d`.
std::string RopeTableLetters(const Shape& table) { return table.size() == 2 ? "sd" : "1s1d"; }

}  // namespace

// fused_rotary_position_embedding(q, [k, [v,]] sin, cos): 3 to 5 inputs, the last two sin
// and cos. q, k, v `[batch, seq, heads, head_dim]` (time_major: `[seq, batch, ...]`), all of
// one shape (as Paddle requires), head_dim even. One output per rotated tensor. q, k, v
// `bshd`, sin/cos `sd` or `1s1d` (also when time_major), R(d). k and v share q's letters:
// with a heads factor of their own, an output without q's heads would be claimed partial
// over an axis that shards only q. Paddle's position_ids input (and sin/cos computed from
// rotary_emb_base) are not taken: sin and cos are required.
OpDecl fused_rotary_position_embedding() {
  return OpBuilder("fused_rotary_position_embedding").VariadicInputs("inputs")
      .Outputs({"out_q", "out_k", "out_v"})
      .Tolerance(ToleranceClass::kPointwise)
      .Vjp(vjps::FusedRope)
      .Attr("use_neox_rotary_style", AttrKind::kBool, true)
      .Attr("time_major", AttrKind::kBool, false)
      .Attr("rotary_emb_base", AttrKind::kFloat, 10000.0)
      .Einsum([](const RuleContext& c) {
        const plan::RopePlan p = plan::PlanRope(c.input_shapes, c.attrs);
        const size_t n = c.input_shapes.size();
        const std::vector<std::string> letters(p.rotated, p.time_major ? "sbhd" : "bshd");
        std::vector<std::string> inputs = letters;
        inputs.push_back(RopeTableLetters(c.input_shapes[n - 2]));
        inputs.push_back(RopeTableLetters(c.input_shapes[n - 1]));
        return notation::FromLetters(inputs, letters, "d");
      })
      .Examples([](const SizePalette& p) {
        const int64_t d = 2 * p[3];
        return std::vector<Example>{
            {{{p[0], p[1], p[2], d}, {p[0], p[1], p[2], d}, {1, p[1], 1, d}, {1, p[1], 1, d}}, Attrs()},
            {{{p[0], p[1], p[2], d}, {p[1], d}, {p[1], d}}, MakeAttrs({{"use_neox_rotary_style", false}})},
            {{{p[1], p[0], p[2], d}, {p[1], p[0], p[2], d}, {p[1], p[0], p[2], d}, {p[1], d}, {p[1], d}},
             MakeAttrs({{"time_major", true}})}};
      });
}

}  // namespace spmd::declare
