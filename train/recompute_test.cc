// Activation recompute changes no bit of training, and holds fewer activation bytes.
//
// Generated cases (rapidcheck): a layout (DP, ZeRO-1/2/3, TP, TP with SP, a 2-d mesh, an
// sp axis with Ulysses or ring attention, pipeline stages with 1F1B or GPipe) and a small
// model (2 to 4 layers, GELU or SwiGLU, LayerNorm or RMSNorm, float32 or float64, dropout
// on or off, 1 or 2 micro-batches) train 2 AdamW steps with and without recompute on
// thread ranks. Every step's loss and gradient norm and every final parameter must be
// bitwise equal, and the peak activation bytes measured by autograd (ActivationBytes) on
// rank 0 must be smaller with recompute. A second test compares every parameter's
// gradient after one backward bit for bit; a third checks Checkpoint's typed errors.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <ostream>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "rules/model/error.h"
#include "runtime/comm/thread_communicator.h"
#include "train/autograd.h"
#include "train/gpt.h"
#include "train/layout.h"
#include "train/pipeline.h"
#include "train/trainer.h"

namespace spmd::train {
namespace {

struct Case {
  std::string mesh;
  Strategy strategy;
  AttentionKind attention = AttentionKind::kDefault;
  bool pipeline = false;
  ScheduleKind schedule = ScheduleKind::kOneFOneB;
};

const Case kCases[] = {
    {"dp=2", {0, false}},      {"dp=2", {1, false}},       {"dp=2", {2, false}},
    {"dp=2", {3, false}},      {"tp=2", {0, false}},       {"tp=2", {0, true}},
    {"dp=2,tp=2", {3, true}},  {"sp=2", {0, false}, AttentionKind::kUlysses},
    {"sp=2", {0, false}, AttentionKind::kRing},
    {"pp=2", {0, false}, AttentionKind::kDefault, true, ScheduleKind::kOneFOneB},
    {"pp=2,dp=2", {1, false}, AttentionKind::kDefault, true, ScheduleKind::kFillDrain},
};

void showValue(const Case& c, std::ostream& os) {
  os << c.mesh << " zero=" << c.strategy.zero_stage << " sp=" << c.strategy.sequence_parallel
     << " attention=" << static_cast<int>(c.attention) << (c.pipeline ? " pipeline" : "");
}

struct Run {
  std::vector<double> losses, grad_norms;
  std::map<std::string, std::vector<double>> params;
  int64_t activation_peak = 0;  // the most over the steps, rank 0
};

Run Train(const Case& c, const GptConfig& config, const BatchSpec& batch, int micro, bool recompute) {
  const Mesh mesh = ParseNamedMesh(c.mesh);
  Run run;
  std::mutex mutex;
  runtime::RunRanks(mesh.size(), [&](runtime::Communicator& comm) {
    TrainOptions options;
    options.micro_batches = micro;
    options.recompute = recompute;
    std::vector<StepStats> stats;
    std::vector<std::pair<std::string, std::vector<double>>> params;
    if (c.pipeline) {
      PipelineTrainer trainer(config, mesh, c.strategy, options, PipelineOptions{c.schedule, 1}, comm);
      for (int s = 0; s < 2; ++s) stats.push_back(trainer.Step(batch, s, comm));
      params = trainer.GatherParams(comm);
    } else {
      Trainer trainer(config, Layout(mesh, c.strategy), options, comm);
      for (int s = 0; s < 2; ++s) stats.push_back(trainer.Step(batch, s, comm));
      const auto values = trainer.GatherParams(comm);
      for (size_t i = 0; i < values.size(); ++i) params.emplace_back(trainer.model().params()[i].name, values[i]);
    }
    std::lock_guard<std::mutex> lock(mutex);
    for (auto& [name, values] : params) {
      if (!values.empty()) run.params[name] = std::move(values);
    }
    if (comm.rank() == 0) {
      for (const StepStats& s : stats) {
        run.losses.push_back(s.loss);
        run.grad_norms.push_back(s.grad_norm);
        run.activation_peak = std::max(run.activation_peak, s.activation_peak_bytes);
      }
    }
  });
  return run;
}

// Bitwise: the same bytes (a NaN would be unequal to itself, and -0 to 0 would pass ==).
bool SameBits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

RC_GTEST_PROP(Recompute, TrainsBitwiseTheSameWithFewerActivationBytes, ()) {
  const Case c = *rc::gen::elementOf(std::vector<Case>(std::begin(kCases), std::end(kCases)));
  GptConfig config;
  config.layers = *rc::gen::inRange<int64_t>(2, 5);
  config.width = 8;
  config.heads = 2;
  config.vocab = *rc::gen::inRange<int64_t>(7, 12);
  config.sequence = 4;
  config.mlp_ratio = 2;
  config.swiglu = *rc::gen::arbitrary<bool>();
  config.rms_norm = *rc::gen::arbitrary<bool>();
  config.dtype = *rc::gen::element(DType::kFloat32, DType::kFloat64);
  config.dropout = *rc::gen::element(0.0, 0.2);
  config.attention = c.attention;
  config.seed = *rc::gen::inRange<uint64_t>(1, 1000);
  const int micro = *rc::gen::inRange(1, 3);
  const BatchSpec batch{4, 4, config.seed};
  RC_TAG(c.mesh, c.strategy.zero_stage, c.strategy.sequence_parallel, c.pipeline);

  const Run plain = Train(c, config, batch, micro, false);
  const Run recomputed = Train(c, config, batch, micro, true);
  RC_ASSERT(plain.losses.size() == 2u);
  RC_ASSERT(SameBits(recomputed.losses, plain.losses));
  RC_ASSERT(SameBits(recomputed.grad_norms, plain.grad_norms));
  RC_ASSERT(recomputed.params.size() == plain.params.size());
  for (const auto& [name, values] : plain.params) {
    RC_ASSERT(recomputed.params.count(name) == 1u);
    if (!SameBits(recomputed.params.at(name), values)) RC_FAIL("parameter " + name + " differs");
  }
  RC_ASSERT(plain.activation_peak > 0);
  // With one block per stage the replay holds that block's graph as the forward did, and
  // the block's input besides: fewer bytes needs at least 2 blocks on rank 0.
  const int64_t blocks = c.pipeline ? config.layers / 2 : config.layers;
  if (blocks >= 2) RC_ASSERT(recomputed.activation_peak < plain.activation_peak);
}

// After one forward and backward, every parameter's gradient (reduced to its storage
// layout, gathered) is bitwise the same with recompute, on layouts whose backward moves
// partial sums around (TP, SP, ZeRO-2's reduce-scatter, ZeRO-3's gathered parameters).
TEST(Recompute, GradientsAreBitwiseTheSame) {
  GptConfig config;
  config.layers = 3;
  config.width = 8;
  config.heads = 2;
  config.vocab = 11;
  config.sequence = 4;
  config.dropout = 0.2;
  config.dtype = DType::kFloat32;
  kernels::Tensor tokens, labels;
  MakeBatch({4, 4, 5}, config.vocab, 0, &tokens, &labels);
  for (const Case& c : {kCases[2], kCases[3], kCases[5], kCases[6]}) {
    SCOPED_TRACE(c.mesh + " zero=" + std::to_string(c.strategy.zero_stage));
    const Mesh mesh = ParseNamedMesh(c.mesh);
    std::vector<std::vector<double>> grads[2];
    for (int recompute = 0; recompute < 2; ++recompute) {
      std::mutex mutex;
      runtime::RunRanks(mesh.size(), [&](runtime::Communicator& comm) {
        const Layout layout(mesh, c.strategy);
        Gpt model(config, layout, comm);
        model.set_recompute(recompute == 1);
        for (const NamedParam& p : model.params()) {
          if (auto g = layout.GradLayout(p.role, static_cast<int>(p.value.value().shape().size()))) {
            p.value.set_grad_layout(*g);
          }
        }
        auto shard = [&](const kernels::Tensor& t) {
          return runtime::DistTensor::ShardTensor(t, mesh, layout.Tokens(2), comm.rank());
        };
        Backward(model.Loss(shard(tokens), shard(labels), comm, 3, 1), comm);
        std::vector<std::vector<double>> mine;
        for (const NamedParam& p : model.params()) {
          const auto global = Gradient(p.value, p.value.value().dist_attr(), comm).ToGlobal(comm);
          std::vector<double> values;
          for (int64_t i = 0; global && i < global->numel(); ++i) values.push_back(global->data<float>()[i]);
          mine.push_back(std::move(values));
        }
        std::lock_guard<std::mutex> lock(mutex);
        if (comm.rank() == 0) grads[recompute] = std::move(mine);
      });
    }
    ASSERT_EQ(grads[0].size(), grads[1].size());
    for (size_t i = 0; i < grads[0].size(); ++i) {
      EXPECT_TRUE(SameBits(grads[1][i], grads[0][i])) << "gradient " << i;
    }
  }
}

std::string FieldOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const SpmdError& e) {
    return e.field();
  }
  return "(no error)";
}

