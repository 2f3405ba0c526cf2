// Eager overhead of the training path (docs/TRAINING.md "Overhead"): the cost of one
// Dispatch and of one recorded autograd Apply, with the kernel and communication made
// negligible (4x4 float32 operands whose layouts need no reshard), on a 2x2 mesh of thread
// ranks, in rank 0's thread CPU time; and one training step of the small GPT on one rank. A plain timing program: each
// figure is the median of 7 runs, each run timing `calls` calls on rank 0.
// The GPT step is timed whole (Trainer::Step), then by phase (forward: Gpt::Loss;
// backward: Backward; optimizer: AdamW::Step with clipping), each in thread CPU time, as
// bench/gpt_torch_bench.py times PyTorch's (docs/BENCHMARKS.md "GPT step against PyTorch").
//   ./build/bin/train_bench
#include <time.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <cstdio>
#include <string>
#include <vector>

#include "rules/model/dist_attr.h"
#include "rules/engine/registry.h"
#include "kernels/allocator.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/simd.h"
#include "runtime/exec/dispatch.h"
#include "runtime/comm/thread_communicator.h"
#include "train/autograd.h"
#include "train/trainer.h"

namespace {

using spmd::DistAttr;
using spmd::Mesh;
using spmd::runtime::Communicator;
using spmd::runtime::DistTensor;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double ThreadMicros() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_nsec) * 1e-3;
}

// Microseconds of rank 0's CPU per call: `calls` calls of each body per run on a fresh 2x2
// mesh of thread ranks, the bodies interleaved (run r times them in an order rotated by r),
// 7 runs; the median per body. Interleaved because a figure depends on what ran before it
// in the process: timed one after the other, whichever body ran first measured up to 3x
// faster (the heap's state after the earlier runs' threads), and a difference of two
// figures timed apart is then meaningless.
using Body = std::function<void(Communicator&, int)>;

std::vector<double> PerCallInterleaved(int calls, const std::vector<Body>& bodies) {
  std::vector<std::vector<double>> runs(bodies.size());
  for (int r = 0; r < 7; ++r) {
    for (size_t k = 0; k < bodies.size(); ++k) {
      const size_t b = (k + static_cast<size_t>(r)) % bodies.size();
      double us = 0;
      spmd::runtime::RunRanks(4, [&](Communicator& comm) {
        // Thread CPU time: four rank threads share the cores, so wall time would count the
        // time rank 0 waits for a core.
        const double start = ThreadMicros();
        bodies[b](comm, calls);
        const double elapsed = ThreadMicros() - start;
        if (comm.rank() == 0) us = elapsed / calls;
      });
      runs[b].push_back(us);
    }
  }
  std::vector<double> medians;
  for (std::vector<double>& v : runs) medians.push_back(Median(std::move(v)));
  return medians;
}

}  // namespace

