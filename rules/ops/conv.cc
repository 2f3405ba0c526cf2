// The conv family with Paddle's names, attrs and argument orders: conv2d, conv3d,
// depthwise_conv2d (input, filter), their grads (input, filter, out_grad) and
// conv2d_transpose (x, filter). A convolution: the batch and the output channels pass
// through; the input channels are contracted (an output partial(sum) over their axes, as
// matmul's k); the spatial dims are forced replicated (an output row reads kh rows of the
// input around it: a shard would need its neighbours' rows). The grads have the same
// factors, summed the other way; the transpose contracts x's channels (the filter's dim 0)
// and writes the filter's dim 1. roi_align and its grad (roi_align_plan.h) pool bilinear
// samples of x's image planes: only the channels pass through.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "rules/ops/conv_shape.h"
#include "rules/ops/roi_align_plan.h"
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

// conv3d: conv3d_grad(input, filter, g) with the forward's attrs.
VjpGraph Conv3d(const RuleContext& c) {
  VjpGraph g;
  const Ref grads = g.Add("conv3d_grad", {Ref::Input(0), Ref::Input(1), Ref::OutputGrad(0)}, c.attrs);
  g.input_grads = {Ref::Call(grads.index, 0), Ref::Call(grads.index, 1)};
  return g;
}

// conv2d_transpose(x, filter) is the input gradient of conv2d(y, filter) for a y of out's
// shape (conv_shape.h), so <g, out> = <conv2d(g, filter), x>: x's gradient is
// conv2d(g, filter) and the filter's is conv2d_grad(g, filter, x)'s filter gradient, both
// with the transpose's geometry as explicit attrs (the resolved paddings, SAME's dilation
// 1). Where output_padding >= stride (dilation > stride allows it) conv2d(g, filter) has
// more rows than x: they are sliced off, and x is zero-padded to them for conv2d_grad.
VjpGraph Conv2dTranspose(const RuleContext& c) {
  const conv::ConvTransposePlan t = conv::PlanConv2dTranspose(c.input_shapes[0], c.input_shapes[1], c.attrs);
  const conv::ConvPlan& p = t.conv;
  Ints strides, paddings, dilations;
  for (size_t d = p.first(); d < p.in.size(); ++d) {
    strides.push_back(p.stride[d]);
    paddings.push_back(p.pad[d]);
    paddings.push_back(p.pad_after[d]);
    dilations.push_back(p.dil[d]);
  }
  const Attrs attrs = MakeAttrs({{"strides", strides}, {"paddings", paddings},
                                 {"padding_algorithm", std::string("EXPLICIT")}, {"dilations", dilations},
                                 {"groups", p.groups}, {"data_format", c.attrs.GetString("data_format")}});
  const Shape& x_shape = c.input_shapes[0];
  const Shape conv_out = conv::PlanConv2d(t.out_shape, c.input_shapes[1], attrs).out_shape;
  VjpGraph g;
  Ref x_grad = g.Add("conv2d", {Ref::OutputGrad(0), Ref::Input(1)}, attrs);
  Ref x = Ref::Input(0);
  if (conv_out != x_shape) {
    Ints axes, starts, ends, pads(2 * x_shape.size(), 0);
    for (int s = 0; s < p.spatial; ++s) {
      const size_t axis = (p.channels_last ? 1 : 2) + static_cast<size_t>(s);
      axes.push_back(static_cast<int64_t>(axis));
      starts.push_back(0);
      ends.push_back(x_shape[axis]);
      pads[2 * axis + 1] = conv_out[axis] - x_shape[axis];
    }
    x_grad = g.Add("slice", {x_grad}, MakeAttrs({{"axes", axes}, {"starts", starts}, {"ends", ends}}));
    x = g.Add("pad", {x}, MakeAttrs({{"paddings", pads}}));
  }
  const Ref grads = g.Add("conv2d_grad", {Ref::OutputGrad(0), Ref::Input(1), x}, attrs);
  g.input_grads = {x_grad, Ref::Call(grads.index, 1)};
  return g;
}

