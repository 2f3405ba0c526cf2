// The softmax cross entropies: cross_entropy_with_softmax (its class axis exchanged with
// use_softmax) and its grad (checked by their plans, rules/ops/loss_plan.h; the grad's class
// axis may stay sharded, a piece told its first class), and Paddle's
// vocabulary-parallel c_softmax_with_cross_entropy and c_softmax_with_multi_label_cross_entropy
// (their class axis exchanged) and their grads.
#include <initializer_list>

#include "rules/model/error.h"
#include "rules/ops/loss_plan.h"
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

// loss = -sum(label log p) along the axis, p = softmax(logits) (or the logits themselves
// without use_softmax). softmax_out's cotangent g0 adds softmax_grad(p, g0) (or g0).
VjpGraph CrossEntropyWithSoftmax(const RuleContext& c) {
  VjpGraph g;
  const int rank = static_cast<int>(c.input_shapes[0].size());
  const int64_t axis = notation::NormalizeAxis(c.attrs.GetInt("axis"), rank, "attrs.axis");
  const bool use_softmax = c.attrs.GetBool("use_softmax");
  const Ref through_softmax_out =
      use_softmax ? g.Add("softmax_grad", {Ref::Output(0), Ref::OutputGrad(0)}, MakeAttrs({{"axis", axis}}))
                  : Ref::OutputGrad(0);
  const Ref loss_grad = Ref::OutputGrad(1);  // the loss's shape: the axis kept as 1
  if (!c.attrs.GetBool("soft_label")) {
    Attrs attrs;
    for (const char* name : {"soft_label", "use_softmax", "numeric_stable_mode"}) attrs.Set(name, c.attrs.GetBool(name));
    attrs.Set("ignore_index", c.attrs.GetInt("ignore_index"));
    attrs.Set("axis", axis);
    const Ref through_loss =
        g.Add("cross_entropy_with_softmax_grad", {Ref::Input(1), Ref::Output(0), loss_grad}, attrs);
    g.input_grads = {g.Add("add", {through_loss, through_softmax_out}), std::nullopt};
    return g;
  }
  // Soft label l: d loss / d logits = g (p sum(l) - l) with softmax, -g l / p without;
  // d loss / d l = -g log p.
  Ref through_loss;
  Ref log_p;
  if (use_softmax) {
    const Ref total = g.Add("sum", {Ref::Input(1)}, MakeAttrs({{"axis", Ints{axis}}, {"keep_dim", true}}));
    const Ref residual = g.Add("subtract", {g.Add("multiply", {Ref::Output(0), total}), Ref::Input(1)});
    through_loss = g.Add("multiply", {loss_grad, residual});
    log_p = g.Add("log_softmax", {Ref::Input(0)}, MakeAttrs({{"axis", axis}}));
  } else {
    through_loss = g.Add("multiply", {ScaleBy(g, loss_grad, -1), g.Add("divide", {Ref::Input(1), Ref::Input(0)})});
    log_p = g.Add("log", {Ref::Input(0)});
  }
  g.input_grads = {g.Add("add", {through_loss, through_softmax_out}),
                   g.Add("multiply", {ScaleBy(g, loss_grad, -1), log_p})};
  return g;
}

// c_softmax_with_cross_entropy: c_softmax_with_cross_entropy_grad(softmax, label, g_loss)
// (local on a class piece) + softmax_grad(softmax, g_softmax) along the last dim; the label
// gets none.
VjpGraph CSoftmaxWithCrossEntropy(const RuleContext& c) {
  VjpGraph g;
  const int64_t last = static_cast<int64_t>(c.input_shapes[0].size()) - 1;
  Attrs attrs;
  for (const char* name : {"ignore_index", "ring_id", "rank", "nranks"}) attrs.Set(name, c.attrs.GetInt(name));
  const Ref through_loss =
      g.Add("c_softmax_with_cross_entropy_grad", {Ref::Output(0), Ref::Input(1), Ref::OutputGrad(1)}, attrs);
  const Ref through_softmax =
      g.Add("softmax_grad", {Ref::Output(0), Ref::OutputGrad(0)}, MakeAttrs({{"axis", last}}));
  g.input_grads = {g.Add("add", {through_loss, through_softmax}), std::nullopt};
  return g;
}

