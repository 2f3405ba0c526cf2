// train/join.h on thread ranks, on the host and on simulated devices (every rank's
// parameters, gradients and the join's buffers on its sim device, the collectives the NCCL
// backend's plans over a simulated NCCL: runtime/sim_device_communicator.h): data-parallel
// training of the small GPT with a random number of batches (and rows per batch) on each
// rank equals one host process trained on the union of the active ranks' batches at every
// step, float64 to 1e-9 relative; and the join's typed errors on both.
#include "train/join.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <mutex>
#include <string>

#include <functional>

#include "rules/error.h"
#include "runtime/sim_device_communicator.h"
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

TEST(Join, TypedErrors) {
  runtime::RunRanks(2, ExpectTypedErrors);
  OnSim(2, ExpectTypedErrors);
}

}  // namespace
}  // namespace spmd::train