// roi_align: x's gradient is roi_align_grad(x, boxes, boxes_num, g) with the forward's attrs;
// boxes are held constant (OpDecl::constant_inputs, as Paddle's grad gives them none) and
// boxes_num holds counts.
VjpGraph RoiAlign(const RuleContext& c) {
  VjpGraph g;
  const Ref x_grad =
      g.Add("roi_align_grad", {Ref::Input(0), Ref::Input(1), Ref::Input(2), Ref::OutputGrad(0)}, c.attrs);
  g.input_grads = {x_grad, std::nullopt, std::nullopt};
  return g;
}

}  // namespace
}  // namespace spmd::vjps

namespace spmd::declare {
namespace {

using notation::Ints;
using notation::MakeAttrs;

// The letters of the spatial dims: x's and out's (out's are replaced by new factors), and
// the kernel's.
std::string SpatialLetters(int spatial) { return spatial == 3 ? "dhw" : "hw"; }
std::string KernelLetters(int spatial) { return spatial == 3 ? "JKL" : "KL"; }

// [n, channel letter, spatial letters] in the plan's layout.
std::string InLayout(const conv::ConvPlan& plan, char channel) {
  const std::string sp = SpatialLetters(plan.spatial);
  return plan.channels_last ? "n" + sp + channel : std::string("n") + channel + sp;
}

// Replaces out's spatial letters (`o`, a notation in the plan's layout) by new factors of
// the plan's output sizes, forced replicated.
void NewSpatialFactors(EinsumSpec& spec, Notation& o, const conv::ConvPlan& plan, const conv::Spatial& sizes) {
  const size_t at = plan.channels_last ? 1 : 2;
  for (int s = 0; s < plan.spatial; ++s) {
    o[at + static_cast<size_t>(s)] = spec.AddFactor(sizes[plan.first() + static_cast<size_t>(s)]);
    spec.forced_replicated.push_back(o[at + static_cast<size_t>(s)]);
  }
}

// x `nchw` (NHWC: `nhwc`; 3-D: `ncdhw`, `ndhwc`), filter `ocKL` (3-D: `ocJKL`), out `noPQ`
// (NHWC: `nPQo`); P and Q (3-D: also the depth) are new factors of the output's spatial
// sizes. R(spatial, kernel, P, Q). With groups > 1 the filter's dim 1 is its own factor `e`
// (in_channels / groups) and c, e and o are forced replicated too: a shard of the channels
// would regroup them (a local output channel j reads group j / (local out_channels /
// groups), not its global group).
// A convolution reads x and the filter and writes out; its grad reads x, the filter and
// out_grad (out's notation) and writes x_grad and filter_grad (x's and the filter's), so
// both rules have the same factors and replications.
EinsumSpec ConvFactors(const conv::ConvPlan& plan, bool grad) {
  const bool grouped = plan.groups > 1;
  const std::string kernel = KernelLetters(plan.spatial);
  const std::string x = InLayout(plan, 'c');
  const std::string filter = (grouped ? "oe" : "oc") + kernel;
  const std::string out = InLayout(plan, 'o');
  std::string forced = SpatialLetters(plan.spatial) + kernel;
  if (grouped) forced += "ceo";
  EinsumSpec spec = grad ? notation::FromLetters({x, filter, out}, {x, filter}, forced)
                         : notation::FromLetters({x, filter}, {out}, forced);
  NewSpatialFactors(spec, grad ? spec.inputs[2] : spec.outputs[0], plan, plan.out);
  return spec;
}

// conv2d_transpose: x `nchw` (NHWC: `nhwc`), filter `coKL`, out `noPQ` (NHWC: `nPQo`), P
// and Q new factors of out's spatial sizes; c contracted (out partial(sum) on its axes), o
// from the filter's dim 1; R(h, w, K, L, P, Q). With groups > 1 the filter's dim 1 is
// out_channels / groups (`e`), out's channels a new factor, and c, e and out's channels are
// forced replicated (as conv2d's groups: a local channel would fall in another group).
EinsumSpec TransposeFactors(const conv::ConvTransposePlan& t) {
  const conv::ConvPlan& plan = t.conv;  // the convolution transposed: its in is out, its out is x
  const bool grouped = plan.groups > 1;
  const std::string kernel = KernelLetters(plan.spatial);
  const std::string x = InLayout(plan, 'c');
  const std::string filter = (grouped ? "ce" : "co") + kernel;
  const std::string out = InLayout(plan, grouped ? 'c' : 'o');  // grouped: channel replaced below
  std::string forced = SpatialLetters(plan.spatial) + kernel;
  if (grouped) forced += "ce";
  EinsumSpec spec = notation::FromLetters({x, filter}, {out}, forced);
  Notation& o = spec.outputs[0];
  if (grouped) {
    const size_t ch = plan.channels_last ? o.size() - 1 : 1;
    o[ch] = spec.AddFactor(plan.c);
    spec.forced_replicated.push_back(o[ch]);
  }
  NewSpatialFactors(spec, o, plan, plan.in);
  return spec;
}

// An op's attrs with Paddle's names, defaults and order; a grad takes its forward's.
struct ConvAttr {
  const char* name;
  AttrKind kind;
  AttrValue default_value;
};
using ConvAttrList = std::vector<ConvAttr>;

const ConvAttrList& Conv2dAttrs() {
  static const ConvAttrList list{
      {"strides", AttrKind::kInts, Ints{1, 1}},
      {"paddings", AttrKind::kInts, Ints{0, 0}},
      {"padding_algorithm", AttrKind::kString, std::string("EXPLICIT")},
      {"dilations", AttrKind::kInts, Ints{1, 1}},
      {"groups", AttrKind::kInt, int64_t{1}},
      {"data_format", AttrKind::kString, std::string("NCHW")}};
  return list;
}

// Paddle's conv3d: groups before dilations.
const ConvAttrList& Conv3dAttrs() {
  static const ConvAttrList list{
      {"strides", AttrKind::kInts, Ints{1, 1, 1}},
      {"paddings", AttrKind::kInts, Ints{0, 0, 0}},
      {"padding_algorithm", AttrKind::kString, std::string("EXPLICIT")},
      {"groups", AttrKind::kInt, int64_t{1}},
      {"dilations", AttrKind::kInts, Ints{1, 1, 1}},
      {"data_format", AttrKind::kString, std::string("NCDHW")}};
  return list;
}

const ConvAttrList& Conv2dTransposeAttrs() {
  static const ConvAttrList list{
      {"strides", AttrKind::kInts, Ints{1, 1}},
      {"paddings", AttrKind::kInts, Ints{0, 0}},
      {"output_padding", AttrKind::kInts, Ints{}},
      {"output_size", AttrKind::kInts, Ints{}},
      {"padding_algorithm", AttrKind::kString, std::string("EXPLICIT")},
      {"groups", AttrKind::kInt, int64_t{1}},
      {"dilations", AttrKind::kInts, Ints{1, 1}},
      {"data_format", AttrKind::kString, std::string("NCHW")}};
  return list;
}

OpBuilder& WithAttrs(OpBuilder& op, const ConvAttrList& list) {
  for (const ConvAttr& a : list) op.Attr(a.name, a.kind, a.default_value);
  return op;
}

OpBuilder& ConvAttrs(OpBuilder& op) { return WithAttrs(op, Conv2dAttrs()); }

// `given` with the defaults of the attrs it does not set.
Attrs WithDefaults(const Attrs& given, const ConvAttrList& list) {
  Attrs all = given;
  for (const ConvAttr& a : list) {
    if (!all.Has(a.name)) all.Set(a.name, a.default_value);
  }
  return all;
}

// `grad` appends out_grad to each example, of the convolution's output shape.
std::vector<Example> WithOutGrad(std::vector<Example> examples, const ConvAttrList& list, int spatial) {
  for (Example& e : examples) {
    e.shapes.push_back(conv::PlanConv(e.shapes[0], e.shapes[1], WithDefaults(e.attrs, list), spatial).out_shape);
  }
  return examples;
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
    return grad ? WithOutGrad(std::move(examples), Conv2dAttrs(), 2) : examples;
  };
}

// conv3d's: as conv2d's, with a depth; the second NDHWC, grouped, strided, dilated and
// padded on both sides of each dim (6 paddings).
ExampleBuilder Conv3dExamples(bool grad) {
  return [grad](const SizePalette& p) {
    const int64_t n = p[0], ch = p[1], o = p[2];
    std::vector<Example> examples{
        {{{n, ch, 3, 4, 2}, {o, ch, 2, 2, 1}}, MakeAttrs({{"paddings", Ints{1, 0, 0}}})},
        {{{n, 3, 4, 3, 2 * ch}, {2 * o, ch, 2, 2, 2}},
         MakeAttrs({{"data_format", std::string("NDHWC")}, {"groups", int64_t{2}},
                    {"strides", Ints{1, 2, 1}}, {"dilations", Ints{2, 1, 1}},
                    {"paddings", Ints{0, 1, 1, 0, 0, 1}}})}};
    return grad ? WithOutGrad(std::move(examples), Conv3dAttrs(), 3) : examples;
  };
}

// Partial inputs kept as matmul keeps them (a convolution is linear in each input).
EinsumSpec Multilinear(EinsumSpec spec) {
  spec.accept = PartialAcceptance::kMultilinear;
  return spec;
}

// conv2d's notation (and depthwise_conv2d's).
EinsumSpec Conv2dNotation(const RuleContext& c) {
  return Multilinear(ConvFactors(conv::PlanConv2d(c.input_shapes[0], c.input_shapes[1], c.attrs), /*grad=*/false));
}

// roi_align's and roi_align_grad's attrs, Paddle's names, defaults and order.
OpBuilder& RoiAlignAttrs(OpBuilder& op) {
  return op.Attr("pooled_height", AttrKind::kInt, int64_t{1})
      .Attr("pooled_width", AttrKind::kInt, int64_t{1})
      .Attr("spatial_scale", AttrKind::kFloat, 1.0)
      .Attr("sampling_ratio", AttrKind::kInt, int64_t{-1})
      .Attr("aligned", AttrKind::kBool, false);
}

// x `nchw`, boxes `rk`, boxes_num `n` (absent: 0-d, no letters), out (grad: out_grad) `rcPQ`
// with P and Q new factors of the pooled sizes. Only c passes through: a roi reads any
// image (n: boxes_num maps the global roi positions to images), any place of it (h, w)
// and all four coordinates (k); r is forced replicated too, since a shard of the rois
// could not tell which image its first roi belongs to without the global counts.
EinsumSpec RoiAlignFactors(const roi_plan::RoiAlignPlan& plan, bool grad) {
  const std::string boxes_num = plan.has_boxes_num ? "n" : "";
  EinsumSpec spec = grad ? notation::FromLetters({"nchw", "rk", boxes_num, "rchw"}, {"nchw"}, "nhwrk")
                         : notation::FromLetters({"nchw", "rk", boxes_num}, {"rchw"}, "nhwrk");
  Notation& o = grad ? spec.inputs[3] : spec.outputs[0];
  o[2] = spec.AddFactor(plan.pooled_h);
  o[3] = spec.AddFactor(plan.pooled_w);
  spec.forced_replicated.push_back(o[2]);
  spec.forced_replicated.push_back(o[3]);
  return spec;
}

// Small images (the rules force H and W replicated), one or two images, one to three rois,
// the channels from the palette, one example per palette (four rank-4 operands make each
// example tens of thousands of sweep cases): an even first size gives adaptive sampling,
// aligned and scaled by 2, with boxes_num; an odd one two samples per bin side, not aligned,
// boxes_num absent (every roi image 0's). The sweep's palettes take both; the VJP and kernel
// tests draw sizes 1..4, so both too. `grad` appends out_grad, of roi_align's out shape.
ExampleBuilder RoiAlignExamples(bool grad) {
  return [grad](const SizePalette& p) {
    const int64_t n = 2 - p[1] % 2, ch = p[1], r = 1 + p[2] % 3;
    Example e = p[0] % 2 == 0
                    ? Example{{{n, ch, 4, 5}, {r, 4}, {n}},
                              MakeAttrs({{"pooled_height", int64_t{2}}, {"pooled_width", int64_t{2}},
                                         {"spatial_scale", 2.0}, {"aligned", true}})}
                    : Example{{{1, ch, 5, 4}, {r, 4}, {}},
                              MakeAttrs({{"pooled_height", int64_t{1}}, {"pooled_width", int64_t{2}},
                                         {"sampling_ratio", int64_t{2}}})};
    if (grad) e.shapes.push_back({r, ch, e.attrs.GetInt("pooled_height"), e.attrs.GetInt("pooled_width")});
    return std::vector<Example>{e};
  };
}

// x real, boxes ordered boxes inside the small images (kBoxes: coordinates in (0.1, 2), so in
// (0.2, 4) at spatial_scale 2), boxes_num counts summing to R; roi_align_grad's out_grad real.
ValuesBuilder RoiAlignValues() {
  return [](const RuleContext& c) {
    std::vector<InputValues> kinds{{ValueKind::kReal}, {ValueKind::kBoxes}, {ValueKind::kCounts}};
    kinds[2].bound = c.input_shapes[1].empty() ? 0 : c.input_shapes[1][0];
    if (c.input_shapes.size() > 3) kinds.push_back({ValueKind::kReal});
    return kinds;
  };
}

}  // namespace

