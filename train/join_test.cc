// train/join.h on thread ranks, on the host and on simulated devices (every rank's
// parameters, gradients and the join's buffers on its sim device, the collectives the NCCL
// backend's plans over a simulated NCCL: runtime/testing/sim_device_communicator.h): data-parallel
// training of the small GPT with a random number of batches (and rows per batch) on each
// rank equals one host process trained on the union of the active ranks' batches at every
// step, float64 to 1e-9 relative; and the join's typed errors on both.
#include "train/join.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <mutex>
#include <string>

#include <functional>

#include "rules/model/error.h"
#include "runtime/testing/sim_device_communicator.h"
#include "train/device_sim.h"
#include "train/join_check.h"

namespace spmd::train {
namespace {

using Runner = std::function<void(int64_t, const std::function<void(runtime::Communicator&)>&)>;

void OnHost(int64_t n, const std::function<void(runtime::Communicator&)>& fn) {
  runtime::CommOptions options;
  options.timeout_s = 30;
  runtime::RunRanks(n, fn, options);
}
void OnSim(int64_t n, const std::function<void(runtime::Communicator&)>& fn) {
  EnableSimTraining();
  runtime::CommOptions options;
  options.timeout_s = 30;
  runtime::nccl::RunSimDeviceRanks(n, fn, options);
}

// Every rank of `run`'s world trains under a Join; "" when each equals the one host
// process (and ran the steps plus the round in which all have joined), else what differs.
std::string CheckUneven(const Runner& run, const std::vector<int64_t>& batches, const std::vector<int64_t>& rows) {
  const auto world = static_cast<int64_t>(batches.size());
  runtime::Group group(world);
  for (int64_t r = 0; r < world; ++r) group[r] = r;
  std::vector<std::vector<std::vector<double>>> finals(world);
  std::vector<int64_t> rounds(world);
  run(world, [&](runtime::Communicator& comm) {
    finals[comm.rank()] = join_check::TrainJoined(comm, group, batches, rows, &rounds[comm.rank()]);
  });
  const auto expected = join_check::TrainOneProcess(batches, rows);
  const int64_t steps = *std::max_element(batches.begin(), batches.end());
  for (int64_t r = 0; r < world; ++r) {
    if (rounds[r] != steps + 1) {
      return "rank " + std::to_string(r) + ": " + std::to_string(rounds[r]) + " rounds for " +
             std::to_string(steps) + " steps";
    }
    const double diff = join_check::RelativeDifference(finals[r], expected);
    if (!(diff <= 1e-9)) return "rank " + std::to_string(r) + ": relative difference " + std::to_string(diff);
  }
  return "";
}

RC_GTEST_PROP(Join, UnevenBatchesTrainLikeOneProcessOnTheirUnion, ()) {
  const int64_t world = *rc::gen::inRange<int64_t>(1, 5);
  const auto batches =
      *rc::gen::container<std::vector<int64_t>>(world, rc::gen::inRange<int64_t>(0, 4));
  const auto rows =
      *rc::gen::container<std::vector<int64_t>>(world, rc::gen::inRange<int64_t>(1, 4));
  const std::string failure = CheckUneven(OnHost, batches, rows);
  RC_LOG() << failure << "\n";
  RC_ASSERT(failure.empty());
}

// The same on sim devices: the gradients never leave their device.
RC_GTEST_PROP(Join, UnevenBatchesOnSimDevicesTrainLikeOneHostProcess, ()) {
  const int64_t world = *rc::gen::inRange<int64_t>(1, 5);
  const auto batches =
      *rc::gen::container<std::vector<int64_t>>(world, rc::gen::inRange<int64_t>(0, 4));
  const auto rows =
      *rc::gen::container<std::vector<int64_t>>(world, rc::gen::inRange<int64_t>(1, 4));
  const std::string failure = CheckUneven(OnSim, batches, rows);
  RC_LOG() << failure << "\n";
  RC_ASSERT(failure.empty());
}

// Eight sim ranks (one per sim device), every one with another number of batches.
TEST(Join, EightSimRanksWithUnevenBatches) {
  EXPECT_EQ(CheckUneven(OnSim, {3, 0, 1, 2, 3, 1, 2, 2}, {2, 1, 3, 1, 2, 2, 1, 3}), "");
}

// float32 parameters (the gradients widened to float64 for the round and rounded back, by
// Dispatch casts on the device): on sim ranks, equal to the same join on host ranks to 1e-5
// (device_proof_test's float32 bound). (Against one float32 process the difference is
// about 3e-3 here on both devices: AdamW turns float32 rounding in near-zero gradient
// elements into steps of the learning rate; the float64 properties above prove the rounds.)
TEST(Join, Float32OnSimDevices) {
  const std::vector<int64_t> batches = {2, 3, 1, 3}, rows = {2, 1, 3, 2};
  const runtime::Group group = {0, 1, 2, 3};
  std::vector<std::vector<std::vector<double>>> host(4), sim(4);
  OnHost(4, [&](runtime::Communicator& comm) {
    host[comm.rank()] = join_check::TrainJoined(comm, group, batches, rows, nullptr, DType::kFloat32);
  });
  OnSim(4, [&](runtime::Communicator& comm) {
    sim[comm.rank()] = join_check::TrainJoined(comm, group, batches, rows, nullptr, DType::kFloat32);
  });
  const auto float64 = join_check::TrainOneProcess(batches, rows);
  for (size_t r = 0; r < 4; ++r) {
    EXPECT_LE(join_check::RelativeDifference(sim[r], host[r]), 1e-5) << "rank " << r;
    EXPECT_GT(join_check::RelativeDifference(sim[r], float64), 0)
        << "rank " << r << ": float32 training must differ from float64 somewhere";
  }
}

void ExpectTypedErrors(runtime::Communicator& comm) {
    EXPECT_THROW(Join(comm, {1 - comm.rank()}), SpmdError);
    Join join(comm, {0, 1});
    try {
      join.Next(true, 0.0);
      ADD_FAILURE() << "a zero weight accepted";
    } catch (const SpmdError& e) {
      EXPECT_EQ(e.field(), "weight");
    }
    const Join::Round first = join.Next(comm.rank() == 0, 2.0);
    EXPECT_EQ(first.active, 1);
    EXPECT_EQ(first.weight, 2.0);
    if (comm.rank() == 1) {
      try {
        join.Next(true, 1.0);
        ADD_FAILURE() << "a batch after joining accepted";
      } catch (const SpmdError& e) {
        EXPECT_EQ(e.field(), "has_batch");
      }
    }
    const Join::Round second = join.Next(false, 0);
    EXPECT_EQ(second.active, 0);
  }

// The parameters' communicator must be on the join's device: a host one under a sim join
// is InvalidArgument naming `local`.
TEST(Join, LocalCommunicatorOnAnotherDeviceIsNamed) {
  OnSim(2, [](runtime::Communicator& comm) {
    Join join(comm, {0, 1});
    const Join::Round round = join.Next(true, 1.0);
    runtime::ThreadWorld solo(1);
    runtime::ThreadCommunicator host(solo, 0);
    try {
      join.AverageGradients({}, round, host);
      ADD_FAILURE() << "a host communicator under a sim join accepted";
    } catch (const SpmdError& e) {
      EXPECT_EQ(e.field(), "local");
    }
    join.AverageGradients({}, round, comm);  // the same device: fine (no parameters)
    EXPECT_EQ(join.Next(false, 0).active, 0);
  });
}

TEST(Join, TypedErrors) {
  runtime::RunRanks(2, ExpectTypedErrors);
  OnSim(2, ExpectTypedErrors);
}

}  // namespace
}  // namespace spmd::train
