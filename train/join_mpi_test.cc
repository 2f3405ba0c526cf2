// train/join.h under mpirun: data-parallel training of the small GPT where rank r has
// batches[r] batches (argv[1], e.g. `3,5,4,4`: one entry per rank) of 2 sequences each.
// Every rank's final parameters must equal one process trained, at each step, on the union
// of the batches of the ranks still active then (train/join_check.h), float64 to 1e-9
// relative. Prints the largest difference over the ranks; exit 0 only when within bound.
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/mpi_communicator.h"
#include "train/join_check.h"

int main(int argc, char** argv) {
  using namespace spmd;
  const std::string spec = argc > 1 ? argv[1] : "3,5,4,4";
  return runtime::GuardedMain(argc, argv, [&spec](runtime::MpiCommunicator& comm) {
    std::vector<int64_t> batches;
    std::stringstream in(spec);
    for (std::string item; std::getline(in, item, ',');) batches.push_back(std::stoll(item));
    if (static_cast<int64_t>(batches.size()) != comm.world_size()) {
      throw std::invalid_argument("batches: expected one count per rank, got '" + spec + "'");
    }
    const std::vector<int64_t> rows(batches.size(), 2);
    runtime::Group world(comm.world_size());
    for (int64_t r = 0; r < comm.world_size(); ++r) world[r] = r;
    int64_t rounds = 0;
    const auto joined = train::join_check::TrainJoined(comm, world, batches, rows, &rounds);
    const auto expected = train::join_check::TrainOneProcess(batches, rows);
    double diff = train::join_check::RelativeDifference(joined, expected);
    comm.AllReduce(&diff, &diff, 1, DType::kFloat64, ReduceOp::kMax, world);
    comm.Synchronize();
    const bool ok = diff <= 1e-9;
    if (comm.rank() == 0) {
      std::printf("join %s: %lld rounds; largest relative difference from one process %.3g: %s\n",
                  spec.c_str(), static_cast<long long>(rounds), diff, ok ? "ok" : "FAIL");
    }
    return ok ? 0 : 1;
  });
}
