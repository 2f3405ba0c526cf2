// Softmax family, layer_norm, rms_norm, the embedding and the softmax cross entropy.
// softmax, log_softmax, softmax_grad, layer_norm and rms_norm exchange their reduced factor
// (OpDecl::exchange): it may stay sharded, each rank summarises its piece of every row in one
// to three numbers (rules/norm_pieces.h), the summaries are all-gathered and each rank
// finishes its piece. layer_norm_grad, rms_norm_grad and the cross entropies keep their
// reduced factors forced replicated (the local kernels need them whole).
#include <algorithm>
#include <limits>

#include "rules/error.h"
#include "rules/norm_plan.h"
#include "rules/notation.h"
#include "rules/registry.h"
#include "rules/vjps.h"

namespace spmd::declare {
namespace {

using notation::FromSignatures;
using notation::MakeAttrs;

// The normalised attrs.axis of input 0 (-1 for a 0-d input, which has no axis).
int SoftmaxAxis(const RuleContext& c) {
  const int rank = static_cast<int>(c.input_shapes[0].size());
  return notation::NormalizeAxisOrScalar(c.attrs.GetInt("axis"), rank, "attrs.axis");
}

// `n` inputs and one output sharing x's letters; the axis letter forced replicated unless
// `exchanged` (then the exchange keeps it sharded).
EinsumSpec AlongAxis(const RuleContext& c, size_t operands, bool exchanged = false) {
  const int axis = SoftmaxAxis(c);
  const std::string letters = notation::Letters(static_cast<int>(c.input_shapes[0].size()));
  return notation::FromLetters(std::vector<std::string>(operands, letters), {letters},
                               axis >= 0 && !exchanged ? letters.substr(axis, 1) : "");
}

// softmax / log_softmax: x `abc` -> out `abc`, the axis exchanged (a piece's max and sum of
// exp(x - max) per row).
OpBuilder Softmax(const char* name) {
  return OpBuilder(name).Inputs({"x"}).Outputs({"out"})
      .Attr("axis", AttrKind::kInt, int64_t{-1})
      .Einsum([](const RuleContext& c) { return AlongAxis(c, 1, true); })
      .ExchangeAlong(0, SoftmaxAxis)
      .Examples(FromSignatures({{{"abc"}}, {{"ab"}, MakeAttrs({{"axis", int64_t{0}}})}}));
}

// layer_norm / rms_norm examples: x `abc` with begin 1 and 2, parameters of the
// flattened normalised size.
ExampleBuilder NormExamples(size_t params) {
  return [params](const SizePalette& p) {
    std::vector<Example> examples;
    for (int64_t begin : {1, 2}) {
      Shape x{p[0], p[1], p[2]};
      int64_t normalized = 1;
      for (size_t d = begin; d < x.size(); ++d) normalized *= x[d];
      std::vector<Shape> shapes{x};
      for (size_t k = 0; k < params; ++k) shapes.push_back({normalized});
      examples.push_back({shapes, MakeAttrs({{"begin_norm_axis", begin}})});
    }
    return examples;
  };
}

// layer_norm / rms_norm: x `abcd` with begin 2 -> out `abcd`, statistics `ab`; scale and
// bias are 1-D of prod(x.shape[begin:]) (a new factor). c, the first normalised dim, is
// exchanged (OpDecl::exchange: each piece's row moments are gathered); d and the
// parameters' factor are forced replicated (a piece reads its slice of the whole scale).
EinsumSpec Normalization(const RuleContext& c, size_t params, size_t statistics) {
  const int rank = static_cast<int>(c.input_shapes[0].size());
  const int64_t begin = plan::PlanNorm(c.input_shapes, c.attrs, params).begin;
  const std::string letters = notation::Letters(rank);
  EinsumSpec spec = notation::FromLetters(
      {letters}, std::vector<std::string>(1 + statistics, letters.substr(0, begin)),
      letters.substr(begin + 1));
  spec.outputs[0] = spec.inputs[0];
  const FactorId param = spec.AddFactor();  // the flattened normalised dims
  for (size_t p = 0; p < params; ++p) spec.inputs.push_back({param});
  spec.forced_replicated.push_back(param);
  return spec;
}

// The exchanged dim of layer_norm / rms_norm: the first normalised one, begin_norm_axis
// normalised (validated by the spec builder, which runs first).
int NormExchangedDim(const RuleContext& c) {
  return static_cast<int>(plan::SplitForNorm(c.input_shapes[0], c.attrs.GetInt("begin_norm_axis")).begin);
}

// A piece of layer_norm / rms_norm reads its slice of the whole scale and bias: x's global
// offset and shape.
Attrs NormPiece(const LocalContext& c) {
  return c.attrs.With(kLocalOffset, c.input_offsets[0]).With(kLocalGlobalShape, c.global_inputs[0]);
}

// layer_norm_grad / rms_norm_grad: x `abcd` with begin 2, the parameters `N` (the flattened
// normalised size), the forward's statistics `ab`, out_grad `abcd` -> x_grad `abcd` and one
// `N` gradient per parameter. c, d and N are forced replicated (a row's gradient needs the
// whole row); the rows a, b may stay sharded, and since the parameters' gradients sum over
// them, those come out partial(sum) on the rows' mesh axes.
EinsumSpec NormalizationGrad(const RuleContext& c, size_t params, size_t statistics) {
  const int rank = static_cast<int>(c.input_shapes[0].size());
  const int64_t begin = plan::PlanNormGrad(c.input_shapes, c.attrs, params, statistics).begin;
  const std::string letters = notation::Letters(rank);
  std::vector<std::string> inputs{letters};
  inputs.insert(inputs.end(), params, "N");
  inputs.insert(inputs.end(), statistics, letters.substr(0, begin));
  inputs.push_back(letters);
  std::vector<std::string> outputs{letters};
  outputs.insert(outputs.end(), params, "N");
  return notation::FromLetters(inputs, outputs, letters.substr(begin) + "N");
}

// Grad examples: x `abc` with begin 1 and 2, the parameters, the statistics x.shape[:begin]
// and out_grad of x's shape.
ExampleBuilder NormGradExamples(size_t params, size_t statistics) {
  return [params, statistics](const SizePalette& p) {
    std::vector<Example> examples;
    for (Example e : NormExamples(params)(p)) {
      const Shape x = e.shapes[0];
      const int64_t begin = e.attrs.GetInt("begin_norm_axis");
      for (size_t k = 0; k < statistics; ++k) e.shapes.push_back(Shape(x.begin(), x.begin() + begin));
      e.shapes.push_back(x);
      examples.push_back(std::move(e));
    }
    return examples;
  };
}

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

// The attrs of Paddle's c_softmax ops: ignore_index, and ring_id, rank, nranks (Paddle's
// communicator and piece; range-checked only, softmax_pieces::CheckPaddleCommAttrs).
OpBuilder& CSoftmaxAttrs(OpBuilder& op) {
  return op.Attr("ignore_index", AttrKind::kInt, int64_t{-100})
      .Attr("ring_id", AttrKind::kInt, int64_t{0})
      .Attr("rank", AttrKind::kInt, int64_t{0})
      .Attr("nranks", AttrKind::kInt, int64_t{0});
}

// The class axis last: `letters` names every dim of a [..., C] tensor, `rows` the same with
// the class dim `1` (a [..., 1] label or loss).
struct ClassLastLetters {
  std::string letters, rows;
};
ClassLastLetters ClassLast(const RuleContext& c, const char* what) {
  const int rank = static_cast<int>(c.input_shapes[0].size());
  if (rank == 0) ThrowInvalid("inputs[0].shape", std::string(what) + " needs a class dim");
  const std::string letters = notation::Letters(rank);
  return {letters, letters.substr(0, rank - 1) + "1"};
}

}  // namespace

OpDecl softmax() {
  return Softmax("softmax")
      .Tolerance(ToleranceClass::kRelative)
      .Vjp(vjps::Softmax);
}
OpDecl log_softmax() {
  return Softmax("log_softmax")
      .Tolerance(ToleranceClass::kLogDomain)
      .Vjp(vjps::LogSoftmax);
}
OpDecl softmax_grad() {
  return OpBuilder("softmax_grad").Inputs({"out", "out_grad"}).Outputs({"x_grad"})
      .Tolerance(ToleranceClass::kSoftmaxGrad)
      .Attr("axis", AttrKind::kInt, int64_t{-1})
      .Einsum([](const RuleContext& c) {
        plan::PlanSoftmaxGrad(c.input_shapes);
        return AlongAxis(c, 2, true);
      })
      .ExchangeAlong(0, SoftmaxAxis)  // a piece's part of sum(out_grad * out) per row
      .Examples(FromSignatures({{{"abc", "abc"}, MakeAttrs({{"axis", int64_t{1}}})}}));
}

OpDecl layer_norm() {
  return OpBuilder("layer_norm").Inputs({"x", "scale", "bias"})
      .Tolerance(ToleranceClass::kLayerNorm)
      .Vjp(vjps::LayerNorm)
      .Outputs({"out", "mean", "variance"})
      .Attr("epsilon", AttrKind::kFloat, 1e-5)
      .Attr("begin_norm_axis", AttrKind::kInt, int64_t{1})
      .Einsum([](const RuleContext& c) { return Normalization(c, 2, 2); })
      .ExchangeAlong(0, NormExchangedDim)
      .Localize(NormPiece)
      .Examples(NormExamples(2));
}

OpDecl rms_norm() {
  return OpBuilder("rms_norm").Inputs({"x", "scale"}).Outputs({"out", "invvar"})
      .Tolerance(ToleranceClass::kRmsNorm)
      .Vjp(vjps::RmsNorm)
      .Attr("epsilon", AttrKind::kFloat, 1e-6)
      .Attr("begin_norm_axis", AttrKind::kInt, int64_t{1})
      .Einsum([](const RuleContext& c) { return Normalization(c, 1, 1); })
      .ExchangeAlong(0, NormExchangedDim)
      .Localize(NormPiece)
      .Examples(NormExamples(1));
}

// Paddle's layer_norm_grad(x, scale, bias, mean, variance, out_grad): the backward of
// layer_norm through out, from the forward's mean and variance (their shapes as
// layer_norm gives them). With inv = 1/sqrt(variance + epsilon), xhat = (x - mean) inv and
// dxhat = out_grad scale: x_grad = inv (dxhat - mean(dxhat) - xhat mean(dxhat xhat)) over
// each row, scale_grad = the sum of out_grad xhat over the rows, bias_grad = the sum of
// out_grad; bias's values are not read. The cotangents of the mean and variance outputs
// are not inputs: the VJP adds their terms.
OpDecl layer_norm_grad() {
  return OpBuilder("layer_norm_grad")
      .Inputs({"x", "scale", "bias", "mean", "variance", "out_grad"})
      .Outputs({"x_grad", "scale_grad", "bias_grad"})
      .Tolerance(ToleranceClass::kLayerNormGrad)
      .Attr("epsilon", AttrKind::kFloat, 1e-5)
      .Attr("begin_norm_axis", AttrKind::kInt, int64_t{1})
      .Einsum([](const RuleContext& c) { return NormalizationGrad(c, 2, 2); })
      .Values([](const RuleContext&) {  // a variance is >= 0
        return std::vector<InputValues>{{}, {}, {}, {}, {ValueKind::kPositive}, {}};
      })
      .Examples(NormGradExamples(2, 2));
}

// Paddle's rms_norm_grad(x, scale, invvar, out_grad): the backward of rms_norm through out,
// from the forward's invvar = 1/sqrt(mean(x^2) + epsilon) (epsilon is not read again). With
// xhat = x invvar and dxhat = out_grad scale: x_grad = invvar (dxhat - xhat mean(dxhat
// xhat)) over each row, scale_grad = the sum of out_grad xhat over the rows. invvar's own
// cotangent is not an input: the VJP adds its term.
OpDecl rms_norm_grad() {
  return OpBuilder("rms_norm_grad").Inputs({"x", "scale", "invvar", "out_grad"})
      .Outputs({"x_grad", "scale_grad"})
      .Tolerance(ToleranceClass::kRmsNormGrad)
      .Attr("epsilon", AttrKind::kFloat, 1e-6)
      .Attr("begin_norm_axis", AttrKind::kInt, int64_t{1})
      .Einsum([](const RuleContext& c) { return NormalizationGrad(c, 1, 1); })
      .Values([](const RuleContext&) {  // an inverse root is > 0
        return std::vector<InputValues>{{}, {}, {ValueKind::kPositive}, {}};
      })
      .Examples(NormGradExamples(1, 1));
}

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
      .Localize([](const LocalContext& c) {  // a shard holds rows [start, start + rows)
        return c.attrs.With(kLocalVocabStart, c.input_offsets[1][0]);
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
      .Localize([](const LocalContext& c) {  // a shard holds rows [start + offset, ...)
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
      .Localize([](const LocalContext& c) {  // a shard holds rows [start + offset, ...)
        return c.attrs.With("start_index", c.attrs.GetInt("start_index") + c.input_offsets[0][0]);
      })
      .Examples([](const SizePalette& p) {
        return std::vector<Example>{
            {{{p[0], p[2]}, {p[0], p[1]}, {p[0], p[1], p[2]}}, MakeAttrs({{"start_index", int64_t{1}}})},
            {{{p[1] + 1, p[2]}, {p[1] + 2}, {p[1] + 2, p[2]}}, Attrs()}};
      });
}

// Paddle's c_softmax_with_cross_entropy(logits, label): the vocabulary-parallel softmax
// cross entropy, with the collective inside the op. logits `..c` (the class axis last),
// label `..1` of ids -> softmax `..c`, loss `..1`. The class factor is exchanged: it may
// stay sharded, each rank summarises its piece of every row, the summaries are all-gathered
// over the class axis's mesh axes (OpDecl::exchange), and the loss comes out whole, not
// partial. Paddle's ring_id, rank and nranks name the communicator and the piece; spmdkit
// takes both from the layout, so they are checked for range only. The localizer gives a
// piece its first class.
OpDecl c_softmax_with_cross_entropy() {
  return CSoftmaxAttrs(OpBuilder("c_softmax_with_cross_entropy").Inputs({"logits", "label"}))
      .Outputs({"softmax", "loss"})
      .Tolerance(ToleranceClass::kCrossEntropy)
      .Einsum([](const RuleContext& c) {
        const auto [letters, rows] = ClassLast(c, "logits");
        return notation::FromLetters({letters, rows}, {letters, rows});
      })
      .ExchangeAlong(0, [](const RuleContext& c) { return static_cast<int>(c.input_shapes[0].size()) - 1; })
      .Vjp(vjps::CSoftmaxWithCrossEntropy)
      .Values([](const RuleContext& c) {
        return std::vector<InputValues>{{}, {ValueKind::kIndex, c.input_shapes[0].back()}};
      })
      .Localize([](const LocalContext& c) {  // a piece holds classes [start, start + C)
        return c.attrs.With(kLocalVocabStart, c.input_offsets[0].back());
      })
      .Examples(FromSignatures({{{"abc", "ab1"}},
                                {{"ac", "a1"}, MakeAttrs({{"ignore_index", int64_t{1}}})}}));
}

// Paddle's c_softmax_with_cross_entropy_grad(softmax, label, loss_grad): the logits'
// gradient of the vocabulary-parallel cross entropy, (softmax - onehot(label)) * loss_grad,
// 0 on rows whose label is ignore_index. softmax `..c`, label and loss_grad `..1` ->
// logits_grad `..c`. Each element needs only its own class and the row's label, so the
// class axis may stay sharded with no exchange: the localizer gives a piece its first class
// and a piece without the label subtracts nothing; the global softmax's shape lets a piece
// refuse a label past the last class. ring_id, rank, nranks as the forward.
OpDecl c_softmax_with_cross_entropy_grad() {
  return CSoftmaxAttrs(OpBuilder("c_softmax_with_cross_entropy_grad").Inputs({"softmax", "label", "loss_grad"}))
      .Outputs({"logits_grad"})
      .Tolerance(ToleranceClass::kPointwise)
      .Einsum([](const RuleContext& c) {
        const auto [letters, rows] = ClassLast(c, "softmax");
        return notation::FromLetters({letters, rows, rows}, {letters});
      })
      .Values([](const RuleContext& c) {
        return std::vector<InputValues>{
            {ValueKind::kPositive}, {ValueKind::kIndex, c.input_shapes[0].back()}, {}};
      })
      .Localize([](const LocalContext& c) {  // classes [start, start + C) of the global softmax
        return c.attrs.With(kLocalVocabStart, c.input_offsets[0].back())
            .With(kLocalGlobalShape, c.global_inputs[0]);
      })
      .Examples(FromSignatures({{{"abc", "ab1", "ab1"}},
                                {{"ac", "a1", "a1"}, MakeAttrs({{"ignore_index", int64_t{1}}})}}));
}

// logits `abc` (class axis c) -> softmax_out `abc`, loss `ab1`; a hard label is `ab1`,
// a soft one `abc`. The class axis is forced replicated (D8).
OpDecl cross_entropy_with_softmax() {
  return OpBuilder("cross_entropy_with_softmax").Inputs({"logits", "label"})
      .Tolerance(ToleranceClass::kCrossEntropy)
      .Vjp(vjps::CrossEntropyWithSoftmax)
      .Outputs({"softmax_out", "loss"})
      .Attr("soft_label", AttrKind::kBool, false)
      .Attr("use_softmax", AttrKind::kBool, true)
      .Attr("numeric_stable_mode", AttrKind::kBool, true)
      .Attr("ignore_index", AttrKind::kInt, int64_t{-100})
      .Attr("axis", AttrKind::kInt, int64_t{-1})
      .Einsum([](const RuleContext& c) {
        const plan::CrossEntropyPlan ce = plan::PlanCrossEntropy(c.input_shapes, c.attrs);
        const int axis = ce.axis;
        const std::string letters = notation::Letters(static_cast<int>(c.input_shapes[0].size()));
        std::string reduced = letters;
        reduced[axis] = '1';
        return notation::FromLetters({letters, ce.soft_label ? letters : reduced}, {letters, reduced},
                                     letters.substr(axis, 1));
      })
      .Values([](const RuleContext& c) {
        const Shape& logits = c.input_shapes[0];
        const int axis = notation::NormalizeAxis(c.attrs.GetInt("axis"),
                                                 static_cast<int>(logits.size()), "attrs.axis");
        const ValueKind probabilities =
            c.attrs.GetBool("use_softmax") ? ValueKind::kReal : ValueKind::kPositive;
        if (c.attrs.GetBool("soft_label")) {
          return std::vector<InputValues>{{probabilities}, {ValueKind::kPositive}};
        }
        return std::vector<InputValues>{{probabilities}, {ValueKind::kIndex, logits[axis]}};
      })
      .Examples(FromSignatures({{{"abc", "ab1"}},
                                {{"ac", "a1"}, MakeAttrs({{"ignore_index", int64_t{1}}})},
                                {{"abc", "abc"}, MakeAttrs({{"soft_label", true}})},
                                {{"1ab", "1ab"}, MakeAttrs({{"soft_label", true}, {"axis", int64_t{1}}})}}));
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
      .Localize([](const LocalContext& c) {  // a shard holds rows [start, start + rows)
        return c.attrs.With(kLocalVocabStart, c.input_offsets[1][0]);
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

// Paddle's cross_entropy_with_softmax_grad: the loss's gradient with respect to the
// logits, from the label, the forward's softmax_out and the loss's cotangent (softmax_out's
// own cotangent is not an input: the VJP adds softmax_grad for it). Hard label,
// use_softmax: (softmax - onehot(label)) loss_grad; without softmax: -loss_grad / softmax
// at the label, 0 elsewhere; a row whose label is ignore_index gets 0. Soft label:
// (softmax - label) loss_grad, or -label loss_grad / softmax (Paddle's formulas: they
// assume labels summing to 1). softmax `abc` (class axis c), label `ab1` or `abc`,
// loss_grad `ab1` -> input_grad `abc`; the class axis is forced replicated.
OpDecl cross_entropy_with_softmax_grad() {
  return OpBuilder("cross_entropy_with_softmax_grad").Inputs({"label", "softmax", "loss_grad"})
      .Outputs({"input_grad"})
      .Tolerance(ToleranceClass::kPointwise)
      .Attr("soft_label", AttrKind::kBool, false)
      .Attr("use_softmax", AttrKind::kBool, true)
      .Attr("numeric_stable_mode", AttrKind::kBool, true)
      .Attr("ignore_index", AttrKind::kInt, int64_t{-100})
      .Attr("axis", AttrKind::kInt, int64_t{-1})
      .Einsum([](const RuleContext& c) {
        const plan::CrossEntropyPlan ce = plan::PlanCrossEntropyGrad(c.input_shapes, c.attrs);
        const int axis = ce.axis;
        const std::string letters = notation::Letters(static_cast<int>(c.input_shapes[1].size()));
        std::string reduced = letters;
        reduced[axis] = '1';
        return notation::FromLetters({ce.soft_label ? letters : reduced, letters, reduced}, {letters},
                                     letters.substr(axis, 1));
      })
      .Values([](const RuleContext& c) {
        const Shape& softmax = c.input_shapes[1];
        const int axis = notation::NormalizeAxis(c.attrs.GetInt("axis"),
                                                 static_cast<int>(softmax.size()), "attrs.axis");
        const InputValues label = c.attrs.GetBool("soft_label")
                                      ? InputValues{ValueKind::kPositive}
                                      : InputValues{ValueKind::kIndex, softmax[axis]};
        return std::vector<InputValues>{label, {ValueKind::kPositive}, {}};
      })
      .Examples(FromSignatures(
          {{{"a1", "ac", "a1"}, MakeAttrs({{"ignore_index", int64_t{1}}})},
           {{"1", "c", "1"}, MakeAttrs({{"use_softmax", false}})},
           {{"c", "c", "1"}, MakeAttrs({{"soft_label", true}})},
           {{"ab", "ab", "1b"}, MakeAttrs({{"soft_label", true}, {"use_softmax", false}, {"axis", int64_t{0}}})}}));
}

}  // namespace spmd::declare
