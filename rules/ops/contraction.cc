// Contractions: matmul, bmm, einsum, matmul_grad, fused_gemm_epilogue (matmul with a bias
// and an activation after it) and fused_linear_param_grad_add (a linear layer's parameter
// gradients added into accumulators). Factors absent from an output make it partial(sum).
#include <algorithm>
#include <cctype>

#include "rules/ops/contraction_plan.h"
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

// Contractions: matmul_grad (bmm is matmul on rank 3).
VjpGraph Matmul(const RuleContext& c) {
  VjpGraph g;
  Attrs attrs;
  for (const char* name : {"trans_x", "trans_y"}) {
    if (c.attrs.Has(name)) attrs.Set(name, c.attrs.GetBool(name));
  }
  const Ref grads = g.Add("matmul_grad", {Ref::Input(0), Ref::Input(1), Ref::OutputGrad(0)}, attrs);
  g.input_grads = {Ref::Call(grads.index, 0), Ref::Call(grads.index, 1)};
  return g;
}

// fused_gemm_epilogue: out = act(h), h = matmul(x, y) + bias, reserve_space = h (relu,
// gelu). The cotangent of h: relu's mask of h > 0 (relu's VJP) or gelu_grad(h, g) with
// the tanh form (the op's gelu), plus reserve_space's cotangent; then x and y from
// matmul_grad, bias the sum of h's cotangent over out's leading dims.
VjpGraph FusedGemmEpilogue(const RuleContext& c) {
  VjpGraph g;
  const plan::FusedGemmEpiloguePlan p = plan::PlanFusedGemmEpilogue(c.input_shapes, c.attrs);
  Ref dh = Ref::OutputGrad(0);
  if (p.activation != plan::Epilogue::kNone) {
    const Ref h = Ref::Output(1);
    if (p.activation == plan::Epilogue::kRelu) {
      dh = Keep(g, g.Add("greater_than", {h, Zeros(g, h)}), dh);
    } else {
      dh = g.Add("gelu_grad", {h, dh}, MakeAttrs({{"approximate", true}}));
    }
    dh = g.Add("add", {dh, Ref::OutputGrad(1)});
  }
  const Ref grads = g.Add("matmul_grad", {Ref::Input(0), Ref::Input(1), dh},
                          MakeAttrs({{"trans_x", c.attrs.GetBool("trans_x")},
                                     {"trans_y", c.attrs.GetBool("trans_y")}}));
  g.input_grads = {Ref::Call(grads.index, 0), Ref::Call(grads.index, 1),
                   SumToShape(g, dh, p.mm.out_shape, c.input_shapes[2])};
  return g;
}

// linear_v2: out = matmul(x, weight) + bias; x and weight from matmul_grad (trans_y the
// transpose_weight), bias the sum of the cotangent over out's leading dims.
VjpGraph LinearV2(const RuleContext& c) {
  VjpGraph g;
  const plan::FusedGemmEpiloguePlan p = plan::PlanLinearV2(c.input_shapes, c.attrs);
  const Ref grads = g.Add("matmul_grad", {Ref::Input(0), Ref::Input(1), Ref::OutputGrad(0)},
                          MakeAttrs({{"trans_x", false}, {"trans_y", c.attrs.GetBool("transpose_weight")}}));
  g.input_grads = {Ref::Call(grads.index, 0), Ref::Call(grads.index, 1),
                   SumToShape(g, Ref::OutputGrad(0), p.mm.out_shape, c.input_shapes[2])};
  return g;
}