// c_softmax_with_multi_label_cross_entropy: its grad op (softmax, label, smooth_weight,
// g_loss; local on a class piece) + softmax_grad(softmax, g_softmax) along the last dim; the
// label gets none and smooth_weight is held constant (OpDecl::constant_inputs).
VjpGraph CSoftmaxWithMultiLabelCrossEntropy(const RuleContext& c) {
  VjpGraph g;
  const int64_t last = static_cast<int64_t>(c.input_shapes[0].size()) - 1;
  Attrs attrs;
  for (const char* name : {"ignore_index", "ring_id", "rank", "nranks"}) attrs.Set(name, c.attrs.GetInt(name));
  attrs.Set("sum_multi_label_loss", c.attrs.GetBool("sum_multi_label_loss"));
  const Ref through_loss = g.Add("c_softmax_with_multi_label_cross_entropy_grad",
                                 {Ref::Output(0), Ref::Input(1), Ref::Input(2), Ref::OutputGrad(1)}, attrs);
  const Ref through_softmax =
      g.Add("softmax_grad", {Ref::Output(0), Ref::OutputGrad(0)}, MakeAttrs({{"axis", last}}));
  g.input_grads = {g.Add("add", {through_loss, through_softmax}), std::nullopt, std::nullopt};
  return g;
}

}  // namespace
}  // namespace spmd::vjps

namespace spmd::declare {
namespace {

using notation::FromSignatures;
using notation::MakeAttrs;

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
ClassLastLetters ClassLast(const RuleContext& c, size_t arity, std::initializer_list<size_t> rows_of) {
  (void)plan::PlanCSoftmax(c.input_shapes, c.attrs, arity, rows_of);
  const int rank = static_cast<int>(c.input_shapes[0].size());
  const std::string letters = notation::Letters(rank);
  return {letters, letters.substr(0, rank - 1) + "1"};
}

}  // namespace

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
        const auto [letters, rows] = ClassLast(c, 2, {1});
        return notation::FromLetters({letters, rows}, {letters, rows});
      })
      .ExchangeAlong(0, [](const RuleContext& c) { return static_cast<int>(c.input_shapes[0].size()) - 1; })
      .Vjp(vjps::CSoftmaxWithCrossEntropy)
      .Values([](const RuleContext& c) {
        return std::vector<InputValues>{{}, {ValueKind::kIndex, c.input_shapes[0].back()}};
      })
      // a piece holds classes [start, start + C)
      .Localize({LocalField::kVocabStart}, [](const LocalContext& c) {
        return c.attrs.WithLocal({.vocab_start = c.input_offsets[0].back()});
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
        const auto [letters, rows] = ClassLast(c, 3, {1, 2});
        return notation::FromLetters({letters, rows, rows}, {letters});
      })
      .Values([](const RuleContext& c) {
        return std::vector<InputValues>{
            {ValueKind::kPositive}, {ValueKind::kIndex, c.input_shapes[0].back()}, {}};
      })
      // classes [start, start + C) of the global softmax
      .Localize({LocalField::kVocabStart, LocalField::kGlobalShape}, [](const LocalContext& c) {
        return c.attrs.WithLocal({.vocab_start = c.input_offsets[0].back(), .global_shape = c.global_inputs[0]});
      })
      .Examples(FromSignatures({{{"abc", "ab1", "ab1"}},
                                {{"ac", "a1", "a1"}, MakeAttrs({{"ignore_index", int64_t{1}}})}}));
}

