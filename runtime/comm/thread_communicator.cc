#include "runtime/comm/thread_communicator.h"

#include <chrono>
#include <cstring>
#include <exception>
#include <functional>
#include <numeric>
#include <thread>

namespace spmd::runtime {
namespace {

using Clock = std::chrono::steady_clock;

Clock::time_point DeadlineAfter(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(seconds));
}

std::string Seconds(double s) {
  std::string out = std::to_string(s);
  out.erase(out.find_last_not_of('0') + 1);
  if (!out.empty() && out.back() == '.') out.pop_back();
  return out + " s";
}

int64_t PrefixSum(const std::vector<int64_t>& v, int64_t end) {
  return std::accumulate(v.begin(), v.begin() + end, int64_t{0});
}

// Reduces chunk `[offset, offset + count)` of every member's send buffer into `out`, in
// position order (the same order on every rank, so every rank gets the same bits); calls
// read(q, bytes) for each member's chunk it reads. The element loops run on `backend` (the
// communicator's).
void ReduceChunks(const std::vector<const void*>& sends, int64_t offset, int64_t count,
                  DType dtype, ReduceOp op, unsigned char* out, kernels::Backend& backend,
                  kernels::Stream stream, const std::function<void(int64_t, int64_t)>& read) {
  const int64_t e = ElementSize(dtype);
  const bool truth = op == ReduceOp::kAny || op == ReduceOp::kAll;
  std::vector<unsigned char> tmp(truth ? count * e : 0);
  for (size_t q = 0; q < sends.size(); ++q) {
    const auto* in = static_cast<const unsigned char*>(sends[q]) + offset * e;
    read(static_cast<int64_t>(q), count * e);
    if (truth) {
      backend.ToTruth(in, tmp.data(), count, dtype, stream);
      in = tmp.data();
    }
    if (q == 0) {
      backend.Copy(out, in, static_cast<size_t>(count * e), stream);
    } else {
      backend.Reduce(out, in, count, dtype, op, stream);
    }
  }
  if (op == ReduceOp::kAvg) {
    backend.Scale(out, count, dtype, static_cast<int64_t>(sends.size()), true, stream);
  }
}

}  // namespace

ThreadWorld::ThreadWorld(int64_t size, CommOptions options)
    : size_(size),
      options_(options),
      exited_(size, false),
      sent_(new std::atomic<int64_t>[size]),
      received_(new std::atomic<int64_t>[size]) {
  for (int64_t r = 0; r < size; ++r) {
    sent_[r] = 0;
    received_[r] = 0;
  }
}

void ThreadWorld::CountCopy(int64_t from, int64_t to, int64_t bytes) {
  if (from == to || bytes == 0) return;
  sent_[from] += bytes;
  received_[to] += bytes;
}

void ThreadWorld::Abort(const std::string& message) {
  std::lock_guard lock(mu_);
  if (!abort_message_) abort_message_ = message;
  cv_.notify_all();
}

void ThreadWorld::MarkExited(int64_t rank) {
  std::lock_guard lock(mu_);
  exited_[rank] = true;
  cv_.notify_all();
}

std::optional<std::string> ThreadWorld::abort_message() const {
  std::lock_guard lock(mu_);
  return abort_message_;
}

ThreadCommunicator::ThreadCommunicator(ThreadWorld& world, int64_t rank)
    : Communicator(rank, world.size(), world.options()), world_(world) {}

ByteCount ThreadCommunicator::transport_bytes() const {
  return ByteCount{world_.sent_[rank()].load(), world_.received_[rank()].load()};
}

void ThreadCommunicator::Fail(std::unique_lock<std::mutex>& lock, const Call& call,
                              const std::string& what) {
  const std::string message = Describe(call) + ": " + what;
  if (!world_.abort_message_) world_.abort_message_ = message;
  world_.cv_.notify_all();
  lock.unlock();
  throw CommError(message);
}

