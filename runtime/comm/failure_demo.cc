// A small MPI program for the failure tests (failure_test.sh): every rank all-reduces over
// the world six times; at step 3 rank 1 does what MODE says instead.
//   ok      nothing: the run succeeds (the control)
//   throw   throws: GuardedMain prints `rank 1 failed at step 2 (...)` and aborts the job
//   exit    finalizes MPI and exits 0: the others time out (SPMD_COLLECTIVE_TIMEOUT_S)
//   vanish  exits at once without finalizing: mpirun ends the job
//   hang    sleeps for an hour: the others, blocked inside MPI's collective, are ended by
//           their watchdogs (timeout), which makes mpirun end rank 1 too
//   silent  rank 0 receives 4 elements from rank 1, which sleeps for an hour instead of
//           sending: rank 0, blocked in MPI_Waitall at Synchronize, is ended by its watchdog
//   kind    calls all_gather instead: with SPMD_DEBUG=collectives, a mismatch naming both
//   count   all-reduces 5 elements instead of 4: likewise
//   a2a     every rank calls all_to_all and rank 1 expects fewer elements from rank 0
//   p2p     rank 0 sends rank 1 three elements, rank 1 receives two: with
//           SPMD_DEBUG=collectives, a mismatch naming both
//   skip    rank 2 (not 1) skips the all-reduce of step 3 and sleeps for an hour (stuck
//           outside the communicator): the others time out; with SPMD_FLIGHT_DIR set every
//           rank dumps its flight record and `spmd hangs` names the skipped call and rank 2
//   group   ranks 0 and 1 all-reduce over a new group (run with 3 or more ranks), rank 0 as
//           [1,0] and rank 1 as [0,1]: found when the group's communicator is created
//           (no SPMD_DEBUG needed; two groups already created would time out instead)
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "runtime/comm/mpi_communicator.h"

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "ok";
  return spmd::runtime::GuardedMain(argc, argv, [&mode](spmd::runtime::MpiCommunicator& comm) {
    using spmd::DType;
    using spmd::ReduceOp;
    spmd::runtime::Group world(comm.world_size());
    for (int64_t r = 0; r < comm.world_size(); ++r) world[r] = r;
    std::vector<double> x(8, 1.0);
    for (int step = 1; step <= 6; ++step) {
      comm.SetPhase("step " + std::to_string(step));
      if (step == 3 && comm.rank() == 2 && mode == "skip") {
        std::this_thread::sleep_for(std::chrono::hours(1));
      }
      if (step == 3 && comm.rank() == 1 && mode != "a2a") {
        if (mode == "throw") throw std::runtime_error("injected failure");
        if (mode == "exit") {
          MPI_Finalize();
          std::exit(0);
        }
        if (mode == "vanish") std::_Exit(0);
        if (mode == "hang") std::this_thread::sleep_for(std::chrono::hours(1));
        if (mode == "kind") {
          std::vector<int64_t> counts(comm.world_size(), 4);
          std::vector<double> all(4 * comm.world_size());
          comm.AllGather(x.data(), all.data(), counts, DType::kFloat64, world);
          continue;
        }
        if (mode == "count") {
          comm.AllReduce(x.data(), x.data(), 5, DType::kFloat64, ReduceOp::kSum, world);
          continue;
        }
      }
      if (step == 3 && mode == "p2p") {
        if (comm.rank() == 0) comm.Send(x.data(), 3, DType::kFloat64, 1);
        if (comm.rank() == 1) comm.Recv(x.data(), 2, DType::kFloat64, 0);
        comm.Synchronize();
        continue;
      }
      if (step == 3 && mode == "silent") {
        if (comm.rank() == 0) comm.Recv(x.data(), 4, DType::kFloat64, 1);
        if (comm.rank() == 1) std::this_thread::sleep_for(std::chrono::hours(1));
        comm.Synchronize();
        continue;
      }
      if (step == 3 && mode == "group") {
        if (comm.rank() == 0) {
          comm.AllReduce(x.data(), x.data(), 4, DType::kFloat64, ReduceOp::kSum, {1, 0});
        } else if (comm.rank() == 1) {
          comm.AllReduce(x.data(), x.data(), 4, DType::kFloat64, ReduceOp::kSum, {0, 1});
        }
        continue;
      }
      if (step == 3 && mode == "a2a") {
        std::vector<int64_t> sends(comm.world_size(), 1);
        std::vector<int64_t> recvs(comm.world_size(), 1);
        if (comm.rank() == 1) recvs[0] = 0;
        std::vector<double> out(comm.world_size());
        comm.AllToAll(x.data(), sends, out.data(), recvs, DType::kFloat64, world);
        continue;
      }
      comm.AllReduce(x.data(), x.data(), 4, DType::kFloat64, ReduceOp::kSum, world);
    }
    if (comm.rank() == 0) std::printf("failure_demo %s: completed\n", mode.c_str());
    return 0;
  });
}
