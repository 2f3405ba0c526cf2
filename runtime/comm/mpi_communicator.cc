#include "runtime/comm/mpi_communicator.h"

#include "runtime/comm/collective_check.h"

#include <algorithm>
#include <array>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <numeric>
#include <thread>

#include "rules/model/error.h"

namespace spmd::runtime {
namespace {

using Clock = std::chrono::steady_clock;

// Tags on the private world duplicate.
constexpr int kDataTag = 1;
constexpr int kHeaderTag = 2;  // SPMD_DEBUG=collectives: {dtype, count, step} before each send
constexpr int kGroupTag = 3;   // the handshake before creating a group's communicator
constexpr int kCreateTag = 4;  // MPI_Comm_create_group

MPI_Datatype ToMpi(DType dtype) {
  switch (dtype) {
    case DType::kFloat64: return MPI_DOUBLE;
    case DType::kFloat32: return MPI_FLOAT;
    case DType::kInt64: return MPI_INT64_T;
    case DType::kBool: return MPI_C_BOOL;
    case DType::kBFloat16:
    case DType::kFloat16: return MPI_UINT16_T;  // moved as bytes; reduced by TwoByteOp
  }
  return MPI_DOUBLE;
}

// MPI has no 2-byte float arithmetic: user ops that run the host Backend's Reduce (each
// step in float32, rounded once; inout = inout op in, commutative).
template <DType kType, ReduceOp kOp>
void TwoByteReduce(void* in, void* inout, int* len, MPI_Datatype*) {
  kernels::BackendFor(kernels::Device::Host()).Reduce(inout, in, *len, kType, kOp, kernels::Stream{});
}

template <DType kType>
MPI_Op TwoByteOp(ReduceOp op) {
  static MPI_Op ops[4] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};  // sum, prod, max, min
  static MPI_User_function* const fns[4] = {
      &TwoByteReduce<kType, ReduceOp::kSum>, &TwoByteReduce<kType, ReduceOp::kProd>,
      &TwoByteReduce<kType, ReduceOp::kMax>, &TwoByteReduce<kType, ReduceOp::kMin>};
  int k = 0;  // avg sums (then divides); any / all combine truth values as max / min
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: k = 0; break;
    case ReduceOp::kProd: k = 1; break;
    case ReduceOp::kMax:
    case ReduceOp::kAny: k = 2; break;
    case ReduceOp::kMin:
    case ReduceOp::kAll: k = 3; break;
  }
  if (ops[k] == MPI_OP_NULL) MPI_Op_create(fns[k], 1, &ops[k]);
  return ops[k];
}

MPI_Op ToMpi(ReduceOp op, DType dtype) {
  if (dtype == DType::kBFloat16) return TwoByteOp<DType::kBFloat16>(op);
  if (dtype == DType::kFloat16) return TwoByteOp<DType::kFloat16>(op);
  if (dtype == DType::kBool) {
    return op == ReduceOp::kMax || op == ReduceOp::kAny ? MPI_LOR : MPI_LAND;
  }
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return MPI_SUM;
    case ReduceOp::kProd: return MPI_PROD;
    case ReduceOp::kMax:
    case ReduceOp::kAny: return MPI_MAX;  // on 0/1 values
    case ReduceOp::kMin:
    case ReduceOp::kAll: return MPI_MIN;
  }
  return MPI_SUM;
}

int ToInt(int64_t v, std::string_view what) {
  if (v > INT_MAX) {
    ThrowUnsupported(std::string(what), std::to_string(v) +
                                            " elements: MPI counts and displacements must fit in an int");
  }
  return static_cast<int>(v);
}

std::vector<int> ToInts(const std::vector<int64_t>& v, std::string_view what) {
  std::vector<int> out;
  out.reserve(v.size());
  for (int64_t x : v) out.push_back(ToInt(x, what));
  return out;
}

std::vector<int> Displacements(const std::vector<int64_t>& counts, std::string_view what) {
  std::vector<int> out;
  int64_t offset = 0;
  for (int64_t c : counts) {
    out.push_back(ToInt(offset, what));
    offset += c;
  }
  ToInt(offset, what);
  return out;
}

