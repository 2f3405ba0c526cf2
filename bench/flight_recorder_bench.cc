// The flight recorder's cost (docs/OPERATIONS.md "The flight recorder"): the CPU time of
// one call that moves nothing (an all-reduce of 8 float64 on a group of one rank, the
// Communicator's own path and nothing else) with the recorder off (SPMD_FLIGHT_RECORDER=0)
// and on (256 entries), and of one dump of a full ring of 256 entries to a file. A plain
// timing program: each figure is the median of 7 runs of `calls` calls, in thread CPU time.
//   ./build/bin/flight_recorder_bench
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/diagnostics/flight_recorder.h"
#include "runtime/comm/thread_communicator.h"

namespace {

double ThreadMicros() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_nsec) * 1e-3;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Microseconds per group-of-one all-reduce with a recorder of `entries` (0: off).
double PerCall(int64_t entries, int calls) {
  spmd::runtime::CommOptions options;
  options.flight_entries = entries;
  spmd::runtime::ThreadWorld world(1, options);
  spmd::runtime::ThreadCommunicator comm(world, 0);
  std::vector<double> x(8, 1.0);
  const spmd::runtime::Group self{0};
  std::vector<double> runs;
  for (int r = 0; r < 7; ++r) {
    const double start = ThreadMicros();
    for (int i = 0; i < calls; ++i) {
      comm.AllReduce(x.data(), x.data(), 8, spmd::DType::kFloat64, spmd::ReduceOp::kMax, self);
    }
    runs.push_back((ThreadMicros() - start) / calls);
  }
  return Median(runs);
}

}  // namespace

int main() {
  const int calls = 200000;
  const double off = PerCall(0, calls);
  const double on = PerCall(256, calls);
  std::printf("group-of-one all_reduce, recorder off: %.3f us/call\n", off);
  std::printf("group-of-one all_reduce, recorder on (256): %.3f us/call (+%.3f us)\n", on, on - off);

  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("spmd_flight_bench_" + std::to_string(::getpid())))
                              .string();
  std::filesystem::create_directories(dir);
  spmd::runtime::FlightRecorder recorder(0, 4, 256, dir);
  spmd::runtime::CollectiveDesc d{spmd::runtime::Collective::kAllGather,
                                  spmd::DType::kFloat32,
                                  spmd::ReduceOp::kSum,
                                  -1,
                                  {0, 1, 2, 3},
                                  {64, 64, 64, 64},
                                  {}};
  for (int i = 1; i <= 256; ++i) recorder.Completed(recorder.Enqueued(d, i, {}));
  std::vector<double> runs;
  for (int r = 0; r < 7; ++r) {
    const double start = ThreadMicros();
    recorder.Dump("bench");
    runs.push_back(ThreadMicros() - start);
  }
  std::printf("dump of 256 entries: %.1f us (%ju bytes)\n", Median(runs),
              static_cast<uintmax_t>(std::filesystem::file_size(dir + "/flight_rank0.txt")));
  std::filesystem::remove_all(dir);
  return 0;
}
