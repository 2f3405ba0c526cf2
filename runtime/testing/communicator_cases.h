// Test support shared by the thread-backend test and the MPI property test: one random
// collective case, drawn identically on every rank from the shared seed, and a check that
// runs it on one rank and compares the result with what that rank computes locally for
// everyone's inputs (every input is a pure function of the case, the group and the
// position), and the byte counters with the convention of communicator.h.
#pragma once

#include <rapidcheck.h>

#include <cstdint>
#include <string>
#include <vector>

#include "rules/model/mesh.h"
#include "runtime/comm/communicator.h"

namespace spmd::runtime::testing {

struct CollectiveCase {
  Collective kind = Collective::kAllReduce;  // kSend stands for the send/recv exchange
  DType dtype = DType::kFloat64;
  ReduceOp op = ReduceOp::kSum;
  int64_t world_size = 1;
  std::vector<Group> groups;  // disjoint; ranks in none stay idle
  // Per group: all_gather / reduce_scatter: one count per position; all_reduce /
  // broadcast: {count}; all_to_all: n*n counts, [from * n + to].
  std::vector<std::vector<int64_t>> counts;
  std::vector<int64_t> roots;  // per group: the broadcast root's position
  bool in_place = false;       // all_reduce with send == recv
  // send/recv: rank r sends message_counts[r] messages to peer_of[r] (none if itself).
  std::vector<int64_t> peer_of;
  std::vector<std::vector<int64_t>> message_counts;
  bool recv_first = false;  // post the receives before the sends
  uint64_t data_seed = 0;
};

std::ostream& operator<<(std::ostream& os, const CollectiveCase& c);

// Every dtype and reduce op that the kind accepts (bool: no sum / avg).
rc::Gen<CollectiveCase> GenCase(int64_t world_size, Collective kind);

// Runs `c` on comm's rank (all ranks of the world call it) and returns "" when its
// output, counters and step are right, else what is wrong.
std::string RunCase(Communicator& comm, const CollectiveCase& c);

// Every ordered subset of mesh axes of meshes over the world (1-d, 2x2, 2x2x2 as the
// world size allows; identity, reversed and sub-mesh process ids): each rank all-reduces
// and all-gathers over its group from Mesh::GroupOf. Returns "" when all results are right.
std::string RunMeshAxes(Communicator& comm);

// SendBox / RecvBox between neighbours (rank r sends to r + 1 mod n): box to box, box to
// contiguous, a 0-d box, an empty box, a bad box; checks values, counters and steps.
// Returns "" when all is right (and on a world of one).
std::string RunBoxSendRecv(Communicator& comm);

}  // namespace spmd::runtime::testing
