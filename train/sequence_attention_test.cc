// The sequence strategies (train/sequence_attention.h) on thread ranks, against the dense
// attention built from registered ops on one rank.
//
// Generated cases: Ulysses, ring and zigzag ring on groups of 1 to 4 ranks, random batch,
// heads, head dim and sequence (lengths not divisible by the group, and shorter than it,
// included), causal or not, on 1-d meshes and on 2-d meshes whose other axis shards the
// batch or the heads. For each: the output and the gradients of sum(out * w) with respect
// to q, k and v equal the dense one-rank run to 1e-10 relative (float64; float32 to 1e-4),
// and every rank's bytes moved equal the plan's formula (PlanBytes). The first 20 cases
// again on simulated devices (sim thread ranks: the block ops on the sim backend, the
// ring's device buffers through the simulated NCCL communicator). Then the typed errors
// and ApplyFunction's contract.
#include "train/sequence_attention.h"

#include <gtest/gtest.h>

#include <functional>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "rules/model/error.h"
#include "rules/model/layout.h"
#include "rules/engine/notation.h"
#include "runtime/exec/dispatch.h"
#include "runtime/testing/sim_device_communicator.h"
#include "runtime/comm/thread_communicator.h"
#include "train/device_sim.h"
#include "train/layout.h"
#include "train/sequence_attention_test_util.h"
#include "train/trainer.h"

