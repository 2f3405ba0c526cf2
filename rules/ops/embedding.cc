// The embeddings: lookup_table_v2, Paddle's vocabulary-parallel c_embedding, and their
// weight gradients embedding_grad and c_embedding_grad, checked by their plans
// (rules/ops/embedding_plan.h). A vocabulary sharding leaves each rank its own rows and zeros
// elsewhere: the lookups come out partial(sum).
#include <algorithm>
#include <limits>

#include "rules/ops/embedding_plan.h"
#include "rules/model/error.h"
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

VjpGraph Embedding(const RuleContext& c) {
  VjpGraph g;
  const Ref weight_grad = g.Add("embedding_grad", {Ref::Input(0), Ref::Input(1), Ref::OutputGrad(0)},
                                MakeAttrs({{"padding_idx", c.attrs.GetInt("padding_idx")},
                                           {"sparse", c.attrs.GetBool("sparse")}}));
  g.input_grads = {std::nullopt, weight_grad};
  return g;
}

// c_embedding: weight: c_embedding_grad(weight, x, g) with the forward's start_index; the
// ids get none.
VjpGraph CEmbedding(const RuleContext& c) {
  VjpGraph g;
  const Ref weight_grad = g.Add("c_embedding_grad", {Ref::Input(0), Ref::Input(1), Ref::OutputGrad(0)},
                                MakeAttrs({{"start_index", c.attrs.GetInt("start_index")}}));
  g.input_grads = {weight_grad, std::nullopt};
  return g;
}

}  // namespace
}  // namespace spmd::vjps

