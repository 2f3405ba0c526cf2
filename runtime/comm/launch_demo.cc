// A small program for the launch tests (launch_test.sh): builds the world and the mesh
// with LaunchMain (under mpirun, or from SPMD_RANK / SPMD_WORLD_SIZE / SPMD_RENDEZVOUS),
// then all-reduces each rank's number over the world and over the mesh's first axis and
// prints what it got:
//   launch_demo MESH      e.g. `launch_demo dp=2,tp=2`
//   rank 1 of 4 (mpirun): mesh dp=2,tp=2: world sum 6, axis dp group [1,3] sum 4
#include <cstdio>
#include <string>
#include <vector>

#include "runtime/comm/launch.h"

int main(int argc, char** argv) {
  using namespace spmd;
  const std::string spec = argc > 1 ? argv[1] : "dp=1";
  const runtime::LaunchEnv env = [] {
    try {
      return runtime::ReadLaunchEnv();
    } catch (const std::exception&) {
      return runtime::LaunchEnv{};  // LaunchMain reports it
    }
  }();
  return runtime::LaunchMain(
      argc, argv, spec, [&](runtime::MpiCommunicator& comm, const Mesh& mesh) {
        runtime::Group world(comm.world_size());
        for (int64_t r = 0; r < comm.world_size(); ++r) world[r] = r;
        double x = static_cast<double>(comm.rank());
        comm.AllReduce(&x, &x, 1, DType::kFloat64, ReduceOp::kSum, world);
        const runtime::Group axis = mesh.GroupOf(*mesh.CoordinateOf(comm.rank()), {0});
        double y = static_cast<double>(comm.rank());
        comm.AllReduce(&y, &y, 1, DType::kFloat64, ReduceOp::kSum, axis);
        comm.Synchronize();
        std::printf("rank %lld of %lld (%s): mesh %s: world sum %g, axis %s group %s sum %g\n",
                    static_cast<long long>(comm.rank()), static_cast<long long>(comm.world_size()),
                    std::string(runtime::ToString(env.source)).c_str(), spec.c_str(), x,
                    mesh.axis_names()[0].c_str(), runtime::ToString(axis).c_str(), y);
        return 0;
      });
}