namespace spmd::train {
namespace {

using runtime::Communicator;
using runtime::DistTensor;
using testing::AttentionInputs;
using testing::AttentionResult;

// Runs `fn` on n ranks: thread ranks on the host, or simulated devices (rank r on sim:r,
// the collectives of the simulated NCCL backend).
using Runner = std::function<void(int64_t, const std::function<void(Communicator&)>&)>;
void OnHost(int64_t n, const std::function<void(Communicator&)>& fn) { runtime::RunRanks(n, fn); }
void OnSim(int64_t n, const std::function<void(Communicator&)>& fn) {
  EnableSimTraining();
  runtime::nccl::RunSimDeviceRanks(n, fn);
}

AttentionResult Dense(const AttentionInputs& in, const Runner& run = OnHost) {
  AttentionResult result;
  run(1, [&](Communicator& comm) {
    result = testing::RunAttention(in, Mesh({1}), DistAttr::Replicated(4), std::nullopt, comm);
  });
  return result;
}

struct Sharded {
  AttentionResult rank0;
  std::string bytes_error;  // "" when every rank moved what the plan says
};

Sharded RunSharded(const AttentionInputs& in, const Mesh& mesh, const DistAttr& attr,
                   const SequenceAttentionOptions& options, const Runner& run = OnHost) {
  Sharded result;
  std::mutex mutex;
  run(mesh.size(), [&](Communicator& comm) {
    AttentionResult mine = testing::RunAttention(in, mesh, attr, options, comm);
    // The plan for this rank: the rows of each position along the axis, its local unit.
    const std::vector<int64_t> coord = *mesh.CoordinateOf(comm.rank());
    const Shape shape{in.b, in.s, in.h, in.dh};
    std::vector<int64_t> rows;
    for (int64_t q = 0; q < mesh.axis_size(options.axis); ++q) {
      std::vector<int64_t> at = coord;
      at[options.axis] = q;
      rows.push_back(LocalShape(shape, attr, mesh, at)[1]);
    }
    const Shape local = LocalShape(shape, attr, mesh, coord);
    const testing::PlannedBytes plan = testing::PlanBytes(
        options.strategy, rows, coord[options.axis], local[0] * local[2] * local[3],
        static_cast<int64_t>(ElementSize(in.dtype)));
    const runtime::ByteCount forward{mine.forward.total_sent(), mine.forward.total_received()};
    const runtime::ByteCount backward{mine.backward.total_sent(), mine.backward.total_received()};
    std::lock_guard<std::mutex> lock(mutex);
    if (!(forward == plan.forward) || !(backward == plan.backward)) {
      result.bytes_error +=
          "rank " + std::to_string(comm.rank()) + ": forward " + std::to_string(forward.sent) +
          "/" + std::to_string(forward.received) + " planned " + std::to_string(plan.forward.sent) +
          "/" + std::to_string(plan.forward.received) + ", backward " +
          std::to_string(backward.sent) + "/" + std::to_string(backward.received) + " planned " +
          std::to_string(plan.backward.sent) + "/" + std::to_string(plan.backward.received) + "; ";
    }
    if (comm.rank() == 0) result.rank0 = std::move(mine);
  });
  return result;
}

// Generated case `seed`: a strategy, a group of 1 to 4 ranks, maybe a second mesh axis
// sharding the batch or the heads, random sizes, causal or not, float64 (float32 one in ten).
struct Case {
  AttentionInputs in;
  Mesh mesh;
  DistAttr attr;
  SequenceAttentionOptions options;
  std::string label;
};

Case MakeCase(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  const SequenceStrategy strategy = static_cast<SequenceStrategy>(seed % 3);
  const int64_t n = pick(1, 4);
  // A second mesh axis (size 2) sharding the batch or the heads, when the world fits.
  const int64_t other = n <= 2 ? pick(0, 2) : 0;  // 0: none, 1: batch, 2: heads
  int64_t b = pick(1, 3), h = pick(1, 3);
  if (strategy == SequenceStrategy::kUlysses) h = n * pick(1, 2) * (other == 2 ? 2 : 1);
  if (other == 2 && strategy != SequenceStrategy::kUlysses) h = 2 * pick(1, 2);
  if (other == 1) b = pick(2, 4);
  const int64_t dh = pick(1, 4);
  const int64_t s =
      strategy == SequenceStrategy::kRingZigzag ? 2 * n * pick(1, 3) : pick(1, 3 * n + 2);
  const bool causal = pick(0, 3) != 0;
  const DType dtype = seed % 10 == 9 ? DType::kFloat32 : DType::kFloat64;
  Case c{testing::RandomInputs(b, s, h, dh, causal, dtype, seed), Mesh({n}), DistAttr::Replicated(4), {}, ""};
  int axis = 0;
  if (other == 0) {
    c.attr.dims[1] = {0};
  } else {
    c.mesh = Mesh({2, n});
    axis = 1;
    c.attr.dims[1] = {1};
    c.attr.dims[other == 1 ? 0 : 2] = {0};
  }
  c.options = SequenceAttentionOptions{strategy, axis, causal, 0};
  c.label = std::string(ToString(strategy)) + " n=" + std::to_string(n) + " other=" + std::to_string(other) +
            " b=" + std::to_string(b) + " s=" + std::to_string(s) + " h=" + std::to_string(h) +
            " dh=" + std::to_string(dh) + " causal=" + std::to_string(causal) + " " +
            std::string(ToString(dtype));
  return c;
}

// Runs the cases of seeds [0, count) with `run` against the dense one-rank host run.
int CheckCases(uint64_t count, const Runner& run, kernels::DeviceKind kind) {
  int cases = 0;
  for (uint64_t seed = 0; seed < count; ++seed) {
    const Case c = MakeCase(seed);
    SCOPED_TRACE(c.label);
    const Sharded got = RunSharded(c.in, c.mesh, c.attr, c.options, run);
    const AttentionResult want = Dense(c.in);
    EXPECT_EQ(testing::CompareResults(got.rank0, want, c.in.dtype == DType::kFloat64 ? 1e-10 : 1e-4), "");
    EXPECT_EQ(got.bytes_error, "");
    EXPECT_EQ(got.rank0.device.kind, kind);
    ++cases;
  }
  return cases;
}

TEST(SequenceAttentionTest, EveryStrategyEqualsDenseAttentionOnOneRank) {
  EXPECT_EQ(CheckCases(60, OnHost, kernels::DeviceKind::kHost), 60);
}

// The same on simulated devices: the tensors on sim:rank, the block ops run by the sim
// backend's kernels, the ring's sends and receives of device buffers and Ulysses'
// all-to-alls through the simulated NCCL communicator.
TEST(SequenceAttentionTest, EveryStrategyOnSimDevicesEqualsDenseAttention) {
  EXPECT_EQ(CheckCases(20, OnSim, kernels::DeviceKind::kSim), 20);
}

// The comparison is not vacuous: attention without the causal mask is not equal to it.
TEST(SequenceAttentionTest, TheComparisonSeesAWrongMask) {
  const AttentionInputs in = testing::RandomInputs(2, 7, 2, 3, true, DType::kFloat64, 7);
  AttentionInputs open = in;
  open.causal = false;
  EXPECT_NE(testing::CompareResults(Dense(open), Dense(in), 1e-10), "");
}

std::string FieldOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const SpmdError& e) {
    return e.field();
  }
  return "no error";
}

