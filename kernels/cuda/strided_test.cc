// The index arithmetic of the CUDA strided loops (kernels/cuda/strided.h), run on the host
// exactly as the kernels run it (the same plans, units, splits and StridedIndexer), against
// the CPU backend's CopyBox, a plain permute loop and the CPU's add.
#include "kernels/cuda/strided.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/kernels.h"
#include "kernels/tensor.h"

namespace spmd::kernels::cuda {
namespace {

// What CopyStrided does on the device, on host memory.
void RunSteps(const std::byte* src, std::byte* dst, const std::vector<StridedCopyStep>& steps) {
  for (const StridedCopyStep& step : steps) {
    const int64_t u = static_cast<int64_t>(step.unit);
    if (step.contiguous) {
      std::memcpy(dst + step.dst_offset * u, src + step.src_offset * u, static_cast<size_t>(step.n * u));
      continue;
    }
    for (int64_t i = 0; i < step.n; ++i) {
      int64_t off[2];
      step.ix.Offsets(i, off);
      std::memcpy(dst + (step.dst_offset + off[1]) * u, src + (step.src_offset + off[0]) * u, step.unit);
    }
  }
}

std::vector<std::byte> RandomBytes(size_t n) {
  const std::vector<uint8_t> v = *rc::gen::container<std::vector<uint8_t>>(n, rc::gen::arbitrary<uint8_t>());
  std::vector<std::byte> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<std::byte>(v[i]);
  return out;
}

int64_t Product(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

RC_GTEST_PROP(StridedCopy, CopyBoxMatchesTheCpuBackend, ()) {
  const int rank = *rc::gen::inRange(0, 6);
  const size_t e = *rc::gen::element<size_t>(1, 2, 4, 8);
  std::vector<int64_t> src_shape(rank), dst_shape(rank), extent(rank), src_at(rank), dst_at(rank);
  for (int d = 0; d < rank; ++d) {
    extent[d] = *rc::gen::inRange<int64_t>(0, 5);
    src_at[d] = *rc::gen::inRange<int64_t>(0, 3);
    dst_at[d] = *rc::gen::inRange<int64_t>(0, 3);
    // Often whole in one array or both, so that dims merge.
    src_shape[d] = src_at[d] + extent[d] + *rc::gen::element<int64_t>(0, 0, 1, 2);
    dst_shape[d] = dst_at[d] + extent[d] + *rc::gen::element<int64_t>(0, 0, 1, 3);
    if (*rc::gen::inRange(0, 2) == 0) {
      src_at[d] = dst_at[d] = 0;
      src_shape[d] = dst_shape[d] = extent[d];
    }
  }
  // Buffers at random offsets from 16-byte alignment (so every unit is reached), with e's
  // own alignment kept (as device buffers have it).
  const size_t src_skew = e * *rc::gen::inRange<size_t>(0, 16 / e + 1);
  const size_t dst_skew = e * *rc::gen::inRange<size_t>(0, 16 / e + 1);
  const size_t src_bytes = static_cast<size_t>(Product(src_shape)) * e;
  const size_t dst_bytes = static_cast<size_t>(Product(dst_shape)) * e;
  alignas(16) static std::byte pool_src[1 << 16], pool_dst[1 << 16], pool_want[1 << 16];
  RC_PRE(src_bytes + src_skew <= sizeof pool_src && dst_bytes + dst_skew <= sizeof pool_dst);
  const std::vector<std::byte> src_data = RandomBytes(src_bytes);
  const std::vector<std::byte> dst_data = RandomBytes(dst_bytes);
  std::byte* src = pool_src + src_skew;
  std::byte* dst = pool_dst + dst_skew;
  std::byte* want = pool_want + dst_skew;
  if (src_bytes > 0) std::memcpy(src, src_data.data(), src_bytes);
  if (dst_bytes > 0) {
    std::memcpy(dst, dst_data.data(), dst_bytes);
    std::memcpy(want, dst_data.data(), dst_bytes);
  }
  bool empty = false;
  for (int64_t x : extent) empty = empty || x == 0;
  CpuBackend().CopyBox(src, src_shape, src_at, want, dst_shape, dst_at, extent, e, Stream{});
  if (!empty) {
    const StridedPlan plan = PlanCopyBox(src_shape, src_at, dst_shape, dst_at, extent);
    const int max_inner = *rc::gen::inRange(1, kMaxStridedDims + 1);
    const std::vector<StridedCopyStep> steps =
        PlanStridedCopy(plan, e, reinterpret_cast<uintptr_t>(src), reinterpret_cast<uintptr_t>(dst), max_inner);
    for (const StridedCopyStep& step : steps) {
      RC_ASSERT(step.unit >= 1u);
      RC_ASSERT(step.ix.rank <= max_inner + 1);  // + the unit dim of a split element
      RC_ASSERT(reinterpret_cast<uintptr_t>(src) % step.unit == 0u);
      RC_ASSERT(reinterpret_cast<uintptr_t>(dst) % step.unit == 0u);
    }
    RunSteps(src, dst, steps);
  }
  RC_ASSERT(dst_bytes == 0 || std::memcmp(dst, want, dst_bytes) == 0);
}

TEST(StridedCopy, WholeArraysAreOneContiguousRun) {
  const StridedPlan plan = PlanCopyBox({4, 6, 8}, {0, 0, 0}, {4, 6, 8}, {0, 0, 0}, {4, 6, 8});
  EXPECT_EQ(plan.dims, (std::vector<int64_t>{192}));
  alignas(16) std::byte a[16], b[16];
  const auto steps = PlanStridedCopy(plan, 4, reinterpret_cast<uintptr_t>(a), reinterpret_cast<uintptr_t>(b));
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_TRUE(steps[0].contiguous);
  EXPECT_EQ(steps[0].unit, 16u);
  EXPECT_EQ(steps[0].n, 192 * 4 / 16);
}

TEST(StridedCopy, RowsOfABoxMoveInSixteenByteUnits) {
  // Rows 1..2, columns 4..11 of a [4, 16] float array into a [2, 8] one.
  const StridedPlan plan = PlanCopyBox({4, 16}, {1, 4}, {2, 8}, {0, 0}, {2, 8});
  EXPECT_EQ(plan.dims, (std::vector<int64_t>{2, 8}));
  alignas(16) std::byte a[16], b[16];
  const auto steps = PlanStridedCopy(plan, 4, reinterpret_cast<uintptr_t>(a), reinterpret_cast<uintptr_t>(b));
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_FALSE(steps[0].contiguous);
  EXPECT_EQ(steps[0].unit, 16u);
  EXPECT_EQ(steps[0].n, 4);  // 2 rows of 2 units
  EXPECT_EQ(steps[0].src_offset, (16 + 4) * 4 / 16);
}

TEST(StridedCopy, ZeroDimBoxIsOneElement) {
  const StridedPlan plan = PlanCopyBox({}, {}, {}, {}, {});
  EXPECT_EQ(plan.numel(), 1);
}

TEST(StridedCopy, TooManyDimsBecomeAHostLoop) {
  // 12 dims of 2 that cannot merge (every other element of every dim): 10 in the kernel,
  // the first 2 looped on the host.
  std::vector<int64_t> shape(12, 4), at(12, 0), extent(12, 2), dst_shape(12, 2);
  const StridedPlan plan = PlanCopyBox(shape, at, dst_shape, at, extent);
  EXPECT_EQ(plan.dims.size(), 12u);
  alignas(16) std::byte a[16], b[16];
  // Odd addresses: one-byte units, so no dim folds into a wider unit.
  const auto steps =
      PlanStridedCopy(plan, 1, reinterpret_cast<uintptr_t>(a) + 1, reinterpret_cast<uintptr_t>(b) + 1);
  EXPECT_EQ(steps.size(), 4u);
  for (const auto& s : steps) EXPECT_EQ(s.ix.rank, kMaxStridedDims);
}

RC_GTEST_PROP(StridedCopy, PermuteMatchesAPlainLoop, ()) {
  const int rank = *rc::gen::inRange(0, 6);
  std::vector<int64_t> shape(rank);
  for (int64_t& d : shape) d = *rc::gen::inRange<int64_t>(1, 5);
  std::vector<int64_t> perm(rank);
  for (int i = 0; i < rank; ++i) perm[i] = i;
  for (int i = rank - 1; i > 0; --i) std::swap(perm[i], perm[*rc::gen::inRange(0, i + 1)]);
  const size_t e = *rc::gen::element<size_t>(1, 2, 4, 8);
  const int64_t n = Product(shape);
  const std::vector<std::byte> x = RandomBytes(static_cast<size_t>(n) * e);
  std::vector<std::byte> got(x.size()), want(x.size());
  std::vector<int64_t> out_shape(rank), xs(rank, 1);
  for (int i = 0; i < rank; ++i) out_shape[i] = shape[perm[i]];
  for (int d = rank - 2; d >= 0; --d) xs[d] = xs[d + 1] * shape[d + 1];
  std::vector<int64_t> idx(rank, 0);
  for (int64_t o = 0; o < n; ++o) {  // idx: the output's multi-index
    int64_t from = 0;
    for (int i = 0; i < rank; ++i) from += idx[i] * xs[perm[i]];
    std::memcpy(want.data() + o * e, x.data() + from * e, e);
    for (int d = rank - 1; d >= 0; --d) {
      if (++idx[d] < out_shape[d]) break;
      idx[d] = 0;
    }
  }
  const int max_inner = *rc::gen::inRange(1, kMaxStridedDims + 1);
  RunSteps(x.data(), got.data(),
           PlanStridedCopy(PlanPermute(shape, perm), e, reinterpret_cast<uintptr_t>(x.data()),
                           reinterpret_cast<uintptr_t>(got.data()), max_inner));
  RC_ASSERT(got == want);
}

TEST(StridedCopy, TransposeOfAMatrixKeepsTwoDims) {
  const StridedPlan plan = PlanPermute({3, 5}, {1, 0});
  EXPECT_EQ(plan.dims, (std::vector<int64_t>{5, 3}));
  EXPECT_EQ(plan.strides[0], (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(plan.strides[1], (std::vector<int64_t>{3, 1}));
  // Size-1 dims vanish and an identity permute is one run.
  EXPECT_EQ(PlanPermute({1, 4, 1, 6}, {2, 1, 0, 3}).dims, (std::vector<int64_t>{24}));
}

TEST(StridedPlan, UnitsKeepTheWalk) {
  // A non-contiguous inner dim: 8-byte elements in 4-byte units add a trailing dim of 2.
  StridedPlan plan;
  plan.dims = {3};
  plan.strides = {{2}, {1}};
  plan.base = {1, 0};
  alignas(16) std::byte a[16];
  const uintptr_t at = reinterpret_cast<uintptr_t>(a) + 4;
  EXPECT_EQ(ChooseUnit(plan, 8, {at, at}), 4u);
  const StridedPlan u = InUnits(plan, 8, 4);
  EXPECT_EQ(u.dims, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(u.strides[0], (std::vector<int64_t>{4, 1}));
  EXPECT_EQ(u.base[0], 2);
}

// A broadcast binary op walked as the elementwise kernels walk it (inputs at their
// collapsed strides, the output as the last operand, split across launches) gives the
// CPU's add.
RC_GTEST_PROP(BroadcastWalk, AddMatchesTheCpuKernel, ()) {
  const int rank = *rc::gen::inRange(0, 6);
  std::vector<int64_t> out_shape(rank), xs, ys;
  for (int64_t& d : out_shape) d = *rc::gen::inRange<int64_t>(1, 5);
  const int xr = *rc::gen::inRange(0, rank + 1), yr = *rc::gen::inRange(0, rank + 1);
  for (int d = rank - xr; d < rank; ++d) xs.push_back(*rc::gen::inRange(0, 3) == 0 ? 1 : out_shape[d]);
  for (int d = rank - yr; d < rank; ++d) ys.push_back(*rc::gen::inRange(0, 3) == 0 ? 1 : out_shape[d]);
  std::vector<double> xv(static_cast<size_t>(Product(xs))), yv(static_cast<size_t>(Product(ys)));
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<double>(i) * 0.5 + 1;
  for (size_t i = 0; i < yv.size(); ++i) yv[i] = static_cast<double>(i) * 1000.0;
  const Tensor x = Tensor::FromVector(xs, xv), y = Tensor::FromVector(ys, yv);
  const Tensor want = RunCpuKernel("add", {x, y}, Attrs{})[0];
  const StridedPlan plan = PlanBroadcastWalk(want.shape(), {xs, ys});
  const SplitPlan split = SplitOuter(plan, *rc::gen::inRange(1, kMaxStridedDims + 1));
  const StridedIndexer<3> ix = MakeIndexer<3>(split.inner);
  std::vector<double> got(static_cast<size_t>(want.numel()), -1.0);
  for (const std::vector<int64_t>& start : OuterStarts(split.outer)) {
    for (int64_t i = 0; i < split.inner.numel(); ++i) {
      int64_t off[3];
      ix.Offsets(i, off);
      got[start[2] + off[2]] = xv[start[0] + off[0]] + yv[start[1] + off[1]];
    }
  }
  RC_ASSERT(std::memcmp(got.data(), want.data<double>(), got.size() * sizeof(double)) == 0);
}

}  // namespace
}  // namespace spmd::kernels::cuda
