// Test support for training on simulated devices against the host (device_train_test.cc,
// device_proof_test.cc): the same training on host thread ranks (OnHost) or on sim device
// ranks (OnSim: rank r on sim:r % 8, the NCCL backend's plans over a simulated NCCL), its
// history (losses, gradient norms, gathered parameters), and the comparison. Header-only.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/testing/sim_device_communicator.h"
#include "runtime/comm/thread_communicator.h"
#include "train/checkpoint.h"
#include "train/device.h"
#include "train/device_sim.h"
#include "train/gpt.h"
#include "train/layout.h"
#include "train/pipeline.h"
#include "train/trainer.h"

namespace spmd::train {

using Runner = std::function<void(int64_t, const std::function<void(runtime::Communicator&)>&)>;

struct History {
  std::vector<double> losses;
  std::vector<double> grad_norms;
  std::vector<std::vector<double>> params;
  kernels::Device device;       // rank 0's parameters' device
};

inline void OnHost(int64_t n, const std::function<void(runtime::Communicator&)>& fn) { runtime::RunRanks(n, fn); }
inline void OnSim(int64_t n, const std::function<void(runtime::Communicator&)>& fn) {
  EnableSimTraining();
  runtime::nccl::RunSimDeviceRanks(n, fn);
}

inline History Train(const Runner& run, const GptConfig& config, const std::string& mesh_text,
              Strategy strategy, const BatchSpec& batch, int steps, int first = 0,
              const std::string& load = "", const std::string& save = "") {
  const Mesh mesh = ParseNamedMesh(mesh_text);
  History result;
  std::mutex mutex;
  run(mesh.size(), [&](runtime::Communicator& comm) {
    TrainOptions options;
    options.device = comm.device();
    Trainer trainer(config, Layout(mesh, strategy), options, comm);
    if (!load.empty()) LoadCheckpoint(trainer, load, comm);
    std::vector<double> losses, norms;
    for (int step = first; step < first + steps; ++step) {
      const StepStats stats = trainer.Step(batch, step, comm);
      losses.push_back(stats.loss);
      norms.push_back(stats.grad_norm);
    }
    if (!save.empty()) SaveCheckpoint(trainer, save, {first + steps}, comm);
    std::vector<std::vector<double>> params = trainer.GatherParams(comm);
    if (comm.rank() == 0) {
      std::lock_guard<std::mutex> lock(mutex);
      result.losses = std::move(losses);
      result.grad_norms = std::move(norms);
      result.params = std::move(params);
      result.device = trainer.model().params()[0].value.value().local().device();
    }
  });
  return result;
}

inline void ExpectSame(const History& got, const History& want, double tolerance) {
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t s = 0; s < want.losses.size(); ++s) {
    EXPECT_NEAR(got.losses[s], want.losses[s], tolerance * std::abs(want.losses[s])) << "step " << s;
    EXPECT_NEAR(got.grad_norms[s], want.grad_norms[s], tolerance * std::abs(want.grad_norms[s])) << "step " << s;
  }
  ASSERT_EQ(got.params.size(), want.params.size());
  for (size_t p = 0; p < want.params.size(); ++p) {
    ASSERT_EQ(got.params[p].size(), want.params[p].size());
    double scale = 0;
    for (double v : want.params[p]) scale = std::max(scale, std::abs(v));
    for (size_t k = 0; k < want.params[p].size(); ++k) {
      ASSERT_NEAR(got.params[p][k], want.params[p][k], tolerance * std::max(scale, 1e-3))
          << "parameter " << p << " element " << k;
    }
  }
}

inline GptConfig DeviceTestConfig() {
  GptConfig config;
  config.layers = 2;
  config.width = 12;
  config.heads = 3;   // uneven over tp = 2
  config.vocab = 13;  // uneven over tp = 2
  config.sequence = 5;
  config.mlp_ratio = 2;
  config.dropout = 0.1;
  config.dtype = DType::kFloat64;
  return config;
}

inline History TrainPipeline(const Runner& run, const GptConfig& config, const std::string& mesh_text,
                      const PipelineOptions& pipeline, int64_t micro_batches, const BatchSpec& batch, int steps,
                      std::vector<History>* per_rank, Strategy strategy = Strategy{1, false}) {
  const Mesh mesh = ParseNamedMesh(mesh_text);
  per_rank->assign(static_cast<size_t>(mesh.size()), History{});
  std::mutex mutex;
  run(mesh.size(), [&](runtime::Communicator& comm) {
    TrainOptions options;
    options.device = comm.device();
    options.micro_batches = static_cast<int>(micro_batches);
    PipelineTrainer trainer(config, mesh, strategy, options, pipeline, comm);
    History h;
    for (int step = 0; step < steps; ++step) {
      const StepStats stats = trainer.Step(batch, step, comm);
      h.losses.push_back(stats.loss);
      h.grad_norms.push_back(stats.grad_norm);
    }
    for (auto& [name, values] : trainer.GatherParams(comm)) h.params.push_back(std::move(values));
    h.device = comm.device();
    std::lock_guard<std::mutex> lock(mutex);
    (*per_rank)[static_cast<size_t>(comm.rank())] = std::move(h);
  });
  return (*per_rank)[0];
}

}  // namespace spmd::train
