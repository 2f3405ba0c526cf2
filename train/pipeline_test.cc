// Pipeline schedules: every generated schedule passes the checker under both send
// semantics, each broken schedule is refused with its typed violation, and the simulated
// timeline meets the textbook bubble and activation counts. Pipeline training on thread
// ranks equals one device (the same under mpirun in property_tests/pipeline_mpi_test.cc).
#include "train/pipeline.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "rules/model/dist_attr.h"
#include "runtime/comm/thread_communicator.h"
#include "train/trainer.h"

namespace spmd::train {
namespace {

ScheduleKind AnyKind(int k) { return static_cast<ScheduleKind>(k); }

// The schedule kinds and chunk counts MakeSchedule takes for (p, m).
bool Generates(ScheduleKind kind, int64_t p, int64_t m, int64_t v) {
  if (kind != ScheduleKind::kInterleaved) return v == 1;
  return m <= p || m % p == 0;
}

Violation ViolationOf(const Schedule& s, SendSemantics semantics = SendSemantics::kBuffered) {
  try {
    CheckSchedule(s, semantics);
  } catch (const ScheduleError& e) {
    EXPECT_EQ(e.type(), ErrorType::kInvalidArgument);
    EXPECT_FALSE(e.field().empty());
    return e.violation();
  }
  ADD_FAILURE() << "the checker accepted a broken schedule";
  return Violation::kShape;
}

size_t Find(const std::vector<Action>& list, ActionKind kind, int64_t mb, int64_t chunk = 0) {
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i].kind == kind && list[i].micro_batch == mb && list[i].chunk == chunk) return i;
  }
  ADD_FAILURE() << "no " << ToString(kind) << " of micro-batch " << mb;
  return 0;
}

RC_GTEST_PROP(PipelineScheduleTest, EveryGeneratedSchedulePassesTheChecker, ()) {
  const int64_t p = *rc::gen::inRange<int64_t>(1, 7);
  const int64_t m = *rc::gen::inRange<int64_t>(1, 13);
  const ScheduleKind kind = AnyKind(*rc::gen::inRange(0, 3));
  const int64_t v = kind == ScheduleKind::kInterleaved ? *rc::gen::inRange<int64_t>(1, 5) : 1;
  RC_PRE(Generates(kind, p, m, v));
  const std::vector<int64_t> sizes = *rc::gen::container<std::vector<int64_t>>(
      static_cast<size_t>(m), rc::gen::inRange<int64_t>(0, 100));
  const Schedule s = MakeSchedule(kind, p, m, v, sizes);
  CheckSchedule(s, SendSemantics::kBuffered);
  CheckSchedule(s, SendSemantics::kRendezvous);
  // The timeline: virtual stage k's forward of a micro-batch ends before k + 1's starts,
  // and k + 1's backward ends before k's starts.
  const ScheduleStats stats = SimulateSchedule(s, 1, 2);
  std::vector<std::vector<double>> f_start(m, std::vector<double>(p * v)),
      f_end = f_start, b_start = f_start, b_end = f_start;
  for (int64_t st = 0; st < p; ++st) {
    for (size_t i = 0; i < s.ranks[st].size(); ++i) {
      const Action& a = s.ranks[st][i];
      const int64_t k = a.chunk * p + st;
      const auto [start, end] = stats.times[st][i];
      if (a.kind == ActionKind::kForward) {
        f_start[a.micro_batch][k] = start;
        f_end[a.micro_batch][k] = end;
      } else if (a.kind == ActionKind::kBackward) {
        b_start[a.micro_batch][k] = start;
        b_end[a.micro_batch][k] = end;
      }
    }
  }
  for (int64_t mb = 0; mb < m; ++mb) {
    for (int64_t k = 0; k + 1 < p * v; ++k) {
      RC_ASSERT(f_end[mb][k] <= f_start[mb][k + 1]);
      RC_ASSERT(b_end[mb][k + 1] <= b_start[mb][k]);
    }
    RC_ASSERT(f_end[mb][p * v - 1] <= b_start[mb][p * v - 1]);
  }
}

