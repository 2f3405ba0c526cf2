// The checker's accounting: a reference that refuses (or answers with other shapes than)
// a request the declaration accepts is a failure of the case, never a skipped case; only
// the rule refusing makes a case not applicable.
#include <gtest/gtest.h>

#include <optional>
#include <stdexcept>
#include <string>

#include "checker/simulate.h"
#include "checker/sweep.h"
#include "rules/model/error.h"
#include "rules/engine/registry.h"

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

// The same check with and without a family's SimulationCache: the verdict, the dist attrs
// checked and the counterexample's message.
void ExpectSameOutcome(const Outcome& cached, const Outcome& fresh) {
  EXPECT_EQ(cached.verdict, fresh.verdict);
  EXPECT_EQ(cached.required, fresh.required);
  EXPECT_EQ(cached.outputs, fresh.outputs);
  EXPECT_EQ(cached.counterexample.has_value(), fresh.counterexample.has_value());
  if (cached.counterexample && fresh.counterexample) {
    EXPECT_EQ(cached.counterexample->message, fresh.counterexample->message);
  }
}

// A claim other than the rule's: output 0 claimed replicated where the rule shards or
// keeps it partial, or sharded on its first dim over axis 0 where the rule replicates it.
std::vector<DistAttr> OtherClaim(const std::vector<DistAttr>& claimed) {
  std::vector<DistAttr> other = claimed;
  if (other.empty()) return other;
  if (!other[0].IsReplicated()) {
    other[0] = DistAttr::Replicated(other[0].rank());
  } else if (other[0].rank() > 0) {
    other[0].dims[0] = {0};
  }
  return other;
}

// Every op, every example of the uneven palette on 2x2: a strided sample of the sweep's
// input combinations, checked with one cache per family (the rule's claim, then another
// claim on the same required inputs) and each again without a cache. A reused outcome
// must be the outcome the computation gives; a cache that confused two pairs (e.g. one
// keyed on the required inputs alone) answers the other claim with the rule's verdict.
TEST(SimulationCache, AReusedOutcomeIsTheOutcomeOfTheSameComputation) {
  const Mesh mesh({2, 2});
  int64_t reused = 0, other_unsound = 0, checked = 0;
  for (const OpDecl& op : AllOps()) {
    for (const Example& example : op.examples(SizePalette{{5, 7, 3}})) {
      SCOPED_TRACE(op.name);
      std::vector<ReduceOp> partial_ops;
      try {
        partial_ops = PartialInputOps(op, example, op.NormalizeAttrs(example.attrs));
      } catch (const SpmdError&) {
        continue;
      }
      std::vector<std::vector<DistAttr>> choices;
      int64_t total = 1;
      for (const Shape& shape : example.shapes) {
        choices.push_back(EnumerateDistAttrs(static_cast<int>(shape.size()), mesh.ndim(), partial_ops));
        total *= static_cast<int64_t>(choices.back().size());
      }
      SimulationCache cache;
      Case family{&op, mesh, example.shapes, {}, example.attrs, 17, nullptr, &cache};
      const int64_t step = std::max<int64_t>(1, total / 12);
      for (int64_t k = 0; k < total; k += step) {
        int64_t rest = k;
        family.inputs.assign(choices.size(), DistAttr{});
        for (int i = static_cast<int>(choices.size()) - 1; i >= 0; --i) {
          family.inputs[i] = choices[i][rest % choices[i].size()];
          rest /= static_cast<int64_t>(choices[i].size());
        }
        Case alone = family;
        alone.cache = nullptr;
        const Outcome cached = CheckForward(family);
        ExpectSameOutcome(cached, CheckForward(alone));
        ++checked;
        if (cached.verdict != Verdict::kSound) continue;
        const std::vector<DistAttr> other = OtherClaim(cached.outputs);
        const Outcome other_cached = CheckClaim(family, cached.required, other);
        const Outcome other_fresh = CheckClaim(alone, cached.required, other);
        ExpectSameOutcome(other_cached, other_fresh);
        other_unsound += other_fresh.verdict == Verdict::kUnsound;
      }
      reused += cache.reused;
    }
  }
  EXPECT_GT(checked, 1000);
  EXPECT_GT(reused, 100);         // the sample does share pairs
  EXPECT_GT(other_unsound, 100);  // and the other claims are often wrong
}

// What one inference gives: the answer, or the error's type and text.
struct Answer {
  std::optional<InferResult> result;
  std::string error;
  std::string Text() const {
    if (!result) return "refused: " + error;
    std::string text;
    for (const DistAttr& attr : result->inputs) text += ToString(attr) + " ";
    text += "->";
    for (const DistAttr& attr : result->outputs) text += " " + ToString(attr);
    return text;
  }
};