// Paddle's roi_align(x, boxes, boxes_num): per roi r (boxes[r] = x1, y1, x2, y2 of image
// n(r), from boxes_num's counts) and channel, a pooled_height x pooled_width grid of bins,
// each the mean of bilinear samples of x (Detectron's RoIAlign; docs/OPS.md). Linear in x:
// a partial(sum) x stays partial (kLinearFirst); boxes and boxes_num are reduced.
OpDecl roi_align() {
  return RoiAlignAttrs(OpBuilder("roi_align").Inputs({"x", "boxes", "boxes_num"}).Outputs({"out"}))
      .Tolerance(ToleranceClass::kSumOfProducts)
      .Vjp(vjps::RoiAlign)
      .ConstantInputs({1})
      .Einsum([](const RuleContext& c) {
        EinsumSpec spec = RoiAlignFactors(
            roi_plan::PlanRoiAlign(c.input_shapes[0], c.input_shapes[1], c.input_shapes[2], c.attrs), false);
        spec.accept = PartialAcceptance::kLinearFirst;
        return spec;
      })
      .Values(RoiAlignValues())
      .Examples(RoiAlignExamples(/*grad=*/false));
}

// Paddle's roi_align_grad(x, boxes, boxes_num, out_grad) -> x_grad: each bin's out_grad,
// divided by its sample count, scattered into x with the samples' bilinear weights. x's
// values are not read (its shape is x_grad's). roi_align's factors; partial inputs reduced.
OpDecl roi_align_grad() {
  return RoiAlignAttrs(OpBuilder("roi_align_grad").Inputs({"x", "boxes", "boxes_num", "out_grad"})
                           .Outputs({"x_grad"}))
      .Tolerance(ToleranceClass::kSumOfProducts)
      .Einsum([](const RuleContext& c) {
        return RoiAlignFactors(roi_plan::PlanRoiAlignGrad(c.input_shapes[0], c.input_shapes[1], c.input_shapes[2],
                                                          c.input_shapes[3], c.attrs),
                               true);
      })
      .Values(RoiAlignValues())
      .Examples(RoiAlignExamples(/*grad=*/true));
}

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

