// Communicator: the collectives the runtime moves bytes with, on sub-groups of the world.
//
// Shape (stream-ordered, so that NCCL fits behind the same interface):
// - every call is enqueued on the communicator's stream (`stream()`, on `device()`), in
//   call order; `Synchronize()` waits until every enqueued call has completed. A backend
//   may complete a call before it returns (the MPI and thread backends complete
//   collectives eagerly, every member done with every buffer, and point-to-point calls at
//   `Synchronize()`). What callers may rely on:
//   * collectives (all_gather, reduce_scatter, all_reduce, all_to_all, broadcast) are
//     stream-ordered: work a Backend (kernels/backend.h) enqueues on the communicator's
//     stream after the call sees its results, the call's buffers may be freed by
//     stream-ordered deallocation on that stream, and the call has completed once the
//     Backend of `device()` has synchronized that stream (Backend::Synchronize), which is
//     when the host may read the results by host pointer.
//   * point-to-point calls (send, recv and their box forms): their buffers stay valid, and
//     are neither read nor written by anyone else, until the next `Synchronize()` returns.
// - a group is an ordered list of distinct world ranks (process ids): the ranks along one
//   or more mesh axes (`Mesh::GroupOf`), in any order. A rank's *position* is its index in
//   the list; per-rank chunks are laid out in position order. Every member calls the same
//   collective with the same group (same order) and matching sizes; non-members do not
//   call it. A group of one rank is legal and moves nothing (a local copy).
// - element types: float64, float32, int64, bool (bool: one byte per element holding 0 or
//   1; data movement and reductions max/min/prod/any/all only), bfloat16 and float16
//   (2 bytes; reductions compute each pairwise step in float32 and round it, as the
//   Backend's Reduce does).
//
// Reduce ops (SEMANTICS.md §1-2): sum, prod, max, min elementwise; avg = sum, then divided
// by the group size (int64: truncating division); any / all treat an element as true when
// it is nonzero (NaN is nonzero) and produce 1 or 0 in the element type.
//
// Byte accounting (per rank, per call; e = element size in bytes, n = group size, p = this
// rank's position; `CountBytes` is the one place that computes it; a group of one moves 0):
//   all_gather(counts)       sent (n-1)*counts[p]*e           (its chunk to each other rank)
//                            received (sum(counts)-counts[p])*e  (every other rank's chunk)
//   reduce_scatter(counts)   sent (sum(counts)-counts[p])*e   (each other rank's chunk, to it)
//                            received (n-1)*counts[p]*e       (its chunk from each other rank)
//   all_reduce(count)        ring = reduce_scatter then all_gather over the balanced split
//                            of `count` (chunk q has count/n elements, plus one if
//                            q < count%n): sent = received = (count - c[p] + (n-1)*c[p])*e,
//                            which is 2(n-1)/n * count * e when n divides count.
//   all_to_all(sc, rc)       sent sum_{q != p} sc[q] * e, received sum_{q != p} rc[q] * e
//   broadcast(count, root)   root: sent (n-1)*count*e; others: received count*e
//   send(count) / recv(count) sent / received count*e
//   barrier                  nothing
//
// Failure behaviour (a failing rank must never leave the others hanging; docs/RUNTIME.md):
// every wait is bounded by `CommOptions::timeout_s` (env SPMD_COLLECTIVE_TIMEOUT_S, default
// 60 s). On timeout, or on a mismatch found by the collective check (env
// SPMD_DEBUG=collectives: every collective first exchanges a descriptor among its group),
// the backend fails the whole job with a message naming this rank, the collective, the
// group and the step (a per-communicator count of calls): the MPI backend prints it and
// calls MPI_Abort (on a timeout its watchdog thread prints it and exits the process, and
// mpirun ends the rest: mpi_communicator.h); the thread backend throws `CommError` in every
// rank (see thread_communicator.h).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/backend.h"
#include "kernels/device.h"
#include "rules/model/dist_attr.h"
#include "rules/model/dtype.h"
#include "rules/model/half.h"

