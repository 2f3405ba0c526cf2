// Fused ops with Paddle's names, attrs and argument orders: fused_rotary_position_embedding
// (rotary position embedding with given sin and cos). Its head dim is read in pairs
// (interleaved) or halves (neox), so it is forced replicated; batch, sequence and heads
// pass through, the sequence dim shared with sin and cos.
#include <cstdint>
#include <string>
#include <vector>

#include "rules/error.h"
#include "rules/fused_plan.h"
#include "rules/notation.h"
#include "rules/registry.h"
#include "rules/vjps.h"

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
