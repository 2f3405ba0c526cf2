// Long-sequence attention and CFG parallelism under mpirun with real Open MPI transfers,
// against one process (docs/LONG_SEQUENCE.md).
//
// 1. Attention (a RapidCheck property; one seed for all ranks, verdicts combined with
//    FirstError so every rank shrinks alike): Ulysses, ring and zigzag ring over the whole
//    world (np 2: a group of 2; np 4: a group of 4, or a [2, 2] mesh whose sequence group
//    is 2 and whose other axis shards the batch or the heads), random batch, heads, head
//    dim and sequence (lengths not divisible by the group included), causal or not,
//    float64 (a fifth of the cases float32). The output and the gradients of sum(out * w)
//    with respect to q, k, v equal dense attention (registered ops) on a one-rank mesh of
//    the same process to 1e-9 relative (float32: 1e-4), and every rank's bytes sent and
//    received in the forward and in the backward, by the counters and by the transport's
//    own count, equal the plan's formula (PlanBytes).
// 2. Training: the small GPT with GptConfig::attention = Ulysses, ring (9 tokens) or
//    zigzag ring (8 tokens) over sp trains 3 AdamW steps; every step's loss and every final
//    parameter equal the one-process run to 1e-9 relative.
// 3. CFG parallelism: guided denoising steps with the two branches on the two halves of a
//    [2, world/2] mesh equal the sequential steps on one process to 1e-12 relative.
// Case count: SPMD_SEQPAR_CASES (default 30).
#include <gtest/gtest.h>
#include <mpi.h>
#include <rapidcheck.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "rules/model/layout.h"
#include "runtime/comm/mpi_communicator.h"
#include "runtime/testing/mpi_test_main.h"
#include "train/cfg.h"
#include "train/layout.h"
#include "train/sequence_attention.h"
#include "train/sequence_attention_test_util.h"
#include "train/trainer.h"