namespace spmd::runtime {

// Ordered distinct world ranks; a rank's position is its index.
using Group = std::vector<int64_t>;

enum class Collective {
  kAllGather,
  kReduceScatter,
  kAllReduce,
  kAllToAll,
  kBroadcast,
  kSend,
  kRecv,
  kBarrier,
};
inline constexpr int kNumCollectives = 8;
std::string_view ToString(Collective kind);  // "all_gather", "reduce_scatter", ...

// Size of one element in bytes (rules/model/dtype.h; bool: 1, bfloat16 and float16: 2).
using spmd::ElementSize;

template <class T>
constexpr DType DTypeOf();
template <>
constexpr DType DTypeOf<double>() { return DType::kFloat64; }
template <>
constexpr DType DTypeOf<float>() { return DType::kFloat32; }
template <>
constexpr DType DTypeOf<int64_t>() { return DType::kInt64; }
template <>
constexpr DType DTypeOf<bool>() { return DType::kBool; }
template <>
constexpr DType DTypeOf<BFloat16>() { return DType::kBFloat16; }
template <>
constexpr DType DTypeOf<Float16>() { return DType::kFloat16; }

// One call as every member of its group sees it: what the collective check compares and
// what failure messages print.
struct CollectiveDesc {
  Collective kind = Collective::kBarrier;
  DType dtype = DType::kFloat64;
  ReduceOp op = ReduceOp::kSum;  // all_reduce, reduce_scatter
  int64_t root = -1;             // broadcast: root's world rank; send / recv: the peer
  Group group;                   // send / recv: {this rank, peer}
  // all_gather, reduce_scatter: one count per position (identical on every member);
  // all_reduce, broadcast, send, recv: {count}; all_to_all: this rank's send counts per
  // position; barrier: empty.
  std::vector<int64_t> counts;
  std::vector<int64_t> recv_counts;  // all_to_all: this rank's receive counts per position

  bool operator==(const CollectiveDesc&) const = default;
};
// Where a piece lies in a row-major array: the box of `extent` elements per dim starting at
// `at`, in an array of shape `array` (elements of the call's dtype; all three the same
// length, 0 for a 0-d array holding one element).
struct BufferBox {
  std::vector<int64_t> array;
  std::vector<int64_t> at;
  std::vector<int64_t> extent;
  int64_t volume() const;
};

// Prints `all_reduce(float32, count=16, op=sum) on group [3,1]`.
std::string ToString(const CollectiveDesc& desc);
std::string ToString(const Group& group);  // `[3,1]`

struct ByteCount {
  int64_t sent = 0;
  int64_t received = 0;
  bool operator==(const ByteCount&) const = default;
};

// The byte accounting above for the member at `position` of `desc.group` (send / recv:
// position is ignored).
ByteCount CountBytes(const CollectiveDesc& desc, int64_t position);

struct CommCounters {
  struct PerKind {
    int64_t calls = 0;
    int64_t sent = 0;
    int64_t received = 0;
    bool operator==(const PerKind&) const = default;
  };
  std::array<PerKind, kNumCollectives> per_kind{};
  // Wall time spent inside the backend (its Run and Synchronize hooks), in seconds: what
  // the collectives themselves took on this rank, waiting for peers included. Everything
  // else a caller spends (packing, allocation, bookkeeping) is outside it.
  double seconds = 0;

  const PerKind& operator[](Collective kind) const { return per_kind[static_cast<int>(kind)]; }
  int64_t total_sent() const;
  int64_t total_received() const;
};

struct CommOptions {
  double timeout_s = 60;           // the bound on every wait
  bool check_collectives = false;  // exchange and compare descriptors before each collective
  // The flight recorder (runtime/diagnostics/flight_recorder.h): the number of calls kept
  // (0: off) and the directory its dumps go to (empty: none written).
  int64_t flight_entries = 256;
  std::string flight_dir;

  // timeout_s from SPMD_COLLECTIVE_TIMEOUT_S (seconds, > 0), check_collectives from
  // SPMD_DEBUG containing `collectives` (a comma-separated list), flight_entries from
  // SPMD_FLIGHT_RECORDER (an integer >= 0), flight_dir from SPMD_FLIGHT_DIR.
  static CommOptions FromEnv();
};

class FlightRecorder;

// A failure of the job seen by one rank: a timeout, a collective mismatch, or another
// rank's failure (thread backend). what() is the full message.
class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Communicator {
 public:
  virtual ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int64_t rank() const { return rank_; }              // this process's world rank
  int64_t world_size() const { return world_size_; }
  const CommOptions& options() const { return options_; }
  // The device of the buffers this communicator is handed (host for the MPI and thread
  // backends) and the stream its calls are ordered on (host: the null stream).
  kernels::Device device() const { return device_; }
  kernels::Stream stream() const { return stream_; }