// Checkpoint's contract: typed errors naming the field; without gradients, the region
// itself (nothing recorded); a region that changes its output count on the replay fails
// the backward naming "region".
TEST(Recompute, CheckpointErrorsAndNoGrad) {
  runtime::RunRanks(1, [&](runtime::Communicator& comm) {
    const Mesh mesh = ParseNamedMesh("dp=1");
    auto value = [&](double v) {
      return runtime::DistTensor::ShardTensor(kernels::Tensor::FromVector({2}, std::vector<double>{v, -v}), mesh,
                                              DistAttr::Replicated(1), comm.rank());
    };
    const Variable w(value(3), true);
    const Region square = [&](const std::vector<Variable>& in, runtime::Communicator& c) {
      return std::vector<Variable>{Apply1("multiply", {in[0], w}, {}, c)};
    };
    EXPECT_EQ(FieldOf([&] { Checkpoint("r", {Variable()}, square, comm); }), "inputs[0]");
    EXPECT_EQ(FieldOf([&] { Checkpoint("r", {Variable(value(1))}, Region{}, comm); }), "region");
    {
      NoGradGuard no_grad;
      EXPECT_FALSE(Checkpoint("r", {Variable(value(1))}, square, comm)[0].requires_grad());
    }
    // The input needs no gradient, the captured parameter does: the step is recorded, and
    // the parameter's gradient is the input.
    const Variable y = Checkpoint("r", {Variable(value(2))}, square, comm)[0];
    ASSERT_TRUE(y.requires_grad());
    Backward(Apply1("sum", {y}, {}, comm), comm);
    ASSERT_TRUE(w.grad().has_value());
    const auto g = w.grad()->ToGlobal(comm);
    EXPECT_EQ(g->data<double>()[0], 2.0);
    EXPECT_EQ(g->data<double>()[1], -2.0);

    int calls = 0;
    const Region changing = [&](const std::vector<Variable>& in, runtime::Communicator& c) {
      std::vector<Variable> out{Apply1("multiply", {in[0], w}, {}, c)};
      if (calls++ > 0) out.push_back(out[0]);
      return out;
    };
    const Variable z = Checkpoint("changing", {Variable(value(2))}, changing, comm)[0];
    EXPECT_EQ(FieldOf([&] { Backward(Apply1("sum", {z}, {}, comm), comm); }), "region");
  });
}

}  // namespace
}  // namespace spmd::train
