// train/join.h on thread ranks: data-parallel training of the small GPT with a random
// number of batches (and rows per batch) on each rank equals one process trained on the
// union of the active ranks' batches at every step, float64 to 1e-9 relative; and the
// join's typed errors.
#include "train/join.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <mutex>

#include "rules/error.h"
#include "train/join_check.h"

namespace spmd::train {
namespace {

RC_GTEST_PROP(Join, UnevenBatchesTrainLikeOneProcessOnTheirUnion, ()) {
  const int64_t world = *rc::gen::inRange<int64_t>(1, 5);
  const auto batches =
      *rc::gen::container<std::vector<int64_t>>(world, rc::gen::inRange<int64_t>(0, 4));
  const auto rows =
      *rc::gen::container<std::vector<int64_t>>(world, rc::gen::inRange<int64_t>(1, 4));
  runtime::Group group(world);
  for (int64_t r = 0; r < world; ++r) group[r] = r;
  std::vector<std::vector<std::vector<double>>> finals(world);
  std::vector<int64_t> rounds(world);
  runtime::CommOptions options;
  options.timeout_s = 30;
  runtime::RunRanks(
      world,
      [&](runtime::Communicator& comm) {
        finals[comm.rank()] =
            join_check::TrainJoined(comm, group, batches, rows, &rounds[comm.rank()]);
      },
      options);
  const auto expected = join_check::TrainOneProcess(batches, rows);
  const int64_t steps = *std::max_element(batches.begin(), batches.end());
  for (int64_t r = 0; r < world; ++r) {
    RC_ASSERT(rounds[r] == steps + 1);  // the steps, then the round in which all have joined
    const double diff = join_check::RelativeDifference(finals[r], expected);
    RC_LOG() << "rank " << r << ": relative difference " << diff << "\n";
    RC_ASSERT(diff <= 1e-9);
  }
}

TEST(Join, TypedErrors) {
  runtime::RunRanks(2, [](runtime::Communicator& comm) {
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
  });
}

}  // namespace
}  // namespace spmd::train
