// Shrinking a case keeps its verdict: for random claims (random ops, meshes, sizes, input
// and claimed output dist attrs), the verdict on the shrunk case equals the verdict on the
// full case, where the full case is small enough to run; and a model-sized case shrinks
// under the simulation budget.
#include "checker/shrink.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "checker/sweep.h"
#include "rules/model/error.h"
#include "rules/engine/registry.h"

namespace spmd::checker {
namespace {

std::string ShapesText(const std::vector<Shape>& shapes) {
  std::string s;
  for (const Shape& shape : shapes) {
    s += "[";
    for (size_t d = 0; d < shape.size(); ++d) s += (d ? "," : "") + std::to_string(shape[d]);
    s += "]";
  }
  return s;
}

// The verdict as `spmd check --claim` gives it: unsound if any of `seeds` seeds finds a
// counterexample.
Verdict VerdictOf(Case c, const std::vector<DistAttr>& required, const std::vector<DistAttr>& claimed, int seeds) {
  Outcome outcome;
  for (int k = 0; k < seeds; ++k, ++c.seed) {
    outcome = CheckClaim(c, required, claimed);
    if (outcome.verdict != Verdict::kSound) break;
  }
  return outcome.verdict;
}

TEST(Shrink, TheShrunkCaseHasTheVerdictOfTheFullCase) {
  std::mt19937_64 rng(20261130);
  const std::vector<std::vector<int64_t>> meshes = {{2}, {3}, {4}, {2, 2}, {2, 3}, {2, 2, 2}};
  const std::vector<ReduceOp> partial_ops = {ReduceOp::kSum, ReduceOp::kMax};
  const auto& ops = AllOps();
  int64_t checked = 0, shrunk = 0, unsound = 0;
  for (int trial = 0; trial < 6000 && checked < 1500; ++trial) {
    const OpDecl& op = ops[rng() % ops.size()];
    const Mesh mesh(meshes[rng() % meshes.size()]);
    // Sizes large enough to shrink, small enough to simulate in full: divisible, uneven
    // and co-shard-divisible ones.
    SizePalette palette;
    for (int k = 0; k < 3; ++k) palette.sizes.push_back(std::uniform_int_distribution<int64_t>(1, 26)(rng));
    const std::vector<Example> examples = op.examples(palette);
    if (examples.empty()) continue;
    const Example& example = examples[rng() % examples.size()];
    Case c{&op, mesh, example.shapes, {}, example.attrs, rng(), nullptr};
    std::vector<Shape> out_shapes;
    try {
      out_shapes = InferOutputShapes(op, c.shapes, op.NormalizeAttrs(c.attrs));
    } catch (const SpmdError&) {
      continue;
    }
    std::vector<DistAttr> required, claimed;
    for (const Shape& s : c.shapes) {
      const auto all = EnumerateDistAttrs(static_cast<int>(s.size()), mesh.ndim(), rng() % 4 == 0 ? partial_ops : std::vector<ReduceOp>{});
      required.push_back(all[rng() % all.size()]);
    }
    // Half the claims are the rule's own answer (mostly sound), half random (mostly not).
    bool from_rule = rng() % 2 == 0;
    if (from_rule) {
      std::vector<TensorArg> args;
      for (size_t i = 0; i < c.shapes.size(); ++i) args.push_back({c.shapes[i], required[i]});
      try {
        const InferResult rule = InferForward(op, mesh, args, c.attrs);
        required = rule.inputs;
        claimed = rule.outputs;
      } catch (const SpmdError&) {
        from_rule = false;
      }
    }
    if (!from_rule) {
      for (const Shape& s : out_shapes) {
        const auto all = EnumerateDistAttrs(static_cast<int>(s.size()), mesh.ndim(), partial_ops);
        claimed.push_back(all[rng() % all.size()]);
      }
    }
    if (SimulatedElements(c, c.shapes) > (int64_t{1} << 17)) continue;  // the full case must run fast
    const Shrunk s = ShrinkCase(c, required, claimed);
    for (size_t i = 0; i < s.shapes.size(); ++i) {
      ASSERT_EQ(s.shapes[i].size(), c.shapes[i].size());
      for (size_t d = 0; d < s.shapes[i].size(); ++d) ASSERT_LE(s.shapes[i][d], c.shapes[i][d]);
    }
    Verdict full = VerdictOf(c, required, claimed, 2);
    ++checked;
    if (!s.shrunk) continue;
    ++shrunk;
    Case small = c;
    small.shapes = s.shapes;
    Verdict on_shrunk = VerdictOf(small, required, claimed, 2);
    // UNSOUND is proven by its counterexample; SOUND means none found in the seeds tried,
    // and for value-dependent claims (a partial sum of bools, say) two seeds may miss on
    // either side. So a side that found none where the other did gets 30 seeds more (the
    // case's values differ per seed) before the verdicts are compared.
    if (full == Verdict::kUnsound && on_shrunk == Verdict::kSound) {
      Case again = small;
      again.seed += 2;
      on_shrunk = VerdictOf(again, required, claimed, 30);
    } else if (full == Verdict::kSound && on_shrunk == Verdict::kUnsound) {
      Case again = c;
      again.seed += 2;
      full = VerdictOf(again, required, claimed, 30);
    }
    unsound += full == Verdict::kUnsound;
    std::string claim;
    for (const DistAttr& d : required) claim += " in " + ToString(d);
    for (const DistAttr& d : claimed) claim += " out " + ToString(d);
    EXPECT_EQ(on_shrunk, full) << op.name << " on mesh " << ToString(mesh) << ": full " << ShapesText(c.shapes)
                               << ", shrunk " << ShapesText(s.shapes) << ";" << claim;
  }
  EXPECT_GT(checked, 1000);
  EXPECT_GT(shrunk, 300);   // the property is about shrunk cases: enough of them
  EXPECT_GT(unsound, 50);   // and both verdicts among them
  EXPECT_GT(shrunk - unsound, 50);
}

TEST(Shrink, AModelSizedMatmulShrinksUnderTheBudget) {
  Case c;
  c.op = FindOp("matmul");
  c.mesh = Mesh({2, 2, 2});
  c.shapes = {{512, 48, 32, 64}, {64, 96}};
  DistAttr x = DistAttr::Replicated(4), y = DistAttr::Replicated(2), out = DistAttr::Replicated(4);
  x.dims[0] = {0};
  x.dims[1] = {1};
  x.dims[3] = {2};
  y.dims[0] = {2};
  out.dims[0] = {0};
  out.dims[1] = {1};
  out.partial[2] = ReduceOp::kSum;
  const Shrunk s = ShrinkCase(c, {x, y}, {out});
  ASSERT_TRUE(s.shrunk) << s.why_not;
  EXPECT_LE(SimulatedElements(c, s.shapes), int64_t{1} << 16) << ShapesText(s.shapes);
  Case small = c;
  small.shapes = s.shapes;
  EXPECT_EQ(CheckClaim(small, {x, y}, {out}).verdict, Verdict::kSound);
  out.partial.clear();  // the dropped partial: wrong on the shrunk case too
  EXPECT_EQ(CheckClaim(small, {x, y}, {out}).verdict, Verdict::kUnsound);
}

TEST(Shrink, SizesKeepTheirResidues) {
  // An uneven co-shard keeps its size modulo 2*3 and its structure; an unsharded dim
  // shrinks to 3 (a piece of three or more elements stays three or more).
  Case c;
  c.op = FindOp("relu");
  c.mesh = Mesh({2, 3});
  c.shapes = {{1000003, 999}};
  DistAttr x = DistAttr::Replicated(2);
  x.dims[0] = {0, 1};
  const Shrunk s = ShrinkCase(c, {x}, {x});
  ASSERT_TRUE(s.shrunk) << s.why_not;
  EXPECT_EQ(s.shapes[0][0] % 6, 1000003 % 6);
  EXPECT_LT(s.shapes[0][0], 200);
  EXPECT_EQ(s.shapes[0][1], 3);
}

}  // namespace
}  // namespace spmd::checker