namespace spmd::train {
namespace {

runtime::MpiCommunicator* g_comm = nullptr;

int Cases() {
  const char* env = std::getenv("SPMD_SEQPAR_CASES");
  return env != nullptr ? std::max(1, std::atoi(env)) : 30;
}

// Uniform in [lo, hi] (RapidCheck's sizing off: every case may be any shape).
int64_t Uniform(int64_t lo, int64_t hi) {
  return *rc::gen::resize(100, rc::gen::inRange<int64_t>(lo, hi + 1));
}

struct AttentionCase {
  SequenceStrategy strategy = SequenceStrategy::kRing;
  int64_t other = 0;  // np 4 only: 0 a 1-d mesh of 4; 1 [2, 2] with the batch on axis 0; 2 heads
  int64_t b = 1, s = 1, h = 1, dh = 1;
  bool causal = true;
  DType dtype = DType::kFloat64;
  uint64_t seed = 0;
  std::string Describe() const {
    std::ostringstream os;
    os << ToString(strategy) << " other=" << other << " b=" << b << " s=" << s << " h=" << h
       << " dh=" << dh << " causal=" << causal << " " << ToString(dtype) << " seed=" << seed;
    return os.str();
  }
};

// This rank's verdict on one case: "" or what differs.
std::string RunCase(const AttentionCase& c) {
  const int64_t world = g_comm->world_size();
  Mesh mesh({world});
  DistAttr attr = DistAttr::Replicated(4);
  int axis = 0;
  if (c.other == 0) {
    attr.dims[1] = {0};
  } else {
    mesh = Mesh({2, world / 2});
    axis = 1;
    attr.dims[1] = {1};
    attr.dims[c.other == 1 ? 0 : 2] = {0};
  }
  const testing::AttentionInputs in =
      testing::RandomInputs(c.b, c.s, c.h, c.dh, c.causal, c.dtype, c.seed);
  const SequenceAttentionOptions options{c.strategy, axis, c.causal, 0};
  const testing::AttentionResult got = testing::RunAttention(in, mesh, attr, options, *g_comm);
  const Mesh alone({1}, {g_comm->rank()});
  const testing::AttentionResult want =
      testing::RunAttention(in, alone, DistAttr::Replicated(4), std::nullopt, *g_comm);
  std::string error =
      testing::CompareResults(got, want, c.dtype == DType::kFloat64 ? 1e-9 : 1e-4);
  if (!error.empty()) return error;

  const std::vector<int64_t> coord = *mesh.CoordinateOf(g_comm->rank());
  const Shape shape{c.b, c.s, c.h, c.dh};
  std::vector<int64_t> rows;
  for (int64_t q = 0; q < mesh.axis_size(axis); ++q) {
    std::vector<int64_t> at = coord;
    at[axis] = q;
    rows.push_back(LocalShape(shape, attr, mesh, at)[1]);
  }
  const Shape local = LocalShape(shape, attr, mesh, coord);
  const testing::PlannedBytes plan =
      testing::PlanBytes(c.strategy, rows, coord[axis], local[0] * local[2] * local[3],
                         static_cast<int64_t>(ElementSize(c.dtype)));
  const runtime::ByteCount forward{got.forward.total_sent(), got.forward.total_received()};
  const runtime::ByteCount backward{got.backward.total_sent(), got.backward.total_received()};
  if (!(forward == plan.forward) || !(backward == plan.backward) ||
      !(got.transport_forward == plan.forward) || !(got.transport_backward == plan.backward)) {
    std::ostringstream os;
    os << "bytes: forward " << forward.sent << "/" << forward.received << " planned "
       << plan.forward.sent << "/" << plan.forward.received << ", backward " << backward.sent << "/"
       << backward.received << " planned " << plan.backward.sent << "/" << plan.backward.received
       << "; transport " << got.transport_forward.sent << "/" << got.transport_forward.received
       << ", " << got.transport_backward.sent << "/" << got.transport_backward.received;
    return os.str();
  }
  return "";
}

TEST(SeqparMpiTest, SequenceAttentionEqualsOneProcess) {
  const int64_t world = runtime::WorldSize();
  ASSERT_TRUE(world == 2 || world == 4) << "run under mpirun -np 2 or 4";
  int64_t strategies[3] = {0, 0, 0};
  const bool ok = rc::check("sequence attention equals dense attention on one process", [&] {
    AttentionCase c;
    c.strategy = static_cast<SequenceStrategy>(Uniform(0, 2));
    c.other = world == 4 ? Uniform(0, 2) : 0;
    const int64_t n = c.other == 0 ? world : 2;  // the sequence group
    c.b = c.other == 1 ? Uniform(2, 4) : Uniform(1, 3);
    c.h = Uniform(1, 3) * (c.other == 2 ? 2 : 1);
    if (c.strategy == SequenceStrategy::kUlysses) c.h = n * Uniform(1, 2) * (c.other == 2 ? 2 : 1);
    c.dh = Uniform(1, 5);
    c.s =
        c.strategy == SequenceStrategy::kRingZigzag ? 2 * n * Uniform(1, 3) : Uniform(2, 4 * n + 1);
    c.causal = Uniform(0, 3) != 0;
    c.dtype = Uniform(0, 4) == 0 ? DType::kFloat32 : DType::kFloat64;
    c.seed = static_cast<uint64_t>(Uniform(0, 1 << 30));
    RC_LOG() << c.Describe() << "\n";
    ++strategies[static_cast<int>(c.strategy)];
    const std::string error = runtime::FirstError(RunCase(c));
    if (!error.empty()) RC_LOG() << error << "\n";
    RC_ASSERT(error.empty());
  });
  EXPECT_TRUE(ok);
  std::cout << "cases: ulysses " << strategies[0] << ", ring " << strategies[1] << ", ring_zigzag "
            << strategies[2] << "\n";
}

struct History {
  std::vector<double> losses;
  std::vector<std::vector<double>> params;
};

History Train(const GptConfig& config, const Mesh& mesh, int steps) {
  Trainer trainer(config, Layout(mesh, Strategy{}), TrainOptions{}, *g_comm);
  History h;
  const BatchSpec batch{3, config.sequence, 5};
  for (int s = 0; s < steps; ++s) h.losses.push_back(trainer.Step(batch, s, *g_comm).loss);
  h.params = trainer.GatherParams(*g_comm);
  return h;
}

std::string Compare(const History& got, const History& want, double tolerance) {
  std::ostringstream os;
  os.precision(17);
  for (size_t s = 0; s < want.losses.size(); ++s) {
    if (!(std::abs(got.losses[s] - want.losses[s]) <= tolerance * std::abs(want.losses[s]))) {
      os << "step " << s << " loss " << got.losses[s] << " vs " << want.losses[s];
      return os.str();
    }
  }
  for (size_t p = 0; p < want.params.size(); ++p) {
    double scale = 1e-3;
    for (double v : want.params[p]) scale = std::max(scale, std::abs(v));
    for (size_t k = 0; k < want.params[p].size(); ++k) {
      if (!(std::abs(got.params[p][k] - want.params[p][k]) <= tolerance * scale)) {
        os << "parameter " << p << " element " << k << ": " << got.params[p][k] << " vs "
           << want.params[p][k];
        return os.str();
      }
    }
  }
  return "";
}

TEST(SeqparMpiTest, GptWithSequenceAttentionTrainsLikeOneProcess) {
  const int64_t world = runtime::WorldSize();
  GptConfig config;
  config.layers = 2;
  config.width = 16;
  config.heads = 4;
  config.vocab = 13;
  config.sequence = 9;  // 9 tokens: uneven over 2 and 4
  config.mlp_ratio = 2;
  const History single = Train(config, Mesh({1}, {g_comm->rank()}, {"dp"}), 3);
  std::vector<std::string> meshes = {"sp=" + std::to_string(world)};
  if (world == 4) meshes.insert(meshes.end(), {"dp=2,sp=2", "tp=2,sp=2"});
  for (const AttentionKind kind : {AttentionKind::kUlysses, AttentionKind::kRing}) {
    for (const std::string& mesh : meshes) {
      SCOPED_TRACE(mesh + (kind == AttentionKind::kUlysses ? " ulysses" : " ring"));
      config.attention = kind;
      EXPECT_EQ(runtime::FirstError(Compare(Train(config, ParseNamedMesh(mesh), 3), single, 1e-9)),
                "");
    }
  }
  // Zigzag: 8 tokens (a multiple of 2 x sp for sp = 2 and 4), against one process in
  // natural order.
  config.sequence = 8;
  config.attention = AttentionKind::kDefault;
  const History natural = Train(config, Mesh({1}, {g_comm->rank()}, {"dp"}), 3);
  config.attention = AttentionKind::kRingZigzag;
  for (const std::string& mesh : meshes) {
    SCOPED_TRACE(mesh + " zigzag");
    EXPECT_EQ(runtime::FirstError(Compare(Train(config, ParseNamedMesh(mesh), 3), natural, 1e-9)),
              "");
  }
}

TEST(SeqparMpiTest, CfgParallelEqualsSequential) {
  const int64_t world = runtime::WorldSize();
  const Mesh mesh({2, world / 2});
  const std::vector<int64_t> coord = *mesh.CoordinateOf(g_comm->rank());
  const Mesh half = mesh.SubMesh(coord, {1});
  const Mesh alone({1}, {g_comm->rank()});
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    std::mt19937_64 rng(seed);
    auto pick = [&](int64_t lo, int64_t hi) {
      return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
    };
    std::uniform_real_distribution<double> real(-1, 1);
    DenoiserConfig config;
    config.features = pick(1, 6);
    config.classes = pick(1, 5);
    config.embed = pick(1, 4);
    config.hidden = pick(2, 12);
    config.seed = seed;
    const int64_t batch = pick(2, 7);
    std::vector<double> xs;
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < batch * config.features; ++i) xs.push_back(real(rng));
    for (int64_t i = 0; i < batch; ++i) ids.push_back(pick(0, config.classes - 1));
    const kernels::Tensor xg = kernels::Tensor::FromVector({batch, config.features}, xs);
    const kernels::Tensor cg = kernels::Tensor::FromVector({batch}, ids);