template <typename Fn>
Answer AnswerOf(Fn&& infer) {
  Answer answer;
  try {
    answer.result = infer();
  } catch (const SpmdError& e) {
    answer.error = std::string(ToString(e.type())) + " " + e.what();
  }
  return answer;
}

// The sweep's families infer through PreparedForward, one per family, which keeps the
// planner bounds its pricing computed across the family's cases. Every op, every example
// of the three palettes, on 2x2 and 2x2x2: a strided sample of the sweep's input
// combinations, then dist attrs the rule refuses (an axis off the mesh, a dim too many),
// each answered by one PreparedForward per family in turn and by InferForward alone: the
// same answer or the same error. A prepared inference that kept a bound under a key
// missing the given layout, or reused another family's, answers contested cases
// differently.
TEST(PreparedForward, GivesWhatInferForwardGives) {
  int64_t answered = 0, refused = 0, moved = 0;
  for (const std::vector<int64_t>& mesh_shape : std::vector<std::vector<int64_t>>{{2, 2}, {2, 2, 2}}) {
    const Mesh mesh(mesh_shape);
    for (const OpDecl& op : AllOps()) {
      for (const SizePalette& palette : DefaultPalettes()) {
        for (const Example& example : op.examples(palette)) {
          SCOPED_TRACE(op.name + " on " + ToString(mesh));
          std::vector<ReduceOp> partial_ops;
          try {
            partial_ops = PartialInputOps(op, example, op.NormalizeAttrs(example.attrs));
          } catch (const SpmdError&) {
            partial_ops = {ReduceOp::kSum};  // the rule refuses these attrs: so must the prepared one
          }
          std::vector<std::vector<DistAttr>> choices;
          int64_t total = 1;
          for (const Shape& shape : example.shapes) {
            choices.push_back(EnumerateDistAttrs(static_cast<int>(shape.size()), mesh.ndim(), partial_ops));
            total *= static_cast<int64_t>(choices.back().size());
          }
          std::vector<std::vector<DistAttr>> requests;
          const int64_t step = std::max<int64_t>(1, total / 40);
          for (int64_t k = 0; k < total; k += step) {
            std::vector<DistAttr> inputs(choices.size());
            int64_t rest = k;
            for (int i = static_cast<int>(choices.size()) - 1; i >= 0; --i) {
              inputs[i] = choices[i][rest % choices[i].size()];
              rest /= static_cast<int64_t>(choices[i].size());
            }
            requests.push_back(std::move(inputs));
          }
          if (!requests.empty() && !requests[0].empty()) {
            std::vector<DistAttr> off_mesh = requests.back();
            off_mesh[0].partial[mesh.ndim()] = ReduceOp::kSum;
            std::vector<DistAttr> extra_dim = requests.back();
            extra_dim.back().dims.push_back({});
            requests.push_back(off_mesh);
            requests.push_back(extra_dim);
          }
          PreparedForward prepared(op, mesh, example.shapes, example.attrs);
          for (const std::vector<DistAttr>& inputs : requests) {
            std::vector<TensorArg> args;
            std::vector<const DistAttr*> dists;
            for (size_t i = 0; i < inputs.size(); ++i) {
              args.push_back({example.shapes[i], inputs[i]});
              dists.push_back(&inputs[i]);
            }
            const Answer alone = AnswerOf([&] { return InferForward(op, mesh, args, example.attrs); });
            const Answer kept = AnswerOf([&] { return prepared.Infer(dists); });
            ASSERT_EQ(kept.Text(), alone.Text());
            ASSERT_EQ(kept.result, alone.result);
            if (!alone.result) {
              ++refused;
              continue;
            }
            ++answered;
            moved += alone.result->inputs != inputs;
          }
        }
      }
    }
  }
  EXPECT_GT(answered, 50000);
  EXPECT_GT(refused, 1000);
  EXPECT_GT(moved, 10000);  // many answers reshard, so their choice was priced
}

TEST(SimulationCache, ACaseOfAnotherFamilyIsRefused) {
  SimulationCache cache;
  Case c = ReluCase();
  c.cache = &cache;
  EXPECT_EQ(CheckForward(c).verdict, Verdict::kSound);
  Case other = c;
  other.seed = c.seed + 1;  // other values
  EXPECT_THROW(CheckForward(other), std::logic_error);
  other = c;
  other.shapes = {{4, 7}};
  EXPECT_THROW(CheckForward(other), std::logic_error);
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
