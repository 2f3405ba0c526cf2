// Every op whose declaration has a VJP (OpDecl::vjp): the graph, run with the float64
// references (EvaluateVjp), must equal central finite differences of the reference, on
// every example of the declaration at random sizes and values. Nothing here is written
// per op: filling an op's VJP slot puts it under this test.
//
// For cotangents g (one per output, random) and L(x) = sum_o <g_o, op(x)_o>, the VJP's
// gradient of input i must match (L(x + h e_j) - L(x - h e_j)) / 2h for every element j,
// within 1e-6 max(1, max |gradient|) (h = 1e-5: truncation ~h^2, cancellation ~1e-16 L / h).
// Integer and bool inputs (ids, labels, conditions) must have no gradient; a real input
// without one must have a zero finite difference, unless the op holds it constant
// (OpDecl::constant_inputs: roi_align's boxes), which must have none.
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <cmath>
#include <random>
#include <sstream>
#include <string>

#include "checker/input_values.h"
#include "checker/vjp_eval.h"
#include "reference/reference.h"
#include "rules/model/error.h"
#include "rules/model/mesh.h"
#include "rules/engine/notation.h"
#include "rules/engine/registry.h"

namespace spmd::checker {
namespace {

using notation::Ints;
using notation::MakeAttrs;
using reference::Tensor;
using reference::Tensors;

constexpr double kStep = 1e-5;
constexpr double kTolerance = 1e-6;

bool Differentiable(const Tensor& t) { return IsFloating(t.dtype); }

// <g, y> over the floating outputs: an int64 or bool output (argmax, a seed_offset) has no
// derivative, and its constant values would only add cancellation to the differences.
double Dot(const Tensors& g, const Tensors& y) {
  double sum = 0;
  for (size_t o = 0; o < g.size(); ++o) {
    if (!IsFloating(y[o].dtype)) continue;
    for (size_t k = 0; k < g[o].data.size(); ++k) sum += g[o].data[k] * y[o].data[k];
  }
  return sum;
}

std::string ShapeText(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (size_t d = 0; d < s.size(); ++d) os << (d ? ", " : "") << s[d];
  os << "]";
  return os.str();
}

// "" when the VJP of `op` matches finite differences on these inputs; else what differs.
std::string CheckCase(const OpDecl& op, const Tensors& inputs, const Attrs& attrs,
                      std::mt19937_64& rng) {
  const reference::ReferenceFn fn = reference::FindReference(op.name);
  const Attrs normalized = op.NormalizeAttrs(attrs);
  const Tensors outputs = fn(inputs, normalized);
  Tensors grads_out;
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  for (const Tensor& y : outputs) {
    Tensor g{y.shape, std::vector<double>(y.data.size()), DType::kFloat64};
    for (double& v : g.data) v = unit(rng);
    grads_out.push_back(std::move(g));
  }
  const auto grads = EvaluateVjp(op, inputs, attrs, outputs, grads_out);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string where = "inputs[" + std::to_string(i) + "]";
    if (!Differentiable(inputs[i])) {
      if (grads[i]) return where + " is " + std::string(ToString(inputs[i].dtype)) + " but gets a gradient";
      continue;
    }
    if (IsConstantInput(op, i)) {
      if (grads[i]) return where + " is held constant but gets a gradient";
      continue;
    }
    double scale = 1;
    if (grads[i]) {
      for (double v : grads[i]->data) scale = std::max(scale, std::fabs(v));
    }
    for (size_t j = 0; j < inputs[i].data.size(); ++j) {
      Tensors plus = inputs, minus = inputs;
      plus[i].data[j] += kStep;
      minus[i].data[j] -= kStep;
      const double fd = (Dot(grads_out, fn(plus, normalized)) - Dot(grads_out, fn(minus, normalized))) /
                        (2 * kStep);
      const double got = grads[i] ? grads[i]->data[j] : 0.0;
      if (!(std::fabs(got - fd) <= kTolerance * scale)) {
        std::ostringstream os;
        os.precision(12);
        os << where << " element " << j << ": VJP " << got
           << (grads[i] ? "" : " (no gradient)") << ", finite difference " << fd;
        return os.str();
      }
    }
  }
  return "";
}

TEST(Vjp, EveryFilledSlotMatchesFiniteDifferences) {
  int ops_with_vjp = 0;
  for (const OpDecl& op : AllOps()) {
    if (!op.vjp) continue;
    ++ops_with_vjp;
    int checked = 0;
    std::mt19937_64 rng(std::hash<std::string>()(op.name));
    for (int trial = 0; trial < 20; ++trial) {
      std::uniform_int_distribution<int64_t> size(1, 4);
      const SizePalette palette{{size(rng), size(rng), size(rng)}};
      for (const Example& example : op.examples(palette)) {
        Tensors inputs;
        std::vector<InputValues> kinds;
        try {
          const Attrs normalized = op.NormalizeAttrs(example.attrs);
          kinds = op.InputValueKinds(RuleContext{example.shapes, normalized});
          for (size_t i = 0; i < example.shapes.size(); ++i) {
            inputs.push_back(MakeInputValues(example.shapes[i], kinds[i], rng));
          }
          reference::FindReference(op.name)(inputs, normalized);
        } catch (const SpmdError&) {
          continue;  // an example these sizes make invalid (the forward refuses it)
        }
        std::string error;
        try {
          error = CheckCase(op, inputs, example.attrs, rng);
        } catch (const SpmdError& e) {
          error = std::string("threw ") + e.what();
        }
        std::string shapes;
        for (const Tensor& t : inputs) shapes += " " + ShapeText(t.shape);
        EXPECT_EQ(error, "") << op.name << " on" << shapes;
        ++checked;
      }
    }
    EXPECT_GT(checked, 0) << op.name << ": no example was valid at sizes 1..4";
    std::cout << op.name << ": " << checked << " cases\n";
  }
  // The slots filled today (each family file in rules/ops/, docs/OPS.md "Backward passes"); fewer means one
  // was dropped.
  EXPECT_GE(ops_with_vjp, 111);
}

// prod's values are near 1 (rules/ops/reduction.cc), so the generated cases never hold a
// zero: here a slice without zeros, with one (its zero gets the product of the rest) and
// with two (all 0), reduced along a dim, over all dims and at a 0-d x. The product is
// linear in each element, so the finite differences are exact there too.
TEST(Vjp, ProdIsRightAtZeros) {
  const OpDecl& op = *FindOp("prod");
  std::mt19937_64 rng(7);
  const Tensor x{{3, 4}, {0.5, 2, -1.5, 3, 0, 2, -0.75, 1.25, 0, 1.5, 0, -2}, DType::kFloat64};
  EXPECT_EQ(CheckCase(op, {x}, MakeAttrs({{"axis", Ints{1}}}), rng), "");
  EXPECT_EQ(CheckCase(op, {x}, MakeAttrs({{"axis", Ints{0}}, {"keep_dim", true}}), rng), "");
  const Tensor one_zero{{2, 2}, {1.5, 0, -2, 0.5}, DType::kFloat64};
  EXPECT_EQ(CheckCase(op, {one_zero}, MakeAttrs({{"reduce_all", true}}), rng), "");
  EXPECT_EQ(CheckCase(op, {Tensor{{}, {0}, DType::kFloat64}}, Attrs(), rng), "");
}

// put_along_axis's mul is multilinear in its operands as prod is, so the central difference
// is exact at zeros too: positions with no zero, one zero (in x or in a value) and two.
TEST(Vjp, PutAlongAxisMulIsRightAtZeros) {
  const OpDecl& op = *FindOp("put_along_axis");
  std::mt19937_64 rng(11);
  const Tensor x{{2, 3}, {0, 2, -1.5, 4, 0.5, 3}, DType::kFloat64};
  const Tensor index{{2, 4}, {0, 0, 2, 1, 1, 1, 0, 1}, DType::kInt64};
  const Tensor value{{2, 4}, {1.5, 2.5, 0, -2, 0, 1.25, 0.75, 0}, DType::kFloat64};
  for (const bool self : {true, false}) {
    EXPECT_EQ(CheckCase(op, {x, index, value},
                        MakeAttrs({{"axis", int64_t{1}}, {"reduce", std::string("mul")}, {"include_self", self}}), rng),
              "");
  }
}

// index_put's VJP wraps a negative id once (remainder by the dim) before it reads the
// cotangent back: negative ids, one of them repeating a positive one's position (the last
// write wins without accumulate, both add with it).
TEST(Vjp, IndexPutNegativeIdsWrap) {
  const OpDecl& op = *FindOp("index_put");
  std::mt19937_64 rng(13);
  const Tensor x{{3, 2}, {0.5, -1.25, 2, 0.75, -0.5, 1.5}, DType::kFloat64};
  const Tensor ids{{3}, {-1, 0, 2}, DType::kInt64};  // -1 and 2 name row 2
  const Tensor value{{3, 2}, {1.5, -2, 0.25, 3, -0.75, 1}, DType::kFloat64};
  for (const bool accumulate : {false, true}) {
    EXPECT_EQ(CheckCase(op, {x, ids, value}, MakeAttrs({{"accumulate", accumulate}}), rng), "");
  }
}

// Every call of every filled graph is accepted by its op's rule at the shapes it sees, and
// the graph gives each input a gradient of the input's shape, with shapes inferred by the
// rules alone (InferOutputShapes; InferForward on replicated inputs of a 2-rank mesh): a
// graph the references can run but the planner cannot (an equation, attr or shape a rule
// refuses) fails here, so the gradients can be sharded by the same rules as the forward.
TEST(Vjp, EveryCallIsAcceptedByItsRule) {
  const Mesh mesh({2});
  int graphs = 0;
  for (const OpDecl& op : AllOps()) {
    if (!op.vjp) continue;
    for (const SizePalette& palette : {SizePalette{{2, 3, 4}}, SizePalette{{1, 4, 3}}}) {
      for (const Example& example : op.examples(palette)) {
        const Attrs normalized = op.NormalizeAttrs(example.attrs);
        std::vector<Shape> output_shapes;
        try {
          output_shapes = InferOutputShapes(op, example.shapes, normalized);
        } catch (const SpmdError&) {
          continue;  // an example these sizes make invalid
        }
        std::string shapes;
        for (const Shape& s : example.shapes) shapes += " " + ShapeText(s);
        SCOPED_TRACE(op.name + " on" + shapes);
        const VjpGraph graph = op.vjp(RuleContext{example.shapes, normalized});
        std::vector<std::vector<Shape>> results;
        auto shape_of = [&](const VjpRef& ref) -> Shape {
          switch (ref.kind) {
            case VjpRef::Kind::kInput: return example.shapes.at(ref.index);
            case VjpRef::Kind::kOutput:
            case VjpRef::Kind::kOutputGrad: return output_shapes.at(ref.index);
            case VjpRef::Kind::kCall: return results.at(ref.index).at(ref.result);
          }
          return {};
        };
        bool ok = true;
        for (size_t k = 0; k < graph.calls.size() && ok; ++k) {
          const VjpCall& call = graph.calls[k];
          const OpDecl* callee = FindOp(call.op);
          ASSERT_NE(callee, nullptr) << call.op;
          std::vector<Shape> operand_shapes;
          std::vector<TensorArg> operands;
          for (const VjpRef& ref : call.operands) {
            operand_shapes.push_back(shape_of(ref));
            operands.push_back({operand_shapes.back(),
                                DistAttr::Replicated(static_cast<int>(operand_shapes.back().size()))});
          }
          try {
            results.push_back(InferOutputShapes(*callee, operand_shapes, callee->NormalizeAttrs(call.attrs)));
            InferForward(*callee, mesh, operands, call.attrs);
          } catch (const SpmdError& e) {
            ADD_FAILURE() << "calls[" << k << "] (" << call.op << ") refused: " << e.what();
            ok = false;
          }
        }
        if (!ok) continue;
        ASSERT_EQ(graph.input_grads.size(), example.shapes.size());
        for (size_t i = 0; i < example.shapes.size(); ++i) {
          if (graph.input_grads[i]) {
            EXPECT_EQ(ShapeText(shape_of(*graph.input_grads[i])), ShapeText(example.shapes[i]))
                << "input " << i;
          }
        }
        ++graphs;
      }
    }
  }
  EXPECT_GT(graphs, 100);
}

// A malformed graph is a typed error naming the field, not a crash.
TEST(Vjp, MalformedGraphsAreTypedErrors) {
  OpDecl op = *FindOp("exp");
  const Tensors inputs{{{2}, {0.5, -1.0}, DType::kFloat64}};
  const Tensors outputs = reference::FindReference("exp")(inputs, Attrs());
  auto field_of = [&](VjpBuilder vjp) -> std::string {
    op.vjp = std::move(vjp);
    try {
      EvaluateVjp(op, inputs, Attrs(), outputs, outputs);
    } catch (const SpmdError& e) {
      return e.field();
    }
    return "no error";
  };
  EXPECT_EQ(field_of([](const RuleContext&) {
              VjpGraph g;
              g.input_grads = {g.Add("no_such_op", {VjpRef::OutputGrad(0)})};
              return g;
            }),
            "vjp.calls[0].op");
  EXPECT_EQ(field_of([](const RuleContext&) {
              VjpGraph g;
              g.input_grads = {g.Add("multiply", {VjpRef::OutputGrad(0), VjpRef::Call(0)})};
              return g;
            }),
            "vjp.calls[0].operands[1]");
  EXPECT_EQ(field_of([](const RuleContext&) {
              VjpGraph g;
              g.input_grads = {g.Add("sum", {VjpRef::OutputGrad(0)})};  // [] for [2]
              return g;
            }),
            "vjp.input_grads[0]");
  EXPECT_EQ(field_of([](const RuleContext&) {
              VjpGraph g;
              g.input_grads = {VjpRef::Input(3)};
              return g;
            }),
            "vjp.input_grads[0]");
  EXPECT_EQ(field_of([](const RuleContext&) { return VjpGraph(); }), "vjp.input_grads");
  EXPECT_EQ(field_of(nullptr), "vjp");
}

}  // namespace
}  // namespace spmd::checker
