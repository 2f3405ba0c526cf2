// Launch and init: the world communicator and a named mesh from the environment the
// launcher left, with every rank checked to have asked for the same mesh.
//
// Two ways to start a job (docs/OPERATIONS.md):
// - under mpirun: Open MPI sets OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE and
//   OMPI_COMM_WORLD_LOCAL_RANK; the world is MPI_COMM_WORLD.
// - without mpirun: each process is started by hand (or by another launcher) with
//   SPMD_RANK, SPMD_WORLD_SIZE and SPMD_RENDEZVOUS=DIR (a directory every process can
//   reach). Each process initialises MPI on its own (a singleton); rank 0 starts an
//   `ompi-server` (Open MPI's rendezvous service: connect / accept between separately
//   started processes needs it) writing its address to DIR/ompi-server.uri, opens an MPI
//   port and writes it to DIR/port; every other rank waits for both files, then connects.
//   Each connection is merged into one intra-communicator (MPI_Intercomm_merge), whose
//   ranks are finally ordered by SPMD_RANK (MPI_Comm_split). Bounded: a rank that does not
//   arrive within SPMD_RENDEZVOUS_TIMEOUT_S (default 60 s) ends every process waiting for
//   it with a message naming how many ranks arrived.
// - neither: one process (rank 0 of a world of 1).
// Setting both (SPMD_RANK beside OMPI_COMM_WORLD_RANK) must agree.
//
// Mesh agreement: every rank passes its mesh spec ("dp=2,tp=2": axis=size, comma
// separated, major to minor, as spmd-train's --mesh); the ranks all-gather a hash and the
// text of their spec, and if they differ every rank throws the same InvalidArgument
// ("mesh") naming the ranks on each side, e.g.
//   mesh: the ranks disagree on the mesh: ranks 0,1,3 ask for 'dp=2,tp=2'; rank 2 asks
//   for 'dp=4'
// instead of hanging in the first collective of mismatched layouts. A spec whose mesh does
// not hold exactly the world's ranks is an InvalidArgument ("mesh") too.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "rules/model/mesh.h"
#include "rules/model/mesh_spec.h"
#include "runtime/comm/communicator.h"
#include "runtime/comm/mpi_communicator.h"

namespace spmd::runtime {

struct LaunchEnv {
  enum class Source { kMpirun, kRendezvous, kSingle };
  Source source = Source::kSingle;
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t local_rank = 0;
  std::string rendezvous;  // SPMD_RENDEZVOUS
  double rendezvous_timeout_s = 60;
};
std::string_view ToString(LaunchEnv::Source source);  // "mpirun", "rendezvous", "single"

// Reads and validates the launcher's variables through `get` (the process environment by
// default). InvalidArgument naming the variable for a value that is not an integer in
// range, SPMD_RANK without SPMD_WORLD_SIZE (or the reverse), a world of more than one
// rank without SPMD_RENDEZVOUS, or SPMD_RANK / SPMD_WORLD_SIZE that disagree with mpirun's.
LaunchEnv ReadLaunchEnv(const std::function<const char*(const char*)>& get = nullptr);

// Parses "dp=2,tp=2" into a mesh with those axis names (rules/model/mesh.h).
using spmd::ParseMeshSpec;

// Collective over every rank of `comm`'s world: throws the same InvalidArgument ("mesh")
// on every rank when the ranks' specs differ (naming the ranks on each side), or when the
// spec's mesh does not have exactly world_size ranks; returns the mesh otherwise.
Mesh AgreeOnMesh(Communicator& comm, const std::string& spec,
                 const std::function<Mesh(const std::string&)>& parse = ParseMeshSpec);

// For programs: reads the environment, initialises MPI and builds the world (mpirun, or
// the rendezvous), builds the communicator, agrees on the mesh, runs body(comm, mesh) and
// returns its exit code after MPI_Finalize. A bad environment or a mesh the ranks disagree
// on: prints `spmd: rank R: InvalidArgument: ...` and returns 2 on every rank. If body
// throws: as GuardedMain (the message, the flight record, MPI_Abort).
int LaunchMain(int argc, char** argv, const std::string& mesh_spec,
               const std::function<int(MpiCommunicator&, const Mesh&)>& body,
               const std::function<Mesh(const std::string&)>& parse = ParseMeshSpec);

}  // namespace spmd::runtime
