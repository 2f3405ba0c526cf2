// Properties of the MPI Communicator under mpirun (docs/ARCHITECTURE.md "Tests under
// mpirun"): every rank draws the same cases from one broadcast seed, runs its part, and the
// verdicts are combined over the world before any RC_ASSERT, so that all ranks shrink to
// the same minimal case; only rank 0 prints.
#include <gtest/gtest.h>
#include <mpi.h>
#include <rapidcheck/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <random>
#include <string>

#include "runtime/comm/mpi_communicator.h"
#include "runtime/testing/communicator_cases.h"
#include "runtime/testing/mpi_test_main.h"

namespace spmd::runtime {
namespace {

MpiCommunicator* g_comm = nullptr;

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
