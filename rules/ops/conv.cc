// conv2d and conv2d_grad with Paddle's names, attrs and argument orders (input, filter
// [, out_grad]). conv2d: the batch and the output channels pass through; the input
// channels are contracted (an output partial(sum) over their axes, as matmul's k); the
// spatial dims are forced replicated (an output row reads kh rows of the input around it:
// a shard would need its neighbours' rows). conv2d_grad has the same factors, summed the
// other way.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "rules/ops/conv_shape.h"
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

// conv2d: conv2d_grad(input, filter, g) with the forward's attrs.
VjpGraph Conv2d(const RuleContext& c) {
  VjpGraph g;
  // conv2d_grad declares conv2d's attrs: the forward's pass as they are.
  const Ref grads = g.Add("conv2d_grad", {Ref::Input(0), Ref::Input(1), Ref::OutputGrad(0)}, c.attrs);
  g.input_grads = {Ref::Call(grads.index, 0), Ref::Call(grads.index, 1)};
  return g;
}

}  // namespace
}  // namespace spmd::vjps

namespace spmd::declare {
namespace {

using notation::Ints;
using notation::MakeAttrs;

// x `nchw` (NHWC: `nhwc`), filter `ocKL`, out `noPQ` (NHWC: `nPQo`); P and Q are new
// factors of the output's spatial sizes. R(h, w, K, L, P, Q). With groups > 1 the filter's
// dim 1 is its own factor `e` (in_channels / groups) and c, e and o are forced replicated
// too: a shard of the channels would regroup them (a local output channel j reads group
// j / (local out_channels / groups), not its global group).
// conv2d reads x and the filter and writes out; conv2d_grad reads x, the filter and
// out_grad (out's notation) and writes x_grad and filter_grad (x's and the filter's), so
// both rules have the same factors and replications.
EinsumSpec ConvFactors(const conv::Conv2dPlan& plan, bool grad) {
  const bool grouped = plan.groups > 1;
  const std::string x = plan.channels_last ? "nhwc" : "nchw";
  const std::string filter = grouped ? "oeKL" : "ocKL";
  const std::string out = plan.channels_last ? "nhwo" : "nohw";
  std::string forced = "hwKL";
  if (grouped) forced += "ceo";
  EinsumSpec spec = grad ? notation::FromLetters({x, filter, out}, {x, filter}, forced)
                         : notation::FromLetters({x, filter}, {out}, forced);
  Notation& o = grad ? spec.inputs[2] : spec.outputs[0];
  const size_t ph = plan.channels_last ? 1 : 2;
  o[ph] = spec.AddFactor(plan.oh);
  o[ph + 1] = spec.AddFactor(plan.ow);
  spec.forced_replicated.push_back(o[ph]);
  spec.forced_replicated.push_back(o[ph + 1]);
  return spec;
}

// conv2d's attrs with Paddle's names and defaults; conv2d_grad takes the forward's.
struct ConvAttr {
  const char* name;
  AttrKind kind;
  AttrValue default_value;
};
const std::vector<ConvAttr>& ConvAttrList() {
  static const std::vector<ConvAttr> list{
      {"strides", AttrKind::kInts, Ints{1, 1}},
      {"paddings", AttrKind::kInts, Ints{0, 0}},
      {"padding_algorithm", AttrKind::kString, std::string("EXPLICIT")},
      {"dilations", AttrKind::kInts, Ints{1, 1}},
      {"groups", AttrKind::kInt, int64_t{1}},
      {"data_format", AttrKind::kString, std::string("NCHW")}};
  return list;
}

OpBuilder& ConvAttrs(OpBuilder& op) {
  for (const ConvAttr& a : ConvAttrList()) op.Attr(a.name, a.kind, a.default_value);
  return op;
}

// `given` with the defaults of the attrs it does not set.
Attrs WithConvDefaults(const Attrs& given) {
  Attrs all = given;
  for (const ConvAttr& a : ConvAttrList()) {
    if (!all.Has(a.name)) all.Set(a.name, a.default_value);
  }
  return all;
}

// Spatial sizes and filters fixed small (the rules force them replicated); batch and
// channels from the palette. Several 4-D inputs give many layouts: two examples, the
// second NHWC, grouped, strided and dilated. `grad` appends out_grad, of conv2d's output
// shape.
ExampleBuilder ConvExamples(bool grad) {
  return [grad](const SizePalette& p) {
    const int64_t n = p[0], ch = p[1], o = p[2];
    std::vector<Example> examples{
        {{{n, ch, 4, 3}, {o, ch, 2, 2}}, MakeAttrs({{"paddings", Ints{1, 0}}})},
        {{{n, 5, 4, 2 * ch}, {2 * o, ch, 2, 2}},
         MakeAttrs({{"data_format", std::string("NHWC")}, {"groups", int64_t{2}},
                    {"strides", Ints{2, 1}}, {"dilations", Ints{1, 2}},
                    {"paddings", Ints{0, 1, 1, 0}}})}};
    if (grad) {
      for (Example& e : examples) {
        e.shapes.push_back(
            conv::PlanConv2d(e.shapes[0], e.shapes[1], WithConvDefaults(e.attrs)).out_shape);
      }
    }
    return examples;
  };
}

// conv2d's notation (and depthwise_conv2d's): partial inputs kept as matmul keeps them.
EinsumSpec Conv2dNotation(const RuleContext& c) {
  EinsumSpec spec = ConvFactors(conv::PlanConv2d(c.input_shapes[0], c.input_shapes[1], c.attrs),
                                /*grad=*/false);
  spec.accept = PartialAcceptance::kMultilinear;
  return spec;
}

}  // namespace

OpDecl conv2d() {
  return ConvAttrs(OpBuilder("conv2d").Inputs({"input", "filter"}).Outputs({"out"}))
      .Tolerance(ToleranceClass::kSumOfProducts)
      .Vjp(vjps::Conv2d)
      .Einsum(Conv2dNotation)
      .Examples(ConvExamples(/*grad=*/false));
}

// Paddle's depthwise_conv2d: conv2d's computation, attrs and rule under the name Paddle
// gives the grouped convolution whose groups equal the input channels (each input channel
// its own group, the filter [channels x multiplier, 1, kh, kw]). Its VJP is conv2d's.
OpDecl depthwise_conv2d() {
  return ConvAttrs(OpBuilder("depthwise_conv2d").Inputs({"input", "filter"}).Outputs({"out"}))
      .Tolerance(ToleranceClass::kSumOfProducts)
      .Vjp(vjps::Conv2d)
      .Einsum(Conv2dNotation)
      .Examples([](const SizePalette& p) {
        // groups = the input channels, one or two filters per channel, NCHW and NHWC.
        const int64_t n = p[0], ch = std::max<int64_t>(p[1], 1);
        return std::vector<Example>{
            {{{n, ch, 4, 3}, {2 * ch, 1, 2, 2}},
             MakeAttrs({{"groups", ch}, {"paddings", Ints{1, 0}}})},
            {{{n, 5, 4, ch}, {ch, 1, 3, 2}},
             MakeAttrs({{"data_format", std::string("NHWC")}, {"groups", ch},
                        {"strides", Ints{2, 1}}, {"dilations", Ints{1, 2}}})}};
      });
}

// Paddle's conv2d_grad: input_grad and filter_grad of <out_grad, conv2d(input, filter)>.
// conv2d's factors and replications: input_grad lacks o (partial(sum) on the axes sharding
// the out channels), filter_grad lacks n (partial(sum) on the batch's axes); P and Q, also
// summed, are replicated. Partial inputs are reduced, as matmul_grad.
OpDecl conv2d_grad() {
  return ConvAttrs(OpBuilder("conv2d_grad").Inputs({"input", "filter", "out_grad"})
                       .Outputs({"input_grad", "filter_grad"}))
      .Tolerance(ToleranceClass::kSumOfProducts)
      .Einsum([](const RuleContext& c) {
        return ConvFactors(conv::PlanConv2dGrad(c.input_shapes[0], c.input_shapes[1],
                                                c.input_shapes[2], c.attrs),
                           /*grad=*/true);
      })
      .Examples(ConvExamples(/*grad=*/true));
}

}  // namespace spmd::declare
