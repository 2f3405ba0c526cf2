// conv2d with Paddle's name, attrs and argument order (input, filter). The batch and the
// output channels pass through; the input channels are contracted (an output partial(sum)
// over their axes, as matmul's k); the spatial dims are forced replicated (an output row
// reads kh rows of the input around it: a shard would need its neighbours' rows).
#include <cstdint>
#include <string>
#include <vector>

#include "rules/conv_shape.h"
#include "rules/error.h"
#include "rules/notation.h"
#include "rules/registry.h"

namespace spmd::declare {
namespace {

using notation::Ints;
using notation::MakeAttrs;

// x `nchw` (NHWC: `nhwc`), filter `ocKL`, out `noPQ` (NHWC: `nPQo`); P and Q are new
// factors of the output's spatial sizes. R(h, w, K, L, P, Q). With groups > 1 the filter's
// dim 1 is its own factor `e` (in_channels / groups) and c, e and o are forced replicated
// too: a shard of the channels would regroup them (a local output channel j reads group
// j / (local out_channels / groups), not its global group).
EinsumSpec Conv2d(const RuleContext& c) {
  const conv::Conv2dPlan plan = conv::PlanConv2d(c.input_shapes[0], c.input_shapes[1], c.attrs);
  const bool grouped = plan.groups > 1;
  const std::string x = plan.channels_last ? "nhwc" : "nchw";
  const std::string filter = grouped ? "oeKL" : "ocKL";
  std::string forced = "hwKL";
  if (grouped) forced += "ceo";
  EinsumSpec spec = notation::FromLetters({x, filter}, {plan.channels_last ? "nhwo" : "nohw"}, forced);
  Notation& out = spec.outputs[0];
  const size_t ph = plan.channels_last ? 1 : 2;
  out[ph] = spec.AddFactor(plan.oh);
  out[ph + 1] = spec.AddFactor(plan.ow);
  spec.forced_replicated.push_back(out[ph]);
  spec.forced_replicated.push_back(out[ph + 1]);
  spec.accept = PartialAcceptance::kMultilinear;
  return spec;
}

}  // namespace

OpDecl conv2d() {
  return OpBuilder("conv2d").Inputs({"input", "filter"}).Outputs({"out"})
      .Tolerance(ToleranceClass::kSumOfProducts)
      .Attr("strides", AttrKind::kInts, Ints{1, 1})
      .Attr("paddings", AttrKind::kInts, Ints{0, 0})
      .Attr("padding_algorithm", AttrKind::kString, std::string("EXPLICIT"))
      .Attr("dilations", AttrKind::kInts, Ints{1, 1})
      .Attr("groups", AttrKind::kInt, int64_t{1})
      .Attr("data_format", AttrKind::kString, std::string("NCHW"))
      .Einsum(Conv2d)
      // Spatial sizes and filters fixed small (the rule forces them replicated); batch and
      // channels from the palette. Two 4-D inputs give many layouts: two examples, the
      // second NHWC, grouped, strided and dilated.
      .Examples([](const SizePalette& p) {
        const int64_t n = p[0], ch = p[1], o = p[2];
        return std::vector<Example>{
            {{{n, ch, 4, 3}, {o, ch, 2, 2}}, MakeAttrs({{"paddings", Ints{1, 0}}})},
            {{{n, 5, 4, 2 * ch}, {2 * o, ch, 2, 2}},
             MakeAttrs({{"data_format", std::string("NHWC")}, {"groups", int64_t{2}},
                        {"strides", Ints{2, 1}}, {"dilations", Ints{1, 2}},
                        {"paddings", Ints{0, 1, 1, 0}}})}};
      });
}

}  // namespace spmd::declare