// `train_bench --step-only` runs only the GPT step (for a profiler: callgrind, perf).
int main(int argc, char** argv) {
  const bool step_only = argc > 1 && std::string(argv[1]) == "--step-only";
  const Mesh mesh({2, 2});
  // x [4, 4] as [S(0), S(1)] (rows over axis 0, the contraction over axis 1); w [4, 4] as
  // [R, S(0)]: the rule's required layouts, so no reshard; the output is partial on axis 1.
  const spmd::kernels::Tensor xg = spmd::kernels::Tensor::FromVector<float>({4, 4}, std::vector<float>(16, 1.0f));
  const DistAttr x_attr = spmd::ParsePlacementString("[S(0), S(1)]", 2, "x");
  const DistAttr w_attr = spmd::ParsePlacementString("[R, S(0)]", 2, "w");
  if (!step_only) {
    const Body dispatch_body = [&](Communicator& comm, int calls) {
      const DistTensor x = DistTensor::ShardTensor(xg, mesh, x_attr, comm.rank());
      const DistTensor w = DistTensor::ShardTensor(xg, mesh, w_attr, comm.rank());
      for (int i = 0; i < calls; ++i) spmd::runtime::Dispatch("matmul", {x, w}, {}, comm);
    };
    // The same local matmul on rank 0's shards, RunCpuKernel alone: what Dispatch adds is
    // the difference.
    const Body kernel_body = [&](Communicator& comm, int calls) {
      const DistTensor x = DistTensor::ShardTensor(xg, mesh, x_attr, comm.rank());
      const DistTensor w = DistTensor::ShardTensor(xg, mesh, w_attr, comm.rank());
      const spmd::kernels::TensorArgs locals(std::vector<const spmd::kernels::Tensor*>{&x.local(), &w.local()});
      const spmd::Attrs attrs = spmd::FindOp("matmul")->NormalizeAttrs({});
      for (int i = 0; i < calls; ++i) spmd::kernels::RunCpuKernel("matmul", locals, attrs);
    };
    const Body apply_body = [&](Communicator& comm, int calls) {
      const spmd::train::Variable x(DistTensor::ShardTensor(xg, mesh, x_attr, comm.rank()));
      const spmd::train::Variable w(DistTensor::ShardTensor(xg, mesh, w_attr, comm.rank()), true);
      for (int i = 0; i < calls; ++i) spmd::train::Apply("matmul", {x, w}, {}, comm);
    };
    const std::vector<double> us = PerCallInterleaved(20000, {dispatch_body, kernel_body, apply_body});
    const double dispatch = us[0];
    const double kernel = us[1];
    const double apply = us[2];
    std::printf("Dispatch matmul, 2x2 mesh, no reshard: %.2f us per call (median of 7)\n", dispatch);
    std::printf("RunCpuKernel matmul on the same shards: %.2f us per call; Dispatch above it: %.2f us\n",
                kernel, dispatch - kernel);
    std::printf("autograd Apply matmul (recorded), same: %.2f us per call (median of 7)\n", apply);
    std::fflush(stdout);
  }

  // One training step of the small GPT on one rank (float32).
  spmd::train::GptConfig config;
  config.layers = 2;
  config.width = 64;
  config.heads = 4;
  config.vocab = 256;
  config.sequence = 64;
  config.dtype = spmd::DType::kFloat32;
  const spmd::train::BatchSpec batch{8, 64, 1};
  std::vector<double> steps, cpu, forward, backward, optimizer;
  spmd::runtime::RunRanks(1, [&](Communicator& comm) {
    spmd::train::Trainer trainer(config, spmd::train::Layout(spmd::train::ParseNamedMesh("dp=1"), {}),
                                 spmd::train::TrainOptions{}, comm);
    for (int s = 0; s < 8; ++s) {
      const double start = ThreadMicros();
      steps.push_back(trainer.Step(batch, s, comm).seconds);
      cpu.push_back((ThreadMicros() - start) * 1e-6);
    }
    // The same step by phase, on the trainer's model and optimizer (what Trainer::Step
    // does with one micro-batch, less its checks and counters).
    spmd::train::Gpt& model = trainer.model();
    const spmd::DistAttr tokens_attr = model.layout().Tokens(2);
    for (int s = 8; s < 16; ++s) {
      spmd::kernels::Tensor tokens, labels;
      spmd::train::MakeBatch(batch, config.vocab, s, &tokens, &labels);
      const DistTensor t = DistTensor::ShardTensor(tokens, model.layout().mesh(), tokens_attr, comm.rank());
      const DistTensor l = DistTensor::ShardTensor(labels, model.layout().mesh(), tokens_attr, comm.rank());
      const double t0 = ThreadMicros();
      const spmd::train::Variable loss = model.Loss(t, l, comm, s);
      const double t1 = ThreadMicros();
      spmd::train::Backward(loss, comm);
      const double t2 = ThreadMicros();
      trainer.optimizer().Step(comm);
      const double t3 = ThreadMicros();
      forward.push_back((t1 - t0) * 1e-6);
      backward.push_back((t2 - t1) * 1e-6);
      optimizer.push_back((t3 - t2) * 1e-6);
    }
  });
  // The first step (and the first phased one) warms the allocator.
  for (auto* v : {&steps, &cpu, &forward, &backward, &optimizer}) v->erase(v->begin());
  const double step = Median(steps);
  // CPU time as well: on a loaded machine it moves much less than wall time (the step is
  // one thread; bench/gpt_torch_bench.py prints the same two figures).
  std::printf("GPT step (layers 2, width 64, heads 4, vocab 256, batch 8 x 64 tokens, float32, 1 rank): "
              "%.1f ms, %.0f tokens/s, CPU %.1f ms (median of 7)\n", step * 1e3, 8 * 64 / step,
              Median(cpu) * 1e3);
  std::printf("GPT step by phase, CPU ms (median of 7): forward %.2f, backward %.2f, optimizer %.2f "
              "(float32 loops: %s; host cache: %lld hits, %lld misses)\n",
              Median(forward) * 1e3, Median(backward) * 1e3, Median(optimizer) * 1e3,
              spmd::kernels::cpu::simd::TargetName(),
              static_cast<long long>(spmd::kernels::HostAllocatorStats().hits),
              static_cast<long long>(spmd::kernels::HostAllocatorStats().misses));
  return 0;
}