namespace {

// The multi-label ops' attrs: the c_softmax ones and sum_multi_label_loss.
OpBuilder& MultiLabelAttrs(OpBuilder& op) {
  return CSoftmaxAttrs(op).Attr("sum_multi_label_loss", AttrKind::kBool, true);
}

// logits (softmax) `..c`, label and smooth_weight `..k` (k a letter of its own), loss `..1`
// summed or `..k`.
struct MultiLabelLetters {
  std::string logits, labels, loss;
};
MultiLabelLetters MultiLabel(const RuleContext& c, plan::MultiLabelInputs form) {
  const plan::MultiLabelPlan p = plan::PlanCSoftmaxMultiLabel(c.input_shapes, c.attrs, form);
  const int rank = static_cast<int>(c.input_shapes[0].size());
  const std::string letters = notation::Letters(rank + 1);
  const std::string lead = letters.substr(0, rank - 1);
  const std::string k = letters.substr(rank, 1);
  return {letters.substr(0, rank), lead + k, lead + (p.sum_loss ? "1" : k)};
}

// Labels drawn from the global class count (an example's ignore_index 1 makes some of them
// ignored), weights real; the grad's softmax positive and loss_grad real.
std::vector<InputValues> MultiLabelValues(const RuleContext& c, bool grad) {
  std::vector<InputValues> kinds{{grad ? ValueKind::kPositive : ValueKind::kReal},
                                 {ValueKind::kIndex, c.input_shapes[0].back()},
                                 {ValueKind::kReal}};
  if (grad) kinds.push_back({ValueKind::kReal});
  return kinds;
}

// One example per palette (three and four operands make each example tens of thousands of
// sweep cases): the summed loss with ignore_index 1 (some drawn labels ignored) where the
// palette's second size is even (the divisible and size-1 palettes), the loss per label
// where it is odd (the uneven one). `grad` appends loss_grad, of the loss's shape.
ExampleBuilder MultiLabelExamples(bool grad) {
  return [grad](const SizePalette& p) {
    const bool summed = p[1] % 2 == 0;
    const std::string loss = summed ? "a1" : "ak";
    std::vector<std::string> operands{"ac", "ak", "ak"};
    if (grad) operands.push_back(loss);
    const Attrs attrs = summed ? MakeAttrs({{"ignore_index", int64_t{1}}})
                               : MakeAttrs({{"sum_multi_label_loss", false}});
    return FromSignatures({{operands, attrs}})(p);
  };
}

}  // namespace

// Paddle's c_softmax_with_multi_label_cross_entropy(logits, label, smooth_weight): the
// vocabulary-parallel softmax cross entropy with k hard labels per row, each weighted.
// logits `..c` (the class axis last), label (ids) and smooth_weight `..k` -> softmax `..c`,
// loss `..1` (sum_multi_label_loss: the row's sum over its labels of weight * (log-sum-exp -
// the label's logit), 0 for a label equal to ignore_index) or `..k` (each label's). The class
// factor is exchanged as c_softmax_with_cross_entropy's: each piece summarises every row in
// 2 + 2k numbers (max, sum of exp, and each label's logit and holder flag), gathered over the
// class axis's mesh axes. k may be sharded: each rank then has its own labels' losses, and
// their sum is partial(sum). ring_id, rank, nranks range-checked only.
OpDecl c_softmax_with_multi_label_cross_entropy() {
  return MultiLabelAttrs(
             OpBuilder("c_softmax_with_multi_label_cross_entropy").Inputs({"logits", "label", "smooth_weight"}))
      .Outputs({"softmax", "loss"})
      .Tolerance(ToleranceClass::kCrossEntropy)
      .Einsum([](const RuleContext& c) {
        const MultiLabelLetters l = MultiLabel(c, plan::MultiLabelInputs::kForward);
        EinsumSpec spec = notation::FromLetters({l.logits, l.labels, l.labels}, {l.logits, l.loss});
        spec.output_reads = {{0}, {0, 1, 2}};  // softmax reads no label: a sharded k leaves it whole
        return spec;
      })
      .ExchangeAlong(0, [](const RuleContext& c) { return static_cast<int>(c.input_shapes[0].size()) - 1; })
      .Vjp(vjps::CSoftmaxWithMultiLabelCrossEntropy)
      .ConstantInputs({2})
      .Values([](const RuleContext& c) { return MultiLabelValues(c, false); })
      // a piece holds classes [start, start + C)
      .Localize({LocalField::kVocabStart}, [](const LocalContext& c) {
        return c.attrs.WithLocal({.vocab_start = c.input_offsets[0].back()});
      })
      .Examples(MultiLabelExamples(/*grad=*/false));
}

