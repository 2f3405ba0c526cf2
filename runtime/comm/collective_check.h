// The collective check (SPMD_DEBUG=collectives, docs/RUNTIME.md) of the planned communicators
// and the MPI backend: the record each member of a group exchanges before a collective, the
// counts of an all_to_all and the header of a point-to-point message, and their comparison
// into a message naming the ranks that disagree.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/comm/nccl_plan.h"

namespace spmd::runtime::nccl {

// What each member says about its call before it runs: a fixed-size record the group
// all-gathers (kind, dtype, op, root, group size and hash, counts hash, number of counts,
// step, the first 8 counts). all_to_all records also carry both count vectors in a second
// exchange (AllToAllCounts).
inline constexpr int kRecordSize = 17;
// A group's (or a count vector's) identity in a record and in the communicators' group
// handshakes: FNV-1a over the values' bytes, non-negative. One definition, so that MPI, NCCL
// and the records agree.
int64_t HashValues(const std::vector<int64_t>& values);
using Record = std::array<int64_t, kRecordSize>;
Record MakeRecord(const CollectiveDesc& desc, int64_t step);
// "" when the members' records (position order) describe the same call, else
// `collective mismatch: rank A calls <call> at its step S, rank B calls <call> at its step T`
// for the first member that differs from position 0.
std::string CompareRecords(std::span<const Record> records, const Group& group);
// all_to_all: this member's send counts then its recv counts (2n values).
std::vector<int64_t> AllToAllCounts(const CollectiveDesc& desc);
// Every member's AllToAllCounts (position order, 2n each): "" when what each member sends
// each other one is what that one expects, else `collective mismatch: rank A sends x
// elements to rank B, which expects y` for the first such pair.
std::string CompareAllToAllCounts(std::span<const int64_t> all, const Group& group);
// Point to point: the header {dtype, count, step} a send carries; "" when the header a
// recv gets matches it, else `mismatch: rank A sends c <dtype> at its step s`.
using Header = std::array<int64_t, 3>;
Header MakeHeader(const PointToPoint& send, int64_t step);
std::string CompareHeader(const Header& got, const PointToPoint& recv);

}  // namespace spmd::runtime::nccl