void ThreadCommunicator::Run(const Call& call) {
  switch (call.desc.kind) {
    case Collective::kSend: {
      const CollectiveDesc& d = call.desc;
      ThreadWorld::Message message{d.dtype, d.counts[0], call.step, {}};
      const auto* bytes = static_cast<const unsigned char*>(call.send);
      const int64_t e = ElementSize(d.dtype);
      if (call.box) {  // pack the piece (the MPI backend lets MPI read it in place)
        message.bytes.resize(d.counts[0] * e);
        const BufferBox& b = *call.box;
        backend().CopyBox(static_cast<const std::byte*>(call.send), b.array, b.at,
                          reinterpret_cast<std::byte*>(message.bytes.data()), b.extent,
                          std::vector<int64_t>(b.extent.size(), 0), b.extent, e, stream());
      } else {
        message.bytes.assign(bytes, bytes + d.counts[0] * e);
      }
      world_.sent_[rank()] += static_cast<int64_t>(message.bytes.size());  // into the mailbox
      std::unique_lock lock(world_.mu_);
      if (world_.abort_message_) throw CommError(*world_.abort_message_);
      world_.mailboxes_[{rank(), d.root}].push_back(std::move(message));
      world_.cv_.notify_all();
      return;
    }
    case Collective::kRecv:
      pending_recvs_.push_back(call);
      return;
    default:
      RunCollective(call);
  }
}

void ThreadCommunicator::DoSynchronize() {
  std::vector<Call> recvs;
  recvs.swap(pending_recvs_);
  for (const Call& call : recvs) {
    const CollectiveDesc& d = call.desc;
    const int64_t peer = d.root;
    const auto deadline = DeadlineAfter(options().timeout_s);
    std::unique_lock lock(world_.mu_);
    std::deque<ThreadWorld::Message>& box = world_.mailboxes_[{peer, rank()}];
    while (box.empty()) {
      if (world_.abort_message_) throw CommError(*world_.abort_message_);
      if (world_.exited_[peer]) Fail(lock, call, "rank " + std::to_string(peer) + " has exited without sending");
      if (world_.cv_.wait_until(lock, deadline) == std::cv_status::timeout && box.empty()) {
        Fail(lock, call, "timed out after " + Seconds(options().timeout_s));
      }
    }
    ThreadWorld::Message message = std::move(box.front());
    box.pop_front();
    if (message.dtype != d.dtype || message.count != d.counts[0]) {
      Fail(lock, call,
           "mismatch: rank " + std::to_string(peer) + " sent " + std::to_string(message.count) +
               " " + std::string(ToString(message.dtype)) + " at its step " +
               std::to_string(message.step));
    }
    lock.unlock();
    if (message.bytes.empty()) continue;
    if (call.box) {
      const BufferBox& b = *call.box;
      backend().CopyBox(reinterpret_cast<const std::byte*>(message.bytes.data()), b.extent,
                        std::vector<int64_t>(b.extent.size(), 0),
                        static_cast<std::byte*>(call.recv), b.array, b.at, b.extent,
                        ElementSize(d.dtype), stream());
    } else {
      std::memcpy(call.recv, message.bytes.data(), message.bytes.size());
    }
    world_.received_[rank()] += static_cast<int64_t>(message.bytes.size());  // out of it
  }
}