// Paddle's c_softmax_with_multi_label_cross_entropy_grad(softmax, label, smooth_weight,
// loss_grad): the logits' gradient, sum over the row's labels j not ignored of
// weight_j * g_j * (softmax - onehot(label_j)), g_j the row's loss_grad (summed) or label j's.
// softmax `..c`, label and smooth_weight `..k`, loss_grad `..1` or `..k` -> logits_grad `..c`.
// Each element needs its own class and the row's labels, so the class axis may stay sharded
// with no exchange (the localizer gives a piece its first class and the global shape); k is
// summed over, so a sharded k gives logits_grad partial(sum).
OpDecl c_softmax_with_multi_label_cross_entropy_grad() {
  return MultiLabelAttrs(OpBuilder("c_softmax_with_multi_label_cross_entropy_grad")
                             .Inputs({"softmax", "label", "smooth_weight", "loss_grad"}))
      .Outputs({"logits_grad"})
      .Tolerance(ToleranceClass::kPointwise)
      .Einsum([](const RuleContext& c) {
        const MultiLabelLetters l = MultiLabel(c, plan::MultiLabelInputs::kGrad);
        return notation::FromLetters({l.logits, l.labels, l.labels, l.loss}, {l.logits});
      })
      .Values([](const RuleContext& c) { return MultiLabelValues(c, true); })
      // classes [start, start + C) of the global softmax
      .Localize({LocalField::kVocabStart, LocalField::kGlobalShape}, [](const LocalContext& c) {
        return c.attrs.WithLocal({.vocab_start = c.input_offsets[0].back(), .global_shape = c.global_inputs[0]});
      })
      .Examples(MultiLabelExamples(/*grad=*/true));
}

namespace {

// cross_entropy_with_softmax's exchanged dim: the class axis with use_softmax (each piece
// sends c_softmax_with_cross_entropy's four numbers per row, softmax_pieces.h); -1 without
// (the axis is forced replicated).
int CrossEntropyExchangedDim(const RuleContext& c) {
  const plan::CrossEntropyPlan ce = plan::PlanCrossEntropy(c.input_shapes, c.attrs);
  return ce.use_softmax ? ce.axis : -1;
}

}  // namespace

// logits `abc` (class axis c) -> softmax_out `abc`, loss `ab1`; a hard label is `ab1`,
// a soft one `abc`. With use_softmax the class axis is exchanged (it may stay sharded: the
// vocabulary-parallel softmax of c_softmax_with_cross_entropy, along any axis and with soft
// labels too; the localizer gives a piece its first class); without, it is forced
// replicated (D8).
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
                                     ce.use_softmax ? "" : letters.substr(axis, 1));
      })
      .ExchangeAlong(0, CrossEntropyExchangedDim)
      .Localize({LocalField::kVocabStart}, [](const LocalContext& c) {  // a piece holds classes [start, start + C)
        const int rank = static_cast<int>(c.global_inputs[0].size());
        const int axis = notation::NormalizeAxis(c.attrs.GetInt("axis"), rank, "attrs.axis");
        return c.attrs.WithLocal({.vocab_start = c.input_offsets[0][axis]});
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
                                {{"1ab", "1ab"}, MakeAttrs({{"soft_label", true}, {"axis", int64_t{1}}})},
                                {{"abc", "a1c"}, MakeAttrs({{"axis", int64_t{1}}})}}));
}