TEST(SequenceAttentionTest, BadInputsGetTypedErrorsNamingTheField) {
  runtime::RunRanks(2, [&](Communicator& comm) {
    const Mesh mesh({2});
    auto make = [&](const Shape& shape, const DistAttr& attr) {
      return Variable(
          DistTensor::ShardTensor(kernels::Tensor(shape, DType::kFloat64), mesh, attr, comm.rank()),
          true);
    };
    DistAttr seq = DistAttr::Replicated(4);
    seq.dims[1] = {0};
    const Variable x = make({1, 6, 3, 2}, seq);  // 3 heads: not a multiple of 2
    const Variable y = make({1, 5, 2, 2}, seq);  // 5: not a multiple of 2n = 4
    EXPECT_EQ(FieldOf([&] {
                SequenceAttention(x, x, x, {SequenceStrategy::kUlysses, 0}, comm);
              }),
              "heads");
    EXPECT_EQ(FieldOf([&] {
                SequenceAttention(y, y, y, {SequenceStrategy::kRingZigzag, 0}, comm);
              }),
              "sequence");
    EXPECT_EQ(FieldOf([&] {
                SequenceAttention(x, x, x, {SequenceStrategy::kRing, 1}, comm);
              }),
              "axis");
    const Variable replicated = make({1, 6, 2, 2}, DistAttr::Replicated(4));
    EXPECT_EQ(FieldOf([&] { SequenceAttention(replicated, replicated, replicated, {}, comm); }),
              "q.dist_attr");
    EXPECT_EQ(FieldOf([&] { SequenceAttention(y, x, x, {}, comm); }), "k");
    const Variable flat = make({6, 2}, DistAttr::Replicated(2));
    EXPECT_EQ(FieldOf([&] { SequenceAttention(flat, flat, flat, {}, comm); }), "q");
  });
  // Heads split unevenly over another axis (3 over 2: 2 and 1): the group with 2 local
  // heads could run, the other cannot; every rank refuses alike.
  runtime::RunRanks(4, [&](Communicator& comm) {
    const Mesh grid({2, 2});
    DistAttr attr = DistAttr::Replicated(4);
    attr.dims[1] = {1};
    attr.dims[2] = {0};
    const Variable x(DistTensor::ShardTensor(kernels::Tensor({1, 4, 3, 2}, DType::kFloat64), grid,
                                             attr, comm.rank()),
                     true);
    EXPECT_EQ(FieldOf([&] { SequenceAttention(x, x, x, {SequenceStrategy::kUlysses, 1}, comm); }),
              "heads");
  });
  EXPECT_EQ(FieldOf([] { ZigzagOrder(6, 2); }), "sequence");
  EXPECT_EQ(ZigzagOrder(8, 2), (std::vector<int64_t>{0, 1, 6, 7, 2, 3, 4, 5}));
}