namespace spmd::declare {
namespace {

using notation::FromSignatures;
using notation::MakeAttrs;

// The end of a vocabulary piece's rows, start + rows, saturated below the int64 limit (a
// caller's start_index may be any int64; rows are at most 2^62).
int64_t PieceEnd(int64_t start, int64_t rows) {
  constexpr int64_t kLimit = std::numeric_limits<int64_t>::max() - 2;
  return start > kLimit - rows ? kLimit : start + rows;
}

// An embedding's weight gradient, checked by its plan: ids (input p.ids_at) `ab..`, weight
// [V, W] (input p.weight_at), out_grad (input 2) `ab..W` -> weight_grad `VW`; the ids'
// letters are summed.
EinsumSpec EmbeddingGradSpec(const RuleContext& c, const plan::EmbeddingPlan& p) {
  const std::string ids = notation::Letters(static_cast<int>(c.input_shapes[p.ids_at].size()));
  std::vector<std::string> inputs(3);
  inputs[p.ids_at] = ids;
  inputs[p.weight_at] = "VW";
  inputs[2] = ids + "W";
  return notation::FromLetters(inputs, {"VW"});
}

}  // namespace

// `ids..,VW->..W`: a vocabulary (V) sharding leaves each rank the rows of its own range
// and zeros elsewhere, so the output is partial(sum). A padding row or a sparse gradient
// cannot be split that way.
OpDecl lookup_table_v2() {
  return OpBuilder("lookup_table_v2").Inputs({"x", "weight"}).Outputs({"out"})
      .Tolerance(ToleranceClass::kExact)
      .Vjp(vjps::Embedding)
      .Attr("padding_idx", AttrKind::kInt, int64_t{-1})
      .Attr("sparse", AttrKind::kBool, false)
      .Einsum([](const RuleContext& c) {
        (void)plan::PlanLookupTable(c.input_shapes, c.attrs);
        const std::string ids = notation::Letters(static_cast<int>(c.input_shapes[0].size()));
        return notation::FromLetters({ids, "VW"}, {ids + "W"});
      })
      .Values([](const RuleContext& c) {
        return std::vector<InputValues>{{ValueKind::kIndex, c.input_shapes[1][0]}, {}};
      })
      // a shard holds rows [start, start + rows)
      .Localize({LocalField::kVocabStart}, [](const LocalContext& c) {
        return c.attrs.WithLocal({.vocab_start = c.input_offsets[1][0]});
      })
      .Examples(FromSignatures({{{"ab", "vh"}}, {{"a", "vh"}, MakeAttrs({{"padding_idx", int64_t{0}}})}}))
      .CheckDist([](const RuleContext& c, const std::vector<DistAttr>& inputs) {
        if (inputs[1].dims[0].empty()) return;
        if (c.attrs.GetInt("padding_idx") >= 0 || c.attrs.GetBool("sparse")) {
          ThrowUnsupported("inputs[1].dims_mapping[0]",
                           "the vocabulary dim cannot be sharded with padding_idx >= 0 or "
                           "sparse");
        }
      });
}

// Paddle's c_embedding(weight, x): the vocabulary-parallel embedding's local op. weight
// holds the rows [start_index, start_index + V) of a table; an id in that range reads its
// row, any other id zeros. Sharding weight's rows therefore leaves out partial(sum) over
// those axes: the caller must all-reduce it (Paddle's model code does, after the op), and
// the rule says so instead of promising a whole output. The localizer moves start_index to
// the shard's first row.
OpDecl c_embedding() {
  return OpBuilder("c_embedding").Inputs({"weight", "x"}).Outputs({"out"})
      .Tolerance(ToleranceClass::kExact)
      .Attr("start_index", AttrKind::kInt, int64_t{0})
      .Attr("vocab_size", AttrKind::kInt, int64_t{-1})
      .Einsum([](const RuleContext& c) {
        (void)plan::PlanCEmbedding(c.input_shapes, c.attrs);
        const std::string ids = notation::Letters(static_cast<int>(c.input_shapes[1].size()));
        return notation::FromLetters({"VW", ids}, {ids + "W"});
      })
      .Values([](const RuleContext& c) {
        const int64_t vocab = c.attrs.GetInt("vocab_size");
        const int64_t start = c.attrs.GetInt("start_index");
        const int64_t end = PieceEnd(start, c.input_shapes[0][0]);
        const int64_t bound = std::max<int64_t>(1, vocab > 0 ? vocab : end + 2);
        // Ids outside the table read zeros; one id always reads a row, or an all-zero output
        // would satisfy any claim.
        InputValues ids{ValueKind::kIndex, bound};
        ids.hit_begin = std::min(start, bound);
        ids.hit_end = std::min(end, bound);
        return std::vector<InputValues>{{}, ids};
      })
      .Localize({}, [](const LocalContext& c) {  // a shard holds rows [start + offset, ...)
        return c.attrs.With("start_index", c.attrs.GetInt("start_index") + c.input_offsets[0][0]);
      })
      .Vjp(vjps::CEmbedding)
      .Examples(FromSignatures({{{"vh", "ab"}, MakeAttrs({{"start_index", int64_t{2}}})},
                                {{"vh", "a"}, MakeAttrs({{"vocab_size", int64_t{9}}})}}));
}

// Paddle's c_embedding_grad(weight, x, out_grad): the weight's gradient of c_embedding, a
// scatter-add of out_grad's rows into the piece's rows [start_index, start_index + V).
// weight `VW` (its values unread), x `ab..`, out_grad `ab..W` -> weight_grad `VW`: the ids'
// letters are summed, so an ids sharding makes weight_grad partial(sum); V may stay
// sharded (the localizer shifts start_index by the shard's first row, as c_embedding's).
OpDecl c_embedding_grad() {
  return OpBuilder("c_embedding_grad").Inputs({"weight", "x", "out_grad"}).Outputs({"weight_grad"})
      .Tolerance(ToleranceClass::kSumOfProducts)
      .Attr("start_index", AttrKind::kInt, int64_t{0})
      .Einsum([](const RuleContext& c) {
        return EmbeddingGradSpec(c, plan::PlanCEmbeddingGrad(c.input_shapes, c.attrs));
      })
      .Values([](const RuleContext& c) {
        const int64_t start = c.attrs.GetInt("start_index");
        // Ids past the piece add nothing; one id always lands in it, or an all-zero
        // gradient would satisfy any claim.
        const int64_t end = PieceEnd(start, c.input_shapes[0][0]);
        InputValues ids{ValueKind::kIndex, std::max<int64_t>(1, end + 2)};
        ids.hit_begin = start;
        ids.hit_end = end;
        return std::vector<InputValues>{{}, ids, {}};
      })
      .Localize({}, [](const LocalContext& c) {  // a shard holds rows [start + offset, ...)
        return c.attrs.With("start_index", c.attrs.GetInt("start_index") + c.input_offsets[0][0]);
      })
      .Examples([](const SizePalette& p) {
        return std::vector<Example>{
            {{{p[0], p[2]}, {p[0], p[1]}, {p[0], p[1], p[2]}}, MakeAttrs({{"start_index", int64_t{1}}})},
            {{{p[1] + 1, p[2]}, {p[1] + 2}, {p[1] + 2, p[2]}}, Attrs()}};
      });
}

// Paddle's embedding_grad: weight_grad[v] = sum of out_grad over the tokens whose id is v
// (none for padding_idx), `ids..,VW,ids..W->VW`. The ids letters are summed: a batch
// sharding leaves each rank its tokens' rows, partial(sum); a vocabulary sharding leaves
// each rank its own rows (the localized row offset, as the forward), padding_idx
// included (a shard compares the global id). The weight only
// gives V (Paddle's argument order). Examples have V >= 2, so the kernel tests' all-ones
// run (every id 1, counting the terms per element) stays in range.
OpDecl embedding_grad() {
  return OpBuilder("embedding_grad").Inputs({"x", "weight", "out_grad"}).Outputs({"weight_grad"})
      .Tolerance(ToleranceClass::kSumOfProducts)
      .Attr("padding_idx", AttrKind::kInt, int64_t{-1})
      .Attr("sparse", AttrKind::kBool, false)
      .Einsum([](const RuleContext& c) {
        return EmbeddingGradSpec(c, plan::PlanEmbeddingGrad(c.input_shapes, c.attrs));
      })
      .Values([](const RuleContext& c) {
        return std::vector<InputValues>{{ValueKind::kIndex, c.input_shapes[1][0]}, {}, {}};
      })
      // a shard holds rows [start, start + rows)
      .Localize({LocalField::kVocabStart}, [](const LocalContext& c) {
        return c.attrs.WithLocal({.vocab_start = c.input_offsets[1][0]});
      })
      .Examples([](const SizePalette& p) {
        // With padding, a case whose ids are all padding has a zero gradient on every
        // rank, where no wrong partial claim is visible: 3 or more tokens over 4 or more
        // rows make that at most 1 case in 64.
        const Shape weight{std::max<int64_t>(p[0], 2), p[2]};
        const Shape padded_weight{std::max<int64_t>(p[0], 2) + 2, p[2]};
        return std::vector<Example>{
            {{{p[0], p[1]}, weight, {p[0], p[1], p[2]}}, Attrs()},
            {{{p[1] + 2}, padded_weight, {p[1] + 2, p[2]}}, MakeAttrs({{"padding_idx", int64_t{0}}})}};
      });
}

}  // namespace spmd::declare
