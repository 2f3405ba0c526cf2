#include "runtime/comm/communicator.h"

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <set>

#include "kernels/backend_checks.h"
#include "rules/model/error.h"
#include "runtime/diagnostics/flight_recorder.h"

namespace spmd::runtime {
namespace {

int64_t Sum(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }

std::string JoinCounts(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + std::to_string(v[i]);
  return out + "]";
}

}  // namespace

std::string_view ToString(Collective kind) {
  switch (kind) {
    case Collective::kAllGather: return "all_gather";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kAllReduce: return "all_reduce";
    case Collective::kAllToAll: return "all_to_all";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kSend: return "send";
    case Collective::kRecv: return "recv";
    case Collective::kBarrier: return "barrier";
  }
  return "barrier";
}

std::string ToString(const Group& group) { return JoinCounts(group); }

std::string ToString(const CollectiveDesc& desc) {
  std::string out(ToString(desc.kind));
  out += "(";
  if (desc.kind != Collective::kBarrier) out += std::string(ToString(desc.dtype));
  switch (desc.kind) {
    case Collective::kAllGather:
      out += ", counts=" + JoinCounts(desc.counts);
      break;
    case Collective::kReduceScatter:
      out += ", counts=" + JoinCounts(desc.counts) + ", op=" + std::string(ToString(desc.op));
      break;
    case Collective::kAllReduce:
      out += ", count=" + std::to_string(desc.counts.at(0)) +
             ", op=" + std::string(ToString(desc.op));
      break;
    case Collective::kAllToAll:
      out += ", send_counts=" + JoinCounts(desc.counts) +
             ", recv_counts=" + JoinCounts(desc.recv_counts);
      break;
    case Collective::kBroadcast:
      out += ", count=" + std::to_string(desc.counts.at(0)) +
             ", root=" + std::to_string(desc.root);
      break;
    case Collective::kSend:
      out += ", count=" + std::to_string(desc.counts.at(0)) + ", to=" + std::to_string(desc.root);
      break;
    case Collective::kRecv:
      out += ", count=" + std::to_string(desc.counts.at(0)) +
             ", from=" + std::to_string(desc.root);
      break;
    case Collective::kBarrier:
      break;
  }
  out += ")";
  if (desc.kind != Collective::kSend && desc.kind != Collective::kRecv) {
    out += " on group " + ToString(desc.group);
  }
  return out;
}

ByteCount CountBytes(const CollectiveDesc& desc, int64_t p) {
  const int64_t e = ElementSize(desc.dtype);
  const auto n = static_cast<int64_t>(desc.group.size());
  if (desc.kind == Collective::kSend) return {desc.counts.at(0) * e, 0};
  if (desc.kind == Collective::kRecv) return {0, desc.counts.at(0) * e};
  if (n <= 1) return {};
  switch (desc.kind) {
    case Collective::kAllGather: {
      const int64_t mine = desc.counts[p];
      return {(n - 1) * mine * e, (Sum(desc.counts) - mine) * e};
    }
    case Collective::kReduceScatter: {
      const int64_t mine = desc.counts[p];
      return {(Sum(desc.counts) - mine) * e, (n - 1) * mine * e};
    }
    case Collective::kAllReduce: {
      const int64_t count = desc.counts.at(0);
      const int64_t chunk = count / n + (p < count % n ? 1 : 0);
      const int64_t bytes = (count - chunk + (n - 1) * chunk) * e;
      return {bytes, bytes};
    }
    case Collective::kAllToAll:
      return {(Sum(desc.counts) - desc.counts[p]) * e,
              (Sum(desc.recv_counts) - desc.recv_counts[p]) * e};
    case Collective::kBroadcast: {
      const int64_t bytes = desc.counts.at(0) * e;
      return desc.group[p] == desc.root ? ByteCount{(n - 1) * bytes, 0} : ByteCount{0, bytes};
    }
    default:
      return {};
  }
}

int64_t BufferBox::volume() const {
  int64_t v = 1;
  for (int64_t x : extent) v *= x;
  return v;
}

int64_t CommCounters::total_sent() const {
  int64_t s = 0;
  for (const PerKind& k : per_kind) s += k.sent;
  return s;
}

int64_t CommCounters::total_received() const {
  int64_t s = 0;
  for (const PerKind& k : per_kind) s += k.received;
  return s;
}

CommOptions CommOptions::FromEnv() {
  CommOptions options;
  if (const char* t = std::getenv("SPMD_COLLECTIVE_TIMEOUT_S"); t != nullptr && *t != '\0') {
    char* end = nullptr;
    const double v = std::strtod(t, &end);
    if (end == t || *end != '\0' || !(v > 0) || !std::isfinite(v)) {
      ThrowInvalid("SPMD_COLLECTIVE_TIMEOUT_S",
                   std::string("expected a positive number of seconds, got '") + t + "'");
    }
    options.timeout_s = v;
  }
  if (const char* f = std::getenv("SPMD_FLIGHT_RECORDER"); f != nullptr && *f != '\0') {
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(f, &end, 10);
    if (end == f || *end != '\0' || v < 0 || errno != 0 || v > (int64_t{1} << 24)) {
      ThrowInvalid("SPMD_FLIGHT_RECORDER",
                   std::string("expected a number of calls from 0 to 16777216, got '") + f + "'");
    }
    options.flight_entries = v;
  }
  if (const char* dir = std::getenv("SPMD_FLIGHT_DIR"); dir != nullptr) options.flight_dir = dir;
  if (const char* d = std::getenv("SPMD_DEBUG"); d != nullptr) {
    std::string_view list(d);
    while (!list.empty()) {
      const size_t comma = list.find(',');
      if (list.substr(0, comma) == "collectives") options.check_collectives = true;
      if (comma == std::string_view::npos) break;
      list.remove_prefix(comma + 1);
    }
  }
  return options;
}

// ---- the base: validation, accounting, numbering -----------------------------------------

namespace {

// Returns this rank's position in `group` after checking the group is well formed.
int64_t CheckGroup(const Group& group, int64_t rank, int64_t world_size, std::string_view what) {
  const std::string field = std::string(what) + ".group";
  if (group.empty()) ThrowInvalid(field, "empty group");
  std::set<int64_t> seen;
  int64_t position = -1;
  for (size_t i = 0; i < group.size(); ++i) {
    const int64_t r = group[i];
    if (r < 0 || r >= world_size) {
      ThrowInvalid(field, "rank " + std::to_string(r) + " is not in the world of " +
                              std::to_string(world_size) + " ranks");
    }
    if (!seen.insert(r).second) ThrowInvalid(field, "rank " + std::to_string(r) + " repeats");
    if (r == rank) position = static_cast<int64_t>(i);
  }
  if (position < 0) {
    ThrowInvalid(field, "rank " + std::to_string(rank) + " calls a collective on group " +
                            ToString(group) + " that does not contain it");
  }
  return position;
}

void CheckCounts(std::span<const int64_t> counts, size_t n, std::string_view what) {
  const std::string field = std::string(what) + ".counts";
  if (counts.size() != n) {
    ThrowInvalid(field, "expected one count per group member (" + std::to_string(n) +
                            "), got " + std::to_string(counts.size()));
  }
  for (int64_t c : counts) {
    if (c < 0) ThrowInvalid(field, "negative count " + std::to_string(c));
  }
}

void CheckCount(int64_t count, std::string_view what) {
  if (count < 0) ThrowInvalid(std::string(what) + ".count", "negative count " + std::to_string(count));
}

// Throws InvalidArgument (field `field`) unless `box` fits its array: three equal-length
// vectors, dims >= 0, 0 <= at and at + extent <= array on every dim, and a volume (of the
// array too) that cannot overflow.
void CheckBox(const BufferBox& box, const std::string& field) {
  const size_t rank = box.array.size();
  if (box.at.size() != rank || box.extent.size() != rank) {
    ThrowInvalid(field, "array, at and extent have " + std::to_string(rank) + ", " +
                            std::to_string(box.at.size()) + " and " +
                            std::to_string(box.extent.size()) + " dims");
  }
  __int128 array_volume = 1;
  for (size_t d = 0; d < rank; ++d) {
    const int64_t a = box.array[d], at = box.at[d], x = box.extent[d];
    if (a < 0 || at < 0 || x < 0 || at > a || x > a - at) {
      ThrowInvalid(field, "dim " + std::to_string(d) + ": [" + std::to_string(at) + ", " +
                              std::to_string(at) + " + " + std::to_string(x) +
                              ") does not fit in " + std::to_string(a));
    }
    array_volume *= a;
    if (array_volume > (__int128{1} << 62)) ThrowInvalid(field, "the array is too large");
  }
}

// The backends' check (kernels/backend_checks.h), naming the call's op.
void CheckOp(DType dtype, ReduceOp op, std::string_view what) {
  kernels::checks::CheckReducible(dtype, op, std::string(what) + ".op");
}

}  // namespace

void Communicator::AllGather(const void* send, void* recv, std::span<const int64_t> counts,
                             DType dtype, const Group& group) {
  Call call;
  call.position = CheckGroup(group, rank_, world_size_, "all_gather");
  CheckCounts(counts, group.size(), "all_gather");
  call.desc = {Collective::kAllGather, dtype, ReduceOp::kSum, -1, group,
               {counts.begin(), counts.end()}, {}};
  call.send = send;
  call.recv = recv;
  Enqueue(call);
}

void Communicator::ReduceScatter(const void* send, void* recv, std::span<const int64_t> counts,
                                 DType dtype, ReduceOp op, const Group& group) {
  Call call;
  call.position = CheckGroup(group, rank_, world_size_, "reduce_scatter");
  CheckCounts(counts, group.size(), "reduce_scatter");
  CheckOp(dtype, op, "reduce_scatter");
  call.desc = {Collective::kReduceScatter, dtype, op, -1, group,
               {counts.begin(), counts.end()}, {}};
  call.send = send;
  call.recv = recv;
  Enqueue(call);
}

void Communicator::AllReduce(const void* send, void* recv, int64_t count, DType dtype,
                             ReduceOp op, const Group& group) {
  Call call;
  call.position = CheckGroup(group, rank_, world_size_, "all_reduce");
  CheckCount(count, "all_reduce");
  CheckOp(dtype, op, "all_reduce");
  call.desc = {Collective::kAllReduce, dtype, op, -1, group, {count}, {}};
  call.send = send;
  call.recv = recv;
  Enqueue(call);
}

void Communicator::AllToAll(const void* send, std::span<const int64_t> send_counts, void* recv,
                            std::span<const int64_t> recv_counts, DType dtype,
                            const Group& group) {
  Call call;
  call.position = CheckGroup(group, rank_, world_size_, "all_to_all");
  CheckCounts(send_counts, group.size(), "all_to_all.send");
  CheckCounts(recv_counts, group.size(), "all_to_all.recv");
  if (send_counts[call.position] != recv_counts[call.position]) {
    ThrowInvalid("all_to_all.counts", "this rank sends itself " +
                                          std::to_string(send_counts[call.position]) +
                                          " elements but expects " +
                                          std::to_string(recv_counts[call.position]));
  }
  call.desc = {Collective::kAllToAll, dtype, ReduceOp::kSum, -1, group,
               {send_counts.begin(), send_counts.end()},
               {recv_counts.begin(), recv_counts.end()}};
  call.send = send;
  call.recv = recv;
  Enqueue(call);
}

void Communicator::Broadcast(void* buffer, int64_t count, DType dtype, int64_t root,
                             const Group& group) {
  Call call;
  call.position = CheckGroup(group, rank_, world_size_, "broadcast");
  CheckCount(count, "broadcast");
  if (std::find(group.begin(), group.end(), root) == group.end()) {
    ThrowInvalid("broadcast.root", "root " + std::to_string(root) + " is not in group " +
                                       ToString(group));
  }
  call.desc = {Collective::kBroadcast, dtype, ReduceOp::kSum, root, group, {count}, {}};
  call.send = buffer;
  call.recv = buffer;
  Enqueue(call);
}

void Communicator::Send(const void* buffer, int64_t count, DType dtype, int64_t peer) {
  CheckCount(count, "send");
  if (peer < 0 || peer >= world_size_ || peer == rank_) {
    ThrowInvalid("send.peer", "peer " + std::to_string(peer) + " is not another rank");
  }
  Enqueue(P2pCall(Collective::kSend, dtype, peer, count, buffer, nullptr));
}

void Communicator::Recv(void* buffer, int64_t count, DType dtype, int64_t peer) {
  CheckCount(count, "recv");
  if (peer < 0 || peer >= world_size_ || peer == rank_) {
    ThrowInvalid("recv.peer", "peer " + std::to_string(peer) + " is not another rank");
  }
  Enqueue(P2pCall(Collective::kRecv, dtype, peer, count, nullptr, buffer));
}

Communicator::Call& Communicator::P2pCall(Collective kind, DType dtype, int64_t peer, int64_t count,
                                          const void* send, void* recv) {
  Call& call = p2p_call_;  // its vectors keep their capacity: a warm message allocates nothing
  call.desc.kind = kind;
  call.desc.dtype = dtype;
  call.desc.op = ReduceOp::kSum;
  call.desc.root = peer;
  call.desc.group.assign({rank_, peer});
  call.desc.counts.assign(1, count);
  call.desc.recv_counts.clear();
  call.position = 0;
  call.send = send;
  call.recv = recv;
  call.box.reset();
  return call;
}

void Communicator::SendBox(const void* base, const BufferBox& box, DType dtype, int64_t peer) {
  CheckBox(box, "send.box");
  if (peer < 0 || peer >= world_size_ || peer == rank_) {
    ThrowInvalid("send.peer", "peer " + std::to_string(peer) + " is not another rank");
  }
  Call call;
  call.desc = {Collective::kSend, dtype, ReduceOp::kSum, peer, {rank_, peer}, {box.volume()}, {}};
  call.send = base;
  call.box = box;
  Enqueue(call);
}

void Communicator::RecvBox(void* base, const BufferBox& box, DType dtype, int64_t peer) {
  CheckBox(box, "recv.box");
  if (peer < 0 || peer >= world_size_ || peer == rank_) {
    ThrowInvalid("recv.peer", "peer " + std::to_string(peer) + " is not another rank");
  }
  Call call;
  call.desc = {Collective::kRecv, dtype, ReduceOp::kSum, peer, {rank_, peer}, {box.volume()}, {}};
  call.recv = base;
  call.box = box;
  Enqueue(call);
}

void Communicator::Barrier(const Group& group) {
  Call call;
  call.position = CheckGroup(group, rank_, world_size_, "barrier");
  call.desc = {Collective::kBarrier, DType::kFloat64, ReduceOp::kSum, -1, group, {}, {}};
  Enqueue(call);
}

namespace {
// Adds the wall time of its scope to `seconds` (also when the scope throws).
class ScopeTimer {
 public:
  explicit ScopeTimer(double& seconds) : seconds_(seconds), start_(std::chrono::steady_clock::now()) {}
  ~ScopeTimer() {
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  ScopeTimer(const ScopeTimer&) = delete;
  ScopeTimer& operator=(const ScopeTimer&) = delete;

 private:
  double& seconds_;
  std::chrono::steady_clock::time_point start_;
};
}  // namespace

Communicator::Communicator(int64_t rank, int64_t world_size, CommOptions options)
    : rank_(rank), world_size_(world_size), options_(std::move(options)) {
  if (options_.flight_entries > 0) {
    recorder_ = std::make_unique<FlightRecorder>(rank_, world_size_, options_.flight_entries,
                                                 options_.flight_dir);
  }
}

Communicator::Communicator(int64_t rank, int64_t world_size, CommOptions options,
                           kernels::Device device, kernels::Stream stream)
    : Communicator(rank, world_size, std::move(options)) {
  device_ = device;
  stream_ = stream;
}

Communicator::~Communicator() = default;

void Communicator::SetPhase(std::string_view phase) {
  if (recorder_) recorder_->SetPhase(phase);
}

std::string Communicator::DumpFlightRecord(const char* reason, bool final) const {
  return recorder_ ? recorder_->Dump(reason, final) : std::string();
}

void Communicator::Synchronize() {
  const ScopeTimer timer(counters_.seconds);
  try {
    DoSynchronize();
  } catch (const CommError& e) {
    DumpFlightRecord(e.what(), /*final=*/true);
    throw;
  }
  if (recorder_) recorder_->CompletedPointToPoint();
}

void Communicator::Enqueue(Call& call) {
  call.step = ++step_;
  last_call_ = call.desc;
  CommCounters::PerKind& k = counters_.per_kind[static_cast<int>(call.desc.kind)];
  const ByteCount bytes = CountBytes(call.desc, call.position);
  k.calls += 1;
  k.sent += bytes.sent;
  k.received += bytes.received;
  const int64_t record = recorder_ ? recorder_->Enqueued(call.desc, call.step, bytes) : -1;

  const CollectiveDesc& d = call.desc;
  if (d.group.size() == 1) {  // moves nothing: the result is this rank's own input
    const int64_t e = ElementSize(d.dtype);
    switch (d.kind) {
      case Collective::kAllGather:
      case Collective::kReduceScatter:
      case Collective::kAllReduce:
      case Collective::kAllToAll: {
        const int64_t count = d.counts.at(0);
        if (count > 0 && call.send != call.recv) {
          backend().Copy(call.recv, call.send, static_cast<size_t>(count * e), stream_);
        }
        if (d.kind == Collective::kAllReduce || d.kind == Collective::kReduceScatter) {
          if (d.op == ReduceOp::kAny || d.op == ReduceOp::kAll) {
            backend().ToTruth(call.recv, call.recv, count, d.dtype, stream_);
          }
          // avg over one member divides by 1: nothing to do.
        }
        if (recorder_) recorder_->Completed(record);
        return;
      }
      case Collective::kBroadcast:
      case Collective::kBarrier:
        if (recorder_) recorder_->Completed(record);
        return;
      default:
        break;  // send / recv have group {rank, peer}: never size 1
    }
  }
  const ScopeTimer timer(counters_.seconds);
  if (recorder_) recorder_->Started(record);
  try {
    Run(call);
  } catch (const CommError& e) {
    DumpFlightRecord(e.what(), /*final=*/true);
    throw;
  }
  // Collectives complete before Run returns; send / recv complete at Synchronize.
  if (recorder_ && d.kind != Collective::kSend && d.kind != Collective::kRecv) {
    recorder_->Completed(record);
  }
}

std::string Communicator::Describe(const Call& call) const {
  return "rank " + std::to_string(rank_) + ": " + ToString(call.desc) + " at step " +
         std::to_string(call.step);
}

std::string FailureMessage(const Communicator& comm, std::string_view what) {
  std::string out = "rank " + std::to_string(comm.rank()) + " failed ";
  if (comm.last_call()) {
    out += "at step " + std::to_string(comm.step()) + " (" + ToString(*comm.last_call()) + ")";
  } else {
    out += "before any collective";
  }
  return out + ": " + std::string(what);
}

}  // namespace spmd::runtime