// The broken schedules, one per rule, each from a generated one.
TEST(PipelineScheduleTest, BrokenSchedulesAreRefusedWithTheirViolation) {
  const Schedule good = MakeSchedule(ScheduleKind::kOneFOneB, 3, 4);
  CheckSchedule(good);
  {
    Schedule s = good;
    s.ranks[1][0].micro_batch = 4;
    EXPECT_EQ(ViolationOf(s), Violation::kShape);
    s = good;
    s.ranks.pop_back();
    EXPECT_EQ(ViolationOf(s), Violation::kShape);
  }
  {  // a backward dropped
    Schedule s = good;
    s.ranks[2].erase(s.ranks[2].begin() + Find(s.ranks[2], ActionKind::kBackward, 3));
    EXPECT_EQ(ViolationOf(s), Violation::kComputeCount);
  }
  {  // on one stage alone, the backward first
    Schedule s = MakeSchedule(ScheduleKind::kFillDrain, 1, 2);
    std::swap(s.ranks[0][0], s.ranks[0][2]);  // B(0) F(1) F(0) B(1)
    EXPECT_EQ(ViolationOf(s), Violation::kBackwardBeforeForward);
  }
  {  // a forward before its input arrives
    Schedule s = good;
    std::vector<Action>& r = s.ranks[1];
    std::swap(r[Find(r, ActionKind::kRecvActivation, 0)], r[Find(r, ActionKind::kForward, 0)]);
    EXPECT_EQ(ViolationOf(s), Violation::kForwardOrder);
  }
  {  // an activation sent before it is computed
    Schedule s = good;
    std::vector<Action>& r = s.ranks[0];
    std::swap(r[Find(r, ActionKind::kSendActivation, 0)], r[Find(r, ActionKind::kForward, 0)]);
    EXPECT_EQ(ViolationOf(s), Violation::kForwardOrder);
  }
  {  // a backward before its output gradient arrives
    Schedule s = good;
    std::vector<Action>& r = s.ranks[0];
    std::swap(r[Find(r, ActionKind::kRecvGrad, 2)], r[Find(r, ActionKind::kBackward, 2)]);
    EXPECT_EQ(ViolationOf(s), Violation::kBackwardOrder);
  }
  {  // one gradient send dropped: its receive meets nothing
    Schedule s = good;
    std::vector<Action>& r = s.ranks[2];
    r.erase(r.begin() + Find(r, ActionKind::kSendGrad, 3));
    EXPECT_EQ(ViolationOf(s), Violation::kUnmatched);
  }
  {  // a message of the wrong size, of the wrong micro-batch, to the wrong stage
    Schedule s = good;
    s.ranks[1][Find(s.ranks[1], ActionKind::kRecvActivation, 2)].size = 7;
    EXPECT_EQ(ViolationOf(s), Violation::kMismatched);
    s = good;
    std::vector<Action>& r = s.ranks[1];  // micro-batch 2 received before 1, both early
    const Action a2 = r[Find(r, ActionKind::kRecvActivation, 2)];
    r.erase(r.begin() + Find(r, ActionKind::kRecvActivation, 2));
    r.insert(r.begin() + Find(r, ActionKind::kRecvActivation, 1), a2);
    EXPECT_EQ(ViolationOf(s), Violation::kMismatched);
    s = good;
    s.ranks[0][Find(s.ranks[0], ActionKind::kSendActivation, 0)].peer = 2;
    EXPECT_EQ(ViolationOf(s), Violation::kMismatched);
  }
  {  // every rule of the list holds, and two stages wait for each other
    // stage 0: F0 sendA0 F1 recvG0 B0 sendA1 recvG1 B1
    // stage 1: recvA0 F0 recvA1 F1 B0 sendG0 B1 sendG1
    Schedule s{"crossed", 2, 2, 1, {}};
    using K = ActionKind;
    s.ranks = {{{K::kForward, 0, 0, -1, 0},
                {K::kSendActivation, 0, 0, 1, 5},
                {K::kForward, 1, 0, -1, 0},
                {K::kRecvGrad, 0, 0, 1, 5},
                {K::kBackward, 0, 0, -1, 0},
                {K::kSendActivation, 1, 0, 1, 5},
                {K::kRecvGrad, 1, 0, 1, 5},
                {K::kBackward, 1, 0, -1, 0}},
               {{K::kRecvActivation, 0, 0, 0, 5},
                {K::kForward, 0, 0, -1, 0},
                {K::kRecvActivation, 1, 0, 0, 5},
                {K::kForward, 1, 0, -1, 0},
                {K::kBackward, 0, 0, -1, 0},
                {K::kSendGrad, 0, 0, 0, 5},
                {K::kBackward, 1, 0, -1, 0},
                {K::kSendGrad, 1, 0, 0, 5}}};
    EXPECT_EQ(ViolationOf(s), Violation::kDeadlock);
    try {
      CheckSchedule(s);
    } catch (const ScheduleError& e) {  // names both stages and where they wait
      const std::string what = e.what();
      EXPECT_NE(what.find("stage 0 at [3] recvG(mb 0, chunk 0)"), std::string::npos) << what;
      EXPECT_NE(what.find("stage 1 at [2] recvA(mb 1, chunk 0)"), std::string::npos) << what;
    }
  }
}

