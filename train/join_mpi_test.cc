// train/join.h under mpirun: data-parallel training of the small GPT where rank r has
// batches[r] batches (argv[1], e.g. `3,5,4,4`: one entry per rank) of 2 sequences each.
// Every rank's final parameters must equal one process trained, at each step, on the union
// of the batches of the ranks still active then (train/join_check.h), float64 to 1e-9
// relative. Prints the largest difference over the ranks; exit 0 only when within bound.
// With argv[2] `sim`, every rank's tensors live on its simulated device (sim:rank % 8) and
// the join's collectives carry device buffers, staged through host memory over MPI
// (runtime/comm/staged_communicator.h), as spmd-train --device sim runs.
#include <cstdio>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/sim/sim.h"
#include "runtime/comm/mpi_communicator.h"
#include "runtime/comm/staged_communicator.h"
#include "train/device_sim.h"
#include "train/join_check.h"

int main(int argc, char** argv) {
  using namespace spmd;
  const std::string spec = argc > 1 ? argv[1] : "3,5,4,4";
  const std::string device = argc > 2 ? argv[2] : "cpu";
  if (device != "cpu" && device != "sim") {
    std::fprintf(stderr, "device: expected cpu or sim, got '%s'\n", device.c_str());
    return 2;
  }
  train::EnableSimTraining();
  return runtime::GuardedMain(argc, argv, [&spec, &device](runtime::MpiCommunicator& mpi) {
    std::optional<runtime::StagedCommunicator> staged;
    if (device == "sim") {
      const kernels::Device sim = kernels::Device::Sim(static_cast<int>(mpi.rank() % 8));
      staged.emplace(mpi, sim, kernels::sim::NewStream(sim), runtime::SimHostStaging());
    }
    runtime::Communicator& comm = staged ? static_cast<runtime::Communicator&>(*staged) : mpi;
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
    mpi.AllReduce(&diff, &diff, 1, DType::kFloat64, ReduceOp::kMax, world);
    mpi.Synchronize();
    const bool ok = diff <= 1e-9;
    if (comm.rank() == 0) {
      std::printf("join %s on %s: %lld rounds; largest relative difference from one process %.3g: %s\n",
                  spec.c_str(), device.c_str(), static_cast<long long>(rounds), diff, ok ? "ok" : "FAIL");
    }
    return ok ? 0 : 1;
  });
}