// Paddle's conv3d: conv2d with a depth (x NCDHW or NDHWC, filter [O, C / groups, kd, kh,
// kw]), conv2d's rule over three spatial dims (all forced replicated; groups > 1: only the
// batch stays sharded).
OpDecl conv3d() {
  return WithAttrs(OpBuilder("conv3d").Inputs({"input", "filter"}).Outputs({"out"}), Conv3dAttrs())
      .Tolerance(ToleranceClass::kSumOfProducts)
      .Vjp(vjps::Conv3d)
      .Einsum([](const RuleContext& c) {
        return Multilinear(
            ConvFactors(conv::PlanConv3d(c.input_shapes[0], c.input_shapes[1], c.attrs), /*grad=*/false));
      })
      .Examples(Conv3dExamples(/*grad=*/false));
}

// Paddle's conv3d_grad: conv2d_grad with a depth; conv3d's attrs, factors and replications.
OpDecl conv3d_grad() {
  return WithAttrs(OpBuilder("conv3d_grad").Inputs({"input", "filter", "out_grad"})
                       .Outputs({"input_grad", "filter_grad"}), Conv3dAttrs())
      .Tolerance(ToleranceClass::kSumOfProducts)
      .Einsum([](const RuleContext& c) {
        return ConvFactors(conv::PlanConv3dGrad(c.input_shapes[0], c.input_shapes[1],
                                                c.input_shapes[2], c.attrs),
                           /*grad=*/true);
      })
      .Examples(Conv3dExamples(/*grad=*/true));
}