// Returns the bytes of `count` items of `type` as MPI sizes them (MPI_Type_size: the data,
// not the extent, so a subarray type counts the elements it selects).
int64_t TypeBytes(MPI_Datatype type, int64_t count) {
  int size = 0;
  MPI_Type_size(type, &size);
  return count * size;
}

// Returns the sum of counts[q] over every position q but `self`.
int64_t OthersSum(const std::vector<int>& counts, int64_t self) {
  int64_t sum = 0;
  for (size_t q = 0; q < counts.size(); ++q) {
    if (static_cast<int64_t>(q) != self) sum += counts[q];
  }
  return sum;
}

std::string Seconds(double s) {
  std::string out = std::to_string(s);
  out.erase(out.find_last_not_of('0') + 1);
  if (!out.empty() && out.back() == '.') out.pop_back();
  return out + " s";
}

int WorldRank(MPI_Comm comm) {
  int r = 0;
  MPI_Comm_rank(comm, &r);
  return r;
}

int WorldSize(MPI_Comm comm) {
  int s = 0;
  MPI_Comm_size(comm, &s);
  return s;
}

}  // namespace

// ---- the watchdog ---------------------------------------------------------------------------

// Bounds every blocking MPI call of the communicator: Arm before it, Disarm after it. A
// thread of its own sleeps until the armed call's deadline (when nothing is armed, for one
// timeout at a time), so arming costs one uncontended lock and no wake-up; if the same
// call is still armed at its deadline, the thread ends the process (Fire). It never calls
// MPI: MPI_Init gives MPI_THREAD_SINGLE, under which only the main thread may.
class MpiCommunicator::Watchdog {
 public:
  explicit Watchdog(MpiCommunicator& owner) : owner_(owner), thread_([this] { Loop(); }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }
  void Arm(const Call& call, const char* what) {
    std::lock_guard<std::mutex> lock(mu_);
    call_ = &call;
    what_ = what;
    deadline_ = Clock::now() + Timeout();
  }
  void Disarm() {
    std::lock_guard<std::mutex> lock(mu_);
    call_ = nullptr;
  }

 private:
  Clock::duration Timeout() const {  // at most 1e8 s (3 years): the deadline cannot overflow
    return std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(std::min(owner_.options().timeout_s, 1e8)));
  }
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      if (call_ != nullptr && Clock::now() >= deadline_) {
        // Still armed at its deadline: the main thread is blocked inside MPI and cannot
        // disarm (it would wait on mu_), so *call_ stays valid while the message is made.
        owner_.Fire(Describe(), what_);
      }
      wake_.wait_until(lock, call_ != nullptr ? deadline_ : Clock::now() + Timeout());
    }
  }
  std::string Describe() const { return owner_.Describe(*call_); }

  MpiCommunicator& owner_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  const Call* call_ = nullptr;
  const char* what_ = "";
  Clock::time_point deadline_;
  std::thread thread_;  // last: started once the state above exists
};

void MpiCommunicator::Fire(const std::string& call, const char* what) const {
  const std::string message =
      call + ": timed out after " + Seconds(options().timeout_s) + " in " + what;
  std::fprintf(stderr, "spmd: %s\n", message.c_str());
  const std::string dump = DumpFlightRecord(message.c_str(), /*final=*/true);
  if (!dump.empty()) std::fprintf(stderr, "spmd: rank %lld: flight record in %s\n", static_cast<long long>(rank()), dump.c_str());
  std::fflush(stderr);
  // Not MPI_Abort (this is not the main thread). A rank that exits without MPI_Finalize
  // makes mpirun end the whole job; the other members of the hung call time out too.
  std::_Exit(kTimeoutExitCode);
}

MpiCommunicator::MpiCommunicator(MPI_Comm world, CommOptions options)
    : Communicator(WorldRank(world), WorldSize(world), options), parent_(world) {
  MPI_Comm_dup(world, &world_);
  MPI_Comm_set_errhandler(world_, MPI_ERRORS_RETURN);
  watchdog_ = std::make_unique<Watchdog>(*this);
}