// Under MPI a send completes only once its receive is posted: the interleaved schedule with
// every receive as late as its consumer allows runs with buffered sends and deadlocks with
// rendezvous ones; the generated one (receives posted early, with the sends) runs under both.
TEST(PipelineScheduleTest, RendezvousNeedsReceivesPostedEarly) {
  const Schedule generated = MakeSchedule(ScheduleKind::kInterleaved, 2, 4, 2);
  CheckSchedule(generated, SendSemantics::kRendezvous);
  Schedule late = generated;
  for (std::vector<Action>& r : late.ranks) {
    // Move each receive past every action that is neither its consumer nor a receive.
    for (size_t i = r.size(); i-- > 0;) {
      const Action a = r[i];
      if (a.kind != ActionKind::kRecvActivation && a.kind != ActionKind::kRecvGrad) continue;
      const ActionKind consumer =
          a.kind == ActionKind::kRecvActivation ? ActionKind::kForward : ActionKind::kBackward;
      size_t j = i;
      while (j + 1 < r.size() && r[j + 1].kind != ActionKind::kRecvActivation &&
             r[j + 1].kind != ActionKind::kRecvGrad &&
             !(r[j + 1].kind == consumer && r[j + 1].micro_batch == a.micro_batch &&
               r[j + 1].chunk == a.chunk)) {
        r[j] = r[j + 1];
        ++j;
      }
      r[j] = a;
    }
  }
  ASSERT_NE(late.ranks, generated.ranks);
  CheckSchedule(late, SendSemantics::kBuffered);
  EXPECT_EQ(ViolationOf(late, SendSemantics::kRendezvous), Violation::kDeadlock);
}

TEST(PipelineScheduleTest, BadArgumentsAreTyped) {
  auto field_of = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const SpmdError& e) {
      return e.field();
    }
    return "";
  };
  EXPECT_EQ(field_of([] { MakeSchedule(ScheduleKind::kOneFOneB, 0, 4); }), "stages");
  EXPECT_EQ(field_of([] { MakeSchedule(ScheduleKind::kOneFOneB, 2, 0); }), "micro_batches");
  EXPECT_EQ(field_of([] { MakeSchedule(ScheduleKind::kOneFOneB, 2, 4, 2); }), "chunks");
  EXPECT_EQ(field_of([] { MakeSchedule(ScheduleKind::kInterleaved, 2, 5, 2); }), "micro_batches");
  EXPECT_EQ(field_of([] { MakeSchedule(ScheduleKind::kOneFOneB, 2, 4, 1, {1, 2}); }), "sizes");
  EXPECT_EQ(field_of([] { ParseScheduleKind("zb"); }), "schedule");
}

