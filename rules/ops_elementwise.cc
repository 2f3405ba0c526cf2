// Elementwise ops: one broadcasting notation; only the partial acceptance differs.
#include "rules/error.h"
#include "rules/notation.h"
#include "rules/registry.h"

namespace spmd::declare {
namespace {

using notation::FromSignatures;
using notation::MakeAttrs;

constexpr double kFloatMax = 1.7976931348623157e308;

EinsumSpec Pointwise(const RuleContext& c) { return notation::Elementwise(c.input_shapes); }

EinsumSpec Accepting(const RuleContext& c, PartialAcceptance accept) {
  EinsumSpec spec = notation::Elementwise(c.input_shapes);
  spec.accept = accept;
  return spec;
}

OpDecl Unary(const char* name, ValueKind values = ValueKind::kReal) {
  return OpBuilder(name).Inputs({"x"}).Outputs({"out"}).Einsum(Pointwise)
      .Values([values](const RuleContext&) { return std::vector<InputValues>{{values}}; })
      .Examples(FromSignatures({{{"abc"}}, {{"a1"}}}));
}

OpDecl Binary(const char* name, PartialAcceptance accept = PartialAcceptance::kNone) {
  return OpBuilder(name).Inputs({"x", "y"}).Outputs({"out"})
      .Einsum([accept](const RuleContext& c) { return Accepting(c, accept); })
      .Examples(FromSignatures({{{"ab", "ab"}}, {{"abc", "c"}}, {{"1b", "ab"}}}));
}

}  // namespace

OpDecl relu() { return Unary("relu"); }
OpDecl gelu() {
  return OpBuilder("gelu").Inputs({"x"}).Outputs({"out"})
      .Attr("approximate", AttrKind::kBool, false).Einsum(Pointwise)
      .Examples(FromSignatures({{{"abc"}}, {{"ab"}, MakeAttrs({{"approximate", true}})}}));
}
OpDecl silu() { return Unary("silu"); }
OpDecl exp() { return Unary("exp"); }
OpDecl log() { return Unary("log", ValueKind::kPositive); }
OpDecl tanh() { return Unary("tanh"); }
OpDecl sigmoid() { return Unary("sigmoid"); }
OpDecl sqrt() { return Unary("sqrt", ValueKind::kPositive); }
OpDecl abs() { return Unary("abs"); }

// scale is linear in x only without a bias: a bias would be added once per rank.
OpDecl scale() {
  return OpBuilder("scale").Inputs({"x"}).Outputs({"out"})
      .Attr("scale", AttrKind::kFloat, 1.0)
      .Attr("bias", AttrKind::kFloat, 0.0)
      .Attr("bias_after_scale", AttrKind::kBool, true)
      .Einsum([](const RuleContext& c) {
        EinsumSpec spec = notation::Elementwise(c.input_shapes);
        if (c.attrs.GetFloat("bias") == 0.0) spec.accept = PartialAcceptance::kSameOp;
        return spec;
      })
      .Examples(FromSignatures({{{"abc"}, MakeAttrs({{"scale", 2.5}})},
                                {{"ab"}, MakeAttrs({{"scale", -1.5}, {"bias", 0.5}})},
                                {{"ab"}, MakeAttrs({{"bias", 1.0}, {"bias_after_scale", false}})}}));
}

OpDecl clip() {
  return OpBuilder("clip").Inputs({"x"}).Outputs({"out"})
      .Attr("min", AttrKind::kFloat, -kFloatMax)
      .Attr("max", AttrKind::kFloat, kFloatMax)
      .Einsum([](const RuleContext& c) {
        if (c.attrs.GetFloat("min") > c.attrs.GetFloat("max")) {
          ThrowInvalid("attrs.min", "min is greater than max");
        }
        return notation::Elementwise(c.input_shapes);
      })
      .Examples(FromSignatures({{{"abc"}, MakeAttrs({{"min", -0.5}, {"max", 0.75}})}}));
}

OpDecl cast() {
  return OpBuilder("cast").Inputs({"x"}).Outputs({"out"})
      .Attr("dtype", AttrKind::kString, std::string("float64"))
      .Einsum([](const RuleContext& c) {
        if (!ParseDType(c.attrs.GetString("dtype"))) {
          ThrowInvalid("attrs.dtype", "unknown dtype '" + c.attrs.GetString("dtype") + "'");
        }
        return notation::Elementwise(c.input_shapes);
      })
      .Examples(FromSignatures({{{"abc"}, MakeAttrs({{"dtype", std::string("float32")}})},
                                {{"ab"}, MakeAttrs({{"dtype", std::string("int64")}})},
                                {{"ab"}, MakeAttrs({{"dtype", std::string("bool")}})}}));
}

OpDecl add() { return Binary("add", PartialAcceptance::kSumOfAll); }
OpDecl subtract() { return Binary("subtract", PartialAcceptance::kSumOfAll); }
OpDecl multiply() { return Binary("multiply", PartialAcceptance::kMultilinear); }
OpDecl divide() {
  OpDecl op = Binary("divide");
  op.values = [](const RuleContext&) {
    return std::vector<InputValues>{{ValueKind::kReal}, {ValueKind::kNonZero}};
  };
  return op;
}
OpDecl maximum() { return Binary("maximum"); }
OpDecl minimum() { return Binary("minimum"); }
OpDecl greater_than() { return Binary("greater_than"); }
OpDecl less_than() { return Binary("less_than"); }
OpDecl where() {
  return OpBuilder("where").Inputs({"condition", "x", "y"}).Outputs({"out"}).Einsum(Pointwise)
      .Values([](const RuleContext&) {
        return std::vector<InputValues>{{ValueKind::kBool}, {ValueKind::kReal}, {ValueKind::kReal}};
      })
      .Examples(FromSignatures({{{"ab", "ab", "ab"}}, {{"ab", "b", "1b"}}}));
}

}  // namespace spmd::declare
