// The main of a GoogleTest + RapidCheck program under mpirun (docs/ARCHITECTURE.md, "Tests
// under mpirun"), shared by the MPI test programs: one RapidCheck seed for every rank (rank
// 0 draws it unless RC_PARAMS fixes it), only rank 0's reports, the exit code all-reduced
// (max) so that one failing rank fails the run; and the verdict helpers (FirstError).
// Test-only; include from one .cc per program.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <random>
#include <string>

#include "runtime/comm/mpi_communicator.h"

namespace spmd::runtime {

inline int WorldRank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

inline int WorldSize() {
  int s = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

// The error of the lowest failing rank, as "rank R: <error>" ("" when every rank passed),
// on every rank: the verdict every rank asserts on, so that RapidCheck shrinks the same way
// everywhere. Plain MPI on the world, independent of the code under test.
inline std::string FirstError(const std::string& mine) {
  const int size = WorldSize();
  int candidate = mine.empty() ? size : WorldRank();
  int first = size;
  MPI_Allreduce(&candidate, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (first == size) return "";
  int length = static_cast<int>(mine.size());
  MPI_Bcast(&length, 1, MPI_INT, first, MPI_COMM_WORLD);
  std::string message = mine;
  message.resize(length);
  MPI_Bcast(message.data(), length, MPI_CHAR, first, MPI_COMM_WORLD);
  return "rank " + std::to_string(first) + ": " + message;
}

// Calls MPI_Init, runs every test with `set_comm` given a live MpiCommunicator (and
// nullptr after), finalizes. `extra_params` is appended to RC_PARAMS unless it already
// names a max_success. Returns with std::cout and std::cerr on the buffers they had on
// entry: ranks other than 0 are silenced only while the tests run.
inline int RunMpiTests(int argc, char** argv, const std::string& extra_params,
                       const std::function<void(MpiCommunicator*)>& set_comm) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const char* env = std::getenv("RC_PARAMS");
  std::string params = env != nullptr ? env : "";
  if (params.find("seed=") == std::string::npos) {
    unsigned long long seed = rank == 0 ? std::random_device{}() : 0;
    MPI_Bcast(&seed, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
    params += " seed=" + std::to_string(seed);
  }
  if (!extra_params.empty() && params.find("max_success=") == std::string::npos) {
    params += " " + extra_params;
  }
  setenv("RC_PARAMS", params.c_str(), 1);

  ::testing::InitGoogleTest(&argc, argv);
  // std::cout and std::cerr outlive this function (they are flushed at exit), so the
  // silenced ranks get their buffers back before the local null stream dies.
  std::ofstream null_stream;
  std::streambuf* const cout_buffer = std::cout.rdbuf();
  std::streambuf* const cerr_buffer = std::cerr.rdbuf();
  if (rank != 0) {
    // RapidCheck and gtest reports: rank 0's suffice (every rank reaches the same verdicts).
    // Failure messages of the runtime use stderr directly and still show.
    null_stream.open("/dev/null");
    std::cerr.rdbuf(null_stream.rdbuf());
    std::cout.rdbuf(null_stream.rdbuf());
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int code = 0;
  {
    MpiCommunicator comm;
    set_comm(&comm);
    code = RUN_ALL_TESTS();
    set_comm(nullptr);
  }
  int worst = 0;
  MPI_Allreduce(&code, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  std::cout.flush();
  std::cerr.flush();
  std::cout.rdbuf(cout_buffer);
  std::cerr.rdbuf(cerr_buffer);
  return worst;
}

}  // namespace spmd::runtime