// Bubble (forward and backward one unit each; also backward two units) and peak live
// activations of the generated schedules against the closed forms:
//   fill-drain and 1F1B: bubble (p - 1) / (m + p - 1); interleaved with v chunks (each
//   chunk's forward one unit: v m units of work per stage): (p - 1) / (v m + p - 1), for m a
//   multiple of p (Megatron's (p - 1) / v stage-times of bubble against m of work).
//   Peak live activations: fill-drain m on every stage; 1F1B min(p - s, m) on stage s.
RC_GTEST_PROP(PipelineScheduleTest, BubbleAndLiveActivationsMeetTheClosedForms, ()) {
  const int64_t p = *rc::gen::inRange<int64_t>(1, 9);
  const int64_t m = *rc::gen::inRange<int64_t>(1, 17);
  for (const double tb : {1.0, 2.0}) {
    const double classic = static_cast<double>(p - 1) / static_cast<double>(m + p - 1);
    const ScheduleStats gpipe =
        SimulateSchedule(MakeSchedule(ScheduleKind::kFillDrain, p, m), 1, tb);
    const ScheduleStats one = SimulateSchedule(MakeSchedule(ScheduleKind::kOneFOneB, p, m), 1, tb);
    RC_ASSERT(std::abs(gpipe.bubble - classic) < 1e-12);
    RC_ASSERT(std::abs(one.bubble - classic) < 1e-12);
    RC_ASSERT(std::abs(gpipe.makespan - static_cast<double>(m + p - 1) * (1 + tb)) < 1e-12);
    for (int64_t s = 0; s < p; ++s) {
      RC_ASSERT(gpipe.peak_live[s] == m);
      RC_ASSERT(one.peak_live[s] == std::min(p - s, m));
    }
    const int64_t v = *rc::gen::inRange<int64_t>(2, 5);
    const int64_t mi = p * *rc::gen::inRange<int64_t>(1, 4);
    const ScheduleStats inter =
        SimulateSchedule(MakeSchedule(ScheduleKind::kInterleaved, p, mi, v), 1, tb);
    const double ideal = static_cast<double>(p - 1) / static_cast<double>(v * mi + p - 1);
    RC_ASSERT(std::abs(inter.bubble - ideal) < 1e-12);
    const double one_bubble = static_cast<double>(p - 1) / static_cast<double>(mi + p - 1);
    RC_ASSERT(p == 1 || inter.bubble < one_bubble);
  }
}

// ---- Training over stages (thread ranks) ---------------------------------------------------

struct History {
  std::vector<double> losses;
  std::map<std::string, std::vector<double>> params;  // every rank's, by name
  std::vector<int64_t> peak_live;                     // per stage (position 0's rank)
};

GptConfig SmallGpt(int64_t layers) {
  GptConfig config;
  config.layers = layers;
  config.width = 12;
  config.heads = 3;
  config.vocab = 13;
  config.sequence = 6;
  config.mlp_ratio = 2;
  config.dropout = 0.1;
  return config;
}

History TrainOneDevice(const GptConfig& config, const BatchSpec& batch, int64_t m, int steps) {
  History run;
  runtime::RunRanks(1, [&](runtime::Communicator& comm) {
    TrainOptions options;
    options.micro_batches = static_cast<int>(m);
    Trainer trainer(config, Layout(Mesh({1}, {0}, {"dp"}), Strategy{}), options, comm);
    for (int s = 0; s < steps; ++s) run.losses.push_back(trainer.Step(batch, s, comm).loss);
    const auto values = trainer.GatherParams(comm);
    for (size_t i = 0; i < values.size(); ++i)
      run.params[trainer.model().params()[i].name] = values[i];
  });
  return run;
}

