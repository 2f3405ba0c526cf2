// The reference and the CPU kernel of every op whose validation is written once in a plan
// header (rules/ops/*_plan.h, rules/ops/norm_pieces.h) agree on accept / refuse, and on the error's
// type and field, over the op's declared examples and mutations of them: every input shape
// with a dim dropped, added, grown or emptied, an input dropped or added, and every attr
// pushed to other values of its kind. (validation_agreement_test.cc does the same for
// einsum's equations, with the rule.) Before the plans, each backend wrote its own checks:
// a check added to one and not the other shows up here as a disagreement. Where the rule
// takes all of its checks from the plan (kRuleOps), the rule agrees as well on the attrs
// its declaration admits (NormalizeAttrs) and on everything but the values' checks.
#include <cmath>
#include <limits>
#include <string>
#include <variant>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/kernels.h"
#include "property_tests/verdict.h"
#include "reference/reference.h"
#include "rules/model/error.h"
#include "rules/model/mesh.h"
#include "rules/engine/op_decl.h"
#include "rules/engine/registry.h"

namespace spmd {
namespace {

using agreement::Numel;
using agreement::Run;
using agreement::Verdict;

struct Case {
  std::vector<Shape> shapes;
  Attrs attrs;
  std::string what;
};

std::string ShapesString(const std::vector<Shape>& shapes) {
  std::string s;
  for (const Shape& shape : shapes) {
    s += "[";
    for (size_t d = 0; d < shape.size(); ++d) s += (d ? "," : "") + std::to_string(shape[d]);
    s += "]";
  }
  return s;
}

// The example, then one mutation at a time of its shapes and attrs.
std::vector<Case> Mutations(const Example& ex) {
  std::vector<Case> cases{{ex.shapes, ex.attrs, "example"}};
  const auto shape_case = [&](size_t i, Shape s, const std::string& what) {
    std::vector<Shape> shapes = ex.shapes;
    shapes[i] = std::move(s);
    cases.push_back({shapes, ex.attrs, "inputs[" + std::to_string(i) + "] " + what});
  };
  for (size_t i = 0; i < ex.shapes.size(); ++i) {
    const Shape& s = ex.shapes[i];
    if (!s.empty()) shape_case(i, Shape(s.begin(), s.end() - 1), "last dim dropped");
    Shape longer = s;
    longer.push_back(2);
    shape_case(i, longer, "a dim 2 added");
    for (size_t d = 0; d < s.size(); ++d) {
      Shape grown = s;
      ++grown[d];
      shape_case(i, grown, "dim " + std::to_string(d) + " grown");
      Shape emptied = s;
      emptied[d] = 0;
      shape_case(i, emptied, "dim " + std::to_string(d) + " emptied");
    }
  }
  if (!ex.shapes.empty()) {
    cases.push_back({std::vector<Shape>(ex.shapes.begin(), ex.shapes.end() - 1), ex.attrs, "last input dropped"});
    std::vector<Shape> more = ex.shapes;
    more.push_back(ex.shapes.back());
    cases.push_back({more, ex.attrs, "an input added"});
  }
  for (const auto& [name, value] : ex.attrs.values()) {
    std::vector<AttrValue> others;
    if (const auto* b = std::get_if<bool>(&value)) {
      others = {!*b};
    } else if (const auto* i = std::get_if<int64_t>(&value)) {
      others = {*i + 1, *i - 1, -*i - 1, int64_t{0}, int64_t{-1}, int64_t{99}};
    } else if (const auto* f = std::get_if<double>(&value)) {
      others = {0.0, -1.0, 1.0, 2.0, 3.0, -*f, std::numeric_limits<double>::infinity()};
    } else if (std::get_if<std::string>(&value)) {
      others = {std::string("int64"), std::string("float32"), std::string("bogus"), std::string("")};
    } else if (const auto* v = std::get_if<std::vector<int64_t>>(&value)) {
      std::vector<int64_t> dup = *v, neg = *v, big = *v;
      if (!v->empty()) dup.push_back(v->front());
      neg.push_back(-1);
      big.push_back(99);
      others = {std::vector<int64_t>{}, dup, neg, big};
    }
    for (const AttrValue& other : others) {
      cases.push_back({ex.shapes, ex.attrs.With(name, other), "attrs." + name + " changed"});
    }
  }
  return cases;
}

// Inputs of zeros: valid ids and labels (0) and finite values, so that a disagreement is
// about shapes and attrs, not data.
void ExpectAgreement(const std::string& op_name, const Case& c, int* refused, bool with_rule) {
  reference::Tensors ref_inputs;
  kernels::Tensors kernel_inputs;
  for (const Shape& shape : c.shapes) {
    if (Numel(shape) > (1 << 16)) return;
    reference::Tensor t;
    t.shape = shape;
    t.data.assign(static_cast<size_t>(Numel(shape)), 0.0);
    ref_inputs.push_back(t);
    kernel_inputs.push_back(kernels::Tensor::FromVector(shape, t.data));
  }
  const Verdict ref = Run([&] { reference::FindReference(op_name)(ref_inputs, c.attrs); });
  const Verdict kernel = Run([&] {
    std::vector<const kernels::Tensor*> ptrs;
    for (const kernels::Tensor& t : kernel_inputs) ptrs.push_back(&t);
    kernels::RunCpuKernel(op_name, kernels::TensorArgs(std::move(ptrs)), c.attrs);
  });
  if (!ref.accepted) ++*refused;
  // The rule sees no values (an id's range is the kernels' to check), and attrs outside an
  // attr's declared domain are refused by NormalizeAttrs before any backend runs.
  const bool data_error = !ref.accepted && ref.field.size() > 5 && ref.field.ends_with(".data");
  const bool declared = Run([&] { (void)FindOp(op_name)->NormalizeAttrs(c.attrs); }).accepted;
  if (with_rule && declared && !data_error) {
    std::vector<TensorArg> args;
    for (const Shape& shape : c.shapes) args.push_back({shape, DistAttr::Replicated(static_cast<int>(shape.size()))});
    const Verdict rule = Run([&] { InferForward(*FindOp(op_name), Mesh({2}), args, c.attrs); });
    EXPECT_EQ(rule, ref) << op_name << " " << c.what << ", shapes " << ShapesString(c.shapes)
                         << ": rule " << rule.Describe() << ", reference " << ref.Describe();
  }
  EXPECT_EQ(ref, kernel) << op_name << " " << c.what << ", shapes " << ShapesString(c.shapes)
                         << ": reference " << ref.Describe() << ", CPU kernel " << kernel.Describe();
}

// The ops whose checks live in the plans of rules/ops/softmax_plan.h, norm_plan.h,
// embedding_plan.h, loss_plan.h, contraction_plan.h, fused_plan.h, reduction_plan.h and
// elementwise_plan.h (and roi_align_plan.h).
const char* const kPlannedOps[] = {
    "clip", "cast", "gelu_grad", "add_n",
    "matmul", "bmm", "matmul_grad", "bmm_grad",
    "sum", "mean", "max", "min", "prod", "any", "all", "squared_l2_norm", "mean_all",
    "logsumexp", "p_norm", "argmax",
    "softmax_grad", "layer_norm", "rms_norm", "layer_norm_grad", "rms_norm_grad",
    "lookup_table_v2", "c_embedding", "embedding_grad", "c_embedding_grad",
    "cross_entropy_with_softmax", "cross_entropy_with_softmax_grad",
    "fused_rotary_position_embedding", "roi_align", "roi_align_grad"};

// The ops whose rule takes its checks from the plan alone.
const char* const kRuleOps[] = {
    "clip", "cast", "gelu_grad", "add_n", "matmul", "bmm", "matmul_grad", "bmm_grad", "p_norm", "argmax",
    "sum", "mean", "max", "min", "prod", "any", "all", "mean_all", "softmax_grad", "layer_norm", "rms_norm",
    "layer_norm_grad", "rms_norm_grad", "lookup_table_v2", "c_embedding", "embedding_grad", "c_embedding_grad",
    "cross_entropy_with_softmax", "cross_entropy_with_softmax_grad", "fused_rotary_position_embedding",
    "roi_align", "roi_align_grad"};

bool InRuleOps(const std::string& name) {
  for (const char* op : kRuleOps) {
    if (name == op) return true;
  }
  return false;
}

TEST(PlanAgreement, ReferenceAndCpuKernelAgreeOnMutatedExamples) {
  const SizePalette palette{{2, 3, 4, 1}};
  for (const char* name : kPlannedOps) {
    SCOPED_TRACE(name);
    const OpDecl* op = FindOp(name);
    ASSERT_NE(op, nullptr) << name << " is not a registered op";
    ASSERT_TRUE(op->examples) << name << " declares no examples";
    int cases = 0, refused = 0;
    for (const Example& ex : op->examples(palette)) {
      const Attrs attrs = op->NormalizeAttrs(ex.attrs);
      for (const Case& c : Mutations({ex.shapes, attrs})) {
        ++cases;
        ExpectAgreement(name, c, &refused, InRuleOps(name));
      }
    }
    // The mutations reach the checks: some cases are refused, and the examples are not.
    EXPECT_GT(refused, 0) << name << ": no mutation was refused in " << cases << " cases";
    EXPECT_LT(refused, cases) << name;
  }
}

}  // namespace
}  // namespace spmd
