// The NCCL backend's logic in plain C++ (no CUDA, no NCCL): for each Communicator call, the
// plan of NCCL calls and local steps that carries it out, the interpreter that runs a plan
// through a Transport (the NCCL calls) and a Backend (the local steps), the records of the
// collective check, and PlannedCommunicator, the Communicator over any Transport.
// NcclCommunicator (runtime/comm/nccl_communicator.h) is PlannedCommunicator over NCCL; the
// tests run the same plans over a simulated NCCL on threads (runtime/testing/nccl_sim.h), so that
// everything but the NCCL calls themselves is tested without a GPU.
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

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/allocator.h"
#include "kernels/backend.h"
#include "runtime/comm/communicator.h"

namespace spmd::runtime::nccl {

// The ToString overloads below would hide these.
using runtime::ToString;
using spmd::ToString;

// NCCL's data types and reduce ops that the plans use, with NCCL's values (ncclDataType_t,
// ncclRedOp_t; nccl_communicator.cc checks them against nccl.h).
enum class DataType : int {
  kUint8 = 1,
  kInt64 = 4,
  kFloat16 = 6,
  kFloat32 = 7,
  kFloat64 = 8,
  kBfloat16 = 9,
};
enum class RedOp : int { kSum = 0, kProd = 1, kMax = 2, kMin = 3 };

DataType ToNcclType(DType dtype);     // bool -> uint8, the others their own
DType FromNcclType(DataType type);    // uint8 -> bool
int64_t SizeOf(DataType type);        // bytes per element
RedOp ToNcclOp(ReduceOp op);          // sum, avg -> sum; max, any -> max; min, all -> min
std::string_view ToString(DataType type);  // "uint8", "float32", ...
std::string_view ToString(RedOp op);       // "sum", ...

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

// ---- The collective check (SPMD_DEBUG=collectives) -------------------------------------

// What each member says about its call before it runs: a fixed-size record the group
// all-gathers (kind, dtype, op, root, group size and hash, counts hash, number of counts,
// step, the first 8 counts). all_to_all records also carry both count vectors in a second
// exchange (AllToAllCounts).
inline constexpr int kRecordSize = 17;
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

// ---- Running plans -----------------------------------------------------------------------

// A failure a Transport reports (a timeout, an NCCL error, a handshake mismatch); what()
// says what happened, without the rank and call (the communicator adds them).
class TransportFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What carries the NCCL calls: NCCL itself (runtime/comm/nccl_communicator.cc) or the simulated
// NCCL of the tests. Every method throws TransportFailure on failure.
class Transport {
 public:
  virtual ~Transport() = default;
  // Runs `ops` as one NCCL group on the communicator of `group` (ranks = positions; the
  // world's communicator when `world`, group then being every rank in order), with the ops'
  // Refs resolved in `buffers`. Returns once the group is enqueued.
  virtual void RunGroup(const Group& group, bool world, std::span<const Op> ops,
                        std::span<void* const> buffers) = 0;
  // Returns once everything enqueued so far has completed (bounded by the timeout);
  // `what` names the wait in a timeout's message.
  virtual void Wait(const std::string& what) = 0;
  // The collective check: every member's `mine` (the same length on every member) in
  // position order.
  virtual std::vector<int64_t> AllGatherInts(const Group& group, std::span<const int64_t> mine) = 0;
  // The point-to-point check: sends headers[i] to send_peers[i] and returns the headers
  // received from recv_peers (in order; world ranks), as one exchange.
  virtual std::vector<Header> ExchangeHeaders(std::span<const int64_t> send_peers,
                                              std::span<const Header> headers,
                                              std::span<const int64_t> recv_peers) = 0;
};

// Runs `plan` (buffers[kScratch] is ignored: the scratch comes from `allocator` on `stream`,
// freed in stream order after the plan): local steps through `backend` on `stream`, groups
// through `transport`. Adds each op's `handed` to `handed` as its group is posted.
void RunPlan(const Plan& plan, std::vector<void*> buffers, const Group& group,
             Transport& transport, kernels::Backend& backend, kernels::Allocator& allocator,
             kernels::Stream stream, ByteCount& handed);

// The Communicator over a Transport: collectives run their plan and wait for it (so a
// collective has completed when it returns, and a hang fails at the collective that hangs);
// send / recv wait for Synchronize(), which runs the flush plan and waits. With the
// collective check, each collective first all-gathers its record (and all_to_all its
// counts), and the flush first exchanges a header per message. A TransportFailure, a
// mismatch, or a timeout ends the job through Fail(), with a message naming this rank, the
// call and its step: `rank 0: all_reduce(float32, count=4, op=sum) on group [0,1] at step 3:
// timed out after 2 s in ...`.
class PlannedCommunicator : public Communicator {
 public:
  // The bytes handed to the transport: the sum of the posted ops' `handed`.
  ByteCount transport_bytes() const override { return handed_; }
  ByteCount planned_bytes() const { return handed_; }

 protected:
  PlannedCommunicator(int64_t rank, int64_t world_size, CommOptions options,
                      kernels::Device device, kernels::Stream stream);
  // The transport the plans run on (set by the subclass before the first call).
  void SetTransport(Transport* transport) { transport_ = transport; }
  // Ends the job (or, on threads, this rank) with `message`; never returns.
  [[noreturn]] virtual void Fail(const std::string& message) = 0;

 private:
  void Run(const Call& call) override;
  void DoSynchronize() override;
  void CheckCollective(const Call& call);

  Transport* transport_ = nullptr;
  std::vector<Call> pending_;
  ByteCount handed_;
};

}  // namespace spmd::runtime::nccl