History TrainPipeline(const GptConfig& config, const std::string& mesh_text, Strategy strategy,
                      PipelineOptions pipeline, const BatchSpec& batch, int64_t m, int steps) {
  const Mesh mesh = ParseNamedMesh(mesh_text);
  History run;
  std::mutex mutex;
  runtime::RunRanks(mesh.size(), [&](runtime::Communicator& comm) {
    TrainOptions options;
    options.micro_batches = static_cast<int>(m);
    PipelineTrainer trainer(config, mesh, strategy, options, pipeline, comm);
    std::vector<double> losses;
    for (int s = 0; s < steps; ++s) losses.push_back(trainer.Step(batch, s, comm).loss);
    const auto params = trainer.GatherParams(comm);
    const ScheduleStats simulated = SimulateSchedule(trainer.schedule());
    std::lock_guard<std::mutex> lock(mutex);
    // The live activations counted at run time equal the schedule's, on every rank.
    EXPECT_EQ(trainer.last_peak_live(), simulated.peak_live[trainer.stage()])
        << "rank " << comm.rank();
    if (comm.rank() == 0) run.losses = losses;
    if (run.peak_live.size() < static_cast<size_t>(trainer.stages()))
      run.peak_live.resize(trainer.stages());
    run.peak_live[trainer.stage()] = trainer.last_peak_live();
    for (const auto& [name, values] : params) run.params[name] = values;
  });
  return run;
}

void ExpectSameRun(const History& got, const History& want, double tolerance) {
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t s = 0; s < want.losses.size(); ++s) {
    EXPECT_NEAR(got.losses[s], want.losses[s], tolerance * std::abs(want.losses[s]))
        << "step " << s;
  }
  ASSERT_EQ(got.params.size(), want.params.size());
  for (const auto& [name, values] : want.params) {
    const auto it = got.params.find(name);
    ASSERT_NE(it, got.params.end()) << name;
    ASSERT_EQ(it->second.size(), values.size()) << name;
    double scale = 1e-3;
    for (double x : values) scale = std::max(scale, std::abs(x));
    for (size_t k = 0; k < values.size(); ++k) {
      ASSERT_NEAR(it->second[k], values[k], tolerance * scale) << name << " element " << k;
    }
  }
}

// Every schedule, on pp alone and on pp with dp, tp (SP) and ZeRO stages, with an uneven
// batch (5 rows in 3 micro-batches; 2 in the interleaved case), dropout and clipping on,
// equals one device to 1e-9 relative, float64.
TEST(PipelineTrainTest, EveryScheduleTrainsLikeOneDevice) {
  const BatchSpec batch{5, 6, 3};
  const int steps = 2;
  struct Case {
    const char* mesh;
    Strategy strategy;
    ScheduleKind kind;
    int64_t chunks, m, layers;
  };
  const Case cases[] = {
      {"pp=2", {}, ScheduleKind::kFillDrain, 1, 3, 2},
      {"pp=2", {}, ScheduleKind::kOneFOneB, 1, 3, 3},
      {"pp=2", {}, ScheduleKind::kInterleaved, 2, 2, 4},
      {"pp=1", {}, ScheduleKind::kInterleaved, 2, 3, 2},
      {"pp=3", {}, ScheduleKind::kOneFOneB, 1, 5, 3},
      {"pp=2,dp=2", {1, false}, ScheduleKind::kOneFOneB, 1, 3, 2},
      {"tp=2,pp=2", {0, true}, ScheduleKind::kInterleaved, 2, 2, 4},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.mesh) + " " + std::string(ToString(c.kind)) +
                 " m=" + std::to_string(c.m));
    const GptConfig config = SmallGpt(c.layers);
    const History want = TrainOneDevice(config, batch, c.m, steps);
    const History got =
        TrainPipeline(config, c.mesh, c.strategy, {c.kind, c.chunks}, batch, c.m, steps);
    ExpectSameRun(got, want, 1e-9);
  }
}

