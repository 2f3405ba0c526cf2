// The checker's accounting: a reference that refuses (or answers with other shapes than)
// a request the declaration accepts is a failure of the case, never a skipped case; only
// the rule refusing makes a case not applicable.
#include <gtest/gtest.h>

#include "checker/simulate.h"
#include "checker/sweep.h"
#include "rules/error.h"
#include "rules/registry.h"

namespace spmd::checker {
namespace {

// An oracle that refuses every request, as a reference whose validation drifted from the
// rule's would.
reference::Tensors Refusing(const reference::Tensors&, const Attrs&) {
  ThrowUnsupported("attrs.equation", "this reference refuses everything");
}

// An oracle that answers relu with the right values but a transposed-looking shape.
reference::Tensors WrongShape(const reference::Tensors& inputs, const Attrs&) {
  reference::Tensor out = inputs[0];
  out.shape = {out.shape.back()};
  for (size_t d = 0; d + 1 < inputs[0].shape.size(); ++d) out.shape.push_back(inputs[0].shape[d]);
  return {out};
}

Case ReluCase() {
  Case c;
  c.op = FindOp("relu");
  c.mesh = Mesh({2});
  c.shapes = {{4, 6}};
  c.inputs = {DistAttr::Replicated(2)};
  c.inputs[0].dims[0] = {0};
  return c;
}

TEST(Simulate, TheRegisteredReferenceIsSound) {
  EXPECT_EQ(CheckForward(ReluCase()).verdict, Verdict::kSound);
}

TEST(Simulate, AReferenceRefusingAnAcceptedRequestIsUnsound) {
  Case c = ReluCase();
  c.reference = Refusing;
  const Outcome outcome = CheckForward(c);
  ASSERT_EQ(outcome.verdict, Verdict::kUnsound) << outcome.note;
  ASSERT_TRUE(outcome.counterexample.has_value());
  EXPECT_EQ(outcome.counterexample->what, "reference refuses");
}

TEST(Simulate, AReferenceDisagreeingWithTheDeclaredShapesIsUnsound) {
  Case c = ReluCase();
  c.reference = WrongShape;
  const Outcome outcome = CheckForward(c);
  ASSERT_EQ(outcome.verdict, Verdict::kUnsound) << outcome.note;
  EXPECT_EQ(outcome.counterexample->what, "shape");
}

TEST(Simulate, TheRuleRefusingIsNotApplicable) {
  Case c = ReluCase();
  c.reference = Refusing;
  c.shapes = {{4, 6, 2}};  // the dist attr has rank 2: the rule refuses
  EXPECT_EQ(CheckForward(c).verdict, Verdict::kNotApplicable);
}

TEST(Sweep, ARefusingReferenceCountsAsFailedNotSkipped) {
  SweepOptions options;
  options.ops = {"relu", "einsum", "concat"};
  options.meshes = {{2}};
  const auto baseline = RunSweep(options, nullptr);
  options.reference = Refusing;
  const auto refused = RunSweep(options, nullptr);
  ASSERT_EQ(refused.size(), baseline.size());
  for (size_t r = 0; r < refused.size(); ++r) {
    SCOPED_TRACE(refused[r].op);
    EXPECT_EQ(baseline[r].failed, 0);
    EXPECT_GT(baseline[r].passed, 0);
    // Every case the rule accepted now fails; what was skipped stays skipped (the rule's
    // refusals only).
    EXPECT_EQ(refused[r].failed, baseline[r].passed);
    EXPECT_EQ(refused[r].passed, 0);
    EXPECT_EQ(refused[r].skipped, baseline[r].skipped);
  }
}

}  // namespace
}  // namespace spmd::checker
