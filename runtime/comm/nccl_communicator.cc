#include "runtime/comm/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <vector>

#include "kernels/cuda/cuda.h"
#include "runtime/comm/collective_check.h"
#include "rules/model/error.h"

namespace spmd::runtime {

// The plans use NCCL's own values for types and ops.
static_assert(static_cast<int>(nccl::DataType::kUint8) == ncclUint8);
static_assert(static_cast<int>(nccl::DataType::kInt64) == ncclInt64);
static_assert(static_cast<int>(nccl::DataType::kFloat16) == ncclFloat16);
static_assert(static_cast<int>(nccl::DataType::kFloat32) == ncclFloat32);
static_assert(static_cast<int>(nccl::DataType::kFloat64) == ncclFloat64);
static_assert(static_cast<int>(nccl::DataType::kBfloat16) == ncclBfloat16);
static_assert(static_cast<int>(nccl::RedOp::kSum) == ncclSum);
static_assert(static_cast<int>(nccl::RedOp::kProd) == ncclProd);
static_assert(static_cast<int>(nccl::RedOp::kMax) == ncclMax);
static_assert(static_cast<int>(nccl::RedOp::kMin) == ncclMin);

namespace {

using Clock = std::chrono::steady_clock;
using nccl::TransportFailure;

// MPI tags on the private duplicate of the world.
constexpr int kRecordTag = 11;     // the collective check's records
constexpr int kBootstrapTag = 12;  // the group handshake
constexpr int kHeaderTag = 13;     // the message headers

std::string Seconds(double s) {
  std::string out = std::to_string(s);
  out.erase(out.find_last_not_of('0') + 1);
  if (!out.empty() && out.back() == '.') out.pop_back();
  return out + " s";
}

int MpiRank(MPI_Comm comm) {
  int r = 0;
  MPI_Comm_rank(comm, &r);
  return r;
}

int MpiSize(MPI_Comm comm) {
  int s = 0;
  MPI_Comm_size(comm, &s);
  return s;
}

void CheckCuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw TransportFailure(std::string(what) + " failed: " + cudaGetErrorString(e));
  }
}

}  // namespace

int DefaultNcclDevice() {
  const int count = kernels::cuda::DeviceCount();
  if (count <= 0) return 0;
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  const int rank = local != nullptr ? std::atoi(local) : 0;
  return rank % count;
}

// The NCCL calls of the plans, the waits, the communicators.
class NcclTransport final : public nccl::Transport {
 public:
  NcclTransport(MPI_Comm control, int64_t rank, int64_t world_size, int device,
                cudaStream_t stream, double timeout_s)
      : control_(control), rank_(rank), world_size_(world_size), device_(device),
        stream_(stream), timeout_s_(timeout_s) {}