// Paddle's cross_entropy_with_softmax_grad: the loss's gradient with respect to the
// logits, from the label, the forward's softmax_out and the loss's cotangent (softmax_out's
// own cotangent is not an input: the VJP adds softmax_grad for it). Hard label,
// use_softmax: (softmax - onehot(label)) loss_grad; without softmax: -loss_grad / softmax
// at the label, 0 elsewhere; a row whose label is ignore_index gets 0. Soft label:
// (softmax - label) loss_grad, or -label loss_grad / softmax (Paddle's formulas: they
// assume labels summing to 1). softmax `abc` (class axis c), label `ab1` or `abc`,
// loss_grad `ab1` -> input_grad `abc`. Each element needs only its own class and the row's
// label, so the class axis may stay sharded with no exchange (as
// c_softmax_with_cross_entropy_grad's): the localizer gives a piece its first class and the
// global shape, a piece without the label adds no one-hot term, and a label is checked
// against the global class count.
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
        return notation::FromLetters({ce.soft_label ? letters : reduced, letters, reduced}, {letters});
      })
      .Localize({LocalField::kVocabStart, LocalField::kGlobalShape}, [](const LocalContext& c) {  // classes [start, start + C) of the global softmax
        const int rank = static_cast<int>(c.global_inputs[1].size());
        const int axis = notation::NormalizeAxis(c.attrs.GetInt("axis"), rank, "attrs.axis");
        return c.attrs.WithLocal({.vocab_start = c.input_offsets[1][axis], .global_shape = c.global_inputs[1]});
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

// label_smooth: label `abc` (classes c) and an optional prior_dist `1c` (or `c`) -> out
// `abc`, elementwise. Without prior_dist every element adds epsilon / C for the global class
// count, so the class dim is whole (forced replicated); with it, the class dim may stay
// sharded with prior_dist sharded alike. The constant term makes it affine, not linear: a
// partial label is reduced first (the default acceptance). VJP: label's gradient is
// (1 - epsilon) g; prior_dist's is epsilon g summed over the rows (Paddle's
// label_smooth_grad gives it none; the checker holds every input to its finite difference).
OpDecl label_smooth() {
  return OpBuilder("label_smooth").VariadicInputs("inputs").Outputs({"out"})
      .Tolerance(ToleranceClass::kPointwise)
      .Attr("epsilon", AttrKind::kFloat, 0.0)
      .Einsum([](const RuleContext& c) {
        const plan::LabelSmoothPlan p = plan::PlanLabelSmooth(c.input_shapes, c.attrs);
        const std::string letters = notation::Letters(static_cast<int>(c.input_shapes[0].size()));
        const std::string cls = letters.substr(letters.size() - 1);
        if (!p.has_prior) return notation::FromLetters({letters}, {letters}, cls);
        return notation::FromLetters({letters, std::string(c.input_shapes[1].size() - 1, '1') + cls}, {letters});
      })
      .Vjp([](const RuleContext& c) {
        VjpGraph g;
        const double keep = 1.0 - c.attrs.GetFloat("epsilon");
        g.input_grads.push_back(g.Add("scale", {VjpRef::OutputGrad(0)}, MakeAttrs({{"scale", keep}, {"bias", 0.0}})));
        if (c.input_shapes.size() == 2) {  // epsilon g summed over the rows, in prior_dist's shape
          const Shape& label = c.input_shapes[0];
          std::vector<int64_t> rows;
          for (size_t d = 0; d + 1 < label.size(); ++d) rows.push_back(static_cast<int64_t>(d));
          const VjpRef summed =
              rows.empty() ? VjpRef::OutputGrad(0)
                           : g.Add("sum", {VjpRef::OutputGrad(0)},
                                   MakeAttrs({{"axis", rows}, {"keep_dim", false}, {"reduce_all", false}}));
          const VjpRef shaped = g.Add("reshape", {summed}, MakeAttrs({{"shape", c.input_shapes[1]}}));
          g.input_grads.push_back(
              g.Add("scale", {shaped}, MakeAttrs({{"scale", c.attrs.GetFloat("epsilon")}, {"bias", 0.0}})));
        }
        return g;
      })
      .Examples(FromSignatures({{{"abc"}, MakeAttrs({{"epsilon", 0.1}})},
                                {{"abc", "1c"}, MakeAttrs({{"epsilon", 0.25}})},
                                {{"ab", "b"}}}));
}

}  // namespace spmd::declare
