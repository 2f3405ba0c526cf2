// bfloat16 and float16 through the runtime on the thread backend: reshards move every bit
// pattern unchanged (bytes are bytes), reductions of partial values give the value back,
// the communicator counts 2 bytes per element exactly as the plan does, and Dispatch runs
// the 2-byte kernels.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "rules/model/half.h"
#include "rules/engine/registry.h"
#include "rules/reshard/reshard.h"
#include "runtime/comm/thread_communicator.h"
#include "runtime/exec/dispatch.h"
#include "runtime/exec/dist_tensor.h"
#include "runtime/exec/reshard_executor.h"
#include "runtime/testing/runtime_test_util.h"

namespace spmd::runtime {
namespace {

using kernels::Tensor;
using testing::Parse;
using testing::Quick;

constexpr DType kTwoByte[] = {DType::kBFloat16, DType::kFloat16};

// A tensor of random 2-byte patterns: any pattern (NaNs, infinities, signed zeros,
// subnormals) when `any_bits`, else normal values with 2^-6 <= |v| < 2^6, whose sums with
// zeros, halves and doubles are exact.
Tensor RandomPatterns(const Shape& shape, DType dtype, bool any_bits, uint64_t seed) {
  Tensor t = Tensor::Uninitialized(shape, dtype);
  std::mt19937_64 rng(seed);
  auto* bits = reinterpret_cast<uint16_t*>(t.bytes());
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (any_bits) {
      bits[i] = static_cast<uint16_t>(rng());
    } else {
      const float magnitude = std::ldexp(1.0f + static_cast<float>(rng() % 64) / 64.0f,
                                         static_cast<int>(rng() % 12) - 6);
      const float v = rng() % 2 ? -magnitude : magnitude;
      bits[i] = dtype == DType::kBFloat16 ? FloatToBFloat16Bits(v) : FloatToFloat16Bits(v);
    }
  }
  return t;
}

// Shards `global` as `from`, reshards it to `to` (on `to_mesh` when given), checks every
// step's counted bytes against the plan and that ToGlobal gives `global` back bit for bit.
void RoundTrip(int64_t world, const Mesh& mesh, const Tensor& global, const std::string& from,
               const std::string& to, const Mesh* to_mesh = nullptr) {
  SCOPED_TRACE(std::string(ToString(global.dtype())) + " " + from + " -> " + to);
  const int rank = static_cast<int>(global.rank());
  RunRanks(
      world,
      [&](Communicator& comm) {
        const DistTensor x = DistTensor::ShardTensor(global, mesh, Parse(from, rank), comm.rank());
        ReshardReport report;
        const DistTensor y = to_mesh ? x.Reshard(*to_mesh, Parse(to, rank), comm, &report)
                                     : x.Reshard(Parse(to, rank), comm, &report);
        for (const StepRecord& r : report.steps) {
          EXPECT_EQ(r.counted, r.planned) << "rank " << comm.rank() << " " << ToString(r.kind);
        }
        const std::optional<Tensor> back = y.ToGlobal(comm);
        if (y.has_local()) {
          ASSERT_TRUE(back.has_value());
          ASSERT_EQ(back->dtype(), global.dtype());
          EXPECT_EQ(std::memcmp(back->bytes(), global.bytes(), global.nbytes()), 0)
              << "rank " << comm.rank();
        }
      },
      Quick());
}

TEST(TwoByteFloats, ReshardsMoveEveryBitPattern) {
  const Mesh mesh({2, 2}, {3, 0, 2, 1});
  const Mesh other({3}, {4, 1, 2});
  for (DType dtype : kTwoByte) {
    const Tensor global = RandomPatterns({7, 5}, dtype, true, 11);
    for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
             {"[S(0), R]", "[R, R]"},                // all-gather, contiguous
             {"[R, S(1)]", "[R, R]"},                // all-gather along an inner dim
             {"[S(1), S(0)]", "[S(0), S(1)]"},        // all-to-all, uneven
             {"[R, R]", "[S(0)#1, S(0)#0]"},          // local slices, co-shard
             {"[S(0), S(1)]", "[S(1), R]"}}) {
      RoundTrip(5, mesh, global, from, to);
    }
    RoundTrip(5, mesh, global, "[S(0), S(1)]", "[S(1)]", &other);  // to another mesh
  }
}

TEST(TwoByteFloats, PartialValuesReduceBackExactly) {
  const Mesh mesh({2, 2});
  for (DType dtype : kTwoByte) {
    const Tensor global = RandomPatterns({6, 4}, dtype, false, 5);
    for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
             {"[P(sum), R]", "[R, R]"},             // all-reduce (x + 0)
             {"[P(sum), P(sum)]", "[S(1), R]"},     // reduce-scatter
             {"[P(max), S(0)]", "[R, P(min)]"},     // max, then a local partial
             {"[R, R]", "[P(prod), P(prod)]"},      // local partials: fills of 1
             {"[R, S(1)]", "[P(sum), S(1)]"},       // a local partial: fills of 0
             {"[S(0), R]", "[P(sum), S(1)]"},       // shard to partial: zero fill, box copy
             {"[P(avg), R]", "[P(sum), R]"}}) {     // rescale: halves, then sums them back
      RoundTrip(4, mesh, global, from, to);
    }
  }
}

TEST(TwoByteFloats, PlansCountTwoBytesPerElement) {
  const Mesh mesh({2, 2});
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"[S(0), R]", "[R, R]"}, {"[P(sum), P(sum)]", "[S(1), R]"}, {"[S(1), S(0)]", "[S(0), S(1)]"}}) {
    const ReshardPlan f32 = PlanReshard(mesh, {6, 10}, DType::kFloat32, Parse(from, 2), Parse(to, 2));
    for (DType dtype : kTwoByte) {
      const ReshardPlan p = PlanReshard(mesh, {6, 10}, dtype, Parse(from, 2), Parse(to, 2));
      EXPECT_EQ(2 * p.bytes_per_rank, f32.bytes_per_rank) << from << " -> " << to;
      EXPECT_EQ(2 * p.lower_bound_bytes, f32.lower_bound_bytes) << from << " -> " << to;
    }
  }
}

TEST(TwoByteFloats, DispatchRunsTheTwoByteKernels) {
  const Mesh mesh({2});
  for (DType dtype : kTwoByte) {
    const Tensor x = RandomPatterns({4, 6}, dtype, false, 1), y = RandomPatterns({6, 3}, dtype, false, 2);
    const Attrs attrs = FindOp("matmul")->NormalizeAttrs({});
    const Tensor want = kernels::RunCpuKernel("matmul", {x, y}, attrs)[0];
    ASSERT_EQ(want.dtype(), dtype);
    RunRanks(
        2,
        [&](Communicator& comm) {
          const DistTensor dx = DistTensor::ShardTensor(x, mesh, Parse("[S(0)]", 2), comm.rank());
          const DistTensor dy = DistTensor::ShardTensor(y, mesh, Parse("[R]", 2), comm.rank());
          const std::vector<DistTensor> out = Dispatch("matmul", {dx, dy}, Attrs(), comm);
          const std::optional<Tensor> got = out.at(0).ToGlobal(comm);
          ASSERT_TRUE(got.has_value());
          EXPECT_TRUE(*got == want);  // row blocks: the same float32 sums, rounded once
        },
        Quick());
  }
}

}  // namespace
}  // namespace spmd::runtime
