// Test support for train/join.h (its thread test and its mpirun test): data-parallel
// training of the small GPT with uneven numbers of batches per rank under a Join, and the
// one-process equivalent it must equal. Test-only; header-only.
//
// Rank r has batches[r] batches of rows[r] sequences each; its k-th batch (k from 0) is
// MakeBatch({rows[r], sequence, seed 1000 + r}, vocab, k). Step k of the one process
// trains on the concatenation, in rank order, of the k-th batches of the ranks with more
// than k batches (its loss: the mean over all those rows).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "runtime/comm/thread_communicator.h"
#include "train/device.h"
#include "train/gpt.h"
#include "train/join.h"
#include "train/layout.h"
#include "train/optimizer.h"
#include "train/trainer.h"

namespace spmd::train::join_check {

inline GptConfig SmallConfig(DType dtype = DType::kFloat64) {
  GptConfig config;
  config.dtype = dtype;
  config.layers = 1;
  config.width = 8;
  config.heads = 2;
  config.vocab = 11;
  config.sequence = 4;
  config.mlp_ratio = 2;
  return config;
}

inline Layout OneDevice(int64_t rank = 0) { return Layout(Mesh({1}, {rank}, {"dp"}), Strategy{}); }

inline AdamW MakeOptimizer(const Gpt& model) {
  AdamW optimizer(1e-2, 0.9, 0.95, 1e-8, 0.01);
  optimizer.set_max_grad_norm(1.0);
  for (const NamedParam& p : model.params()) optimizer.Add(p.value);
  return optimizer;
}

inline std::vector<std::vector<double>> Values(const Gpt& model, runtime::Communicator& local) {
  std::vector<std::vector<double>> out;
  for (const NamedParam& p : model.params()) {
    const kernels::Tensor g = ToHostTensor(*p.value.value().ToGlobal(local));  // device.h's door
    if (g.dtype() == DType::kFloat32) {
      out.emplace_back(g.data<float>(), g.data<float>() + g.numel());
    } else {
      out.emplace_back(g.data<double>(), g.data<double>() + g.numel());
    }
  }
  return out;
}

// The forward and backward of `model` on (tokens, labels) [rows, sequence] on its one-rank
// mesh, the batch on `local`'s device.
inline void Forward(Gpt& model, const kernels::Tensor& tokens, const kernels::Tensor& labels,
                    int64_t step, runtime::Communicator& local) {
  const Mesh& mesh = model.layout().mesh();
  const DistAttr attr = model.layout().Tokens(2);
  const int64_t me = local.rank();
  auto up = [&](const kernels::Tensor& t) {
    return OnDevice(runtime::DistTensor::ShardTensor(t, mesh, attr, me), local.device(), local.stream());
  };
  const Variable loss = model.Loss(up(tokens), up(labels), local, step);
  Backward(loss, local);
}

inline void RankBatch(int64_t rank, int64_t rows, int64_t k, const GptConfig& config,
                      kernels::Tensor* tokens, kernels::Tensor* labels) {
  MakeBatch(BatchSpec{rows, config.sequence, 1000 + static_cast<uint64_t>(rank)}, config.vocab, k,
            tokens, labels);
}

// This rank's part: trains its replica (on a mesh of one rank: this one, its tensors on
// `comm`'s device) under a Join over `group` of `comm`; returns the final parameters and
// the number of rounds.
inline std::vector<std::vector<double>> TrainJoined(runtime::Communicator& comm,
                                                    const runtime::Group& group,
                                                    const std::vector<int64_t>& batches,
                                                    const std::vector<int64_t>& rows,
                                                    int64_t* rounds = nullptr,
                                                    DType dtype = DType::kFloat64) {
  runtime::Communicator& local = comm;  // the replica's mesh is this rank alone
  const GptConfig config = SmallConfig(dtype);
  Gpt model(config, OneDevice(comm.rank()), local);
  AdamW optimizer = MakeOptimizer(model);
  std::vector<Variable> params;
  for (const NamedParam& p : model.params()) params.push_back(p.value);
  Join join(comm, group);
  const int64_t me = comm.rank();
  for (int64_t k = 0;; ++k) {
    const bool has = k < batches[me];
    const Join::Round round = join.Next(has, static_cast<double>(rows[me]));
    if (round.active == 0) break;
    if (has) {
      kernels::Tensor tokens, labels;
      RankBatch(me, rows[me], k, config, &tokens, &labels);
      Forward(model, tokens, labels, k, local);
    }
    join.AverageGradients(params, round, local);
    optimizer.Step(local);
  }
  if (rounds != nullptr) *rounds = join.rounds();
  return Values(model, local);
}

// The one process: step k on the union of the active ranks' k-th batches.
inline std::vector<std::vector<double>> TrainOneProcess(const std::vector<int64_t>& batches,
                                                        const std::vector<int64_t>& rows,
                                                        DType dtype = DType::kFloat64) {
  runtime::ThreadWorld solo(1);
  runtime::ThreadCommunicator local(solo, 0);
  const GptConfig config = SmallConfig(dtype);
  Gpt model(config, OneDevice(), local);
  AdamW optimizer = MakeOptimizer(model);
  const int64_t steps = batches.empty() ? 0 : *std::max_element(batches.begin(), batches.end());
  for (int64_t k = 0; k < steps; ++k) {
    std::vector<int64_t> t, l;
    int64_t total = 0;
    for (size_t r = 0; r < batches.size(); ++r) {
      if (k >= batches[r]) continue;
      kernels::Tensor tokens, labels;
      RankBatch(static_cast<int64_t>(r), rows[r], k, config, &tokens, &labels);
      t.insert(t.end(), tokens.data<int64_t>(), tokens.data<int64_t>() + tokens.numel());
      l.insert(l.end(), labels.data<int64_t>(), labels.data<int64_t>() + labels.numel());
      total += rows[r];
    }
    Forward(model, kernels::Tensor::FromVector({total, config.sequence}, t),
            kernels::Tensor::FromVector({total, config.sequence}, l), k, local);
    optimizer.Step(local);
  }
  return Values(model, local);
}

// max over parameters of |a - b|_inf / max(|b|_inf, 1e-3).
inline double RelativeDifference(const std::vector<std::vector<double>>& a,
                                 const std::vector<std::vector<double>>& b) {
  if (a.size() != b.size()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size()) return INFINITY;
    double diff = 0, scale = 1e-3;
    for (size_t j = 0; j < a[i].size(); ++j) {
      diff = std::max(diff, std::abs(a[i][j] - b[i][j]));
      scale = std::max(scale, std::abs(b[i][j]));
    }
    worst = std::max(worst, diff / scale);
  }
  return worst;
}

}  // namespace spmd::train::join_check