  ~NcclTransport() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&control_);
    if (aborted_) return;
    // Finalize (flushes, nonblocking), then destroy; a communicator that does not settle
    // within the timeout is aborted.
    std::vector<ncclComm_t> comms = All();
    for (ncclComm_t c : comms) ncclCommFinalize(c);
    for (ncclComm_t c : comms) {
      const auto deadline = Deadline();
      ncclResult_t state = ncclInProgress;
      while (ncclCommGetAsyncError(c, &state) == ncclSuccess && state == ncclInProgress &&
             Clock::now() < deadline) {
        sched_yield();
      }
      if (state == ncclSuccess) {
        ncclCommDestroy(c);
      } else {
        ncclCommAbort(c);
      }
    }
  }

  // The world's communicator (collective over the world; MPI bootstrap).
  void InitWorld() {
    ncclUniqueId id;
    if (rank_ == 0) CheckNccl(ncclGetUniqueId(&id), nullptr, "ncclGetUniqueId");
    std::vector<MPI_Request> request(1);
    MPI_Ibcast(&id, sizeof id, MPI_BYTE, 0, control_, request.data());
    WaitMpi(request, "broadcasting the world's ncclUniqueId");
    world_ = Init(id, static_cast<int>(world_size_), static_cast<int>(rank_), "the world");
  }

  void RunGroup(const Group& group, bool world, std::span<const nccl::Op> ops,
                std::span<void* const> buffers) override {
    if (ops.empty()) return;
    ncclComm_t comm = world ? world_ : CommOf(group);
    last_ = std::string(nccl::ToString(ops.front().prim));
    if (ops.size() > 1) last_ += " (" + std::to_string(ops.size()) + " calls grouped)";
    last_ += world ? " on the world" : " on group " + ToString(group);
    auto at = [&buffers](const nccl::Ref& r) -> void* {
      if (r.buffer < 0) return nullptr;
      return static_cast<std::byte*>(buffers[r.buffer]) + r.offset;
    };
    CheckNccl(ncclGroupStart(), nullptr, "ncclGroupStart");
    for (const nccl::Op& op : ops) {
      const auto type = static_cast<ncclDataType_t>(op.type);
      const auto red = static_cast<ncclRedOp_t>(op.op);
      const auto count = static_cast<size_t>(op.count);
      const int peer = static_cast<int>(op.peer);
      void* in = at(op.in);
      void* out = at(op.out);
      ncclResult_t r = ncclSuccess;
      switch (op.prim) {
        case nccl::Prim::kAllGather:
          r = ncclAllGather(in, out, count, type, comm, stream_);
          break;
        case nccl::Prim::kReduceScatter:
          r = ncclReduceScatter(in, out, count, type, red, comm, stream_);
          break;
        case nccl::Prim::kReduce:  // recvbuff is read on the root only
          r = ncclReduce(in, out != nullptr ? out : in, count, type, red, peer, comm, stream_);
          break;
        case nccl::Prim::kBroadcast:  // sendbuff is read on the root only
          r = ncclBroadcast(in != nullptr ? in : out, out, count, type, peer, comm, stream_);
          break;
        case nccl::Prim::kSend:
          r = ncclSend(in, count, type, peer, comm, stream_);
          break;
        case nccl::Prim::kRecv:
          r = ncclRecv(out, count, type, peer, comm, stream_);
          break;
      }
      if (r != ncclSuccess && r != ncclInProgress) {
        ncclGroupEnd();
        CheckNccl(r, comm, std::string(nccl::ToString(op.prim)).c_str());
      }
    }
    const ncclResult_t end = ncclGroupEnd();
    if (end != ncclSuccess && end != ncclInProgress) CheckNccl(end, comm, "ncclGroupEnd");
    Settle(comm, last_);  // enqueued (nonblocking: NCCL may finish posting in the background)
  }

  void Wait(const std::string&) override {
    const auto deadline = Deadline();
    for (int64_t iteration = 0;; ++iteration) {
      const cudaError_t q = cudaStreamQuery(stream_);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) CheckCuda(q, "cudaStreamQuery");
      if (iteration % 64 == 0) {
        for (ncclComm_t c : All()) {
          ncclResult_t state = ncclSuccess;
          ncclCommGetAsyncError(c, &state);
          if (state != ncclSuccess && state != ncclInProgress) CheckNccl(state, c, "an NCCL call in flight");
        }
        if (Clock::now() > deadline) {
          throw TransportFailure("timed out after " + Seconds(timeout_s_) + " in " + last_);
        }
      }
      sched_yield();
    }
  }

  std::vector<int64_t> AllGatherInts(const Group& group, std::span<const int64_t> mine) override {
    const auto n = static_cast<int64_t>(group.size());
    const int64_t p = std::find(group.begin(), group.end(), rank_) - group.begin();
    const auto len = static_cast<int64_t>(mine.size());
    std::vector<int64_t> all(n * len);
    std::copy(mine.begin(), mine.end(), all.begin() + p * len);
    std::vector<MPI_Request> requests;
    for (int64_t q = 0; q < n; ++q) {
      if (q == p) continue;
      requests.emplace_back();
      MPI_Irecv(all.data() + q * len, static_cast<int>(len), MPI_INT64_T, static_cast<int>(group[q]),
                kRecordTag, control_, &requests.back());
      requests.emplace_back();
      MPI_Isend(mine.data(), static_cast<int>(len), MPI_INT64_T, static_cast<int>(group[q]),
                kRecordTag, control_, &requests.back());
    }
    WaitMpi(requests, "the collective check");
    return all;
  }

  std::vector<nccl::Header> ExchangeHeaders(std::span<const int64_t> send_peers,
                                            std::span<const nccl::Header> headers,
                                            std::span<const int64_t> recv_peers) override {
    std::vector<nccl::Header> got(recv_peers.size());
    std::vector<MPI_Request> requests;
    for (size_t i = 0; i < recv_peers.size(); ++i) {
      requests.emplace_back();
      MPI_Irecv(got[i].data(), 3, MPI_INT64_T, static_cast<int>(recv_peers[i]), kHeaderTag,
                control_, &requests.back());
    }
    for (size_t i = 0; i < send_peers.size(); ++i) {
      requests.emplace_back();
      MPI_Isend(headers[i].data(), 3, MPI_INT64_T, static_cast<int>(send_peers[i]), kHeaderTag,
                control_, &requests.back());
    }
    WaitMpi(requests, "the message headers");
    return got;
  }

  // Aborts every NCCL communicator (once; the job is ending).
  void AbortAll() {
    if (aborted_) return;
    aborted_ = true;
    for (ncclComm_t c : All()) ncclCommAbort(c);
  }

 private:
  std::chrono::steady_clock::time_point Deadline() const {
    return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(timeout_s_));
  }

  std::vector<ncclComm_t> All() const {
    std::vector<ncclComm_t> out;
    if (world_ != nullptr) out.push_back(world_);
    for (const auto& [group, c] : groups_) {
      if (c != world_) out.push_back(c);
    }
    return out;
  }

  void CheckNccl(ncclResult_t r, ncclComm_t comm, const char* what) const {
    if (r == ncclSuccess || r == ncclInProgress) return;
    std::string text = std::string(what) + " failed: " + ncclGetErrorString(r);
    if (comm != nullptr) {
      const char* last = ncclGetLastError(comm);
      if (last != nullptr && *last != '\0') text += std::string(" (") + last + ")";
    }
    throw TransportFailure(text);
  }

  // Polls the communicator until its last call is no longer in progress.
  void Settle(ncclComm_t comm, const std::string& what) const {
    const auto deadline = Deadline();
    for (int64_t iteration = 0;; ++iteration) {
      ncclResult_t state = ncclInProgress;
      CheckNccl(ncclCommGetAsyncError(comm, &state), comm, "ncclCommGetAsyncError");
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) CheckNccl(state, comm, what.c_str());
      if (iteration % 64 == 0 && Clock::now() > deadline) {
        throw TransportFailure("timed out after " + Seconds(timeout_s_) + " in " + what);
      }
      sched_yield();
    }
  }

  void WaitMpi(std::vector<MPI_Request>& requests, const std::string& what) const {
    const auto deadline = Deadline();
    for (int64_t iteration = 0;; ++iteration) {
      int done = 0;
      const int rc = MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done,
                                 MPI_STATUSES_IGNORE);
      if (rc != MPI_SUCCESS) throw TransportFailure("MPI failed in " + what);
      if (done) return;
      if (iteration >= 16) sched_yield();
      if (iteration % 16 == 0 && Clock::now() > deadline) {
        throw TransportFailure("timed out after " + Seconds(timeout_s_) + " in " + what);
      }
    }
  }

  ncclComm_t Init(const ncclUniqueId& id, int n, int rank, const std::string& what) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    CheckCuda(cudaSetDevice(device_), "cudaSetDevice");
    ncclComm_t comm = nullptr;
    ncclUniqueId copy = id;
    CheckNccl(ncclCommInitRankConfig(&comm, n, copy, rank, &config), nullptr, "ncclCommInitRankConfig");
    if (comm == nullptr) throw TransportFailure("ncclCommInitRankConfig returned no communicator");
    try {
      Settle(comm, "creating the NCCL communicator of " + what);
    } catch (const TransportFailure&) {
      ncclCommAbort(comm);
      throw;
    }
    return comm;
  }

  // The cached communicator of `group` (ranks = positions), created on first use.
  ncclComm_t CommOf(const Group& group) {
    if (auto it = groups_.find(group); it != groups_.end()) return it->second;
    const auto n = static_cast<int64_t>(group.size());
    Group identity(world_size_);
    std::iota(identity.begin(), identity.end(), int64_t{0});
    if (group == identity) return groups_[group] = world_;

    // Handshake over MPI: {hash of the group, position 0's ncclUniqueId} to every other member.
    struct Blob {
      int64_t hash = 0;
      ncclUniqueId id{};
    };
    const int64_t p = std::find(group.begin(), group.end(), rank_) - group.begin();
    Blob mine;
    mine.hash = nccl::HashValues(group);
    if (p == 0) CheckNccl(ncclGetUniqueId(&mine.id), nullptr, "ncclGetUniqueId");
    std::vector<Blob> theirs(n);
    std::vector<MPI_Request> requests;
    for (int64_t q = 0; q < n; ++q) {
      if (q == p) continue;
      requests.emplace_back();
      MPI_Irecv(&theirs[q], sizeof(Blob), MPI_BYTE, static_cast<int>(group[q]), kBootstrapTag,
                control_, &requests.back());
      requests.emplace_back();
      MPI_Isend(&mine, sizeof(Blob), MPI_BYTE, static_cast<int>(group[q]), kBootstrapTag,
                control_, &requests.back());
    }
    WaitMpi(requests, "creating the communicator of group " + ToString(group));
    for (int64_t q = 0; q < n; ++q) {
      if (q != p && theirs[q].hash != mine.hash) {
        throw TransportFailure("collective mismatch: rank " + std::to_string(group[q]) +
                               " calls a collective on another group (other members or another order)");
      }
    }
    const ncclUniqueId& id = p == 0 ? mine.id : theirs[0].id;
    ncclComm_t comm = Init(id, static_cast<int>(n), static_cast<int>(p), "group " + ToString(group));
    groups_[group] = comm;
    return comm;
  }

  MPI_Comm control_;
  int64_t rank_;
  int64_t world_size_;
  int device_;
  cudaStream_t stream_;
  double timeout_s_;
  ncclComm_t world_ = nullptr;
  std::map<Group, ncclComm_t> groups_;
  std::string last_ = "no NCCL call yet";
  bool aborted_ = false;
};