void ThreadCommunicator::RunCollective(const Call& call) {
  const CollectiveDesc& d = call.desc;
  const auto n = static_cast<int64_t>(d.group.size());
  const int64_t p = call.position;
  const int64_t e = ElementSize(d.dtype);
  const std::pair<Group, int64_t> key{d.group, calls_per_group_[d.group]++};
  const auto deadline = DeadlineAfter(options().timeout_s);

  std::unique_lock lock(world_.mu_);
  if (world_.abort_message_) throw CommError(*world_.abort_message_);
  ThreadWorld::Slot& slot = world_.slots_[key];
  if (slot.members.empty()) slot.members.resize(n);
  slot.members[p] = {&call, true};
  ++slot.arrived;
  world_.cv_.notify_all();

  // Phase 1: every member has published its call.
  while (slot.arrived < n) {
    if (world_.abort_message_) throw CommError(*world_.abort_message_);
    std::vector<int64_t> missing;
    for (int64_t q = 0; q < n; ++q) {
      if (!slot.members[q].arrived) missing.push_back(d.group[q]);
    }
    for (int64_t r : missing) {
      if (world_.exited_[r]) {
        Fail(lock, call, "rank " + std::to_string(r) + " has exited without calling it");
      }
    }
    if (world_.cv_.wait_until(lock, deadline) == std::cv_status::timeout && slot.arrived < n) {
      Fail(lock, call, "timed out after " + Seconds(options().timeout_s) +
                           " waiting for ranks " + ToString(missing));
    }
  }
  // A member that failed (here: found a mismatch first) has left, and its call with it.
  if (world_.abort_message_) throw CommError(*world_.abort_message_);
  std::vector<const Call*> calls(n);
  for (int64_t q = 0; q < n; ++q) calls[q] = static_cast<const Call*>(slot.members[q].call);

  // The collective check: every member calls the same collective with matching sizes.
  for (int64_t q = 0; q < n; ++q) {
    const CollectiveDesc& a = calls[0]->desc;
    const CollectiveDesc& b = calls[q]->desc;
    const bool same = d.kind == Collective::kAllToAll && b.kind == Collective::kAllToAll
                          ? a.dtype == b.dtype
                          : a == b;
    if (!same) {
      Fail(lock, call, "collective mismatch: rank " + std::to_string(d.group[0]) + " calls " +
                           ToString(a) + " at its step " + std::to_string(calls[0]->step) +
                           ", rank " + std::to_string(d.group[q]) + " calls " + ToString(b) +
                           " at its step " + std::to_string(calls[q]->step));
    }
  }
  if (d.kind == Collective::kAllToAll) {
    for (int64_t from = 0; from < n; ++from) {
      for (int64_t to = 0; to < n; ++to) {
        const int64_t sent = calls[from]->desc.counts[to];
        const int64_t expected = calls[to]->desc.recv_counts[from];
        if (sent != expected) {
          Fail(lock, call, "collective mismatch: rank " + std::to_string(d.group[from]) +
                               " sends " + std::to_string(sent) + " elements to rank " +
                               std::to_string(d.group[to]) + ", which expects " +
                               std::to_string(expected));
        }
      }
    }
  }
  lock.unlock();

  // Read the others' send buffers into scratch (they stay untouched until phase 2).
  std::vector<unsigned char> scratch;
  std::vector<const void*> sends(n);
  for (int64_t q = 0; q < n; ++q) sends[q] = calls[q]->send;
  // Every read of another member's memory is counted here, where it happens.
  auto read = [&](int64_t q, int64_t bytes) { world_.CountCopy(d.group[q], rank(), bytes); };
  // all_reduce: the balanced split of the buffer (chunk q: count / n elements, one more
  // when q < count % n); each member reduces its own chunk, then gathers the others'.
  std::vector<int64_t> split;
  switch (d.kind) {
    case Collective::kAllGather: {
      scratch.resize(PrefixSum(d.counts, n) * e);
      int64_t offset = 0;
      for (int64_t q = 0; q < n; ++q) {
        if (d.counts[q] > 0) std::memcpy(scratch.data() + offset, sends[q], d.counts[q] * e);
        read(q, d.counts[q] * e);
        offset += d.counts[q] * e;
      }
      break;
    }
    case Collective::kReduceScatter:
      scratch.resize(d.counts[p] * e);
      ReduceChunks(sends, PrefixSum(d.counts, p), d.counts[p], d.dtype, d.op, scratch.data(),
                   backend(), stream(), read);
      break;
    case Collective::kAllReduce: {
      const int64_t count = d.counts[0];
      for (int64_t q = 0; q < n; ++q) split.push_back(count / n + (q < count % n ? 1 : 0));
      scratch.resize(split[p] * e);
      ReduceChunks(sends, PrefixSum(split, p), split[p], d.dtype, d.op, scratch.data(),
                   backend(), stream(), read);
      break;
    }
    case Collective::kAllToAll: {
      scratch.resize(PrefixSum(d.recv_counts, n) * e);
      int64_t offset = 0;
      for (int64_t q = 0; q < n; ++q) {
        const CollectiveDesc& dq = calls[q]->desc;
        const auto* from = static_cast<const unsigned char*>(sends[q]) + PrefixSum(dq.counts, p) * e;
        if (d.recv_counts[q] > 0) std::memcpy(scratch.data() + offset, from, d.recv_counts[q] * e);
        read(q, d.recv_counts[q] * e);
        offset += d.recv_counts[q] * e;
      }
      break;
    }
    case Collective::kBroadcast:
      if (rank() != d.root) {
        const int64_t root_pos = std::find(d.group.begin(), d.group.end(), d.root) - d.group.begin();
        scratch.resize(d.counts[0] * e);
        if (!scratch.empty()) std::memcpy(scratch.data(), sends[root_pos], scratch.size());
        read(root_pos, static_cast<int64_t>(scratch.size()));
      }
      break;
    default:
      break;
  }

  // Phase 2: every member has finished reading; then write the output.
  lock.lock();
  slot.members[p].reduced = scratch.data();
  ++slot.finished;
  world_.cv_.notify_all();
  auto wait_for = [&](const int64_t& counter, const char* what) {
    while (counter < n) {
      if (world_.abort_message_) throw CommError(*world_.abort_message_);
      if (world_.cv_.wait_until(lock, deadline) == std::cv_status::timeout && counter < n) {
        Fail(lock, call, "timed out after " + Seconds(options().timeout_s) + " waiting for " +
                             what);
      }
    }
  };
  wait_for(slot.finished, "the group to finish");
  if (d.kind == Collective::kAllReduce) {
    // The all-gather half: every member's reduced chunk into place (the send buffers are no
    // longer read, so in-place calls are safe); the chunks stay alive until all have copied.
    lock.unlock();
    auto* out = static_cast<unsigned char*>(call.recv);
    for (int64_t q = 0; q < n; ++q) {
      const auto* chunk = static_cast<const unsigned char*>(slot.members[q].reduced);
      if (split[q] > 0) std::memcpy(out + PrefixSum(split, q) * e, chunk, split[q] * e);
      if (q != p) read(q, split[q] * e);
    }
    lock.lock();
    ++slot.gathered;
    world_.cv_.notify_all();
    wait_for(slot.gathered, "the group to gather");
    if (++slot.departed == n) world_.slots_.erase(key);
    return;
  }
  if (++slot.departed == n) world_.slots_.erase(key);
  lock.unlock();
  if (!scratch.empty()) std::memcpy(call.recv, scratch.data(), scratch.size());
}

void RunRanks(int64_t size, const std::function<void(Communicator&)>& fn, CommOptions options) {
  ThreadWorld world(size, options);
  std::vector<std::thread> threads;
  threads.reserve(size);
  for (int64_t r = 0; r < size; ++r) {
    threads.emplace_back([&world, &fn, r] {
      ThreadCommunicator comm(world, r);
      try {
        fn(comm);
        comm.Synchronize();
      } catch (const CommError& e) {
        world.Abort(e.what());  // already the world's message unless fn threw its own
      } catch (const std::exception& e) {
        const std::string message = FailureMessage(comm, e.what());
        comm.DumpFlightRecord(message.c_str(), /*final=*/true);
        world.Abort(message);
      } catch (...) {
        world.Abort(FailureMessage(comm, "unknown exception"));
      }
      world.MarkExited(r);
    });
  }
  for (std::thread& t : threads) t.join();
  if (std::optional<std::string> message = world.abort_message()) throw CommError(*message);
}

}  // namespace spmd::runtime
