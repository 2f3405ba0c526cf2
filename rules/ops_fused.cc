// Fused ops with Paddle's names, attrs and argument orders: fused_rotary_position_embedding
// (rotary position embedding with given sin and cos). Its head dim is read in pairs
// (interleaved) or halves (neox), so it is forced replicated; batch, sequence and heads
// pass through, the sequence dim shared with sin and cos.
#include <cstdint>
#include <string>
#include <vector>

#include "rules/error.h"
#include "rules/notation.h"
#include "rules/registry.h"
#include "rules/vjps.h"

namespace spmd::declare {
namespace {

using notation::MakeAttrs;

// Checks sin / cos (input i): [s, d], or [1, s, 1, d] (Paddle's layout whatever time_major
// says). Returns its letters over the tensors' `s` and `d`.
std::string RopeTableLetters(const Shape& table, size_t i) {
  constexpr int seq_dim = 1;
  const std::string field = "inputs[" + std::to_string(i) + "].shape";
  if (table.size() == 2) return "sd";
  if (table.size() != 4) ThrowInvalid(field, "sin and cos must be [seq, head_dim] or 4-D");
  std::string letters = "111d";
  letters[static_cast<size_t>(seq_dim)] = 's';
  for (int d = 0; d < 3; ++d) {
    if (d != seq_dim && table[static_cast<size_t>(d)] != 1) {
      ThrowInvalid(field, "sin and cos must be 1 on every dim but the sequence and head dims");
    }
  }
  return letters;
}

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
        const size_t n = c.input_shapes.size();
        if (n < 3 || n > 5) {
          ThrowInvalid("inputs", "expected q, [k, [v,]] sin, cos: 3 to 5 inputs, got " + std::to_string(n));
        }
        const bool time_major = c.attrs.GetBool("time_major");
        const size_t rotated = n - 2;
        for (size_t i = 0; i < rotated; ++i) {
          if (c.input_shapes[i].size() != 4) {
            ThrowInvalid("inputs[" + std::to_string(i) + "].shape", "q, k and v must be 4-D");
          }
        }
        const std::vector<std::string> letters(rotated, time_major ? "sbhd" : "bshd");
        const int64_t head_dim = c.input_shapes[0][3];
        if (head_dim % 2 != 0) {
          ThrowInvalid("inputs[0].shape", "head_dim " + std::to_string(head_dim) + " must be even");
        }
        std::vector<std::string> inputs = letters;
        inputs.push_back(RopeTableLetters(c.input_shapes[n - 2], n - 2));
        inputs.push_back(RopeTableLetters(c.input_shapes[n - 1], n - 1));
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
