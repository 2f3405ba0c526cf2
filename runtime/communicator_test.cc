// Properties of the MPI Communicator under mpirun (TOOLCHAIN.md "GoogleTest + RapidCheck
// under mpirun"): every rank draws the same cases from one broadcast seed, runs its part,
// and the verdicts are combined over the world before any RC_ASSERT, so that all ranks
// shrink to the same minimal case; only rank 0 prints.
#include <gtest/gtest.h>
#include <mpi.h>
#include <rapidcheck/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <random>
#include <string>

#include "runtime/communicator_cases.h"
#include "runtime/mpi_communicator.h"
#include "runtime/mpi_test_main.h"

namespace spmd::runtime {
namespace {

MpiCommunicator* g_comm = nullptr;

int WorldRank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int WorldSize() {
  int s = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

// Returns the error of the lowest failing rank ("" when every rank passed), on every rank.
// Plain MPI on the world, independent of the code under test.
std::string FirstError(const std::string& mine) {
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
  return message;
}

void CheckKind(Collective kind) {
  const testing::CollectiveCase c = *testing::GenCase(WorldSize(), kind);
  const std::string error = FirstError(testing::RunCase(*g_comm, c));
  if (!error.empty()) RC_LOG() << error << "\n";
  RC_ASSERT(error.empty());
}

RC_GTEST_PROP(MpiCommunicator, AllGather, ()) { CheckKind(Collective::kAllGather); }
RC_GTEST_PROP(MpiCommunicator, ReduceScatter, ()) { CheckKind(Collective::kReduceScatter); }
RC_GTEST_PROP(MpiCommunicator, AllReduce, ()) { CheckKind(Collective::kAllReduce); }
RC_GTEST_PROP(MpiCommunicator, AllToAll, ()) { CheckKind(Collective::kAllToAll); }
RC_GTEST_PROP(MpiCommunicator, Broadcast, ()) { CheckKind(Collective::kBroadcast); }
RC_GTEST_PROP(MpiCommunicator, SendRecv, ()) { CheckKind(Collective::kSend); }
RC_GTEST_PROP(MpiCommunicator, Barrier, ()) { CheckKind(Collective::kBarrier); }

TEST(MpiCommunicator, BoxSendRecv) {
  EXPECT_EQ(FirstError(testing::RunBoxSendRecv(*g_comm)), "");
}

TEST(MpiCommunicator, MeshAxisGroups) {
  EXPECT_EQ(FirstError(testing::RunMeshAxes(*g_comm)), "");
}

}  // namespace
}  // namespace spmd::runtime

int main(int argc, char** argv) {
  return spmd::runtime::RunMpiTests(argc, argv, "max_success=200", [](spmd::runtime::MpiCommunicator* comm) {
    spmd::runtime::g_comm = comm;
  });
}