namespace {

int DeviceOrDefault(std::optional<int> device) { return device ? *device : DefaultNcclDevice(); }

kernels::Stream StreamOrNew(std::optional<kernels::Stream> stream, int device) {
  kernels::cuda::EnableCuda();  // throws SpmdError(kUnsupported, "device") without a GPU
  return stream ? *stream : kernels::cuda::NewStream(kernels::Device::Cuda(device));
}

}  // namespace

NcclCommunicator::NcclCommunicator(MPI_Comm world, CommOptions options, std::optional<int> device,
                                   std::optional<kernels::Stream> stream)
    : NcclCommunicator(world, std::move(options), DeviceOrDefault(device),
                       StreamOrNew(stream, DeviceOrDefault(device))) {}

NcclCommunicator::NcclCommunicator(MPI_Comm world, CommOptions options, int device,
                                   kernels::Stream stream)
    : PlannedCommunicator(MpiRank(world), MpiSize(world), std::move(options),
                          kernels::Device::Cuda(device), stream),
      parent_(world) {
  const int count = kernels::cuda::DeviceCount();
  if (device < 0 || device >= count) {
    ThrowInvalid("device", "CUDA device " + std::to_string(device) + " does not exist (" +
                               std::to_string(count) + " devices)");
  }
  MPI_Comm control;
  MPI_Comm_dup(world, &control);
  MPI_Comm_set_errhandler(control, MPI_ERRORS_RETURN);
  transport_ = std::make_unique<NcclTransport>(control, rank(), world_size(), device,
                                               static_cast<cudaStream_t>(stream.handle),
                                               this->options().timeout_s);
  try {
    transport_->InitWorld();
  } catch (const TransportFailure& f) {
    throw CommError("rank " + std::to_string(rank()) + ": creating the NCCL world: " + f.what());
  }
  SetTransport(transport_.get());
}

NcclCommunicator::~NcclCommunicator() {
  transport_.reset();
}

void NcclCommunicator::AbortJob(const std::string& message) const {
  std::fprintf(stderr, "spmd: %s\n", message.c_str());
  const std::string dump = DumpFlightRecord(message.c_str(), /*final=*/true);
  if (!dump.empty()) {
    std::fprintf(stderr, "spmd: rank %lld: flight record in %s\n", static_cast<long long>(rank()),
                 dump.c_str());
  }
  std::fflush(stderr);
  if (transport_) transport_->AbortAll();
  MPI_Abort(parent_, 1);
  std::abort();  // MPI_Abort does not return
}

}  // namespace spmd::runtime
