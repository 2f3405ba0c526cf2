// Long-sequence attention under mpirun (docs/LONG_SEQUENCE.md "Measured"): for causal
// attention on [B, S, H, Dh] float64 with the sequence sharded over the whole world, the
// bytes each rank sends in the forward and in the backward, and the wall time of a
// forward + backward (median of 5 runs, the slowest rank's), for
//   dense    the attention of registered ops on the sequence-sharded layout (the rules
//            gather what the scores and the softmax need: the default sp path of the GPT)
//   ulysses  SequenceAttention, two all-to-alls each way
//   ring     SequenceAttention, n - 1 k/v transfers (n dK/dV transfers in the backward)
//   zigzag   the ring over the load-balanced causal split
// and one training step of the small GPT on "sp=<world>" with each GptConfig::attention
// (bytes per rank, from the trainer's counters). A plain timing program; the local
// arithmetic of the strategies is plain loops (train/sequence_attention.cc), so the times
// compare communication patterns and load balance, not kernels.
//   mpirun -np 4 build/bin/seqpar_bench [S] [H] [Dh] [B]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "runtime/comm/mpi_communicator.h"
#include "train/autograd.h"
#include "train/layout.h"
#include "train/sequence_attention.h"
#include "train/trainer.h"

namespace {

using spmd::DistAttr;
using spmd::DType;
using spmd::Mesh;
using spmd::runtime::DistTensor;
using namespace spmd::train;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Figures {
  int64_t forward_sent = 0, backward_sent = 0;
  double seconds = 0;
};

// One forward + backward of `strategy` (nothing: dense) on the world's sp mesh.
Figures Run(const std::optional<SequenceStrategy>& strategy, int64_t b, int64_t s, int64_t h,
            int64_t dh, spmd::runtime::MpiCommunicator& comm) {
  const Mesh mesh({comm.world_size()});
  DistAttr attr = DistAttr::Replicated(4);
  attr.dims[1] = {0};
  std::vector<double> values(b * s * h * dh);
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = static_cast<double>((i * 7919) % 1000) / 1000.0 - 0.5;
  const spmd::kernels::Tensor global = spmd::kernels::Tensor::FromVector({b, s, h, dh}, values);
  Figures f;
  std::vector<double> times;
  for (int r = 0; r < 5; ++r) {
    const Variable q(DistTensor::ShardTensor(global, mesh, attr, comm.rank()), true);
    const Variable k(DistTensor::ShardTensor(global, mesh, attr, comm.rank()), true);
    const Variable v(DistTensor::ShardTensor(global, mesh, attr, comm.rank()), true);
    MPI_Barrier(MPI_COMM_WORLD);
    const auto start = std::chrono::steady_clock::now();
    comm.ResetCounters();
    const Variable out = strategy ? SequenceAttention(q, k, v, {*strategy, 0, true, 0}, comm)
                                  : DenseAttention(q, k, v, true, 0, comm);
    f.forward_sent = comm.counters().total_sent();
    comm.ResetCounters();
    Backward(Apply1("sum", {out}, {}, comm), comm);
    f.backward_sent = comm.counters().total_sent();
    double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    MPI_Allreduce(MPI_IN_PLACE, &elapsed, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    times.push_back(elapsed);
  }
  f.seconds = Median(times);
  int64_t sent[2] = {f.forward_sent, f.backward_sent};
  MPI_Allreduce(MPI_IN_PLACE, sent, 2, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  f.forward_sent = sent[0];
  f.backward_sent = sent[1];
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  {
    spmd::runtime::MpiCommunicator comm;
    const int64_t s = argc > 1 ? std::atoll(argv[1]) : 256;
    const int64_t h = argc > 2 ? std::atoll(argv[2]) : 8;
    const int64_t dh = argc > 3 ? std::atoll(argv[3]) : 32;
    const int64_t b = argc > 4 ? std::atoll(argv[4]) : 1;
    const int64_t n = comm.world_size();
    if (comm.rank() == 0) {
      std::printf(
          "causal attention float64 B=%lld S=%lld H=%lld Dh=%lld over %lld ranks "
          "(local q = %lld bytes)\n",
          static_cast<long long>(b), static_cast<long long>(s), static_cast<long long>(h),
          static_cast<long long>(dh), static_cast<long long>(n),
          static_cast<long long>(b * s / n * h * dh * 8));
      std::printf("%-8s %16s %16s %12s\n", "strategy", "fwd sent/rank", "bwd sent/rank",
                  "fwd+bwd s");
    }
    const std::pair<const char*, std::optional<SequenceStrategy>> runs[] = {
        {"dense", std::nullopt},
        {"ulysses", SequenceStrategy::kUlysses},
        {"ring", SequenceStrategy::kRing},
        {"zigzag", SequenceStrategy::kRingZigzag}};
    for (const auto& [name, strategy] : runs) {
      if (strategy == SequenceStrategy::kUlysses && h % n != 0) continue;
      if (strategy == SequenceStrategy::kRingZigzag && s % (2 * n) != 0) continue;
      const Figures f = Run(strategy, b, s, h, dh, comm);
      if (comm.rank() == 0) {
        std::printf("%-8s %16lld %16lld %12.4f\n", name, static_cast<long long>(f.forward_sent),
                    static_cast<long long>(f.backward_sent), f.seconds);
      }
    }
    // One GPT step on sp=<world> with each attention.
    GptConfig config;
    config.layers = 2;
    config.width = 64;
    config.heads = 4 * n;
    config.vocab = 64;
    config.sequence = 128;
    config.mlp_ratio = 2;
    if (comm.rank() == 0)
      std::printf("\nGPT step (2 layers, width 64, %lld heads, batch 2 x 128 tokens) on sp=%lld\n",
                  static_cast<long long>(config.heads), static_cast<long long>(n));
    const Mesh sp = ParseNamedMesh("sp=" + std::to_string(n));
    for (const auto& [name, kind] :
         {std::pair{"dense", AttentionKind::kDefault},
          std::pair{"ulysses", AttentionKind::kUlysses}, std::pair{"ring", AttentionKind::kRing},
                                     std::pair{"zigzag", AttentionKind::kRingZigzag}}) {
      config.attention = kind;
      Trainer trainer(config, Layout(sp, Strategy{}), TrainOptions{}, comm);
      trainer.Step(BatchSpec{2, 128, 1}, 0, comm);  // warm-up
      const StepStats stats = trainer.Step(BatchSpec{2, 128, 1}, 1, comm);
      int64_t sent = stats.bytes_sent;
      double seconds = stats.seconds;
      MPI_Allreduce(MPI_IN_PLACE, &sent, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
      MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (comm.rank() == 0) {
        std::printf("%-8s bytes sent/rank %12lld  step %.4f s  loss %.6f\n", name,
                    static_cast<long long>(sent), seconds, stats.loss);
      }
    }
  }
  MPI_Finalize();
  return 0;
}