  // recv (sum(counts) elements) = the members' send buffers (counts[position] elements
  // each) concatenated in position order.
  void AllGather(const void* send, void* recv, std::span<const int64_t> counts, DType dtype,
                 const Group& group);
  // send has sum(counts) elements, chunk q (counts[q] elements, position order) for the
  // member at position q; recv (counts[p] elements) = op over the members of chunk p.
  void ReduceScatter(const void* send, void* recv, std::span<const int64_t> counts,
                     DType dtype, ReduceOp op, const Group& group);
  // recv = op over the members of send (count elements each). send == recv is allowed.
  void AllReduce(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op,
                 const Group& group);
  // send holds send_counts[q] elements for position q, packed in position order; recv gets
  // recv_counts[q] elements from position q, packed in position order. The member at q
  // must send this rank exactly recv_counts[q] elements.
  void AllToAll(const void* send, std::span<const int64_t> send_counts, void* recv,
                std::span<const int64_t> recv_counts, DType dtype, const Group& group);
  // buffer (count elements) on every member = root's buffer; root is a world rank in group.
  void Broadcast(void* buffer, int64_t count, DType dtype, int64_t root, const Group& group);
  // Point to point with another world rank; messages between two ranks arrive in order.
  // Both complete by the next Synchronize(), so Send; Recv; Synchronize() exchanges safely.
  void Send(const void* buffer, int64_t count, DType dtype, int64_t peer);
  void Recv(void* buffer, int64_t count, DType dtype, int64_t peer);
  // The same for a piece that lies as `box` in the array at `base`: it is read from (written
  // into) its place, strided, without a separate packing pass where the backend can (MPI:
  // a subarray datatype). On the wire and in the counters it is box.volume() elements, so
  // a SendBox matches a Recv or RecvBox of that count. InvalidArgument ("send.box" /
  // "recv.box") for a box that does not fit its array.
  void SendBox(const void* base, const BufferBox& box, DType dtype, int64_t peer);
  void RecvBox(void* base, const BufferBox& box, DType dtype, int64_t peer);
  // Returns once every member has called it.
  void Barrier(const Group& group);
  // Waits until every call enqueued so far has completed.
  void Synchronize();

  const CommCounters& counters() const { return counters_; }
  // The bytes this rank's backend really handed to its transport, counted by the backend
  // itself where it hands them over, apart from CountBytes and counters(): MPI, from the
  // counts and datatypes (MPI_Type_size) of every MPI data call it posts; threads, the bytes
  // copied out of or into another rank's memory (sent: read from this rank by another;
  // received: read by this rank from another). Payload only: the collective check's
  // descriptors and headers and the group handshake are not counted. A group of one rank
  // moves nothing. Monotone; the tests compare its change over a step with the plan.
  virtual ByteCount transport_bytes() const = 0;
  void ResetCounters() { counters_ = {}; }
  // The number of calls made so far (the step of the last call; 0 before any call).
  int64_t step() const { return step_; }
  // The last call made, for failure messages.
  const std::optional<CollectiveDesc>& last_call() const { return last_call_; }

  // The flight recorder (runtime/diagnostics/flight_recorder.h): the label copied into the
  // record of every later call, e.g. `step 3 backward`; and a dump of the record on request (into
  // options().flight_dir; returns the file, or "" when none is written). The backends dump
  // it themselves on a timeout or error; null when the recorder is off.
  void SetPhase(std::string_view phase);
  // `final`: the dump of a failure, which later signal dumps do not overwrite.
  std::string DumpFlightRecord(const char* reason = "request", bool final = false) const;
  const FlightRecorder* flight_recorder() const { return recorder_.get(); }

 protected:
  Communicator(int64_t rank, int64_t world_size, CommOptions options);
  // A backend whose buffers live on `device` and whose calls are ordered on `stream`.
  Communicator(int64_t rank, int64_t world_size, CommOptions options, kernels::Device device,
               kernels::Stream stream);

  // One member's view of a call, with its buffers; `position` is this rank's index in the
  // group (send / recv: 0).
  struct Call {
    CollectiveDesc desc;
    int64_t position = 0;
    int64_t step = 0;
    const void* send = nullptr;
    void* recv = nullptr;  // broadcast: the buffer
    // SendBox / RecvBox: where the piece lies in `send` / `recv` (kind kSend / kRecv).
    std::optional<BufferBox> box;
  };
  // Backends implement one hook; the base has validated the call (group contains this
  // rank, sizes match), counted its bytes and numbered it. Groups of one rank never reach
  // the backend: the base copies locally.
  virtual void Run(const Call& call) = 0;
  virtual void DoSynchronize() = 0;

  // The Backend of device(): every local copy, reduction and truth conversion of a
  // communicator (the base's group-of-one paths, the backends' local reductions) goes
  // through it, so that a device communicator shares them.
  kernels::Backend& backend() const { return kernels::BackendFor(device_); }

  // Prints `rank R: <what> at step S` style messages in one format for every backend.
  std::string Describe(const Call& call) const;

 private:
  void Enqueue(Call& call);
  // The call of a Send / Recv of `count` elements with `peer`, built in p2p_call_.
  Call& P2pCall(Collective kind, DType dtype, int64_t peer, int64_t count, const void* send,
                void* recv);

  int64_t rank_;
  int64_t world_size_;
  CommOptions options_;
  kernels::Device device_;
  kernels::Stream stream_;
  CommCounters counters_;
  int64_t step_ = 0;
  std::optional<CollectiveDesc> last_call_;
  std::unique_ptr<FlightRecorder> recorder_;
  Call p2p_call_;  // P2pCall's, reused
};

// The message of a rank that failed with `what` after its last call, e.g.
// `rank 1 failed at step 3 (all_reduce(float64, count=8, op=sum) on group [0,1]): boom`
// (`rank 1 failed before any collective: boom` when it made none).
std::string FailureMessage(const Communicator& comm, std::string_view what);

}  // namespace spmd::runtime
