// runtime/comm/launch.h without mpirun: the launcher's environment read and validated (typed
// errors naming the variable), and the mesh agreement on thread ranks: whichever ranks ask
// for another mesh, every rank throws the same error naming the ranks on each side.
#include "runtime/comm/launch.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <map>
#include <mutex>

#include "rules/model/error.h"
#include "runtime/comm/thread_communicator.h"

namespace spmd::runtime {
namespace {

LaunchEnv Read(const std::map<std::string, std::string>& vars) {
  return ReadLaunchEnv([&vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

std::string ErrorField(const std::map<std::string, std::string>& vars) {
  try {
    Read(vars);
  } catch (const SpmdError& e) {
    return e.field();
  }
  return "";
}

TEST(Launch, ReadsTheLaunchersVariables) {
  const LaunchEnv none = Read({});
  EXPECT_EQ(none.source, LaunchEnv::Source::kSingle);
  EXPECT_EQ(none.world_size, 1);
  const LaunchEnv mpi = Read({{"OMPI_COMM_WORLD_RANK", "3"},
                              {"OMPI_COMM_WORLD_SIZE", "4"},
                              {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}});
  EXPECT_EQ(mpi.source, LaunchEnv::Source::kMpirun);
  EXPECT_EQ(mpi.rank, 3);
  EXPECT_EQ(mpi.world_size, 4);
  EXPECT_EQ(mpi.local_rank, 1);
  const LaunchEnv rdv = Read({{"SPMD_RANK", "2"},
                              {"SPMD_WORLD_SIZE", "3"},
                              {"SPMD_RENDEZVOUS", "/tmp/x"},
                              {"SPMD_RENDEZVOUS_TIMEOUT_S", "5"}});
  EXPECT_EQ(rdv.source, LaunchEnv::Source::kRendezvous);
  EXPECT_EQ(rdv.rank, 2);
  EXPECT_EQ(rdv.rendezvous, "/tmp/x");
  EXPECT_EQ(rdv.rendezvous_timeout_s, 5);
  EXPECT_EQ(Read({{"SPMD_RANK", "0"}, {"SPMD_WORLD_SIZE", "1"}}).source,
            LaunchEnv::Source::kSingle);
}

TEST(Launch, BadVariablesAreTypedErrorsNamingThem) {
  EXPECT_EQ(ErrorField({{"SPMD_RANK", "x"}, {"SPMD_WORLD_SIZE", "2"}}), "SPMD_RANK");
  EXPECT_EQ(ErrorField({{"SPMD_RANK", "2"}, {"SPMD_WORLD_SIZE", "2"}, {"SPMD_RENDEZVOUS", "/d"}}),
            "SPMD_RANK");
  EXPECT_EQ(ErrorField({{"SPMD_RANK", "0"}}), "SPMD_WORLD_SIZE");
  EXPECT_EQ(ErrorField({{"SPMD_WORLD_SIZE", "0"}, {"SPMD_RANK", "0"}}), "SPMD_WORLD_SIZE");
  EXPECT_EQ(ErrorField({{"SPMD_RANK", "0"}, {"SPMD_WORLD_SIZE", "2"}}), "SPMD_RENDEZVOUS");
  EXPECT_EQ(ErrorField({{"OMPI_COMM_WORLD_RANK", "4"}, {"OMPI_COMM_WORLD_SIZE", "4"}}),
            "OMPI_COMM_WORLD_RANK");
  EXPECT_EQ(ErrorField({{"OMPI_COMM_WORLD_RANK", "1"}}), "OMPI_COMM_WORLD_SIZE");
  EXPECT_EQ(ErrorField({{"OMPI_COMM_WORLD_RANK", "1"},
                        {"OMPI_COMM_WORLD_SIZE", "4"},
                        {"SPMD_RANK", "2"},
                        {"SPMD_WORLD_SIZE", "4"}}),
            "SPMD_RANK");
  EXPECT_EQ(ErrorField({{"SPMD_RENDEZVOUS_TIMEOUT_S", "-1"}}), "SPMD_RENDEZVOUS_TIMEOUT_S");
}

TEST(Launch, ParsesMeshSpecs) {
  const Mesh mesh = ParseMeshSpec("dp=2,tp=3");
  EXPECT_EQ(mesh.shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(mesh.axis_names(), (std::vector<std::string>{"dp", "tp"}));
  for (const char* bad : {"", "dp", "=2", "dp=x", "dp=2,,tp=2"}) {
    EXPECT_THROW(ParseMeshSpec(bad), SpmdError) << bad;
  }
}

RC_GTEST_PROP(Launch, EveryRankNamesTheRanksThatDisagree, ()) {
  const int64_t world = *rc::gen::inRange<int64_t>(2, 7);
  // Each rank asks for one of two specs (both of `world` ranks), or all for the same.
  const std::string a = "dp=" + std::to_string(world);
  const std::string b = "dp=1,tp=" + std::to_string(world);
  const auto pick = *rc::gen::container<std::vector<bool>>(world, rc::gen::arbitrary<bool>());
  std::vector<std::string> errors(world);
  std::vector<std::vector<int64_t>> shapes(world);
  RunRanks(world, [&](Communicator& comm) {
    try {
      shapes[comm.rank()] = AgreeOnMesh(comm, pick[comm.rank()] ? b : a).shape();
    } catch (const SpmdError& e) {
      errors[comm.rank()] = e.what();
    }
  });
  std::vector<int64_t> on_a, on_b;
  for (int64_t r = 0; r < world; ++r) (pick[r] ? on_b : on_a).push_back(r);
  if (on_a.empty() || on_b.empty()) {
    for (int64_t r = 0; r < world; ++r) RC_ASSERT(errors[r].empty());
    RC_ASSERT(shapes[0] ==
              (on_a.empty() ? std::vector<int64_t>{1, world} : std::vector<int64_t>{world}));
    return;
  }
  auto names = [](const std::vector<int64_t>& ranks, const std::string& spec) {
    std::string out = ranks.size() == 1 ? "rank " : "ranks ";
    for (size_t i = 0; i < ranks.size(); ++i) out += (i ? "," : "") + std::to_string(ranks[i]);
    return out + (ranks.size() == 1 ? " asks" : " ask") + " for '" + spec + "'";
  };
  for (int64_t r = 0; r < world; ++r) {
    RC_LOG() << errors[r] << "\n";
    RC_ASSERT(errors[r] == errors[0]);
    RC_ASSERT(errors[r].rfind("mesh: the ranks disagree on the mesh:", 0) == 0);
    RC_ASSERT(errors[r].find(names(on_a, a)) != std::string::npos);
    RC_ASSERT(errors[r].find(names(on_b, b)) != std::string::npos);
  }
}

TEST(Launch, AMeshOfAnotherSizeIsATypedError) {
  std::vector<std::string> errors(3);
  RunRanks(3, [&](Communicator& comm) {
    try {
      AgreeOnMesh(comm, "dp=2,tp=2");
    } catch (const SpmdError& e) {
      errors[comm.rank()] = e.what();
    }
  });
  for (const std::string& e : errors)
    EXPECT_EQ(e, "mesh: 'dp=2,tp=2' has 4 ranks, the world has 3");
}

}  // namespace
}  // namespace spmd::runtime