// einsum: per operand, the einsum of the cotangent with the other operands.
// Operand i's gradient is the einsum of the cotangent with the other operands, giving
// operand i's letters (the planned equation: `...` spelled out as letters). A dim of
// operand i stays out of that einsum's output, and comes back by broadcasting (reshape to
// 1, expand), when no other term has its letter at its size: a letter only in operand i
// (summed there), or one the other terms have only at size 1. A dim that broadcast in the
// forward (size 1, the letter larger elsewhere) is summed by that einsum.
VjpGraph Einsum(const RuleContext& c) {
  VjpGraph g;
  const shape::EinsumPlan plan = shape::PlanEinsum(c.attrs.GetString("equation"), c.input_shapes);
  const shape::EinsumEquation& eq = plan.eq;
  for (size_t i = 0; i < eq.operands.size(); ++i) {
    // The largest size of each letter over the cotangent and the other operands.
    std::vector<int64_t> seen(128, -1);
    auto see = [&](const std::string& letters, const Shape& sizes) {
      for (size_t d = 0; d < letters.size(); ++d) {
        int64_t& s = seen[static_cast<unsigned char>(letters[d])];
        s = std::max(s, sizes[d]);
      }
    };
    see(eq.output, plan.SizesOf(eq.output));
    std::vector<Ref> operands{Ref::OutputGrad(0)};
    std::string terms = eq.output;
    for (size_t j = 0; j < eq.operands.size(); ++j) {
      if (j == i) continue;
      terms += "," + eq.operands[j];
      see(eq.operands[j], c.input_shapes[j]);
      operands.push_back(Ref::Input(j));
    }
    const std::string& mine = eq.operands[i];
    std::string target;
    Shape kept = c.input_shapes[i];
    for (size_t d = 0; d < mine.size(); ++d) {
      const int64_t size = c.input_shapes[i][d];
      if (!plan.broadcast[i][d] && seen[static_cast<unsigned char>(mine[d])] == size) {
        target.push_back(mine[d]);
      } else {
        kept[d] = 1;
      }
    }
    const Ref grad = g.Add("einsum", operands, MakeAttrs({{"equation", terms + "->" + target}}));
    g.input_grads.push_back(target == mine ? grad : ExpandReduced(g, grad, kept, c.input_shapes[i]));
  }
  return g;
}

}  // namespace
}  // namespace spmd::vjps

