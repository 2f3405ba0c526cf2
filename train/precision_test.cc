// Mixed precision (train/precision.h), thread ranks.
//
// Properties over generated small models and layouts (DP, ZeRO-1/2/3, TP, SP and their
// combinations): a bf16-mixed or fp16-mixed distributed run equals one process in the same
// precision within BoundsFor's bounds, and one process tracks float64 within its bound;
// the masters, moments and gradients stay float32 and every gradient reduction moves float32
// (the bytes of the fp32 run); fp16 loss scaling skips a step whose gradients overflow
// without changing any parameter or optimizer state, backs the scale off, counts the step,
// and stops with a NonFiniteError naming the step once the scale would fall below its floor.
// MEASURE=1 (DISABLED_Measure) prints the differences over many configs that
// docs/TRAINING.md "Mixed precision" reports.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "rules/model/error.h"
#include "runtime/comm/thread_communicator.h"
#include "train/gpt.h"
#include "train/layout.h"
#include "train/precision.h"
#include "train/trainer.h"

namespace spmd::train {
namespace {

struct History {
  std::vector<double> losses;
  std::vector<std::vector<double>> params;
  std::vector<StepStats> stats;
  std::vector<std::string> names;
};

struct Case {
  GptConfig config;
  std::string mesh;
  Strategy strategy;
  BatchSpec batch;
  int micro_batches = 1;
  int steps = 4;
  std::string Describe() const {
    return mesh + " zero=" + std::to_string(strategy.zero_stage) + " sp=" + std::to_string(strategy.sequence_parallel) +
           " layers=" + std::to_string(config.layers) + " width=" + std::to_string(config.width) +
           " heads=" + std::to_string(config.heads) + " vocab=" + std::to_string(config.vocab) +
           " batch=" + std::to_string(batch.batch) + "x" + std::to_string(batch.sequence) +
           " micro=" + std::to_string(micro_batches) + (config.swiglu ? " swiglu" : "") +
           (config.rms_norm ? " rms" : "") + " seed=" + std::to_string(config.seed);
  }
};

// Trains `c` on its mesh (or on one rank when `single`) in `precision` (float64 model
// for fp32 when `float64`); rank 0's history.
History Train(const Case& c, Precision precision, bool single = false, bool float64 = false) {
  const Mesh mesh = ParseNamedMesh(single ? "dp=1" : c.mesh);
  GptConfig config = c.config;
  config.dtype = float64 ? DType::kFloat64 : DType::kFloat32;
  TrainOptions options;
  options.precision = precision;
  options.micro_batches = c.micro_batches;
  History run;
  std::mutex mutex;
  runtime::RunRanks(mesh.size(), [&](runtime::Communicator& comm) {
    Trainer trainer(config, Layout(mesh, single ? Strategy{} : c.strategy), options, comm);
    std::vector<StepStats> stats;
    for (int step = 0; step < c.steps; ++step) stats.push_back(trainer.Step(c.batch, step, comm));
    std::vector<std::vector<double>> params = trainer.GatherParams(comm);
    if (comm.rank() == 0) {
      std::lock_guard<std::mutex> lock(mutex);
      for (const StepStats& s : stats) run.losses.push_back(s.loss);
      run.stats = std::move(stats);
      run.params = std::move(params);
      for (const NamedParam& p : trainer.model().params()) run.names.push_back(p.name);
    }
  });
  return run;
}

// The largest loss difference relative to the reference loss, and the largest parameter
// difference relative to the reference's largest parameter magnitude (cli/train_verify.h's
// two halves); NaN-aware (a non-finite value is +infinity).
struct Differences {
  double loss = 0, params = 0;
  std::string worst_param;
  double loss_units = 0;  // max over steps t of the loss difference / (u growth^t): the c it needs
  double params_abs = 0;  // the largest parameter difference, absolute
};
Differences Compare(const History& got, const History& want, const MixedBounds& bounds = {1, 1.2, 0, 0}) {
  const double inf = std::numeric_limits<double>::infinity();
  Differences d;
  auto take = [&](double& worst, double v) { worst = std::isfinite(v) ? std::max(worst, v) : inf; };
  if (got.losses.size() != want.losses.size() || got.params.size() != want.params.size()) return {inf, inf, ""};
  for (size_t s = 0; s < want.losses.size(); ++s) {
    take(d.loss, std::abs(got.losses[s] - want.losses[s]) / std::abs(want.losses[s]));
    take(d.loss_units, std::abs(got.losses[s] - want.losses[s]) / std::abs(want.losses[s]) /
                           bounds.Loss(1, static_cast<int64_t>(s)));
  }
  double scale = 1e-30;
  for (const auto& p : want.params) {
    for (double v : p) scale = std::max(scale, std::abs(v));
  }
  for (size_t p = 0; p < want.params.size(); ++p) {
    if (got.params[p].size() != want.params[p].size()) return {inf, inf, ""};
    for (size_t k = 0; k < want.params[p].size(); ++k) {
      const double before = d.params;
      take(d.params, std::abs(got.params[p][k] - want.params[p][k]) / scale);
      take(d.params_abs, std::abs(got.params[p][k] - want.params[p][k]));
      if (d.params > before && p < want.names.size()) d.worst_param = want.names[p];
    }
  }
  return d;
}

const char* const kMeshes[][2] = {{"dp=2", "0"}, {"dp=2", "1"}, {"dp=2", "2"}, {"dp=2", "3"},
                                  {"tp=2", "0"}, {"tp=2", "0s"}, {"sp=2", "0"}, {"dp=2,tp=2", "1s"},
                                  {"dp=2,tp=2", "3"}, {"dp=2,sp=2", "2"}, {"dp=3", "2"}};

// A generated case: model sizes, layout (kMeshes[mesh], or drawn when -1) and batch from `rng`.
Case MakeCase(std::mt19937_64& rng, int steps, int mesh = -1) {
  auto pick = [&](int lo, int hi) { return static_cast<int>(std::uniform_int_distribution<int>(lo, hi)(rng)); };
  Case c;
  c.config.layers = pick(1, 2);
  c.config.heads = pick(1, 3);
  c.config.width = c.config.heads * pick(2, 5);
  c.config.vocab = pick(7, 19);
  c.config.mlp_ratio = pick(1, 3);
  c.config.swiglu = pick(0, 1) == 1;
  c.config.rms_norm = pick(0, 1) == 1;
  c.config.seed = static_cast<uint64_t>(pick(1, 1000));
  const int drawn = pick(0, static_cast<int>(std::size(kMeshes)) - 1);
  const auto& m = kMeshes[mesh >= 0 ? mesh : drawn];
  c.mesh = m[0];
  c.strategy.zero_stage = m[1][0] - '0';
  c.strategy.sequence_parallel = m[1][1] == 's';
  c.batch.sequence = pick(2, 6);
  c.config.sequence = c.batch.sequence;
  c.batch.batch = pick(2, 5);
  c.batch.seed = static_cast<uint64_t>(pick(1, 1000));
  c.micro_batches = pick(1, 2);
  c.steps = steps;
  return c;
}

// MEASURE: the differences docs/TRAINING.md reports (run by hand:
// precision_test --gtest_also_run_disabled_tests --gtest_filter='*Measure*').
TEST(PrecisionTest, DISABLED_Measure) {
  const int cases = std::getenv("MEASURE_CASES") ? std::atoi(std::getenv("MEASURE_CASES")) : 40;
  const int steps = std::getenv("MEASURE_STEPS") ? std::atoi(std::getenv("MEASURE_STEPS")) : 10;
  const double drift = AdamWDriftBound(TrainOptions{}.lr, TrainOptions{}.beta1, TrainOptions{}.beta2, steps);
  for (Precision precision : {Precision::kBf16Mixed, Precision::kFp16Mixed}) {
    const MixedBounds bounds = MixedBoundsFor(precision);
    std::mt19937_64 rng(7);
    Differences worst_dist, worst_64;
    double fp32_units = 0;
    int disagreements = 0;
    for (int i = 0; i < cases; ++i) {
      const Case c = MakeCase(rng, steps);
      const History dist = Train(c, precision), one = Train(c, precision, true);
      const History exact = Train(c, Precision::kFp32, true, true);
      const History fp32 = Train(c, Precision::kFp32);
      bool any_skip = false;
      for (const StepStats& s : one.stats) any_skip = any_skip || s.skipped;
      const Differences a = Compare(dist, one, bounds);
      // A skipped step is a step float64 took: no float64 comparison after one.
      const Differences b = any_skip ? Differences{} : Compare(one, exact, bounds);
      const Differences f = Compare(fp32, exact, {0x1p-24, bounds.growth, 0, 0});
      std::string skips_dist, skips_one;
      for (const StepStats& s : dist.stats) skips_dist += s.skipped ? "x" : ".";
      for (const StepStats& s : one.stats) skips_one += s.skipped ? "x" : ".";
      const bool agree = skips_dist == skips_one;
      std::printf("%s %s: dist-vs-one loss %.3g (c %.3g) params %.3g (%s); one-vs-float64 loss %.3g (c %.3g) "
                  "params %.3g (%s); fp32 dist-vs-float64 c %.3g; skips %s %s%s\n",
                  std::string(ToString(precision)).c_str(), c.Describe().c_str(), a.loss, a.loss_units,
                  a.params_abs, a.worst_param.c_str(), b.loss, b.loss_units, b.params_abs, b.worst_param.c_str(),
                  f.loss_units, skips_dist.c_str(), skips_one.c_str(), agree ? "" : " DISAGREE");
      if (!agree) {
        ++disagreements;
        continue;
      }
      worst_dist = {std::max(worst_dist.loss, a.loss), 0, "", std::max(worst_dist.loss_units, a.loss_units),
                    std::max(worst_dist.params_abs, a.params_abs)};
      worst_64 = {std::max(worst_64.loss, b.loss), 0, "", std::max(worst_64.loss_units, b.loss_units),
                  std::max(worst_64.params_abs, b.params_abs)};
      fp32_units = std::max(fp32_units, f.loss_units);
    }
    std::printf("%s worst over %d cases (%d with skips that disagree left out), %d steps: dist-vs-one loss %.3g "
                "c %.3g, params %.3g; one-vs-float64 loss %.3g c %.3g, params %.3g; AdamW drift bound %.3g; "
                "fp32 dist-vs-float64 c %.3g (u = 2^-24)\n",
                std::string(ToString(precision)).c_str(), cases, disagreements, steps, worst_dist.loss,
                worst_dist.loss_units, worst_dist.params_abs, worst_64.loss, worst_64.loss_units, worst_64.params_abs,
                drift, fp32_units);
  }
}

// The property: over generated models on every layout of kMeshes, the distributed mixed-precision run equals
// one process in the same precision, and one process tracks float64, within MixedBounds and
// the AdamW drift bound. Cases whose fp16 runs skip different steps are counted, not
// compared (a skip is another step taken); they must stay rare.
TEST(PrecisionTest, DistributedRunEqualsOneProcessWithinTheBounds) {
  const int steps = 4;
  const double drift = AdamWDriftBound(TrainOptions{}.lr, TrainOptions{}.beta1, TrainOptions{}.beta2, steps);
  for (Precision precision : {Precision::kBf16Mixed, Precision::kFp16Mixed}) {
    const MixedBounds bounds = MixedBoundsFor(precision);
    std::mt19937_64 rng(precision == Precision::kBf16Mixed ? 11 : 12);
    int compared = 0;
    for (int i = 0; i < static_cast<int>(std::size(kMeshes)); ++i) {  // every layout once
      const Case c = MakeCase(rng, steps, i);
      SCOPED_TRACE(std::string(ToString(precision)) + " " + c.Describe());
      const History dist = Train(c, precision), one = Train(c, precision, true);
      bool skips_agree = true, any_skip = false;
      for (int s = 0; s < steps; ++s) {
        skips_agree = skips_agree && dist.stats[s].skipped == one.stats[s].skipped;
        any_skip = any_skip || one.stats[s].skipped;
      }
      if (!skips_agree) continue;
      ++compared;
      const Differences a = Compare(dist, one, bounds);
      EXPECT_LE(a.loss_units, bounds.same_precision) << "loss " << a.loss;
      EXPECT_LE(a.params_abs, drift) << a.worst_param;
      if (any_skip) continue;
      const History exact = Train(c, Precision::kFp32, true, /*float64=*/true);
      const Differences b = Compare(one, exact, bounds);
      EXPECT_LE(b.loss_units, bounds.float64) << "loss " << b.loss;
      EXPECT_LE(b.params_abs, drift) << b.worst_param;
      // The first step's gradient norm, unscaled and reduced in float32, is float64's up to
      // the compute dtype's rounding (a loose 16 u: it sums every gradient element).
      EXPECT_NEAR(one.stats[0].grad_norm, exact.stats[0].grad_norm,
                  16 * bounds.unit_roundoff * exact.stats[0].grad_norm);
    }
    EXPECT_GE(compared, 8) << "too many runs skipped different steps";
  }
}

// Ulysses and ring attention compute in float32 inside a mixed run (their q, k, v cast up):
// on sp=2 they equal one process within the bounds too.
TEST(PrecisionTest, SequenceAttentionStrategiesWithinTheBounds) {
  std::mt19937_64 rng(5);
  Case c = MakeCase(rng, 3);
  c.mesh = "sp=2";
  c.strategy = Strategy{};
  c.config.heads = 2;
  c.config.width = 8;
  c.batch.sequence = c.config.sequence = 4;
  const MixedBounds bounds = MixedBoundsFor(Precision::kBf16Mixed);
  for (AttentionKind kind : {AttentionKind::kUlysses, AttentionKind::kRing, AttentionKind::kRingZigzag}) {
    c.config.attention = kind;
    const Differences d = Compare(Train(c, Precision::kBf16Mixed), Train(c, Precision::kBf16Mixed, true), bounds);
    EXPECT_LE(d.loss_units, bounds.same_precision) << static_cast<int>(kind);
    EXPECT_LE(d.params_abs, AdamWDriftBound(TrainOptions{}.lr, TrainOptions{}.beta1, TrainOptions{}.beta2, 3));
  }
}

// Masters, AdamW's moments and gradients stay float32 while activations are in the compute
// dtype; the loss is float32.
TEST(PrecisionTest, MastersStayFloat32) {
  for (Precision precision : {Precision::kBf16Mixed, Precision::kFp16Mixed}) {
    const DType compute = precision == Precision::kBf16Mixed ? DType::kBFloat16 : DType::kFloat16;
    const Mesh mesh = ParseNamedMesh("dp=2");
    runtime::RunRanks(2, [&](runtime::Communicator& comm) {
      GptConfig config;
      config.dtype = DType::kFloat32;
      config.vocab = 11;
      config.sequence = 4;
      TrainOptions options;
      options.precision = precision;
      Trainer trainer(config, Layout(mesh, Strategy{1, false}), options, comm);
      EXPECT_EQ(trainer.policy().compute, compute);
      EXPECT_EQ(trainer.policy().param, DType::kFloat32);
      EXPECT_EQ(trainer.policy().reduce, DType::kFloat32);
      const BatchSpec batch{4, 4, 3};
      for (int step = 0; step < 2; ++step) trainer.Step(batch, step, comm);
      int64_t elements = 0;
      for (size_t i = 0; i < trainer.model().params().size(); ++i) {
        const runtime::DistTensor& value = trainer.model().params()[i].value.value();
        EXPECT_EQ(value.dtype(), DType::kFloat32) << trainer.model().params()[i].name;
        EXPECT_EQ(trainer.optimizer().first_moment(i).dtype(), DType::kFloat32);
        EXPECT_EQ(trainer.optimizer().second_moment(i).dtype(), DType::kFloat32);
        elements += value.local().numel();
      }
      EXPECT_EQ(trainer.GradBytes(), 4 * elements);  // float32 gradients, replicated over dp
      // The forward: the residual stream in the compute dtype, the loss in float32.
      kernels::Tensor tokens, labels;
      MakeBatch(batch, config.vocab, 0, &tokens, &labels);
      const Layout& layout = trainer.model().layout();
      auto shard = [&](const kernels::Tensor& t) {
        return runtime::DistTensor::ShardTensor(t, mesh, layout.Tokens(2), comm.rank());
      };
      NoGradGuard no_grad;
      EXPECT_EQ(trainer.model().Embed(shard(tokens), comm).value().dtype(), compute);
      EXPECT_EQ(trainer.model().Loss(shard(tokens), shard(labels), comm).value().dtype(), DType::kFloat32);
    });
  }
}

// Every gradient reduction moves float32: on data-parallel and ZeRO layouts (no activation
// collectives) a mixed-precision step sends exactly the bytes of a float32 step. A reduction
// in the compute dtype would send half.
TEST(PrecisionTest, GradientReductionsMoveFloat32) {
  GptConfig config;
  config.layers = 1;
  config.width = 8;
  config.heads = 2;
  config.vocab = 11;
  config.sequence = 4;
  config.dtype = DType::kFloat32;
  const BatchSpec batch{4, 4, 5};
  for (int zero = 0; zero <= 3; ++zero) {
    auto bytes = [&](Precision precision) {
      const Mesh mesh = ParseNamedMesh("dp=2");
      std::vector<int64_t> sent(2);
      runtime::RunRanks(2, [&](runtime::Communicator& comm) {
        TrainOptions options;
        options.precision = precision;
        Trainer trainer(config, Layout(mesh, Strategy{zero, false}), options, comm);
        sent[comm.rank()] = trainer.Step(batch, 0, comm).bytes_sent;
      });
      return sent;
    };
    const std::vector<int64_t> fp32 = bytes(Precision::kFp32);
    EXPECT_GT(fp32[0], 0);
    EXPECT_EQ(bytes(Precision::kBf16Mixed), fp32) << "zero " << zero;
    EXPECT_EQ(bytes(Precision::kFp16Mixed), fp32) << "zero " << zero;
  }
}

// fp16 loss scaling on dp=2 with ZeRO-2: an initial scale of 2^40 overflows float16 in the
// backward (an injected infinity). The step is skipped on every rank (no parameter or AdamW
// state changes), the scale halves and the skip is counted; once the scale is small enough a
// step applies, and then the parameters move.
TEST(PrecisionTest, Fp16SkipsAnOverflowingStepWithoutAnyUpdate) {
  const Mesh mesh = ParseNamedMesh("dp=2");
  runtime::RunRanks(2, [&](runtime::Communicator& comm) {
    GptConfig config;
    config.layers = 1;
    config.width = 8;
    config.heads = 2;
    config.vocab = 11;
    config.sequence = 4;
    config.dtype = DType::kFloat32;
    TrainOptions options;
    options.precision = Precision::kFp16Mixed;
    options.loss_scale.initial = 0x1p40;
    Trainer trainer(config, Layout(mesh, Strategy{2, false}), options, comm);
    const BatchSpec batch{4, 4, 9};
    const std::vector<std::vector<double>> initial = trainer.GatherParams(comm);
    const StepStats first = trainer.Step(batch, 0, comm);
    EXPECT_TRUE(first.skipped);
    EXPECT_FALSE(std::isfinite(first.grad_norm));
    EXPECT_TRUE(std::isfinite(first.loss));
    EXPECT_EQ(first.loss_scale, 0x1p40);
    EXPECT_EQ(trainer.loss_scale(), 0x1p39);
    EXPECT_EQ(trainer.skipped_steps(), 1);
    EXPECT_EQ(trainer.GatherParams(comm), initial) << "a skipped step changed a parameter";
    for (size_t i = 0; i < trainer.model().params().size(); ++i) {
      EXPECT_EQ(trainer.optimizer().step(i), 0);
      for (const runtime::DistTensor* state : {&trainer.optimizer().first_moment(i), &trainer.optimizer().second_moment(i)}) {
        const kernels::Tensor global = *state->ToGlobal(comm);
        for (int64_t k = 0; k < global.numel(); ++k) ASSERT_EQ(global.data<float>()[k], 0.0f);
      }
    }
    // Skips go on, each halving the scale, until the gradients fit float16.
    int64_t step = 1, skipped = 1;
    while (trainer.Step(batch, step, comm).skipped) {
      ++step;
      ++skipped;
      ASSERT_LT(step, 40) << "the scale never came down far enough";
    }
    EXPECT_EQ(trainer.skipped_steps(), skipped);
    EXPECT_EQ(trainer.loss_scale(), std::ldexp(1.0, 40 - static_cast<int>(skipped)));
    EXPECT_NE(trainer.GatherParams(comm), initial) << "the step after the skips applied nothing";
    EXPECT_EQ(trainer.optimizer().step(0), 1);
  });
}

// A scale that would fall below its floor is a NonFiniteError naming the step, on every rank;
// a non-finite loss in the forward is one too, loss scaling or not.
TEST(PrecisionTest, Fp16ScaleBelowTheFloorAndNonFiniteLossAreErrors) {
  const Mesh mesh = ParseNamedMesh("dp=2");
  GptConfig config;
  config.layers = 1;
  config.width = 8;
  config.heads = 2;
  config.vocab = 11;
  config.sequence = 4;
  config.dtype = DType::kFloat32;
  TrainOptions options;
  options.precision = Precision::kFp16Mixed;
  options.loss_scale.initial = 0x1p40;
  options.loss_scale.min_scale = 0x1p39;
  std::vector<std::string> errors(2);
  runtime::RunRanks(2, [&](runtime::Communicator& comm) {
    Trainer trainer(config, Layout(mesh, Strategy{}), options, comm);
    const BatchSpec batch{4, 4, 9};
    EXPECT_TRUE(trainer.Step(batch, 0, comm).skipped);  // 2^39: still at the floor
    try {
      trainer.Step(batch, 1, comm);
    } catch (const NonFiniteError& e) {
      EXPECT_EQ(e.step(), 1);
      errors[comm.rank()] = e.what();
    }
  });
  for (const std::string& e : errors) {
    EXPECT_NE(e.find("step 1"), std::string::npos) << e;
    EXPECT_NE(e.find("loss scale below"), std::string::npos) << e;
  }
  // A master weight float16 cannot hold: the forward's loss is not finite.
  options.loss_scale = LossScaleOptions{};
  runtime::RunRanks(2, [&](runtime::Communicator& comm) {
    Trainer trainer(config, Layout(mesh, Strategy{}), options, comm);
    const runtime::DistTensor& w = trainer.model().params()[0].value.value();
    trainer.model().params()[0].value.SetValue(ConstantLike(w, w.dist_attr(), 1e6));
    try {
      trainer.Step(BatchSpec{4, 4, 9}, 0, comm);
      ADD_FAILURE() << "a non-finite loss trained";
    } catch (const NonFiniteError& e) {
      EXPECT_EQ(e.step(), 0);
      EXPECT_NE(std::string(e.what()).find("loss is"), std::string::npos) << e.what();
    }
  });
}

TEST(PrecisionTest, LossScalerGrowsBacksOffAndRefusesBadOptions) {
  LossScaleOptions options;
  options.initial = 8;
  options.growth_interval = 3;
  LossScaler scaler(options);
  EXPECT_TRUE(scaler.Update(true));
  EXPECT_TRUE(scaler.Update(true));
  EXPECT_EQ(scaler.scale(), 8);
  EXPECT_TRUE(scaler.Update(true));
  EXPECT_EQ(scaler.scale(), 16);  // 3 good steps in a row
  EXPECT_TRUE(scaler.Update(true));
  EXPECT_TRUE(scaler.Update(false));  // a skip: halved, and the run of good steps restarts
  EXPECT_EQ(scaler.scale(), 8);
  EXPECT_EQ(scaler.skipped(), 1);
  EXPECT_TRUE(scaler.Update(true));
  EXPECT_TRUE(scaler.Update(true));
  EXPECT_EQ(scaler.scale(), 8);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(scaler.Update(false));  // 4, 2, 1
  EXPECT_FALSE(scaler.Update(false));                               // 0.5: below the floor
  EXPECT_EQ(scaler.skipped(), 5);

  auto refused = [](LossScaleOptions o, const std::string& field) {
    try {
      LossScaler bad(o);
      ADD_FAILURE() << field << " accepted";
    } catch (const SpmdError& e) {
      EXPECT_EQ(e.type(), ErrorType::kInvalidArgument);
      EXPECT_EQ(e.field(), field);
    }
  };
  LossScaleOptions o;
  o.initial = 3;
  refused(o, "loss_scale.initial");
  o = {};
  o.initial = 0.5;
  refused(o, "loss_scale.initial");  // below the floor
  o = {};
  o.initial = 0x1p65;
  refused(o, "loss_scale.initial");  // above 2^64
  o = {};
  o.backoff = 2;
  refused(o, "loss_scale.backoff");
  o = {};
  o.growth = 0.5;
  refused(o, "loss_scale.growth");
  o = {};
  o.growth_interval = 0;
  refused(o, "loss_scale.growth_interval");
}

TEST(PrecisionTest, PoliciesAndRefusals) {
  EXPECT_EQ(ParsePrecision("bf16-mixed", "--precision"), Precision::kBf16Mixed);
  EXPECT_EQ(ToString(Precision::kFp16Mixed), "fp16-mixed");
  try {
    ParsePrecision("fp8", "--precision");
    ADD_FAILURE();
  } catch (const SpmdError& e) {
    EXPECT_EQ(e.field(), "--precision");
  }
  const PrecisionPolicy fp32 = PolicyFor(Precision::kFp32, DType::kFloat64);
  EXPECT_EQ(fp32.compute, DType::kFloat64);
  EXPECT_FALSE(fp32.loss_scaling);
  EXPECT_TRUE(PolicyFor(Precision::kFp16Mixed, DType::kFloat32).loss_scaling);
  EXPECT_FALSE(PolicyFor(Precision::kBf16Mixed, DType::kFloat32).loss_scaling);
  // Mixed precision keeps float32 masters: a float64 model is refused, by the Trainer too.
  try {
    PolicyFor(Precision::kBf16Mixed, DType::kFloat64);
    ADD_FAILURE();
  } catch (const SpmdError& e) {
    EXPECT_EQ(e.field(), "options.precision");
  }
  // The AdamW drift bound: one step moves an element by at most lr, so two runs by 2 lr.
  EXPECT_DOUBLE_EQ(AdamWDriftBound(0.01, 0.9, 0.95, 1), 0.02);
  EXPECT_GT(AdamWDriftBound(0.01, 0.9, 0.95, 10), AdamWDriftBound(0.01, 0.9, 0.95, 9));
}

}  // namespace
}  // namespace spmd::train
