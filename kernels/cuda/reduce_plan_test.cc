// The reduction layouts and launch splits of kernels/cuda/reduce_plan.h, on the CPU: a host
// fold that follows ArrangeReduce (permute, then [outer, len, inner]) and the launch's
// pieces (folded piece by piece, then the pieces in order, as the kernels do) must give
// what the CPU sum kernel gives (float64 on small integers: exact in any order); bad axes
// must be refused with the CPU kernel's error type and field. Cases are drawn at random
// (seeded; the failing case is printed).
#include "kernels/cuda/reduce_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/internal.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/permute.h"
#include "rules/model/error.h"
#include "rules/engine/registry.h"

namespace spmd::kernels::cuda {
namespace {

std::string Describe(const Shape& x, const std::vector<int64_t>& axis, bool keep, bool all) {
  std::string s = "x " + ShapeToString(x) + " axis [";
  for (size_t i = 0; i < axis.size(); ++i) s += (i ? ", " : "") + std::to_string(axis[i]);
  return s + "]" + (keep ? " keep_dim" : "") + (all ? " reduce_all" : "");
}

// Sums x (row-major, `shape`) as the CUDA kernels fold it: arranged by `layout`, each
// output's len cut into the launch's pieces, each piece summed in order, then the pieces.
std::vector<double> FoldAsTheKernels(const std::vector<double>& x, const Shape& shape,
                                     const ReduceLayout& layout, const ReduceLaunch& launch) {
  std::vector<double> data = x;
  if (!layout.perm.empty()) data = cpu::internal::Permuted(x.data(), shape, layout.perm);
  std::vector<double> out(static_cast<size_t>(layout.outer * layout.inner), 0.0);
  for (int64_t o = 0; o < layout.outer; ++o) {
    for (int64_t i = 0; i < layout.inner; ++i) {
      double total = 0;
      for (int64_t s = 0; s < launch.splits; ++s) {
        double piece = 0;
        const int64_t end = std::min(layout.len, (s + 1) * launch.chunk);
        for (int64_t a = s * launch.chunk; a < end; ++a) {
          piece += data.at(static_cast<size_t>((o * layout.len + a) * layout.inner + i));
        }
        total += piece;
      }
      out[static_cast<size_t>(o * layout.inner + i)] = total;
    }
  }
  return out;
}

TEST(ReducePlan, LayoutsFoldToTheCpuKernelsSum) {
  std::mt19937_64 rng(20261201);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int run = 0, permuted = 0;
  for (int c = 0; c < 3000; ++c) {
    Shape x;
    for (int d = pick(0, 5); d > 0; --d) x.push_back(pick(0, 11) == 0 ? 0 : pick(1, 4));
    // Mostly valid axes (distinct, in range, either sign); sometimes one out of range or
    // repeated.
    std::vector<int64_t> axis;
    const int rank = static_cast<int>(x.size());
    for (int d = 0; d < std::max(rank, 1); ++d) {
      if (pick(0, 1) == 0) axis.push_back(pick(0, 1) == 0 ? d : d - std::max(rank, 1));
    }
    std::shuffle(axis.begin(), axis.end(), rng);
    if (pick(0, 9) == 0) axis.push_back(pick(-rank - 2, rank + 1));
    const bool keep = pick(0, 1) == 1;
    const bool all = pick(0, 5) == 0;
    const std::string what = Describe(x, axis, keep, all);
    SCOPED_TRACE("case " + std::to_string(c) + ": " + what);
    std::vector<double> values(static_cast<size_t>(NumElements(x)));
    for (double& v : values) v = pick(-3, 3);
    const Tensor xt = Tensor::FromVector(x, values);
    Attrs given;
    given.Set("axis", axis);
    given.Set("keep_dim", keep);
    given.Set("reduce_all", all);
    const Attrs attrs = FindOp("sum")->NormalizeAttrs(given);
    std::string plan_error, cpu_error;
    ReduceShape plan;
    Tensors want;
    try {
      plan = PlanReduceShape(x, axis, keep, all);
    } catch (const SpmdError& e) {
      plan_error = std::string(ToString(e.type())) + " " + e.field();
    }
    try {
      want = RunCpuKernel("sum", {xt}, attrs);
    } catch (const SpmdError& e) {
      cpu_error = std::string(ToString(e.type())) + " " + e.field();
    }
    ASSERT_EQ(plan_error, cpu_error);
    if (!plan_error.empty()) continue;
    ++run;
    ASSERT_EQ(plan.out_shape, want[0].shape());
    const ReduceLayout layout = ArrangeReduce(x, plan.reduced);
    permuted += layout.perm.empty() ? 0 : 1;
    EXPECT_EQ(layout.outer * layout.inner, NumElements(plan.out_shape));
    const std::vector<double> got = FoldAsTheKernels(values, x, layout, PlanReduceLaunch(layout));
    const double* w = want[0].data<double>();
    EXPECT_EQ(got, std::vector<double>(w, w + want[0].numel()));
  }
  EXPECT_GT(run, 1500);
  EXPECT_GT(permuted, 30);  // the permuted layout is exercised
}

TEST(ReducePlan, LaunchPiecesCoverEveryElementOnce) {
  std::mt19937_64 rng(5);
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  int split = 0;
  for (int c = 0; c < 20000; ++c) {
    ReduceLayout layout;
    layout.outer = pick(0, 3) == 0 ? pick(0, 4) : pick(1, int64_t{1} << pick(0, 24));
    layout.len = pick(0, 3) == 0 ? pick(0, 4) : pick(0, int64_t{1} << pick(0, 26));
    layout.inner = pick(0, 1) == 0 ? 1 : pick(1, int64_t{1} << pick(0, 16));
    SCOPED_TRACE("outer " + std::to_string(layout.outer) + " len " + std::to_string(layout.len) +
                 " inner " + std::to_string(layout.inner));
    const ReduceLaunch l = PlanReduceLaunch(layout);
    EXPECT_EQ(l.rows, layout.inner == 1);
    ASSERT_GE(l.splits, 1);
    ASSERT_LE(l.splits, kMaxReduceSplits);
    if (l.warp_rows) {
      EXPECT_EQ(l.splits, 1);
    }
    if (layout.len > 0) {
      EXPECT_GE(l.splits * l.chunk, layout.len);         // every element in a piece
      EXPECT_LT((l.splits - 1) * l.chunk, layout.len);   // no empty piece
    }
    split += l.splits > 1;
  }
  EXPECT_GT(split, 100);
}

TEST(ReducePlan, Examples) {
  // Reduced dims in one block are used in place: [2, 3, 4] over dim 1 -> [2, 3, 4], no copy.
  ReduceLayout l = ArrangeReduce({2, 3, 4}, {false, true, false});
  EXPECT_EQ(l.outer, 2);
  EXPECT_EQ(l.len, 3);
  EXPECT_EQ(l.inner, 4);
  EXPECT_TRUE(l.perm.empty());
  // Size-1 dims do not split a block: [2, 1, 3] over dims 0 and 2 -> one block of 6.
  l = ArrangeReduce({2, 1, 3}, {true, false, true});
  EXPECT_EQ(l.len, 6);
  EXPECT_TRUE(l.perm.empty());
  // Two blocks: kept dims first, then the reduced ones.
  l = ArrangeReduce({2, 3, 4}, {true, false, true});
  EXPECT_EQ(l.perm, (std::vector<int64_t>{1, 0, 2}));
  EXPECT_EQ(l.outer, 3);
  EXPECT_EQ(l.len, 8);
  EXPECT_EQ(l.inner, 1);
  // An empty x: every output is the identity.
  l = ArrangeReduce({3, 0}, {false, true});
  EXPECT_EQ(l.outer, 3);
  EXPECT_EQ(l.len, 0);
  // A long row is split across blocks; a short one is one warp's.
  EXPECT_GT(PlanReduceLaunch({1, 1 << 20, 1, {}}).splits, 1);
  EXPECT_TRUE(PlanReduceLaunch({1000, 100, 1, {}}).warp_rows);
}

}  // namespace
}  // namespace spmd::kernels::cuda
