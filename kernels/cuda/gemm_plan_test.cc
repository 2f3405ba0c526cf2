// The cuBLAS call plans of kernels/cuda/gemm_plan.h, on the CPU: each plan is executed by a
// naive column-major GEMM that follows cuBLAS's contract (and checks its leading-dimension
// rules, every read in bounds, every output element written once), and must give exactly
// what the CPU kernels give (float64 on small integers: every sum is exact, so any order
// agrees). Shapes are drawn at random (seeded; the failing case is printed), including
// empty dims, size-1 dims, broadcast batch dims and transposes; bad shapes must be refused
// with the CPU kernel's error type and field.
#include "kernels/cuda/gemm_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/internal.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/permute.h"
#include "rules/model/error.h"
#include "rules/engine/registry.h"

namespace spmd::kernels::cuda {
namespace {

using Values = std::vector<double>;

// Executes `plan` as cuBLAS would (column-major, beta = 0) with the product's operands op0
// (its a) and op1 (its b) into c; no call: c is all zeros. Counts the writes per element.
void RunPlanOnHost(const GemmPlan& plan, const Values& op0, const Values& op1, Values& c,
                   std::vector<int>* writes = nullptr) {
  if (plan.calls.empty()) {
    std::fill(c.begin(), c.end(), 0.0);
    return;
  }
  for (const GemmCall& call : plan.calls) {
    // cuBLAS's argument rules (else CUBLAS_STATUS_INVALID_VALUE).
    ASSERT_GE(call.m, 0);
    ASSERT_GE(call.n, 0);
    ASSERT_GE(call.k, 0);
    ASSERT_GE(call.batch_count, 1);
    ASSERT_LE(call.batch_count, kMaxBatchPerCall);
    ASSERT_GE(call.lda, std::max<int64_t>(1, call.trans_a ? call.k : call.m));
    ASSERT_GE(call.ldb, std::max<int64_t>(1, call.trans_b ? call.n : call.k));
    ASSERT_GE(call.ldc, std::max<int64_t>(1, call.m));
    const Values& a = call.a_source == 0 ? op0 : op1;
    const Values& b = call.a_source == 0 ? op1 : op0;
    for (int64_t e = 0; e < call.batch_count; ++e) {
      const int64_t oa = call.offset_a + e * call.stride_a;
      const int64_t ob = call.offset_b + e * call.stride_b;
      const int64_t oc = call.offset_c + e * call.stride_c;
      for (int64_t i = 0; i < call.m; ++i) {
        for (int64_t j = 0; j < call.n; ++j) {
          double sum = 0;
          for (int64_t p = 0; p < call.k; ++p) {
            const double av = call.trans_a ? a.at(oa + p + i * call.lda) : a.at(oa + i + p * call.lda);
            const double bv = call.trans_b ? b.at(ob + j + p * call.ldb) : b.at(ob + p + j * call.ldb);
            sum += av * bv;
          }
          const int64_t at = oc + i + j * call.ldc;
          c.at(at) = sum;
          if (writes != nullptr) ++writes->at(at);
        }
      }
    }
  }
}

Values ValuesOf(const Tensor& t) {
  Values v(static_cast<size_t>(t.numel()));
  const double* p = t.data<double>();
  std::copy(p, p + t.numel(), v.begin());
  return v;
}

Tensor RandomInts(const Shape& shape, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> d(-3, 3);
  std::vector<double> v(static_cast<size_t>(NumElements(shape)));
  for (double& x : v) x = d(rng);
  return Tensor::FromVector(shape, v);
}

// x summed over the flagged dims (kept as 1): the reference for the scratch path.
Values SumDims(const Values& x, const Shape& shape, const std::vector<bool>& summed) {
  Shape out_shape;
  for (size_t d = 0; d < shape.size(); ++d) out_shape.push_back(summed[d] ? 1 : shape[d]);
  Values out(static_cast<size_t>(NumElements(out_shape)), 0.0);
  std::vector<int64_t> index(shape.size(), 0);
  for (int64_t flat = 0; flat < NumElements(shape); ++flat) {
    int64_t o = 0;
    for (size_t d = 0; d < shape.size(); ++d) o = o * out_shape[d] + (summed[d] ? 0 : index[d]);
    out[o] += x[flat];
    for (size_t d = shape.size(); d-- > 0;) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

struct MatmulCase {
  Shape x, y;
  bool trans_x = false, trans_y = false;
  std::string Describe() const {
    return "x " + ShapeToString(x) + (trans_x ? " (trans)" : "") + ", y " + ShapeToString(y) +
           (trans_y ? " (trans)" : "");
  }
};

// Random matmul operands: ranks 1-4, sizes 0-4, batch dims that broadcast; about one case
// in eight has one dim changed (usually a bad shape).
MatmulCase RandomMatmul(std::mt19937_64& rng) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  MatmulCase c;
  c.trans_x = pick(0, 1) == 1;
  c.trans_y = pick(0, 1) == 1;
  const int64_t m = pick(0, 4) == 0 ? 0 : pick(1, 4);
  const int64_t n = pick(0, 5) == 0 ? 0 : pick(1, 4);
  const int64_t k = pick(0, 5) == 0 ? 0 : pick(1, 4);
  Shape batch;
  for (int d = pick(0, 2); d > 0; --d) batch.push_back(pick(0, 6) == 0 ? 0 : pick(1, 3));
  auto own_batch = [&]() {
    Shape own(batch.begin() + pick(0, static_cast<int>(batch.size())), batch.end());
    for (int64_t& d : own) {
      if (pick(0, 2) == 0) d = 1;
    }
    return own;
  };
  const int rx = pick(1, 4), ry = pick(1, 4);
  if (rx == 1) {
    c.x = {k};
  } else {
    c.x = own_batch();
    while (static_cast<int>(c.x.size()) > rx - 2) c.x.erase(c.x.begin());
    c.x.push_back(c.trans_x ? k : m);
    c.x.push_back(c.trans_x ? m : k);
  }
  if (ry == 1) {
    c.y = {k};
  } else {
    c.y = own_batch();
    while (static_cast<int>(c.y.size()) > ry - 2) c.y.erase(c.y.begin());
    c.y.push_back(c.trans_y ? n : k);
    c.y.push_back(c.trans_y ? k : n);
  }
  if (pick(0, 7) == 0) {
    Shape& s = pick(0, 1) == 0 ? c.x : c.y;
    s[pick(0, static_cast<int>(s.size()) - 1)] += 1;
  }
  return c;
}

Attrs MatmulAttrs(const MatmulCase& c) {
  Attrs given;
  given.Set("trans_x", c.trans_x);
  given.Set("trans_y", c.trans_y);
  return FindOp("matmul")->NormalizeAttrs(given);
}

// Same SpmdError type and field, or both succeed; returns whether both succeeded.
template <typename Plan, typename Cpu>
bool SameVerdict(Plan plan, Cpu cpu, const std::string& what) {
  std::string plan_error, cpu_error;
  try {
    plan();
  } catch (const SpmdError& e) {
    plan_error = std::string(ToString(e.type())) + " " + e.field();
  }
  try {
    cpu();
  } catch (const SpmdError& e) {
    cpu_error = std::string(ToString(e.type())) + " " + e.field();
  }
  EXPECT_EQ(plan_error, cpu_error) << what;
  return plan_error.empty() && cpu_error.empty();
}

constexpr int kCases = 600;

TEST(GemmPlan, MatmulPlansGiveTheCpuKernelsProduct) {
  std::mt19937_64 rng(20261201);
  int run = 0;
  for (int i = 0; i < kCases; ++i) {
    const MatmulCase c = RandomMatmul(rng);
    SCOPED_TRACE("case " + std::to_string(i) + ": " + c.Describe());
    const Tensor x = RandomInts(c.x, rng);
    const Tensor y = RandomInts(c.y, rng);
    const Attrs attrs = MatmulAttrs(c);
    MatmulShapes s;
    Tensors want;
    if (!SameVerdict([&] { s = plan::PlanMatmulShapes(c.x, c.y, c.trans_x, c.trans_y); },
                     [&] { want = RunCpuKernel("matmul", {x, y}, attrs); }, c.Describe())) {
      continue;
    }
    ++run;
    ASSERT_EQ(s.out_shape, want[0].shape());
    const GemmPlan plan = PlanProduct(MatmulProduct(s));
    Values out(static_cast<size_t>(NumElements(s.out_shape)), -99.0);
    std::vector<int> writes(out.size(), 0);
    RunPlanOnHost(plan, ValuesOf(x), ValuesOf(y), out, &writes);
    EXPECT_EQ(out, ValuesOf(want[0]));
    if (!plan.calls.empty()) {
      EXPECT_TRUE(std::all_of(writes.begin(), writes.end(), [](int w) { return w == 1; }));
    }
  }
  EXPECT_GT(run, kCases / 2);
}

TEST(GemmPlan, MatmulGradPlansGiveTheCpuKernelsGradients) {
  std::mt19937_64 rng(7);
  int run = 0, summed = 0;
  for (int i = 0; i < kCases; ++i) {
    const MatmulCase c = RandomMatmul(rng);
    SCOPED_TRACE("case " + std::to_string(i) + ": " + c.Describe());
    const Tensor x = RandomInts(c.x, rng);
    const Tensor y = RandomInts(c.y, rng);
    MatmulShapes s;
    try {
      s = plan::PlanMatmulShapes(c.x, c.y, c.trans_x, c.trans_y);
    } catch (const SpmdError&) {
      continue;
    }
    ++run;
    const Tensor g = RandomInts(s.out_shape, rng);
    const Tensors want = RunCpuKernel("matmul_grad", {x, y, g}, MatmulAttrs(c));
    const Values xv = ValuesOf(x), yv = ValuesOf(y), gv = ValuesOf(g);
    for (GradOf which : {GradOf::kX, GradOf::kY}) {
      const Shape& shape = which == GradOf::kX ? c.x : c.y;
      const Values& op0 = which == GradOf::kX ? gv : xv;
      const Values& op1 = which == GradOf::kX ? yv : gv;
      Values grad;
      if (!GradNeedsSum(s, which)) {
        grad.assign(static_cast<size_t>(NumElements(shape)), -99.0);
        std::vector<int> writes(grad.size(), 0);
        const GemmPlan plan = PlanProduct(MatmulGradProduct(s, which, false));
        RunPlanOnHost(plan, op0, op1, grad, &writes);
        if (!plan.calls.empty()) {
          EXPECT_TRUE(std::all_of(writes.begin(), writes.end(), [](int w) { return w == 1; }));
        }
      } else {
        ++summed;
        const Shape scratch_shape = GradScratchShape(s, which, shape);
        Values scratch(static_cast<size_t>(NumElements(scratch_shape)), -99.0);
        RunPlanOnHost(PlanProduct(MatmulGradProduct(s, which, true)), op0, op1, scratch);
        grad = SumDims(scratch, scratch_shape, GradSummedDims(s, which, shape));
      }
      EXPECT_EQ(grad, ValuesOf(want[which == GradOf::kX ? 0 : 1]))
          << (which == GradOf::kX ? "x_grad" : "y_grad");
    }
  }
  EXPECT_GT(run, kCases / 2);
  EXPECT_GT(summed, 10);  // the broadcast (scratch) path is exercised
}

TEST(GemmPlan, LargeBatchesAreSplitAcrossCalls) {
  // [70000, 2, 3] x [3, 2] (y broadcast): one batch dim of 70000 entries, cut at 65535.
  const Shape xs{70000, 2, 3}, ys{3, 2};
  const MatmulShapes s = plan::PlanMatmulShapes(xs, ys, false, false);
  const GemmPlan plan = PlanProduct(MatmulProduct(s));
  ASSERT_EQ(plan.calls.size(), 2u);
  EXPECT_EQ(plan.calls[0].batch_count, kMaxBatchPerCall);
  EXPECT_EQ(plan.calls[1].batch_count, 70000 - kMaxBatchPerCall);
  std::mt19937_64 rng(3);
  const Tensor x = RandomInts(xs, rng), y = RandomInts(ys, rng);
  Values out(static_cast<size_t>(NumElements(s.out_shape)), -99.0);
  RunPlanOnHost(plan, ValuesOf(x), ValuesOf(y), out);
  EXPECT_EQ(out, ValuesOf(RunCpuKernel("matmul", {x, y}, FindOp("matmul")->NormalizeAttrs({}))[0]));
}

TEST(GemmPlan, BatchDimsMergeWhenContiguousAndLoopWhenNot) {
  // x [2, 3, m, k], y [2, 3, k, n]: the two batch dims merge into one call of 6 entries.
  const MatmulShapes merged = plan::PlanMatmulShapes({2, 3, 4, 5}, {2, 3, 5, 6}, false, false);
  const GemmPlan one = PlanProduct(MatmulProduct(merged));
  ASSERT_EQ(one.calls.size(), 1u);
  EXPECT_EQ(one.calls[0].batch_count, 6);
  // x [2, 1, m, k], y [1, 3, k, n]: no single stride per operand; the larger dim (3) is
  // batched, the other looped.
  const MatmulShapes crossed = plan::PlanMatmulShapes({2, 1, 4, 5}, {1, 3, 5, 6}, false, false);
  const GemmPlan two = PlanProduct(MatmulProduct(crossed));
  ASSERT_EQ(two.calls.size(), 2u);
  EXPECT_EQ(two.calls[0].batch_count, 3);
  // k == 0: zeros, no call.
  const GemmPlan zero = PlanProduct(MatmulProduct(plan::PlanMatmulShapes({3, 0}, {0, 2}, false, false)));
  EXPECT_TRUE(zero.calls.empty());
  EXPECT_TRUE(zero.zero_fill);
}

TEST(GemmPlan, RowMajorOutputsSwapTheOperands) {
  // out[2, 3] = x[2, 4] . y[4, 3] row-major: cuBLAS computes out^T = y^T x^T, no transposes.
  const GemmPlan plan = PlanProduct(MatmulProduct(plan::PlanMatmulShapes({2, 4}, {4, 3}, false, false)));
  ASSERT_EQ(plan.calls.size(), 1u);
  const GemmCall& c = plan.calls[0];
  EXPECT_EQ(c.a_source, 1);
  EXPECT_FALSE(c.trans_a);
  EXPECT_FALSE(c.trans_b);
  EXPECT_EQ(c.m, 3);
  EXPECT_EQ(c.n, 2);
  EXPECT_EQ(c.k, 4);
  EXPECT_EQ(c.lda, 3);
  EXPECT_EQ(c.ldb, 4);
  EXPECT_EQ(c.ldc, 3);
  // trans_y: y stored [3, 4]: cuBLAS's A transposed.
  const GemmPlan t = PlanProduct(MatmulProduct(plan::PlanMatmulShapes({2, 4}, {3, 4}, false, true)));
  EXPECT_TRUE(t.calls[0].trans_a);
  EXPECT_EQ(t.calls[0].lda, 4);
}

// ---- einsum ----

struct EinsumCase {
  std::string equation;
  std::vector<Shape> shapes;
};

// 1-3 operands over the letters a-e (sizes 0-3, mostly 1-3), an explicit output (a random
// subset in random order) or an implicit one; about one case in ten with a broken shape.
EinsumCase RandomEinsum(std::mt19937_64& rng) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const std::string alphabet = "abcde";
  int64_t size[5];
  for (int64_t& s : size) s = pick(0, 9) == 0 ? 0 : pick(1, 3);
  EinsumCase c;
  std::string used;
  const int count = pick(1, 3);
  std::vector<std::string> operands;
  for (int i = 0; i < count; ++i) {
    std::string letters = alphabet;
    std::shuffle(letters.begin(), letters.end(), rng);
    letters.resize(static_cast<size_t>(pick(0, 3)));
    operands.push_back(letters);
    for (char l : letters) {
      if (used.find(l) == std::string::npos) used += l;
    }
  }
  for (int i = 0; i < count; ++i) {
    if (i > 0) c.equation += ",";
    c.equation += operands[i];
    Shape s;
    for (char l : operands[i]) s.push_back(size[l - 'a']);
    c.shapes.push_back(s);
  }
  if (pick(0, 3) != 0) {
    std::string out = used;
    std::shuffle(out.begin(), out.end(), rng);
    out.resize(static_cast<size_t>(pick(0, static_cast<int>(out.size()))));
    c.equation += "->" + out;
  }
  if (pick(0, 9) == 0 && !c.shapes.back().empty()) c.shapes.back().back() += 1;
  return c;
}

// Executes an EinsumPlan on the host (the steps as the device runs them; products through
// RunPlanOnHost).
Values RunEinsumOnHost(const EinsumPlan& plan, const std::vector<Tensor>& inputs) {
  std::vector<Values> data;
  std::vector<Shape> shapes;
  for (const Tensor& t : inputs) {
    data.push_back(ValuesOf(t));
    shapes.push_back(t.shape());
  }
  for (const EinsumStep& step : plan.steps) {
    Values out;
    switch (step.kind) {
      case EinsumStep::Kind::kSum:
        out = SumDims(data[step.src], shapes[step.src], step.reduced);
        break;
      case EinsumStep::Kind::kPermute:
        out = cpu::internal::Permuted(data[step.src].data(), shapes[step.src], step.perm);
        break;
      case EinsumStep::Kind::kContract: {
        Values a = data[step.src], b = data[step.src2];
        if (!step.perm.empty()) a = cpu::internal::Permuted(a.data(), shapes[step.src], step.perm);
        if (!step.perm2.empty()) {
          b = cpu::internal::Permuted(b.data(), shapes[step.src2], step.perm2);
        }
        out.assign(static_cast<size_t>(NumElements(step.shape)), -99.0);
        std::vector<int> writes(out.size(), 0);
        const GemmPlan gemm = PlanProduct(step.product);
        RunPlanOnHost(gemm, a, b, out, &writes);
        if (!gemm.calls.empty()) {
          EXPECT_TRUE(std::all_of(writes.begin(), writes.end(), [](int w) { return w == 1; }));
        }
        break;
      }
    }
    EXPECT_EQ(static_cast<int64_t>(out.size()), NumElements(step.shape));
    data.push_back(std::move(out));
    shapes.push_back(step.shape);
  }
  EXPECT_EQ(shapes[plan.result], plan.out_shape);
  return data[plan.result];
}

TEST(GemmPlan, EinsumPlansGiveTheCpuKernelsResult) {
  std::mt19937_64 rng(99);
  int run = 0, contracted = 0;
  for (int i = 0; i < kCases; ++i) {
    const EinsumCase c = RandomEinsum(rng);
    std::string what = c.equation;
    for (const Shape& s : c.shapes) what += " " + ShapeToString(s);
    SCOPED_TRACE("case " + std::to_string(i) + ": " + what);
    std::vector<Tensor> inputs;
    for (const Shape& s : c.shapes) inputs.push_back(RandomInts(s, rng));
    Attrs given;
    given.Set("equation", c.equation);
    const Attrs attrs = FindOp("einsum")->NormalizeAttrs(given);
    EinsumPlan plan;
    Tensors want;
    if (!SameVerdict([&] { plan = PlanEinsum(c.equation, c.shapes); },
                     [&] { want = RunCpuKernel("einsum", Tensors(inputs), attrs); }, what)) {
      continue;
    }
    ++run;
    for (const EinsumStep& s : plan.steps) contracted += s.kind == EinsumStep::Kind::kContract;
    ASSERT_EQ(plan.out_shape, want[0].shape());
    EXPECT_EQ(RunEinsumOnHost(plan, inputs), ValuesOf(want[0]));
  }
  EXPECT_GT(run, kCases / 2);
  EXPECT_GT(contracted, kCases / 4);
}

TEST(GemmPlan, EinsumFoldsTransposesInsteadOfPermuting) {
  // bij,bjk->bik: both operands as they are.
  const EinsumPlan bmm = PlanEinsum("bij,bjk->bik", {{2, 3, 4}, {2, 4, 5}});
  ASSERT_EQ(bmm.steps.size(), 1u);
  EXPECT_TRUE(bmm.steps[0].perm.empty());
  EXPECT_TRUE(bmm.steps[0].perm2.empty());
  // ij,kj->ik (a linear layer's [out, in] weight): the weight as a transposed operand.
  const EinsumPlan linear = PlanEinsum("ij,kj->ik", {{3, 4}, {5, 4}});
  ASSERT_EQ(linear.steps.size(), 1u);
  EXPECT_TRUE(linear.steps[0].perm2.empty());
  EXPECT_EQ(linear.steps[0].product.b.rs, 1);
}

}  // namespace
}  // namespace spmd::kernels::cuda
