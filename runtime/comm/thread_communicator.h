// The in-process backend: N ranks as threads of one process, meeting at a shared
// rendezvous (ThreadWorld). Same semantics and byte accounting as the MPI backend; for
// fast tests (as DTensor's tests do) and for code that wants a mesh without mpirun.
//
// How a collective runs: each member publishes its call (descriptor and buffers) in the
// slot of (group, n-th call on that group); once all have arrived each member checks that
// the descriptors agree (always: a mismatch here would read out of bounds), computes its
// own result from the others' send buffers into a scratch buffer, waits until every member
// has finished reading, then writes its output. So in-place calls (send == recv) are safe.
// all_reduce is a reduce-scatter then an all-gather over the balanced split of the buffer
// (each member reduces its own chunk, waits, then copies the others' reduced chunks), so
// that what moves between threads is what communicator.h's byte accounting describes.
// transport_bytes() counts every copy out of or into another rank's memory where it
// happens (a Send's copy into the mailbox, a Recv's copy out of it).
// Send copies the message into the (sender, receiver) mailbox; Recv takes it at
// Synchronize().
//
// Failure: every wait is bounded by the options' timeout_s. A timeout, a mismatch, a rank
// that throws (under RunRanks) or a rank that returns while others wait for it aborts the
// world: every rank's current or next wait throws CommError with the first failure's
// message, and RunRanks rethrows that message once every thread has ended.
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
#include <utility>
#include <vector>

#include "runtime/comm/communicator.h"

namespace spmd::runtime {

class ThreadCommunicator;

// The shared state of `size` thread ranks. Outlives their communicators.
class ThreadWorld {
 public:
  explicit ThreadWorld(int64_t size, CommOptions options = CommOptions::FromEnv());
  int64_t size() const { return size_; }
  const CommOptions& options() const { return options_; }

  // Fails every rank's current and next wait with `message` (the first call wins).
  void Abort(const std::string& message);
  // Marks `rank` as done: members waiting for it fail at once instead of timing out.
  void MarkExited(int64_t rank);
  // The first abort message, if any.
  std::optional<std::string> abort_message() const;

 private:
  friend class ThreadCommunicator;
  struct Member {
    const void* call = nullptr;  // the member's Communicator::Call (opaque here)
    bool arrived = false;
    const void* reduced = nullptr;  // all_reduce: the member's reduced chunk
  };
  struct Slot {
    std::vector<Member> members;  // by position
    int64_t arrived = 0;
    int64_t finished = 0;
    int64_t gathered = 0;  // all_reduce: members done copying the reduced chunks
    int64_t departed = 0;
  };
  struct Message {
    DType dtype;
    int64_t count;
    int64_t step;  // the sender's step
    std::vector<unsigned char> bytes;
  };

  int64_t size_;
  CommOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::pair<Group, int64_t>, Slot> slots_;
  std::map<std::pair<int64_t, int64_t>, std::deque<Message>> mailboxes_;  // (from, to)
  std::vector<bool> exited_;
  std::optional<std::string> abort_message_;
  // Transport counts per rank; a rank's sent bytes are counted by the ranks that read them.
  void CountCopy(int64_t from, int64_t to, int64_t bytes);
  std::unique_ptr<std::atomic<int64_t>[]> sent_;
  std::unique_ptr<std::atomic<int64_t>[]> received_;
};

class ThreadCommunicator final : public Communicator {
 public:
  // `world` must outlive this communicator; one communicator per rank, used by one thread.
  ThreadCommunicator(ThreadWorld& world, int64_t rank);

  ByteCount transport_bytes() const override;

 private:
  void Run(const Call& call) override;
  void DoSynchronize() override;
  void RunCollective(const Call& call);
  // Throws CommError (after aborting the world) with `what` prefixed by this call.
  [[noreturn]] void Fail(std::unique_lock<std::mutex>& lock, const Call& call,
                         const std::string& what);

  ThreadWorld& world_;
  std::map<Group, int64_t> calls_per_group_;
  std::vector<Call> pending_recvs_;
};

// Runs fn(comm) on `size` thread ranks, each with its own ThreadCommunicator, and returns
// once all have ended. If any rank fails (throws, or its collective times out or
// mismatches), throws CommError with the first failure's message, e.g.
// `rank 1 failed at step 3 (all_reduce(float64, count=8, op=sum) on group [0,1]): boom`.
void RunRanks(int64_t size, const std::function<void(Communicator&)>& fn,
              CommOptions options = CommOptions::FromEnv());

}  // namespace spmd::runtime
