// The NCCL backend's plans, in plain C++ (no CUDA, no NCCL): for each Communicator call, the
// NCCL calls and local steps that carry it out. The rest of the NCCL backend's logic is beside
// it: NCCL's types (runtime/comm/nccl_types.h), the records of the collective check
// (runtime/comm/collective_check.h), the interpreter that runs a plan through a Transport
// (runtime/comm/plan_runner.h) and PlannedCommunicator, the Communicator over any Transport
// (runtime/comm/planned_communicator.h). NcclCommunicator (runtime/comm/nccl_communicator.h)
// is PlannedCommunicator over NCCL; the tests run the same plans over a simulated NCCL on
// threads (runtime/testing/nccl_sim.h), so that everything but the NCCL calls themselves is
// tested without a GPU.
//
// Plans (`PlanCollective`, for a group of n >= 2 members, the member at position p; the
// group's NCCL communicator has the members as ranks 0..n-1 in position order):
//   all_gather      equal counts: ncclAllGather. Uneven: one group of ncclBroadcast, root q
//                   sending its chunk into place q of every member's output (q = 0..n-1).
//   reduce_scatter  equal counts: ncclReduceScatter. Uneven: one group of ncclReduce, root q
//                   receiving chunk q.
//   all_reduce      a reduce-scatter then an all-gather over the balanced split of the
//                   buffer (chunk q: count / n elements, one more when q < count % n), the
//                   algorithm of communicator.h's byte accounting: when n divides the count
//                   ncclReduceScatter into place p of the output, then an in-place
//                   ncclAllGather; else a group of ncclReduce (root q: chunk q) then a group
//                   of ncclBroadcast (root q: chunk q), in place in the output.
//   all_to_all      one group of ncclSend / ncclRecv, one pair per other member with a
//                   nonzero count; the own chunk is a local copy.
//   broadcast       ncclBroadcast in place.
//   barrier         an in-place ncclAllGather of one byte per member in scratch (a token:
//                   not payload, counted as nothing).
// Reduce ops: sum, prod, max, min are NCCL's own; avg is ncclSum, then the reduced chunk is
// divided by n (Backend::Scale: int64 truncating, 2-byte floats in float32 rounded once);
// any / all map the input to 1 / 0 (Backend::ToTruth into scratch; bool already is) and
// reduce with ncclMax / ncclMin. bool travels as ncclUint8, bfloat16 / float16 as NCCL's
// own types (NCCL reduces them in float32 and rounds each step). Zero-count calls are left
// out (every member leaves out the same ones: the counts are the group's).
//
// Point to point (`PlanPointToPoint`): send / recv and their box forms wait for the next
// Synchronize(), which runs all of them as one group of ncclSend / ncclRecv on the world's
// communicator, in call order (NCCL matches the messages between two ranks in order). So
// `Send; Recv; Synchronize()` between two ranks cannot deadlock. A box is packed into
// scratch (Backend::CopyBox) before the group and a received box unpacked after it; on the
// wire it is box.volume() contiguous elements.
//
// Bytes: every Op carries the bytes it hands NCCL on this rank by its definition (all_gather
// of c per member: (n-1)c sent and received; reduce_scatter of c per member: the same;
// reduce, root q, c elements: a non-root sends c, the root receives (n-1)c; broadcast, root
// q: the root sends (n-1)c, the others receive c; send / recv: c). They add up to
// CountBytes for every call (nccl_plan_test.cc checks it on random calls, and the simulated
// NCCL counts the bytes it really copies between ranks).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/comm/nccl_types.h"

namespace spmd::runtime::nccl {

// A place in one of the buffers a plan runs on: `buffer` indexes the buffers handed to
// RunPlan (kScratch: the plan's scratch), `offset` in bytes. buffer -1: none.
struct Ref {
  int buffer = -1;
  int64_t offset = 0;
  bool operator==(const Ref&) const = default;
};
inline constexpr int kScratch = 0;
// The buffers of a collective's plan: the call's send and recv (broadcast: its buffer).
inline constexpr int kSendBuffer = 1;
inline constexpr int kRecvBuffer = 2;

enum class Prim { kAllGather, kReduceScatter, kReduce, kBroadcast, kSend, kRecv };
std::string_view ToString(Prim prim);  // "ncclAllGather", ...

// One NCCL call.
struct Op {
  Prim prim = Prim::kAllGather;
  Ref in;   // sendbuff (recv: none)
  Ref out;  // recvbuff (send: none; reduce: read on the root only)
  // NCCL's count: all_gather its sendcount, reduce_scatter its recvcount, else the count.
  int64_t count = 0;
  DataType type = DataType::kFloat64;
  RedOp op = RedOp::kSum;  // reduce_scatter, reduce
  // reduce, broadcast: the root; send, recv: the peer (ranks of the NCCL communicator the
  // op runs on: positions in the group, or world ranks on the world's communicator).
  int64_t peer = -1;
  bool payload = true;  // false: the barrier's token, not counted
  ByteCount handed;     // what the op hands NCCL on this rank, by its definition
  bool operator==(const Op&) const = default;
};

// One local step, run by the Backend of the communicator's device on its stream.
struct Local {
  enum class Kind {
    kCopy,       // to[0, count) = from[0, count)
    kToTruth,    // to = ToTruth(from), count elements
    kDivide,     // to[0, count) /= divisor
    kPackBox,    // to (contiguous, box.extent) = the box of the array at `from`
    kUnpackBox,  // the box of the array at `to` = from (contiguous, box.extent)
  };
  Kind kind = Kind::kCopy;
  Ref from;
  Ref to;
  int64_t count = 0;  // elements
  DType dtype = DType::kFloat64;
  int64_t divisor = 1;
  BufferBox box;
  bool operator==(const Local&) const = default;
};

// One NCCL group (ops between ncclGroupStart and ncclGroupEnd, on the call's group's
// communicator, or the world's when `world`) or one local step.
struct Step {
  std::vector<Op> ops;
  bool world = false;
  std::optional<Local> local;
};

struct Plan {
  std::vector<Step> steps;
  int64_t scratch_bytes = 0;
  ByteCount handed() const;  // the sum over the ops' `handed`
  int64_t nccl_calls() const;
};

// The plan of a collective on a group of n >= 2 members, for the member at `position`
// (buffers kSendBuffer and kRecvBuffer; broadcast and barrier use kRecvBuffer / scratch).
// std::logic_error for send / recv or a group of one (those never reach it).
Plan PlanCollective(const CollectiveDesc& desc, int64_t position);

// A send or recv waiting for Synchronize().
struct PointToPoint {
  Collective kind = Collective::kSend;  // kSend or kRecv
  DType dtype = DType::kFloat64;
  int64_t count = 0;  // elements (a box: its volume)
  int64_t peer = -1;  // world rank
  std::optional<BufferBox> box;
};
// The plan of the flush: one group of ncclSend / ncclRecv on the world's communicator, in
// call order; buffer i + 1 is the buffer (base, for a box) of pending[i].
Plan PlanPointToPoint(std::span<const PointToPoint> pending);

}  // namespace spmd::runtime::nccl