MpiCommunicator::~MpiCommunicator() {
  watchdog_.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (auto& [group, comm] : group_comms_) MPI_Comm_free(&comm);
  MPI_Comm_free(&world_);
}

void MpiCommunicator::AbortJob(const std::string& message) const {
  std::fprintf(stderr, "spmd: %s\n", message.c_str());
  const std::string dump = DumpFlightRecord(message.c_str(), /*final=*/true);
  if (!dump.empty()) std::fprintf(stderr, "spmd: rank %lld: flight record in %s\n", static_cast<long long>(rank()), dump.c_str());
  std::fflush(stderr);
  MPI_Abort(parent_, 1);
  std::abort();  // MPI_Abort does not return; this keeps [[noreturn]] honest
}

void MpiCommunicator::Check(int mpi_error, const Call& call, const char* what) {
  if (mpi_error == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(mpi_error, text, &length);
  AbortJob(Describe(call) + ": " + what + " failed: " + std::string(text, length));
}

void MpiCommunicator::Wait(MPI_Request* requests, int count, const Call& call, const char* what) {
  Blocking(call, what, [&] { return MPI_Waitall(count, requests, MPI_STATUSES_IGNORE); });
}

void MpiCommunicator::Blocking(const Call& call, const char* what, const std::function<int()>& mpi_call) {
  watchdog_->Arm(call, what);
  const int error = mpi_call();
  watchdog_->Disarm();
  Check(error, call, what);
}

MPI_Comm MpiCommunicator::GroupComm(const Call& call) {
  const Group& group = call.desc.group;
  if (auto it = group_comms_.find(group); it != group_comms_.end()) return it->second;

  // Handshake: every member tells every other one which group it is creating. Polled, so a
  // member that never comes times out; a member with another group (or order) is named.
  const int64_t n = static_cast<int64_t>(group.size());
  const int64_t mine = nccl::HashValues(group);
  std::vector<int64_t> theirs(n, 0);
  std::vector<MPI_Request> requests;
  for (int64_t q = 0; q < n; ++q) {
    if (group[q] == rank()) continue;
    requests.emplace_back();
    Check(MPI_Irecv(&theirs[q], 1, MPI_INT64_T, static_cast<int>(group[q]), kGroupTag, world_,
                    &requests.back()),
          call, "MPI_Irecv (group handshake)");
    requests.emplace_back();
    Check(MPI_Isend(&mine, 1, MPI_INT64_T, static_cast<int>(group[q]), kGroupTag, world_,
                    &requests.back()),
          call, "MPI_Isend (group handshake)");
  }
  Wait(requests, call, "creating the group's communicator");
  for (int64_t q = 0; q < n; ++q) {
    if (group[q] != rank() && theirs[q] != mine) {
      AbortJob(Describe(call) + ": collective mismatch: rank " + std::to_string(group[q]) +
               " calls a collective on another group (other members or another order)");
    }
  }

  MPI_Group world_group;
  MPI_Group sub_group;
  MPI_Comm comm;
  std::vector<int> ranks(group.begin(), group.end());
  MPI_Comm_group(world_, &world_group);
  MPI_Group_incl(world_group, static_cast<int>(n), ranks.data(), &sub_group);
  Check(MPI_Comm_create_group(world_, sub_group, kCreateTag, &comm), call, "MPI_Comm_create_group");
  MPI_Group_free(&sub_group);
  MPI_Group_free(&world_group);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  group_comms_.emplace(group, comm);
  return comm;
}

void MpiCommunicator::CheckCollective(const Call& call, MPI_Comm comm) {
  const CollectiveDesc& d = call.desc;
  const auto n = static_cast<int64_t>(d.group.size());
  // The records and their comparison are the NCCL backend's too (runtime/comm/collective_check.h).
  const nccl::Record mine = nccl::MakeRecord(d, call.step);
  std::vector<nccl::Record> all(n);
  Blocking(call, "MPI_Allgather (collective check)", [&] {
    return MPI_Allgather(mine.data(), nccl::kRecordSize, MPI_INT64_T, all.data(), nccl::kRecordSize,
                         MPI_INT64_T, comm);
  });
  const std::string mismatch = nccl::CompareRecords(all, d.group);
  if (!mismatch.empty()) AbortJob(Describe(call) + ": " + mismatch);
  if (d.kind != Collective::kAllToAll) return;

  // all_to_all: what each member sends this rank must be what this rank expects.
  std::vector<int64_t> incoming(n);
  Blocking(call, "MPI_Alltoall (collective check)", [&] {
    return MPI_Alltoall(d.counts.data(), 1, MPI_INT64_T, incoming.data(), 1, MPI_INT64_T, comm);
  });
  std::array<int64_t, 4> verdict{n, 0, 0, 0};  // {first bad sender position or n, to, sent, expected}
  for (int64_t q = 0; q < n; ++q) {
    if (incoming[q] != d.recv_counts[q]) {
      verdict = {q, call.position, incoming[q], d.recv_counts[q]};
      break;
    }
  }
  std::vector<std::array<int64_t, 4>> verdicts(n);
  Blocking(call, "MPI_Allgather (collective check)", [&] {
    return MPI_Allgather(verdict.data(), 4, MPI_INT64_T, verdicts.data(), 4, MPI_INT64_T, comm);
  });
  for (const auto& v : verdicts) {
    if (v[0] < n) {
      AbortJob(Describe(call) + ": collective mismatch: rank " + std::to_string(d.group[v[0]]) +
               " sends " + std::to_string(v[2]) + " elements to rank " +
               std::to_string(d.group[v[1]]) + ", which expects " + std::to_string(v[3]));
    }
  }
}

void MpiCommunicator::Run(const Call& call) {
  const CollectiveDesc& d = call.desc;
  const MPI_Datatype type = ToMpi(d.dtype);
  const int64_t e = ElementSize(d.dtype);

  if (d.kind == Collective::kSend || d.kind == Collective::kRecv) {
    const int peer = static_cast<int>(d.root);
    const int count = ToInt(d.counts[0], ToString(d.kind));
    if (open_ == pending_.size()) pending_.emplace_back();
    Pending& pending = pending_[open_];
    pending.call = call;
    pending.count = 0;
    pending.header.reset();
    if (options().check_collectives) {
      pending.header = std::make_unique<std::array<int64_t, 3>>(
          std::array<int64_t, 3>{static_cast<int64_t>(d.dtype), d.counts[0], call.step});
      MPI_Request* header = &pending.requests[pending.count++];
      Check(d.kind == Collective::kSend
                ? MPI_Isend(pending.header->data(), 3, MPI_INT64_T, peer, kHeaderTag, world_, header)
                : MPI_Irecv(pending.header->data(), 3, MPI_INT64_T, peer, kHeaderTag, world_, header),
            call, "posting the header");
    }
    // A box of rank >= 1 holding elements travels as one subarray datatype: MPI reads or
    // writes the strided piece in place (same type signature as `count` elements, so it
    // matches a contiguous Send / Recv). The type may be freed once the call is posted.
    MPI_Datatype wire = type;
    int wire_count = count;
    const bool subarray = call.box && !call.box->array.empty() && count > 0;
    if (subarray) {
      const std::vector<int> sizes = ToInts(call.box->array, "box.array");
      const std::vector<int> subsizes = ToInts(call.box->extent, "box.extent");
      const std::vector<int> starts = ToInts(call.box->at, "box.at");
      Check(MPI_Type_create_subarray(static_cast<int>(sizes.size()), sizes.data(), subsizes.data(),
                                     starts.data(), MPI_ORDER_C, type, &wire),
            call, "MPI_Type_create_subarray");
      Check(MPI_Type_commit(&wire), call, "MPI_Type_commit");
      wire_count = 1;
    }
    MPI_Request* data = &pending.requests[pending.count++];
    Check(d.kind == Collective::kSend
              ? MPI_Isend(call.send, wire_count, wire, peer, kDataTag, world_, data)
              : MPI_Irecv(call.recv, wire_count, wire, peer, kDataTag, world_, data),
          call, d.kind == Collective::kSend ? "MPI_Isend" : "MPI_Irecv");
    if (d.kind == Collective::kSend) {
      Handed(TypeBytes(wire, wire_count), 0);
    } else {
      Handed(0, TypeBytes(wire, wire_count));
    }
    if (subarray) Check(MPI_Type_free(&wire), call, "MPI_Type_free");
    ++open_;  // posted: Synchronize waits for it
    return;
  }

  MPI_Comm comm = GroupComm(call);
  if (options().check_collectives) CheckCollective(call, comm);
  const auto n = static_cast<int64_t>(d.group.size());
  const bool truth = d.op == ReduceOp::kAny || d.op == ReduceOp::kAll;
  std::vector<unsigned char>& scratch = scratch_;
  switch (d.kind) {
    case Collective::kAllGather: {
      const std::vector<int> counts = ToInts(d.counts, "all_gather.counts");
      const std::vector<int> displs = Displacements(d.counts, "all_gather.counts");
      // Its chunk to each other member; each other member's chunk to it.
      Handed((n - 1) * TypeBytes(type, counts[call.position]),
             TypeBytes(type, OthersSum(counts, call.position)));
      Blocking(call, "MPI_Allgatherv", [&] {
        return MPI_Allgatherv(call.send, counts[call.position], type, call.recv, counts.data(),
                              displs.data(), type, comm);
      });
      return;
    }
    case Collective::kReduceScatter: {
      const std::vector<int> counts = ToInts(d.counts, "reduce_scatter.counts");
      Displacements(d.counts, "reduce_scatter.counts");  // the total must fit too
      const int64_t total = std::accumulate(d.counts.begin(), d.counts.end(), int64_t{0});
      const void* send = call.send;
      if (truth && d.dtype != DType::kBool) {
        scratch.resize(total * e);
        backend().ToTruth(call.send, scratch.data(), total, d.dtype, stream());
        send = scratch.data();
      }
      // Each other member's chunk to it; an addend of its own chunk from each other member.
      Handed(TypeBytes(type, OthersSum(counts, call.position)),
             (n - 1) * TypeBytes(type, counts[call.position]));
      Blocking(call, "MPI_Reduce_scatter", [&] {
        return MPI_Reduce_scatter(send, call.recv, counts.data(), type, ToMpi(d.op, d.dtype), comm);
      });
      if (d.op == ReduceOp::kAvg) {
        backend().Scale(call.recv, d.counts[call.position], d.dtype, n, true, stream());
      }
      return;
    }
    case Collective::kAllReduce: {
      // One blocking MPI_Allreduce: Open MPI's tuned algorithms (a reduce-scatter and an
      // all-gather as two calls took 1.4-1.7x as long at 1-16 MiB, docs/BENCHMARKS.md).
      // Its transport is counted as the ring algorithm's (the balanced split of
      // communicator.h's accounting): what MPI moves depends on the algorithm it picks.
      const int64_t count = d.counts[0];
      const int c = ToInt(count, "all_reduce.count");
      const void* send = call.send;
      if (truth && d.dtype != DType::kBool) {
        if (scratch.size() < static_cast<size_t>(count * e)) scratch.resize(count * e);
        backend().ToTruth(call.send, scratch.data(), count, d.dtype, stream());
        send = scratch.data();
      }
      std::vector<int64_t> split(n);
      for (int64_t q = 0; q < n; ++q) split[q] = count / n + (q < count % n ? 1 : 0);
      const std::vector<int> counts = ToInts(split, "all_reduce.count");
      const int64_t p = call.position;
      const int64_t ring = TypeBytes(type, OthersSum(counts, p)) + (n - 1) * TypeBytes(type, counts[p]);
      Handed(ring, ring);
      const MPI_Op mpi_op = ToMpi(d.op, d.dtype);
      Blocking(call, "MPI_Allreduce", [&] {
        return send == call.recv ? MPI_Allreduce(MPI_IN_PLACE, call.recv, c, type, mpi_op, comm)
                                 : MPI_Allreduce(send, call.recv, c, type, mpi_op, comm);
      });
      if (d.op == ReduceOp::kAvg) backend().Scale(call.recv, count, d.dtype, n, true, stream());
      return;
    }
    case Collective::kAllToAll: {
      const std::vector<int> send_counts = ToInts(d.counts, "all_to_all.send_counts");
      const std::vector<int> recv_counts = ToInts(d.recv_counts, "all_to_all.recv_counts");
      const std::vector<int> send_displs = Displacements(d.counts, "all_to_all.send_counts");
      const std::vector<int> recv_displs = Displacements(d.recv_counts, "all_to_all.recv_counts");
      Handed(TypeBytes(type, OthersSum(send_counts, call.position)),
             TypeBytes(type, OthersSum(recv_counts, call.position)));
      Blocking(call, "MPI_Alltoallv", [&] {
        return MPI_Alltoallv(call.send, send_counts.data(), send_displs.data(), type, call.recv,
                             recv_counts.data(), recv_displs.data(), type, comm);
      });
      return;
    }
    case Collective::kBroadcast: {
      const int root = static_cast<int>(std::find(d.group.begin(), d.group.end(), d.root) -
                                        d.group.begin());
      const int count = ToInt(d.counts[0], "broadcast.count");
      if (root == call.position) {
        Handed((n - 1) * TypeBytes(type, count), 0);
      } else {
        Handed(0, TypeBytes(type, count));
      }
      Blocking(call, "MPI_Bcast", [&] { return MPI_Bcast(call.recv, count, type, root, comm); });
      return;
    }
    case Collective::kBarrier:
      Blocking(call, "MPI_Barrier", [&] { return MPI_Barrier(comm); });
      return;
    default:
      return;
  }
}

void MpiCommunicator::DoSynchronize() {
  // Marked closed first (a failed wait ends the job, but the list must not be walked twice).
  const size_t open = open_;
  open_ = 0;
  for (size_t k = 0; k < open; ++k) {
    Pending& p = pending_[k];
    const CollectiveDesc& d = p.call.desc;
    if (p.header != nullptr && d.kind == Collective::kRecv) {
      Wait(&p.requests[0], 1, p.call, "waiting for the sender");  // sets it to MPI_REQUEST_NULL
      const auto& h = *p.header;
      if (h[0] != static_cast<int64_t>(d.dtype) || h[1] != d.counts[0]) {
        AbortJob(Describe(p.call) + ": mismatch: rank " + std::to_string(d.root) + " sends " +
                 std::to_string(h[1]) + " " + std::string(ToString(static_cast<DType>(h[0]))) +
                 " at its step " + std::to_string(h[2]));
      }
    }
    Wait(p.requests.data(), p.count, p.call,
         d.kind == Collective::kSend ? "waiting for the receiver" : "waiting for the sender");
  }
}

int GuardedMain(int argc, char** argv, const std::function<int(MpiCommunicator&)>& body) {
  MPI_Init(&argc, &argv);
  int code = 0;
  {
    std::unique_ptr<MpiCommunicator> comm;
    try {
      comm = std::make_unique<MpiCommunicator>();
      code = body(*comm);
      comm->Synchronize();
    } catch (const std::exception& e) {
      const std::string message =
          comm ? FailureMessage(*comm, e.what())
               : "rank " + std::to_string(WorldRank(MPI_COMM_WORLD)) +
                     " failed before any collective: " + e.what();
      std::fprintf(stderr, "spmd: %s\n", message.c_str());
      if (comm) {
        const std::string dump = comm->DumpFlightRecord(message.c_str(), /*final=*/true);
        if (!dump.empty()) std::fprintf(stderr, "spmd: rank %lld: flight record in %s\n", static_cast<long long>(comm->rank()), dump.c_str());
      }
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  MPI_Finalize();
  return code;
}

}  // namespace spmd::runtime
