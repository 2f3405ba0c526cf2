// The normalisations: layer_norm, rms_norm and their grads, checked by their plans
// (rules/ops/norm_plan.h). layer_norm and rms_norm exchange their first normalised dim
// (OpDecl::exchange: each rank summarises its piece of every row, rules/ops/norm_pieces.h);
// layer_norm_grad and rms_norm_grad keep their normalised factors forced replicated (the
// local kernels need a row whole).
#include "rules/model/error.h"
#include "rules/ops/norm_plan.h"
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

// layer_norm / rms_norm: x's dims split at begin_norm_axis into the rows (kept) and the
// normalised dims; the statistics (and their cotangents) reshaped to `kept` broadcast
// against x.
struct NormDims {
  Shape kept;  // x.shape[:begin] + 1s
  double n = 1;
};

NormDims SplitNorm(const RuleContext& c) {
  const Shape& x = c.input_shapes[0];
  const int rank = static_cast<int>(x.size());
  NormDims dims;
  const int64_t begin = c.attrs.GetInt("begin_norm_axis");
  if (begin < 0 || begin >= rank) {
    ThrowInvalid("attrs.begin_norm_axis", "must be in [0, " + std::to_string(rank) + ")");
  }
  dims.kept = x;
  for (int d = static_cast<int>(begin); d < rank; ++d) {
    dims.kept[d] = 1;
    dims.n *= static_cast<double>(x[d]);
  }
  return dims;
}

Ref ToKept(VjpGraph& g, Ref stats, const NormDims& dims) {
  return g.Add("reshape", {stats}, MakeAttrs({{"shape", dims.kept}}));
}

// The attrs the forward passes on to its grad op.
Attrs NormGradAttrs(const RuleContext& c) {
  return MakeAttrs({{"epsilon", c.attrs.GetFloat("epsilon")},
                    {"begin_norm_axis", c.attrs.GetInt("begin_norm_axis")}});
}

// layer_norm, rms_norm: through out, their grad ops (layer_norm_grad, rms_norm_grad); the
// statistics outputs' cotangents add their terms to x_grad (reshape, scale, subtract,
// multiply, add).
// Through out: layer_norm_grad(x, scale, bias, mean, variance, g) gives x_grad (from
// xhat = (x - mean) / sqrt(variance + eps) and dxhat = g scale: (dxhat - mean(dxhat) -
// xhat mean(dxhat xhat)) / std), scale_grad and bias_grad. The mean and variance outputs'
// cotangents add g_mean / N and 2 (x - mean) g_variance / N to x_grad.
VjpGraph LayerNorm(const RuleContext& c) {
  VjpGraph g;
  const NormDims dims = SplitNorm(c);
  const size_t grads = g.Add("layer_norm_grad",
                             {Ref::Input(0), Ref::Input(1), Ref::Input(2), Ref::Output(1),
                              Ref::Output(2), Ref::OutputGrad(0)},
                             NormGradAttrs(c)).index;
  const Ref centered = g.Add("subtract", {Ref::Input(0), ToKept(g, Ref::Output(1), dims)});
  Ref x_grad = g.Add("add", {Ref::Call(grads, 0), ScaleBy(g, ToKept(g, Ref::OutputGrad(1), dims), 1 / dims.n)});
  const Ref variance_weight = ScaleBy(g, ToKept(g, Ref::OutputGrad(2), dims), 2 / dims.n);
  x_grad = g.Add("add", {x_grad, g.Add("multiply", {centered, variance_weight})});
  g.input_grads = {x_grad, Ref::Call(grads, 1), Ref::Call(grads, 2)};
  return g;
}

// Through out: rms_norm_grad(x, scale, invvar, g) gives x_grad (dxhat invvar - x invvar^3
// sum(dxhat x) / N, dxhat = g scale) and scale_grad. invvar = 1 / sqrt(mean(x^2) + eps)
// has d invvar / dx = -invvar^3 x / N, so its cotangent adds -x invvar^3 g_invvar / N.
VjpGraph RmsNorm(const RuleContext& c) {
  VjpGraph g;
  const NormDims dims = SplitNorm(c);
  const size_t grads = g.Add("rms_norm_grad",
                             {Ref::Input(0), Ref::Input(1), Ref::Output(1), Ref::OutputGrad(0)},
                             NormGradAttrs(c)).index;
  const Ref inv = ToKept(g, Ref::Output(1), dims);
  const Ref inv_cubed = g.Add("multiply", {g.Add("multiply", {inv, inv}), inv});
  const Ref coefficient =
      ScaleBy(g, g.Add("multiply", {inv_cubed, ToKept(g, Ref::OutputGrad(1), dims)}), -1 / dims.n);
  const Ref x_grad = g.Add("add", {Ref::Call(grads, 0), g.Add("multiply", {Ref::Input(0), coefficient})});
  g.input_grads = {x_grad, Ref::Call(grads, 1)};
  return g;
}

}  // namespace
}  // namespace spmd::vjps

namespace spmd::declare {
namespace {

using notation::MakeAttrs;

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
  return c.attrs.WithLocal({.offset = c.input_offsets[0], .global_shape = c.global_inputs[0]});
}

// layer_norm_grad / rms_norm_grad: x `abcd` with begin 2, the parameters `N` (the flattened
// normalised size), the forward's statistics `ab`, out_grad `abcd` -> x_grad `abcd` and one
// `N` gradient per parameter. c, the first normalised dim, is exchanged (each piece's row
// sums of dxhat and dxhat xhat are gathered) and N follows it (EinsumSpec::tied: sharded
// with c when the axes divide both sizes, so a piece holds the slice of the parameters and
// of their gradients that matches its slice of the row); d is forced replicated. The rows
// a, b may stay sharded, and since the parameters' gradients sum over them, those come out
// partial(sum) on the rows' mesh axes.
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
  EinsumSpec spec = notation::FromLetters(inputs, outputs, letters.substr(begin + 1));
  spec.tied.push_back({spec.inputs[1][0], spec.inputs[0][begin]});  // N follows c
  return spec;
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

}  // namespace

OpDecl layer_norm() {
  return OpBuilder("layer_norm").Inputs({"x", "scale", "bias"})
      .Tolerance(ToleranceClass::kLayerNorm)
      .Vjp(vjps::LayerNorm)
      .Outputs({"out", "mean", "variance"})
      .Attr("epsilon", AttrKind::kFloat, 1e-5)
      .Attr("begin_norm_axis", AttrKind::kInt, int64_t{1})
      .Einsum([](const RuleContext& c) { return Normalization(c, 2, 2); })
      .ExchangeAlong(0, NormExchangedDim)
      .Localize({LocalField::kOffset, LocalField::kGlobalShape}, NormPiece)
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
      .Localize({LocalField::kOffset, LocalField::kGlobalShape}, NormPiece)
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
      .ExchangeAlong(0, NormExchangedDim)
      .Localize({LocalField::kOffset, LocalField::kGlobalShape}, NormPiece)
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
      .ExchangeAlong(0, NormExchangedDim)
      .Localize({LocalField::kOffset, LocalField::kGlobalShape}, NormPiece)
      .Values([](const RuleContext&) {  // an inverse root is > 0
        return std::vector<InputValues>{{}, {}, {ValueKind::kPositive}, {}};
      })
      .Examples(NormGradExamples(1, 1));
}

}  // namespace spmd::declare
