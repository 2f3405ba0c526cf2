// flash_attention with Paddle's name, inputs (q, k, v, [fixed_seed_offset, [attn_mask]]),
// attrs and output order (out, softmax, softmax_lse; Paddle's fourth output, seed_offset,
// is its dropout generator's state, which spmdkit does not have). Batch and heads pass
// through; q's sequence may stay sharded (each query row is independent; the localizer
// passes the rows' global offset for the causal mask); the key sequence and q/k's head
// dim are forced replicated (a softmax over the keys, a dot product inside it), and so is
// v's head dim (the outputs without it would be claimed partial over its axes).
#include <cstdint>
#include <string>
#include <vector>

#include "rules/attention_shape.h"
#include "rules/error.h"
#include "rules/local_attrs.h"
#include "rules/notation.h"
#include "rules/registry.h"

namespace spmd::declare {
namespace {

using notation::MakeAttrs;

// q `bshd`, k `btgd`, v `btge`, fixed_seed_offset `f`, attn_mask `bhst` with its size-1
// broadcasting dims `1`; out `bshe`, softmax `bhst` (return_softmax; else `bhs` and a new
// factor of size 0), softmax_lse `bhs`. g is h when k has q's heads; grouped (fewer k heads) g and h
// are forced replicated: a shard of q's heads would pair with other k heads. R(t, d, e, f):
// e too, since softmax and softmax_lse lack it (a sharded e would make them partial).
EinsumSpec FlashAttention(const RuleContext& c) {
  const attention::FlashAttentionPlan p = attention::PlanFlashAttention(c.input_shapes, c.attrs);
  const bool grouped = p.kv_heads != p.heads;
  const std::string kv = grouped ? "btg" : "bth";
  std::vector<std::string> inputs = {"bshd", kv + "d", kv + "e"};
  std::string forced = "tde";
  if (grouped) forced += "hg";
  const size_t n = c.input_shapes.size();
  if (n > 3) {
    inputs.push_back(p.has_seed_offset ? "f" : "");
    if (p.has_seed_offset) forced += "f";
  }
  if (n > 4) {
    std::string mask;
    if (p.has_mask) {
      const std::string letters = "bhst";
      const std::vector<int64_t> full = {p.batch, p.heads, p.sq, p.sk};
      for (size_t d = 0; d < 4; ++d) mask.push_back(p.mask_shape[d] == 1 && full[d] != 1 ? '1' : letters[d]);
    }
    inputs.push_back(mask);
  }
  EinsumSpec spec = notation::FromLetters(inputs, {"bshe", "bhst", "bhs"}, forced);
  if (!p.return_softmax) {
    const FactorId empty = spec.AddFactor(0);
    spec.outputs[1].back() = empty;  // [b, h, s, 0]: no factor is left out (no partial)
    spec.forced_replicated.push_back(empty);
  }
  return spec;
}

}  // namespace

OpDecl flash_attention() {
  return OpBuilder("flash_attention").VariadicInputs("inputs")
      .Outputs({"out", "softmax", "softmax_lse"})
      .Tolerance(ToleranceClass::kAttention)
      .Attr("dropout", AttrKind::kFloat, 0.0)
      .Attr("causal", AttrKind::kBool, false)
      .Attr("return_softmax", AttrKind::kBool, false)
      .Attr("is_test", AttrKind::kBool, false)
      .Attr("rng_name", AttrKind::kString, std::string(""))
      .Einsum(FlashAttention)
      .Values([](const RuleContext& c) {
        std::vector<InputValues> kinds(c.input_shapes.size());
        if (kinds.size() > 3) kinds[3] = {ValueKind::kIndex, 1 << 20};  // seeds: unused
        return kinds;
      })
      .Localize([](const LocalContext& c) {  // q's rows [offset, offset + sq) of the global q
        return c.attrs.With(kLocalOffset, c.input_offsets[0]).With(kLocalGlobalShape, c.global_inputs[0]);
      })
      // One example: three to five 4-D inputs multiply the sweep's layouts. Causal with
      // fewer query rows than keys, a mask broadcasting over the heads, the probabilities
      // returned, v's head dim differing from q's.
      .Examples([](const SizePalette& p) {
        const int64_t b = p[0], s = p[1], h = p[2];
        return std::vector<Example>{
            {{{b, s, h, 4}, {b, s + 1, h, 4}, {b, s + 1, h, 3}, {}, {b, 1, s, s + 1}},
             MakeAttrs({{"causal", true}, {"return_softmax", true}})}};
      });
}

}  // namespace spmd::declare