    const Denoiser one(config, alone, g_comm->rank());
    runtime::DistTensor x1 =
        runtime::DistTensor::ShardTensor(xg, alone, DistAttr::Replicated(2), g_comm->rank());
    const runtime::DistTensor c1 =
        runtime::DistTensor::ShardTensor(cg, alone, DistAttr::Replicated(1), g_comm->rank());
    const Denoiser model(config, half, g_comm->rank());
    const DistAttr rows = ParsePlacementString("[S(0)]", 2, "x");
    runtime::DistTensor xp = runtime::DistTensor::ShardTensor(xg, half, rows, g_comm->rank());
    const runtime::DistTensor cp = runtime::DistTensor::ShardTensor(
        cg, half, ParsePlacementString("[S(0)]", 1, "cond"), g_comm->rank());
    for (int step = 0; step < 3; ++step) {
      const GuidedStep s{1.5 + step, 1.0 - step / 3.0, 0.95, -0.15};
      x1 = GuidedStepSequential(one, x1, c1, s, *g_comm);
      xp = GuidedStepCfgParallel(model, mesh, xp, cp, s, *g_comm);
    }
    const kernels::Tensor want = *x1.ToGlobal(*g_comm);
    const kernels::Tensor got = *xp.ToGlobal(*g_comm);
    double scale = 1e-300;
    for (int64_t i = 0; i < want.numel(); ++i)
      scale = std::max(scale, std::abs(want.data<double>()[i]));
    std::string error;
    for (int64_t i = 0; i < want.numel() && error.empty(); ++i) {
      if (!(std::abs(got.data<double>()[i] - want.data<double>()[i]) <= 1e-12 * scale)) {
        error = "seed " + std::to_string(seed) + " x[" + std::to_string(i) + "] differs";
      }
    }
    EXPECT_EQ(runtime::FirstError(error), "");
  }
}

}  // namespace
}  // namespace spmd::train

int main(int argc, char** argv) {
  return spmd::runtime::RunMpiTests(
      argc, argv, "max_success=" + std::to_string(spmd::train::Cases()),
      [](spmd::runtime::MpiCommunicator* c) { spmd::train::g_comm = c; });
}
