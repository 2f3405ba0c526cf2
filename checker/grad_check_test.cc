// The sharded gradient check (checker/grad_check.h) on every op with a VJP: the graphs
// the declarations give pass, and generated faults are caught on every op: a wrong graph
// (a gradient scaled), a graph whose call the rule refuses, and a tiny error in the
// per-rank computation that finite differences cannot see.
#include "checker/grad_check.h"

#include <gtest/gtest.h>

#include <cmath>
#include <iostream>

#include "rules/model/error.h"
#include "rules/engine/registry.h"

namespace spmd::checker {
namespace {

GradOptions Small() {
  GradOptions options;
  options.families = 4;
  options.layouts = 4;
  options.seed = 7;
  options.jobs = 2;
  return options;
}

// Fails the test unless every op with calls in its graphs has a failing case, and every
// reported failure is of kind `what`.
void ExpectEveryOpCaught(const std::vector<GradRow>& rows, const std::string& what, bool only_with_calls) {
  ASSERT_FALSE(rows.empty());
  for (const GradRow& row : rows) {
    if (only_with_calls && row.calls == 0) continue;  // nothing runs per rank
    EXPECT_GT(row.failed, 0) << row.op << ": the fault went unnoticed in " << row.cases << " cases";
    if (row.failed > 0) {
      EXPECT_EQ(row.failure.rfind(what + ":", 0), 0u) << row.op << ": " << row.failure;
    }
  }
}

TEST(GradCheck, DeclaredGraphsPassOnEveryOp) {
  const auto rows = RunGradCheck(Small(), nullptr);
  int64_t cases = 0;
  for (const GradRow& row : rows) {
    EXPECT_EQ(row.failed, 0) << row.op << ": " << row.failure;
    EXPECT_GT(row.cases, 0) << row.op << ": no case was applicable";
    cases += row.cases;
  }
  EXPECT_GE(rows.size(), 20u);
  std::cout << rows.size() << " ops, " << cases << " cases\n";
}

// A wrong backward: the first input gradient of every graph scaled by 1.5. The sharded run
// agrees with the unsharded one (both run the wrong graph); finite differences do not.
TEST(GradCheck, ScaledGradientIsCaughtOnEveryOp) {
  GradOptions options = Small();
  options.vjp = [](const OpDecl& op) -> VjpBuilder {
    return [vjp = op.vjp](const RuleContext& c) {
      VjpGraph g = vjp(c);
      for (auto& grad : g.input_grads) {
        if (!grad) continue;
        Attrs attrs;
        attrs.Set("scale", 1.5);
        grad = g.Add("scale", {*grad}, attrs);
        break;
      }
      return g;
    };
  };
  ExpectEveryOpCaught(RunGradCheck(options, nullptr), "vs finite differences", false);
}

// A call refused on the shards (the reference throws a typed error per rank) fails the
// case: a refusal inside a backward is never skipped.
TEST(GradCheck, RefusedCallIsAFailureOnEveryOp) {
  GradOptions options = Small();
  options.local_reference = [](const KernelRef& kernel, const reference::Tensors&, const Attrs&) -> reference::Tensors {
    ThrowUnsupported("inputs", ToString(kernel) + " refuses these shards");
  };
  ExpectEveryOpCaught(RunGradCheck(options, nullptr), "reference refuses", true);
}

// A graph with a call the unsharded run already refuses (an attr the op does not declare)
// fails too.
TEST(GradCheck, UndeclaredAttrIsAFailureOnEveryOp) {
  GradOptions options = Small();
  options.vjp = [](const OpDecl& op) -> VjpBuilder {
    return [vjp = op.vjp](const RuleContext& c) {
      VjpGraph g = vjp(c);
      g.Add("scale", {VjpRef::OutputGrad(0)}, Attrs().With("no_such_attr", int64_t{1}));
      return g;
    };
  };
  const auto rows = RunGradCheck(options, nullptr);
  ExpectEveryOpCaught(rows, "graph", false);
  for (const GradRow& row : rows) EXPECT_EQ(row.passed, 0) << row.op;
}

// Every call's per-rank result off by a relative 1e-7: below what finite differences can
// resolve (1e-6), caught by the tight comparison with the unsharded float64 VJP.
TEST(GradCheck, TinyShardErrorIsCaughtOnEveryOp) {
  GradOptions options = Small();
  options.local_reference = [](const KernelRef& kernel, const reference::Tensors& inputs, const Attrs& attrs) {
    reference::Tensors out = reference::FindReference(kernel)(inputs, attrs);
    for (reference::Tensor& t : out) {
      if (!IsFloating(t.dtype)) continue;
      for (double& v : t.data) v *= 1 + 1e-7;
    }
    return out;
  };
  ExpectEveryOpCaught(RunGradCheck(options, nullptr), "sharded vs unsharded", true);
}

// A case is replayable: the reported case, run again, gives the same verdict and message.
TEST(GradCheck, CasesAreDeterministic) {
  GradOptions options = Small();
  options.ops = {"matmul"};
  std::vector<GradCase> seen;
  options.replay = [&](const GradCase& c) {
    seen.push_back(c);
    return std::string("replay");
  };
  options.vjp = [](const OpDecl& op) -> VjpBuilder {
    return [vjp = op.vjp](const RuleContext& c) {
      VjpGraph g = vjp(c);
      g.input_grads[1] = g.Add("scale", {*g.input_grads[1]}, Attrs().With("scale", 2.0));
      return g;
    };
  };
  const auto rows = RunGradCheck(options, nullptr);
  ASSERT_EQ(rows.size(), 1u);
  ASSERT_FALSE(seen.empty());
  const GradOutcome again = CheckGrad(seen.back());  // the reported (smallest) case
  EXPECT_EQ(again.verdict, GradVerdict::kFailed);
  EXPECT_EQ(rows[0].failure, again.what + ": " + again.message + "\n    replay: replay");
}

}  // namespace
}  // namespace spmd::checker
