// The Communicator properties on the thread backend (no mpirun), plus its failure
// behaviour: a rank that throws, returns early, waits too long or calls a mismatching
// collective ends every rank in bounded time with a message naming the rank and step.
#include "runtime/comm/thread_communicator.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "rules/model/error.h"
#include "runtime/testing/communicator_cases.h"

namespace spmd::runtime {
namespace {

using Clock = std::chrono::steady_clock;

CommOptions Options(double timeout_s) {
  CommOptions options;
  options.timeout_s = timeout_s;
  return options;
}

void CheckKind(Collective kind) {
  const int64_t world = *rc::gen::inRange<int64_t>(1, 9);
  const testing::CollectiveCase c = *testing::GenCase(world, kind);
  std::vector<std::string> errors(world);
  RunRanks(world, [&](Communicator& comm) { errors[comm.rank()] = testing::RunCase(comm, c); },
           Options(20));
  for (const std::string& error : errors) {
    if (!error.empty()) RC_LOG() << error << "\n";
    RC_ASSERT(error.empty());
  }
}

RC_GTEST_PROP(ThreadCommunicator, AllGather, ()) { CheckKind(Collective::kAllGather); }
RC_GTEST_PROP(ThreadCommunicator, ReduceScatter, ()) { CheckKind(Collective::kReduceScatter); }
RC_GTEST_PROP(ThreadCommunicator, AllReduce, ()) { CheckKind(Collective::kAllReduce); }
RC_GTEST_PROP(ThreadCommunicator, AllToAll, ()) { CheckKind(Collective::kAllToAll); }
RC_GTEST_PROP(ThreadCommunicator, Broadcast, ()) { CheckKind(Collective::kBroadcast); }
RC_GTEST_PROP(ThreadCommunicator, SendRecv, ()) { CheckKind(Collective::kSend); }
RC_GTEST_PROP(ThreadCommunicator, Barrier, ()) { CheckKind(Collective::kBarrier); }

TEST(ThreadCommunicator, MeshAxisGroups) {
  for (int64_t world : {1, 2, 3, 4, 8}) {
    std::vector<std::string> errors(world);
    RunRanks(world, [&](Communicator& comm) { errors[comm.rank()] = testing::RunMeshAxes(comm); },
             Options(20));
    for (const std::string& error : errors) EXPECT_EQ(error, "") << "world " << world;
  }
}

TEST(ThreadCommunicator, BoxSendRecv) {
  for (int64_t world : {2, 3, 4}) {
    std::vector<std::string> errors(world);
    RunRanks(world, [&](Communicator& comm) { errors[comm.rank()] = testing::RunBoxSendRecv(comm); },
             Options(20));
    for (const std::string& error : errors) EXPECT_EQ(error, "") << "world " << world;
  }
}

// Runs fn on `world` ranks and returns RunRanks' failure message ("" if none). Bounded
// time without a clock: the failure must reach every rank through the world's abort, so
// no rank's wait may end by its own timeout (a rank that missed the abort would wait the
// whole `timeout_s` and end "timed out"); only `timeout_expected` allows that ending.
std::string FailureOf(int64_t world, const std::function<void(Communicator&)>& fn,
                      double timeout_s = 30, bool timeout_expected = false) {
  std::vector<std::string> endings(world);
  std::string message;
  try {
    RunRanks(world, [&](Communicator& comm) {
      try {
        fn(comm);
      } catch (const CommError& e) {
        endings[comm.rank()] = e.what();
        throw;
      }
    }, Options(timeout_s));
  } catch (const CommError& e) {
    message = e.what();
  }
  if (!timeout_expected) {
    for (int64_t r = 0; r < world; ++r) {
      EXPECT_EQ(endings[r].find("timed out"), std::string::npos)
          << "rank " << r << " waited for its own timeout: " << endings[r];
    }
  }
  return message;
}

// Four all-reduces over the world; `at_step_3` replaces rank 1's third one.
std::function<void(Communicator&)> Steps(const std::function<void(Communicator&)>& at_step_3) {
  return [at_step_3](Communicator& comm) {
    Group world(comm.world_size());
    for (int64_t r = 0; r < comm.world_size(); ++r) world[r] = r;
    std::vector<double> x(4, 1.0);
    for (int step = 1; step <= 4; ++step) {
      if (step == 3 && comm.rank() == 1) {
        at_step_3(comm);
        continue;
      }
      comm.AllReduce(x.data(), x.data(), 4, DType::kFloat64, ReduceOp::kSum, world);
    }
  };
}

TEST(ThreadCommunicatorFailure, RankThrows) {
  const std::string message = FailureOf(3, Steps([](Communicator&) {
    throw std::runtime_error("injected failure");
  }));
  EXPECT_EQ(message,
            "rank 1 failed at step 2 (all_reduce(float64, count=4, op=sum) on group [0,1,2]): "
            "injected failure");
}

TEST(ThreadCommunicatorFailure, RankReturnsEarly) {
  const std::string message = FailureOf(3, [](Communicator& comm) {
    if (comm.rank() == 1) return;
    Steps([](Communicator&) {})(comm);
  });
  EXPECT_NE(message.find("at step 1: rank 1 has exited without calling it"), std::string::npos)
      << message;
}

TEST(ThreadCommunicatorFailure, Timeout) {
  const std::string message = FailureOf(
      2, Steps([](Communicator&) { std::this_thread::sleep_for(std::chrono::milliseconds(700)); }),
      /*timeout_s=*/0.2, /*timeout_expected=*/true);
  EXPECT_NE(message.find("rank 0: all_reduce(float64, count=4, op=sum) on group [0,1] at step 3: "
                         "timed out after 0.2 s waiting for ranks [1]"),
            std::string::npos)
      << message;
}

TEST(ThreadCommunicatorFailure, DifferentCollective) {
  const std::string message = FailureOf(2, Steps([](Communicator& comm) {
    std::vector<double> x(4, 1.0);
    std::vector<double> y(8);
    const std::vector<int64_t> counts = {4, 4};
    comm.AllGather(x.data(), y.data(), counts, DType::kFloat64, {0, 1});
  }));
  EXPECT_NE(message.find("collective mismatch: rank 0 calls all_reduce(float64, count=4, op=sum) "
                         "on group [0,1] at its step 3, rank 1 calls all_gather(float64, "
                         "counts=[4,4]) on group [0,1] at its step 3"),
            std::string::npos)
      << message;
}

TEST(ThreadCommunicatorFailure, DifferentCount) {
  const std::string message = FailureOf(2, Steps([](Communicator& comm) {
    std::vector<double> x(5, 1.0);
    comm.AllReduce(x.data(), x.data(), 5, DType::kFloat64, ReduceOp::kSum, {0, 1});
  }));
  EXPECT_NE(message.find("rank 1 calls all_reduce(float64, count=5, op=sum)"), std::string::npos)
      << message;
}

TEST(ThreadCommunicatorFailure, AllToAllCounts) {
  const std::string message = FailureOf(2, [](Communicator& comm) {
    std::vector<double> send(4, 1.0);
    std::vector<double> recv(4);
    const std::vector<int64_t> sends = {2, 2};
    const std::vector<int64_t> recvs = comm.rank() == 0 ? std::vector<int64_t>{2, 1}
                                                        : std::vector<int64_t>{2, 2};
    comm.AllToAll(send.data(), sends, recv.data(), recvs, DType::kFloat64, {0, 1});
  });
  EXPECT_NE(message.find("collective mismatch: rank 1 sends 2 elements to rank 0, which expects 1"),
            std::string::npos)
      << message;
}

TEST(ThreadCommunicatorFailure, SendRecvCount) {
  const std::string message = FailureOf(2, [](Communicator& comm) {
    std::vector<double> buffer(3, 1.0);
    if (comm.rank() == 0) comm.Send(buffer.data(), 3, DType::kFloat64, 1);
    if (comm.rank() == 1) comm.Recv(buffer.data(), 2, DType::kFloat64, 0);
    comm.Synchronize();
  });
  EXPECT_NE(message.find("rank 1: recv(float64, count=2, from=0) at step 1: mismatch: rank 0 sent "
                         "3 float64 at its step 1"),
            std::string::npos)
      << message;
}

TEST(ThreadCommunicator, InvalidCallsThrowTypedErrors) {
  ThreadWorld world(3, Options(1));
  ThreadCommunicator comm(world, 0);
  double x = 0;
  EXPECT_THROW(comm.AllReduce(&x, &x, 1, DType::kFloat64, ReduceOp::kSum, {1, 2}), SpmdError);
  EXPECT_THROW(comm.AllReduce(&x, &x, 1, DType::kFloat64, ReduceOp::kSum, {0, 0}), SpmdError);
  EXPECT_THROW(comm.AllReduce(&x, &x, 1, DType::kFloat64, ReduceOp::kSum, {0, 3}), SpmdError);
  EXPECT_THROW(comm.AllReduce(&x, &x, 1, DType::kBool, ReduceOp::kSum, {0}), SpmdError);
  EXPECT_THROW(comm.AllGather(&x, &x, std::vector<int64_t>{1}, DType::kFloat64, {0, 1}), SpmdError);
  EXPECT_THROW(comm.Broadcast(&x, 1, DType::kFloat64, 2, {0, 1}), SpmdError);
  EXPECT_THROW(comm.Send(&x, 1, DType::kFloat64, 0), SpmdError);
  EXPECT_EQ(comm.step(), 0);  // rejected calls are not numbered
}

TEST(ThreadCommunicator, GroupOfOneMovesNothing) {
  ThreadWorld world(2, Options(1));
  ThreadCommunicator comm(world, 1);
  std::vector<double> x = {1.5, 0.0, -2.0};
  std::vector<double> y(3);
  comm.AllReduce(x.data(), y.data(), 3, DType::kFloat64, ReduceOp::kAny, {1});
  comm.Synchronize();
  EXPECT_EQ(y, (std::vector<double>{1, 0, 1}));
  EXPECT_EQ(comm.counters().total_sent() + comm.counters().total_received(), 0);
  EXPECT_EQ(comm.counters()[Collective::kAllReduce].calls, 1);
  comm.ResetCounters();
  EXPECT_EQ(comm.counters()[Collective::kAllReduce].calls, 0);
}

// CommCounters::seconds is the time inside the backend: positive after a collective that
// waited for a peer, and within the caller's own time around the calls.
TEST(ThreadCommunicator, CountsSecondsInsideTheBackend) {
  std::vector<double> inside(2), around(2);
  RunRanks(2, [&](Communicator& comm) {
    if (comm.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const auto start = Clock::now();
    comm.Barrier({0, 1});
    comm.Synchronize();
    around[comm.rank()] = std::chrono::duration<double>(Clock::now() - start).count();
    inside[comm.rank()] = comm.counters().seconds;
  }, Options(20));
  for (int r = 0; r < 2; ++r) {
    EXPECT_GT(inside[r], 0.0) << "rank " << r;
    EXPECT_LE(inside[r], around[r]) << "rank " << r;
  }
}

TEST(CountBytes, FollowsTheConvention) {
  CollectiveDesc all_reduce{Collective::kAllReduce, DType::kFloat32, ReduceOp::kSum, -1,
                            {0, 1, 2, 3}, {10}, {}};
  // Balanced split 3,3,2,2: 2(n-1)/n * 10 elements on average, exactly per position.
  EXPECT_EQ(CountBytes(all_reduce, 0), (ByteCount{16 * 4, 16 * 4}));
  EXPECT_EQ(CountBytes(all_reduce, 3), (ByteCount{14 * 4, 14 * 4}));
  CollectiveDesc all_gather{Collective::kAllGather, DType::kFloat64, ReduceOp::kSum, -1,
                            {5, 2, 7}, {1, 2, 3}, {}};
  EXPECT_EQ(CountBytes(all_gather, 1), (ByteCount{2 * 2 * 8, 4 * 8}));
  CollectiveDesc reduce_scatter = all_gather;
  reduce_scatter.kind = Collective::kReduceScatter;
  EXPECT_EQ(CountBytes(reduce_scatter, 1), (ByteCount{4 * 8, 2 * 2 * 8}));
  CollectiveDesc broadcast{Collective::kBroadcast, DType::kInt64, ReduceOp::kSum, 2,
                           {5, 2, 7}, {4}, {}};
  EXPECT_EQ(CountBytes(broadcast, 1), (ByteCount{64, 0}));  // the root: world rank 2
  EXPECT_EQ(CountBytes(broadcast, 2), (ByteCount{0, 32}));
}

TEST(CommOptions, FromEnv) {
  setenv("SPMD_COLLECTIVE_TIMEOUT_S", "2.5", 1);
  setenv("SPMD_DEBUG", "plans,collectives", 1);
  CommOptions options = CommOptions::FromEnv();
  EXPECT_EQ(options.timeout_s, 2.5);
  EXPECT_TRUE(options.check_collectives);
  setenv("SPMD_COLLECTIVE_TIMEOUT_S", "soon", 1);
  EXPECT_THROW(CommOptions::FromEnv(), SpmdError);
  unsetenv("SPMD_COLLECTIVE_TIMEOUT_S");
  unsetenv("SPMD_DEBUG");
  options = CommOptions::FromEnv();
  EXPECT_EQ(options.timeout_s, 60);
  EXPECT_FALSE(options.check_collectives);
}

}  // namespace
}  // namespace spmd::runtime
