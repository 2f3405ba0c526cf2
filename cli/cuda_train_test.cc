// spmd-train --device cuda's choice of collectives (cli/cuda_train.h), on the cases it is
// for: np 2 and 4 on one GPU (staged: NCCL refuses duplicate GPUs), one GPU per rank (NCCL),
// one GPU per rank-with-its-own-NCCL_HOSTID (NCCL, the gpu-check way), the same GPU index on
// two hosts (NCCL), not launched by mpirun (staged), the forced settings, a bad setting.
#include "cli/cuda_train.h"

#include <gtest/gtest.h>

#include "rules/model/error.h"

namespace spmd::cli {
namespace {

constexpr int64_t kHostA = 11, kHostB = 12;

TEST(CudaCollectives, RanksSharingAGpuAreStagedOverMpi) {
  for (const std::vector<int64_t>& world : {std::vector<int64_t>{kHostA, 0, kHostA, 0},
                                            std::vector<int64_t>{kHostA, 0, kHostA, 0, kHostA, 0, kHostA, 0},
                                            std::vector<int64_t>{kHostA, 0, kHostA, 1, kHostA, 0}}) {
    const CollectivesChoice c = ChooseCollectives(world, "auto", true);
    EXPECT_FALSE(c.nccl);
    EXPECT_TRUE(c.shared);
    EXPECT_NE(c.description.find("ranks share a GPU"), std::string::npos) << c.description;
  }
}

TEST(CudaCollectives, OneGpuPerRankIsNccl) {
  // Four GPUs on one host; two hosts with GPU 0 each; four ranks on GPU 0 with their own
  // NCCL_HOSTID (their identities differ).
  for (const std::vector<int64_t>& world : {std::vector<int64_t>{kHostA, 0, kHostA, 1, kHostA, 2, kHostA, 3},
                                            std::vector<int64_t>{kHostA, 0, kHostB, 0},
                                            std::vector<int64_t>{1, 0, 2, 0, 3, 0, 4, 0}}) {
    const CollectivesChoice c = ChooseCollectives(world, "auto", true);
    EXPECT_TRUE(c.nccl);
    EXPECT_FALSE(c.shared);
    EXPECT_EQ(c.description, "collectives: NCCL");
  }
  // Without mpirun (SPMD_RENDEZVOUS) the NCCL bootstrap has no MPI_COMM_WORLD of the job.
  const CollectivesChoice rendezvous = ChooseCollectives({kHostA, 0, kHostA, 1}, "auto", false);
  EXPECT_FALSE(rendezvous.nccl);
  EXPECT_NE(rendezvous.description.find("not launched by mpirun"), std::string::npos);
}

TEST(CudaCollectives, SettingsForceAChoiceAndBadOnesAreNamed) {
  EXPECT_TRUE(ChooseCollectives({kHostA, 0, kHostA, 0}, "nccl", true).nccl);
  const CollectivesChoice staged = ChooseCollectives({kHostA, 0, kHostA, 1}, "staged", true);
  EXPECT_FALSE(staged.nccl);
  EXPECT_NE(staged.description.find("SPMD_CUDA_COLLECTIVES=staged"), std::string::npos);
  try {
    ChooseCollectives({kHostA, 0}, "mpi", true);
    ADD_FAILURE() << "a bad setting accepted";
  } catch (const SpmdError& e) {
    EXPECT_EQ(e.field(), "SPMD_CUDA_COLLECTIVES");
    EXPECT_EQ(std::string(e.what()).rfind("SPMD_CUDA_COLLECTIVES", 0), 0u) << e.what();
  }
}

}  // namespace
}  // namespace spmd::cli