namespace spmd::declare {
namespace {

using notation::FromSignatures;
using notation::MakeAttrs;

// matmul's notation: batch letters (upper case, broadcast like elementwise), then
// `mk` / `kn` (`km` / `nk` when transposed); a 1-D operand is just `k`.
// Example: x [2, 1, 8, 4], y [3, 4, 5] -> x `AB` batch from [2, 1] vs [3]: `A1mk`,
// y `Bkn`, out `ABmn`.
std::vector<std::string> MatmulLetters(const RuleContext& c) {
  const Shape& x = c.input_shapes[0];
  const Shape& y = c.input_shapes[1];
  // The shapes' checks (plan::PlanMatmulShapes, shared with the reference and the kernels).
  (void)plan::PlanMatmulShapes(x, y, c.attrs.GetBool("trans_x"), c.attrs.GetBool("trans_y"));
  const bool trans_x = c.attrs.GetBool("trans_x") && x.size() > 1;
  const bool trans_y = c.attrs.GetBool("trans_y") && y.size() > 1;
  const Shape x_batch(x.begin(), x.end() - std::min<size_t>(2, x.size()));
  const Shape y_batch(y.begin(), y.end() - std::min<size_t>(2, y.size()));
  const std::vector<std::string> batch = notation::ElementwiseLetters({x_batch, y_batch});
  auto upper = [](std::string s) {
    for (char& ch : s) ch = ch == '1' ? '1' : static_cast<char>(std::toupper(ch));
    return s;
  };
  return {upper(batch[0]) + (x.size() == 1 ? "k" : (trans_x ? "km" : "mk")),
          upper(batch[1]) + (y.size() == 1 ? "k" : (trans_y ? "nk" : "kn")),
          upper(batch[2]) + (x.size() > 1 ? "m" : "") + (y.size() > 1 ? "n" : "")};
}

EinsumSpec Matmul(const RuleContext& c) {
  const std::vector<std::string> letters = MatmulLetters(c);
  EinsumSpec spec = notation::FromLetters({letters[0], letters[1]}, {letters[2]});
  spec.accept = PartialAcceptance::kMultilinear;
  return spec;
}

// einsum's equation (rules/engine/shape_util.h, shared with the reference and the kernel):
// explicit `ij,jk->ik`, or implicit (letters seen once, sorted), `...` expanded to letters
// of its own; an operand dim that broadcasts (size 1, the letter larger elsewhere) is a
// broadcast dim `1`. Example: `...ij,jk` with [2, 5, 3] and [1, 4] is `Aij,1k->Aik`.
EinsumSpec ParseEquation(const std::string& equation, const std::vector<Shape>& shapes) {
  const shape::EinsumPlan plan = shape::PlanEinsum(equation, shapes);
  std::vector<std::string> operands = plan.eq.operands;
  for (size_t i = 0; i < operands.size(); ++i) {
    for (size_t d = 0; d < operands[i].size(); ++d) {
      if (plan.broadcast[i][d]) operands[i][d] = '1';
    }
  }
  EinsumSpec spec = notation::FromLetters(operands, {plan.eq.output});
  spec.accept = PartialAcceptance::kMultilinear;
  return spec;
}

}  // namespace

OpDecl matmul() {
  return OpBuilder("matmul").Inputs({"x", "y"}).Outputs({"out"})
      .Tolerance(ToleranceClass::kSumOfProducts)
      .Vjp(vjps::Matmul)
      .Attr("trans_x", AttrKind::kBool, false)
      .Attr("trans_y", AttrKind::kBool, false)
      .Einsum(Matmul)
      .Examples(FromSignatures({{{"mk", "kn"}},
                                {{"bmk", "kn"}},
                                {{"k", "kn"}},
                                {{"mk", "k"}},
                                {{"b1mk", "cbkn"}},
                                {{"km", "nk"}, MakeAttrs({{"trans_x", true}, {"trans_y", true}})}}));
}

OpDecl bmm() {
  return OpBuilder("bmm").Inputs({"x", "y"}).Outputs({"out"})
      .Tolerance(ToleranceClass::kSumOfProducts)
      .Vjp(vjps::Matmul)
      .Einsum([](const RuleContext& c) {
    (void)plan::PlanBmm(c.input_shapes);
    EinsumSpec spec = notation::FromLetters({"bmk", "bkn"}, {"bmn"});
    spec.accept = PartialAcceptance::kMultilinear;
    return spec;
  }).Examples(FromSignatures({{{"bmk", "bkn"}}}));
}

OpDecl einsum() {
  return OpBuilder("einsum").VariadicInputs("operands").Outputs({"out"})
      .Tolerance(ToleranceClass::kSumOfProducts)
      .Vjp(vjps::Einsum)
      .Attr("equation", AttrKind::kString, std::nullopt)
      .Einsum([](const RuleContext& c) {
        return ParseEquation(c.attrs.GetString("equation"), c.input_shapes);
      })
      .Examples(FromSignatures({
          {{"ij", "jk"}, MakeAttrs({{"equation", std::string("ij,jk->ik")}})},
          {{"bij", "bjk"}, MakeAttrs({{"equation", std::string("bij,bjk->bik")}})},
          {{"ijk", "ik"}, MakeAttrs({{"equation", std::string("ijk,ik->j")}})},
          {{"ij"}, MakeAttrs({{"equation", std::string("ij->ji")}})},
          {{"ij", "jk", "kl"}, MakeAttrs({{"equation", std::string("ij,jk,kl")}})},
          // Broadcasting (low ranks: each example multiplies the sweep's layouts): an
          // ellipsis whose size-1 dim broadcasts, a size-1 letter, an implicit output after
          // the ellipsis dims.
          {{"bk", "1kn"}, MakeAttrs({{"equation", std::string("...j,...jk->...k")}})},
          {{"i1", "jk"}, MakeAttrs({{"equation", std::string("ij,jk->ik")}})},
          {{"ac", "c"}, MakeAttrs({{"equation", std::string("...c,c")}})}}));
}

// Paddle's fused_gemm_epilogue(x, y, bias): out = act(matmul(x, y) + bias), x rank >= 2,
// y rank 2, bias [n]; reserve_space (Paddle's second output) the pre-activation for relu
// and gelu, unset (0-d) for none. matmul's letters (x `..mk`, y `kn`, out `..mn`), bias
// `n`, reserve_space out's. relu and gelu cannot take a partial sum: k is forced
// replicated. With activation none, k may stay sharded as matmul's: out is partial(sum) on
// its axes and bias is accumulated into it (EinsumSpec::accumulated: required partial
// there, so it is added once, not once per rank; Paddle's rule makes bias partial so too).
// Partial inputs are reduced (a kept one would need bias added once per addend as well).
OpDecl fused_gemm_epilogue() {
  return OpBuilder("fused_gemm_epilogue").Inputs({"x", "y", "bias"}).Outputs({"out", "reserve_space"})
      .Tolerance(ToleranceClass::kSumOfProducts)
      .Vjp(vjps::FusedGemmEpilogue)
      .Attr("trans_x", AttrKind::kBool, false)
      .Attr("trans_y", AttrKind::kBool, false)
      .Attr("activation", AttrKind::kString, std::string("none"))
      .Einsum([](const RuleContext& c) {
        const plan::FusedGemmEpiloguePlan p = plan::PlanFusedGemmEpilogue(c.input_shapes, c.attrs);
        const std::vector<std::string> mm = MatmulLetters(c);
        const bool linear = p.activation == plan::Epilogue::kNone;
        EinsumSpec spec = notation::FromLetters({mm[0], mm[1], "n"}, {mm[2], linear ? "" : mm[2]}, linear ? "" : "k");
        if (linear) {
          spec.whole_outputs.push_back(1);      // reserve_space unset
          spec.accumulated.emplace_back(2, 0);  // bias into out
        }
        return spec;
      })
      .Examples(FromSignatures({{{"mk", "kn", "n"}},
                                {{"bmk", "kn", "n"}, MakeAttrs({{"activation", std::string("relu")}})},
                                {{"km", "nk", "n"}, MakeAttrs({{"trans_x", true}, {"trans_y", true},
                                                               {"activation", std::string("gelu")}})},
                                {{"abkm", "kn", "n"}, MakeAttrs({{"trans_x", true}})}}));
}

// Paddle's linear_v2(x, weight, bias; transpose_weight): out = matmul(x, weight) + bias,
// fused_gemm_epilogue without an activation and with one output (plan::PlanLinearV2):
// matmul's letters with bias `n` added into out (EinsumSpec::accumulated), so a sharded k
// leaves out partial(sum) with the bias required partial where out is, added once. Paddle's
// rule replicates every dim when k is sharded and refuses transpose_weight; spmdkit keeps
// both (docs/DECISIONS.md).
OpDecl linear_v2() {
  return OpBuilder("linear_v2").Inputs({"x", "weight", "bias"}).Outputs({"out"})
      .Tolerance(ToleranceClass::kSumOfProducts)
      .Vjp(vjps::LinearV2)
      .Attr("transpose_weight", AttrKind::kBool, false)
      .Einsum([](const RuleContext& c) {
        (void)plan::PlanLinearV2(c.input_shapes, c.attrs);
        const Attrs mm_attrs = MakeAttrs({{"trans_x", false}, {"trans_y", c.attrs.GetBool("transpose_weight")}});
        const std::vector<std::string> mm = MatmulLetters(RuleContext{c.input_shapes, mm_attrs});
        EinsumSpec spec = notation::FromLetters({mm[0], mm[1], "n"}, {mm[2]});
        spec.accumulated.emplace_back(2, 0);  // bias into out
        return spec;
      })
      .Examples(FromSignatures({{{"mk", "kn", "n"}},
                                {{"bmk", "kn", "n"}},
                                {{"k", "nk", "n"}, MakeAttrs({{"transpose_weight", true}})},
                                {{"abmk", "nk", "n"}, MakeAttrs({{"transpose_weight", true}})}}));
}

// Paddle's fused_linear_param_grad_add(x, dout, dweight, dbias): a linear layer's weight
// and bias gradients added into their accumulators, dweight_out = dweight + x^T . dout over
// every leading dim, dbias_out = dbias + dout summed over them. x `..k`, dout `..n` (the
// leading dims shared, upper case), dweight `kn`, dbias `n` (0-d: absent, no letters),
// dweight_out `kn`, dbias_out `n` (unset without has_bias: 0-d, whole). The leading dims
// are summed: the outputs come out partial(sum) on their axes. dbias_out reads only dout
// and dbias (EinsumSpec::output_reads), so a sharded k leaves it whole. dweight and dbias
// are added into the outputs (EinsumSpec::accumulated): each is required partial(sum)
// where its output is, so every addend carries it once (Paddle requires them with the
// outputs' dist attrs, partial included). Partial inputs are reduced.
OpDecl fused_linear_param_grad_add() {
  return OpBuilder("fused_linear_param_grad_add").Inputs({"x", "dout", "dweight", "dbias"})
      .Outputs({"dweight_out", "dbias_out"})
      .Tolerance(ToleranceClass::kSumOfProducts)
      .Attr("multi_precision", AttrKind::kBool, true)
      .Attr("has_bias", AttrKind::kBool, true)
      .Einsum([](const RuleContext& c) {
        const plan::LinearParamGradPlan p = plan::PlanFusedLinearParamGradAdd(c.input_shapes, c.attrs);
        const std::string lead = notation::Letters(static_cast<int>(c.input_shapes[0].size()) - 1, 'A');
        EinsumSpec spec = notation::FromLetters(
            {lead + "k", lead + "n", p.has_dweight ? "kn" : "", p.has_dbias ? "n" : ""}, {"kn", p.has_bias ? "n" : ""});
        spec.output_reads = {{0, 1, 2}, {1, 3}};
        if (p.has_dweight) spec.accumulated.emplace_back(2, 0);
        if (p.has_dbias) spec.accumulated.emplace_back(3, 1);
        if (!p.has_bias) spec.whole_outputs.push_back(1);
        return spec;
      })
      .Examples(FromSignatures({{{"bk", "bn", "kn", "n"}},
                                {{"abk", "abn", "", ""}},
                                {{"bk", "bn", "kn", ""}, MakeAttrs({{"has_bias", false}})},
                                {{"k", "n", "", "n"}, MakeAttrs({{"multi_precision", false}})}}));
}

// x_grad = out_grad . y^T lacks n; y_grad = x^T . out_grad lacks m (and the batch when y
// was broadcast): both come out partial(sum) on those factors' axes.
OpDecl matmul_grad() {
  return OpBuilder("matmul_grad").Inputs({"x", "y", "out_grad"}).Outputs({"x_grad", "y_grad"})
      .Tolerance(ToleranceClass::kSumOfProducts)
      .Attr("trans_x", AttrKind::kBool, false)
      .Attr("trans_y", AttrKind::kBool, false)
      .Einsum([](const RuleContext& c) {
        (void)plan::PlanMatmulGrad(c.input_shapes, c.attrs);
        const std::vector<std::string> fwd = MatmulLetters(c);
        return notation::FromLetters({fwd[0], fwd[1], fwd[2]}, {fwd[0], fwd[1]});
      })
      .Examples(FromSignatures({{{"mk", "kn", "mn"}},
                                {{"bmk", "kn", "bmn"}},
                                {{"mk", "nk", "mn"}, MakeAttrs({{"trans_y", true}})}}));
}

// Paddle's bmm_grad: matmul_grad for x [b, m, k], y [b, k, n], out_grad [b, m, n]. x_grad
// lacks n and y_grad lacks m: each is partial(sum) on the other's contracted factor.
OpDecl bmm_grad() {
  return OpBuilder("bmm_grad").Inputs({"x", "y", "out_grad"}).Outputs({"x_grad", "y_grad"})
      .Tolerance(ToleranceClass::kSumOfProducts)
      .Einsum([](const RuleContext& c) {
        (void)plan::PlanBmmGrad(c.input_shapes);
        return notation::FromLetters({"bmk", "bkn", "bmn"}, {"bmk", "bkn"});
      })
      .Examples(FromSignatures({{{"bmk", "bkn", "bmn"}}}));
}

}  // namespace spmd::declare