// Backward(y, c) (a stage's backward from the gradient the next stage sent) equals
// Backward of the surrogate sum(y * c), on 2 ranks with the batch sharded.
TEST(PipelineTrainTest, SeededBackwardIsTheVectorJacobianProduct) {
  std::vector<double> xs(4 * 3), ws(3 * 5), cs(4 * 5);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(1.0 + static_cast<double>(i));
  for (size_t i = 0; i < ws.size(); ++i) ws[i] = std::cos(2.0 + static_cast<double>(i));
  for (size_t i = 0; i < cs.size(); ++i) cs[i] = std::sin(3.0 * static_cast<double>(i));
  runtime::RunRanks(2, [&](runtime::Communicator& comm) {
    const Mesh mesh({2});
    const DistAttr rows = ParsePlacementString("[S(0)]", 2, "x");
    auto grads = [&](bool seeded) {
      const Variable x(runtime::DistTensor::ShardTensor(kernels::Tensor::FromVector({4, 3}, xs),
                                                        mesh, rows, comm.rank()),
                       true);
      const Variable w(runtime::DistTensor::ShardTensor(kernels::Tensor::FromVector({3, 5}, ws),
                                                        mesh, DistAttr::Replicated(2), comm.rank()),
                       true);
      const runtime::DistTensor c = runtime::DistTensor::ShardTensor(
          kernels::Tensor::FromVector({4, 5}, cs), mesh, rows, comm.rank());
      const Variable y = Apply1("tanh", {Apply1("matmul", {x, w}, {}, comm)}, {}, comm);
      if (seeded) {
        Backward(y, c, comm);
      } else {
        Backward(Apply1("sum", {Apply1("multiply", {y, Variable(c)}, {}, comm)}, {}, comm), comm);
      }
      return std::vector<kernels::Tensor>{
          *Gradient(x, DistAttr::Replicated(2), comm).ToGlobal(comm),
          *Gradient(w, DistAttr::Replicated(2), comm).ToGlobal(comm)};
    };
    const auto seeded = grads(true), surrogate = grads(false);
    for (size_t t = 0; t < 2; ++t) {
      for (int64_t i = 0; i < seeded[t].numel(); ++i) {
        EXPECT_NEAR(seeded[t].data<double>()[i], surrogate[t].data<double>()[i], 1e-14);
      }
    }
    const Variable y =
        Apply1("tanh",
               {Variable(runtime::DistTensor::ShardTensor(kernels::Tensor::FromVector({4, 3}, xs),
                                                          mesh, rows, comm.rank()),
                         true)},
               {}, comm);
    try {
      Backward(y,
               runtime::DistTensor::ShardTensor(kernels::Tensor::FromVector({4, 5}, cs), mesh, rows,
                                                comm.rank()),
               comm);
      ADD_FAILURE() << "accepted a cotangent of another shape";
    } catch (const SpmdError& e) {
      EXPECT_EQ(e.field(), "cotangent");
    }
  });
}

TEST(PipelineTrainTest, BadConfigurationsAreTyped) {
  runtime::RunRanks(2, [&](runtime::Communicator& comm) {
    const Mesh mesh = ParseNamedMesh("pp=2");
    TrainOptions options;
    options.micro_batches = 0;
    try {
      PipelineTrainer(SmallGpt(2), mesh, {}, options, {}, comm);
      ADD_FAILURE() << "accepted 0 micro-batches";
    } catch (const SpmdError& e) {
      EXPECT_EQ(e.field(), "options.micro_batches");
    }
    options.micro_batches = 2;
    try {
      PipelineTrainer(SmallGpt(2), mesh, {}, options, {ScheduleKind::kOneFOneB, 2}, comm);
      ADD_FAILURE() << "accepted 2 chunks for 1f1b";
    } catch (const SpmdError& e) {
      EXPECT_EQ(e.field(), "pipeline.chunks");
    }
    try {
      PipelineTrainer(SmallGpt(2), ParseNamedMesh("pp=2,xp=1"), {}, options, {}, comm);
      ADD_FAILURE() << "accepted an axis xp";
    } catch (const SpmdError& e) {
      EXPECT_EQ(e.field(), "mesh.axis_names");
    }
  });
}

}  // namespace
}  // namespace spmd::train