// ApplyFunction: the backward gets the cotangent in the output's layout (here a partial
// cotangent is reduced first), its gradients reach the leaves, and a wrong gradient count
// is a typed error.
TEST(SequenceAttentionTest, ApplyFunctionRecordsAGivenBackward) {
  runtime::RunRanks(2, [&](Communicator& comm) {
    using notation::MakeAttrs;
    const Mesh mesh({2});
    const DistAttr rows = ParsePlacementString("[S(0)]", 2, "x");
    const kernels::Tensor xg = kernels::Tensor::FromVector({4, 1}, std::vector<double>{1, 2, 3, 4});
    const Variable x(DistTensor::ShardTensor(xg, mesh, rows, comm.rank()), true);
    int calls = 0;
    // y = 3 x, computed here; its backward: 3 * cotangent.
    auto triple = [&](const Variable& in, bool wrong_count) {
      DistTensor out =
          runtime::Dispatch("scale", {in.value()}, MakeAttrs({{"scale", 3.0}}), comm)[0];
      return ApplyFunction("triple", {in}, {std::move(out)},
                           [&, wrong_count, attr = in.value().dist_attr()](
                               const std::vector<DistTensor>& cotangents, Communicator& c) {
                             ++calls;
                             EXPECT_EQ(cotangents.size(), 1u);
                             EXPECT_EQ(cotangents[0].dist_attr(), attr);
                             std::vector<std::optional<DistTensor>> grads;
                             grads.push_back(runtime::Dispatch("scale", {cotangents[0]},
                                                               MakeAttrs({{"scale", 3.0}}), c)[0]);
                             if (wrong_count) grads.push_back(std::nullopt);
                             return grads;
                           })[0];
    };
    // loss = sum(triple(x) * x) = 3 sum(x^2): d/dx = 6 x.
    Variable y = triple(x, false);
    EXPECT_TRUE(y.requires_grad());
    Backward(Apply1("sum", {Apply1("multiply", {y, x}, {}, comm)}, {}, comm), comm);
    EXPECT_EQ(calls, 1);
    const kernels::Tensor g = *Gradient(x, DistAttr::Replicated(2), comm).ToGlobal(comm);
    for (int i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(g.data<double>()[i], 6.0 * (i + 1));

    const Variable bad = triple(x, true);
    EXPECT_EQ(FieldOf([&] { Backward(Apply1("sum", {bad}, {}, comm), comm); }), "backward");
    {
      NoGradGuard no_grad;
      EXPECT_FALSE(triple(x, false).requires_grad());
    }
    EXPECT_EQ(FieldOf([&] { ApplyFunction("empty", {x}, {}, BackwardFunction()); }), "backward");
  });
}

struct History {
  std::vector<double> losses;
  std::vector<std::vector<double>> params;
};

History Train(const GptConfig& config, const std::string& mesh_text, int steps) {
  const BatchSpec batch{3, config.sequence, 2};
  const Mesh mesh = ParseNamedMesh(mesh_text);
  History h;
  std::mutex mutex;
  runtime::RunRanks(mesh.size(), [&](Communicator& comm) {
    Trainer trainer(config, Layout(mesh, Strategy{}), TrainOptions{}, comm);
    std::vector<double> losses;
    for (int s = 0; s < steps; ++s)
      losses.push_back(trainer.Step(batch, s, comm).loss);
    std::vector<std::vector<double>> params = trainer.GatherParams(comm);
    std::lock_guard<std::mutex> lock(mutex);
    if (comm.rank() == 0) h = {losses, params};
  });
  return h;
}

std::string CompareHistories(const History& got, const History& want, double tolerance) {
  for (size_t s = 0; s < want.losses.size(); ++s) {
    if (!(std::abs(got.losses[s] - want.losses[s]) <= tolerance * std::abs(want.losses[s]))) {
      std::ostringstream os;
      os.precision(17);
      os << "step " << s << " loss " << got.losses[s] << " vs " << want.losses[s];
      return os.str();
    }
  }
  for (size_t p = 0; p < want.params.size(); ++p) {
    double scale = 1e-3;
    for (double v : want.params[p]) scale = std::max(scale, std::abs(v));
    for (size_t k = 0; k < want.params[p].size(); ++k) {
      if (!(std::abs(got.params[p][k] - want.params[p][k]) <= tolerance * scale)) {
        return "parameter " + std::to_string(p) + " element " + std::to_string(k);
      }
    }
  }
  return "";
}

// The small GPT with its attention replaced by Ulysses or ring attention over sp trains
// like one device (float64, 1e-9), on sequence-parallel layouts with an uneven split (7
// tokens over 2 ranks) and combined with dp or tp.
TEST(SequenceAttentionTest, GptWithSequenceAttentionTrainsLikeOneDevice) {
  GptConfig config;
  config.layers = 2;
  config.width = 8;
  config.heads = 4;
  config.vocab = 11;
  config.sequence = 7;
  config.mlp_ratio = 2;
  const History single = Train(config, "dp=1", 3);
  for (const AttentionKind kind : {AttentionKind::kUlysses, AttentionKind::kRing}) {
    for (const char* mesh : {"sp=2", "dp=2,sp=2", "tp=2,sp=2"}) {
      SCOPED_TRACE(std::string(mesh) + (kind == AttentionKind::kUlysses ? " ulysses" : " ring"));
      config.attention = kind;
      EXPECT_EQ(CompareHistories(Train(config, mesh, 3), single, 1e-9), "");
    }
  }
  // Zigzag: the model runs on the sequence in zigzag order (8 tokens: 4 chunks of 2 over
  // sp=2), the loss and the parameters as on one device in natural order.
  config.sequence = 8;
  config.attention = AttentionKind::kDefault;
  const History natural = Train(config, "dp=1", 3);
  config.attention = AttentionKind::kRingZigzag;
  for (const char* mesh : {"sp=2", "dp=2,sp=2", "tp=2,sp=2"}) {
    SCOPED_TRACE(std::string(mesh) + " zigzag");
    EXPECT_EQ(CompareHistories(Train(config, mesh, 3), natural, 1e-9), "");
  }
}

TEST(SequenceAttentionTest, ZigzagGptRefusesWhatItCannotOrder) {
  runtime::RunRanks(2, [&](Communicator& comm) {
    GptConfig config;
    config.width = 8;
    config.heads = 2;
    config.sequence = 6;
    config.attention = AttentionKind::kRingZigzag;
    const Layout layout(ParseNamedMesh("sp=2"), Strategy{});
    Gpt model(config, layout, comm);
    const kernels::Tensor ids({1, 6}, DType::kInt64);
    const DistTensor tokens = DistTensor::ShardTensor(ids, layout.mesh(), layout.Tokens(2), comm.rank());
    EXPECT_EQ(FieldOf([&] { model.Loss(tokens, tokens, comm); }), "tokens");  // 6: not 4k
    config.dropout = 0.1;
    EXPECT_EQ(FieldOf([&] { Gpt(config, layout, comm); }), "config.dropout");
  });
}

}  // namespace
}  // namespace spmd::train
