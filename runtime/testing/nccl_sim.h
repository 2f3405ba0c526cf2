// A simulated NCCL on threads, for testing the NCCL backend's plans without a GPU: the
// same PlannedCommunicator as NcclCommunicator (runtime/comm/planned_communicator.h), over
// a Transport that carries out each NCCL call by its definition (ncclAllGather,
// ncclReduceScatter, ncclReduce, ncclBroadcast, ncclSend / ncclRecv) on host buffers shared
// between thread ranks. Local steps run on the host Backend.
//
// How a group runs: a group of collectives meets the other members' matching group (the
// n-th group on that communicator) at a rendezvous; every member checks that all posted the
// same calls (prim, count, type, op, root: NCCL requires it), computes its outputs from the
// others' inputs into scratch, waits until every member has done so, then writes them (so
// in-place calls are safe). Reductions fold the members in position order with the host
// Backend's Reduce (2-byte floats: float32 per step, rounded). ncclSend copies the message
// into the (communicator, sender, receiver) mailbox; ncclRecv takes the oldest one and
// requires the same count and type. transport_bytes() counts what was really copied out of
// another rank's memory (a rank's sent bytes are counted by the ranks that read them), so
// the tests compare it with the plan's `handed` and with CountBytes.
//
// Failure: every wait is bounded by the options' timeout_s; a timeout, a mismatch or a rank
// that throws aborts the world, as the thread backend does (RunSimRanks rethrows the first
// message as CommError).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/comm/planned_communicator.h"

namespace spmd::runtime::nccl {

class SimTransport;

// The shared state of `size` thread ranks.
class SimWorld {
 public:
  explicit SimWorld(int64_t size, CommOptions options = CommOptions::FromEnv());
  int64_t size() const { return size_; }
  const CommOptions& options() const { return options_; }
  void Abort(const std::string& message);
  void MarkExited(int64_t rank);
  std::optional<std::string> abort_message() const;
  ByteCount copied(int64_t rank) const { return {sent_[rank].load(), received_[rank].load()}; }

 private:
  friend class SimTransport;
  struct Posted {
    std::span<const Op> ops;
    std::span<void* const> buffers;
    const std::vector<int64_t>* ints = nullptr;  // AllGatherInts
  };
  struct Slot {
    std::vector<std::optional<Posted>> members;
    int64_t arrived = 0;
    int64_t computed = 0;
    int64_t departed = 0;
  };
  struct Message {
    DataType type;
    int64_t count;
    std::vector<unsigned char> bytes;
  };
  // (kind: 0 groups, 1 ints; world flag; group; n-th call)
  using SlotKey = std::tuple<int, bool, Group, int64_t>;
  // (world flag, group, from world rank, to world rank); headers use world flag 2.
  using MailKey = std::tuple<int, Group, int64_t, int64_t>;

  void CountCopy(int64_t from, int64_t to, int64_t bytes);

  int64_t size_;
  CommOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<SlotKey, Slot> slots_;
  std::map<MailKey, std::deque<Message>> mail_;
  std::vector<bool> exited_;
  std::optional<std::string> abort_message_;
  std::unique_ptr<std::atomic<int64_t>[]> sent_;
  std::unique_ptr<std::atomic<int64_t>[]> received_;
};

// One rank's view of the simulated NCCL.
class SimTransport final : public Transport {
 public:
  SimTransport(SimWorld& world, int64_t rank) : world_(world), rank_(rank) {}
  void RunGroup(const Group& group, bool world, std::span<const Op> ops,
                std::span<void* const> buffers) override;
  void Wait(const std::string&) override {}  // every group completes before RunGroup returns
  std::vector<int64_t> AllGatherInts(const Group& group, std::span<const int64_t> mine) override;
  std::vector<Header> ExchangeHeaders(std::span<const int64_t> send_peers,
                                      std::span<const Header> headers,
                                      std::span<const int64_t> recv_peers) override;
  // The number of NCCL calls this rank has made (groups of collectives count each call).
  int64_t calls() const { return calls_; }

 private:
  void RunCollectives(const Group& group, bool world, std::span<const Op> ops,
                      std::span<void* const> buffers);
  void RunPointToPoint(const Group& group, bool world, std::span<const Op> ops,
                       std::span<void* const> buffers);
  // Waits on `lock` until `ready()`, the deadline or an abort (TransportFailure).
  template <class Ready>
  void WaitFor(std::unique_lock<std::mutex>& lock, Ready ready, const std::string& what,
               const Group& group);

  SimWorld& world_;
  int64_t rank_;
  std::map<std::tuple<int, bool, Group>, int64_t> seq_;
  int64_t calls_ = 0;
};

class SimNcclCommunicator final : public PlannedCommunicator {
 public:
  SimNcclCommunicator(SimWorld& world, int64_t rank);
  // What the simulated NCCL really copied out of and into this rank's memory.
  ByteCount transport_bytes() const override { return world_.copied(rank()); }
  const SimTransport& transport() const { return transport_; }

 private:
  [[noreturn]] void Fail(const std::string& message) override;

  SimWorld& world_;
  SimTransport transport_;
};

// Runs fn(comm) on `size` thread ranks over the simulated NCCL, as RunRanks does for the
// thread backend: throws CommError with the first failure's message.
void RunSimRanks(int64_t size, const std::function<void(Communicator&)>& fn,
                 CommOptions options = CommOptions::FromEnv());

// The same on any communicator of `world` that `make(rank)` builds (the simulated NCCL on
// host or device buffers): each rank's thread runs fn, then synchronizes its communicator
// and its stream's backend; a failure aborts the world; throws CommError with the first
// failure's message once every thread has ended.
void RunSimWorld(SimWorld& world, const std::function<std::unique_ptr<Communicator>(int64_t rank)>& make,
                 const std::function<void(Communicator&)>& fn);

}  // namespace spmd::runtime::nccl