// Paddle's conv2d_transpose(x, filter): x [N, C, H, W] (NHWC [N, H, W, C]), filter [C,
// M / groups, kh, kw], out [N, M, OH, OW] (conv_shape.h). x's channels are contracted
// with the filter's dim 0 (out partial(sum) on their axes), out's channels are the
// filter's dim 1 (groups 1), the spatial dims are forced replicated; groups > 1: only the
// batch stays sharded. Partial inputs kept (it is linear in each input). The VJP composes
// conv2d and conv2d_grad.
OpDecl conv2d_transpose() {
  return WithAttrs(OpBuilder("conv2d_transpose").Inputs({"x", "filter"}).Outputs({"out"}), Conv2dTransposeAttrs())
      .Tolerance(ToleranceClass::kSumOfProducts)
      .Vjp(vjps::Conv2dTranspose)
      .Einsum([](const RuleContext& c) {
        return Multilinear(TransposeFactors(conv::PlanConv2dTranspose(c.input_shapes[0], c.input_shapes[1], c.attrs)));
      })
      .Examples([](const SizePalette& p) {
        // NCHW padded; NHWC grouped, strided, with output_padding; SAME; output_size; and
        // output_padding beyond the stride (dilation 2, stride 1: the VJP slices).
        const int64_t n = p[0], ch = p[1], o = p[2];
        return std::vector<Example>{
            {{{n, ch, 3, 2}, {ch, o, 2, 2}}, MakeAttrs({{"paddings", Ints{1, 0}}})},
            {{{n, 3, 2, 2 * ch}, {2 * ch, o, 2, 3}},
             MakeAttrs({{"data_format", std::string("NHWC")}, {"groups", int64_t{2}},
                        {"strides", Ints{2, 3}}, {"output_padding", Ints{1, 2}},
                        {"paddings", Ints{0, 1, 1, 0}}})},
            {{{n, ch, 3, 2}, {ch, o, 3, 2}},
             MakeAttrs({{"padding_algorithm", std::string("SAME")}, {"strides", Ints{2, 1}},
                        {"dilations", Ints{2, 2}}})},
            {{{n, ch, 2, 3}, {ch, o, 2, 2}},
             MakeAttrs({{"strides", Ints{3, 2}}, {"output_size", Ints{6, 5}}, {"paddings", Ints{0, 1}}})},
            {{{n, ch, 3, 2}, {ch, o, 2, 2}},
             MakeAttrs({{"dilations", Ints{2, 1}}, {"output_padding", Ints{1, 0}}, {"paddings", Ints{1, 0}}})}};
      });
}

}  // namespace spmd::declare
