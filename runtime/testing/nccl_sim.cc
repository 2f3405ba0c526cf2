#include "runtime/testing/nccl_sim.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>

#include "kernels/backend.h"

namespace spmd::runtime::nccl {
namespace {

using Clock = std::chrono::steady_clock;

bool IsPointToPoint(Prim prim) { return prim == Prim::kSend || prim == Prim::kRecv; }

ReduceOp ToReduceOp(RedOp op) {
  switch (op) {
    case RedOp::kSum: return ReduceOp::kSum;
    case RedOp::kProd: return ReduceOp::kProd;
    case RedOp::kMax: return ReduceOp::kMax;
    case RedOp::kMin: return ReduceOp::kMin;
  }
  return ReduceOp::kSum;
}

std::string Seconds(double s) {
  std::string out = std::to_string(s);
  out.erase(out.find_last_not_of('0') + 1);
  if (!out.empty() && out.back() == '.') out.pop_back();
  return out + " s";
}

std::byte* Resolve(std::span<void* const> buffers, const Ref& r) {
  if (r.buffer < 0 || r.buffer >= static_cast<int>(buffers.size())) return nullptr;
  return static_cast<std::byte*>(buffers[r.buffer]) + r.offset;
}

bool SameCall(const Op& a, const Op& b) {
  return a.prim == b.prim && a.count == b.count && a.type == b.type && a.op == b.op &&
         a.peer == b.peer && a.payload == b.payload;
}

}  // namespace

SimWorld::SimWorld(int64_t size, CommOptions options)
    : size_(size),
      options_(std::move(options)),
      exited_(size, false),
      sent_(new std::atomic<int64_t>[size]),
      received_(new std::atomic<int64_t>[size]) {
  for (int64_t r = 0; r < size; ++r) {
    sent_[r] = 0;
    received_[r] = 0;
  }
}

void SimWorld::Abort(const std::string& message) {
  std::lock_guard lock(mu_);
  if (!abort_message_) abort_message_ = message;
  cv_.notify_all();
}

void SimWorld::MarkExited(int64_t rank) {
  std::lock_guard lock(mu_);
  exited_[rank] = true;
  cv_.notify_all();
}

std::optional<std::string> SimWorld::abort_message() const {
  std::lock_guard lock(mu_);
  return abort_message_;
}

void SimWorld::CountCopy(int64_t from, int64_t to, int64_t bytes) {
  sent_[from] += bytes;
  received_[to] += bytes;
}

template <class Ready>
void SimTransport::WaitFor(std::unique_lock<std::mutex>& lock, Ready ready, const std::string& what,
                           const Group& group) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(world_.options_.timeout_s));
  while (!ready()) {
    if (world_.abort_message_) throw TransportFailure("the job was aborted: " + *world_.abort_message_);
    for (int64_t r : group) {
      if (r != rank_ && world_.exited_[r]) {
        throw TransportFailure("rank " + std::to_string(r) + " has exited without calling " + what);
      }
    }
    if (world_.cv_.wait_until(lock, deadline) == std::cv_status::timeout && !ready()) {
      throw TransportFailure("timed out after " + Seconds(world_.options_.timeout_s) + " in " + what);
    }
  }
}

void SimTransport::RunGroup(const Group& group, bool world, std::span<const Op> ops,
                            std::span<void* const> buffers) {
  if (ops.empty()) return;
  const bool p2p = IsPointToPoint(ops.front().prim);
  for (const Op& op : ops) {
    if (IsPointToPoint(op.prim) != p2p) {
      throw TransportFailure("simulated NCCL: a group mixing point-to-point calls and collectives");
    }
  }
  calls_ += static_cast<int64_t>(ops.size());
  if (p2p) {
    RunPointToPoint(group, world, ops, buffers);
  } else {
    RunCollectives(group, world, ops, buffers);
  }
}

void SimTransport::RunPointToPoint(const Group& group, bool world, std::span<const Op> ops,
                                   std::span<void* const> buffers) {
  // Ranks: world ranks on the world's communicator, positions in `group` otherwise.
  const auto world_rank = [&](int64_t peer) { return world ? peer : group.at(peer); };
  const int kind = world ? 1 : 0;
  const Group key_group = world ? Group{} : group;
  std::unique_lock lock(world_.mu_);
  for (const Op& op : ops) {
    if (op.prim != Prim::kSend) continue;
    const int64_t to = world_rank(op.peer);
    const int64_t bytes = op.count * SizeOf(op.type);
    const auto* from = reinterpret_cast<const unsigned char*>(Resolve(buffers, op.in));
    SimWorld::Message m{op.type, op.count, std::vector<unsigned char>(from, from + bytes)};
    world_.mail_[{kind, key_group, rank_, to}].push_back(std::move(m));
    world_.sent_[rank_] += bytes;  // handed over: into the mailbox
  }
  world_.cv_.notify_all();
  for (const Op& op : ops) {
    if (op.prim != Prim::kRecv) continue;
    const int64_t from = world_rank(op.peer);
    std::deque<SimWorld::Message>& box = world_.mail_[{kind, key_group, from, rank_}];
    WaitFor(lock, [&box] { return !box.empty(); }, "ncclSend to match ncclRecv from rank " + std::to_string(from), Group{from});
    SimWorld::Message m = std::move(box.front());
    box.pop_front();
    if (m.type != op.type || m.count != op.count) {
      throw TransportFailure("simulated NCCL: ncclRecv of " + std::to_string(op.count) + " " +
                             std::string(ToString(op.type)) + " from rank " + std::to_string(from) +
                             " matched an ncclSend of " + std::to_string(m.count) + " " +
                             std::string(ToString(m.type)));
    }
    std::memcpy(Resolve(buffers, op.out), m.bytes.data(), m.bytes.size());
    world_.received_[rank_] += static_cast<int64_t>(m.bytes.size());  // out of the mailbox
  }
}

void SimTransport::RunCollectives(const Group& group, bool world, std::span<const Op> ops,
                                  std::span<void* const> buffers) {
  const auto n = static_cast<int64_t>(group.size());
  const int64_t p = std::find(group.begin(), group.end(), rank_) - group.begin();
  if (p >= n) throw TransportFailure("simulated NCCL: rank not in the group");
  const SimWorld::SlotKey key{0, world, group, seq_[{0, world, group}]++};
  const std::string what = std::string(ToString(ops.front().prim)) + " on group " + ToString(group);

  std::unique_lock lock(world_.mu_);
  if (world_.abort_message_) throw TransportFailure("the job was aborted: " + *world_.abort_message_);
  SimWorld::Slot& slot = world_.slots_[key];
  if (slot.members.empty()) slot.members.resize(n);
  slot.members[p] = SimWorld::Posted{ops, buffers, nullptr};
  ++slot.arrived;
  world_.cv_.notify_all();
  WaitFor(lock, [&] { return slot.arrived == n; }, what, group);

  // NCCL requires every member to post the same calls.
  for (int64_t q = 0; q < n; ++q) {
    const std::span<const Op> theirs = slot.members[q]->ops;
    bool same = theirs.size() == ops.size();
    for (size_t i = 0; same && i < ops.size(); ++i) same = SameCall(ops[i], theirs[i]);
    if (!same) {
      throw TransportFailure("simulated NCCL: rank " + std::to_string(group[q]) +
                             " posted other calls in this group than rank " + std::to_string(rank_));
    }
  }

  // Phase 1: compute this member's outputs from everyone's inputs (reads only).
  kernels::Backend& host = kernels::BackendFor(kernels::Device::Host());
  // Member q's input of call i (its own Ref: a broadcast's non-roots have none).
  auto input = [&](int64_t q, size_t i) {
    return Resolve(slot.members[q]->buffers, slot.members[q]->ops[i].in);
  };
  std::vector<std::vector<std::byte>> results(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    const int64_t e = SizeOf(op.type);
    const int64_t c = op.count;
    const DType dtype = FromNcclType(op.type);
    std::vector<std::byte>& out = results[i];
    const auto count = [&](int64_t from, int64_t bytes) {
      if (op.payload && from != p) world_.CountCopy(group[from], rank_, bytes);
    };
    // Folds chunk `at` (bytes) of every member's input, in position order.
    const auto fold = [&](int64_t at) {
      out.assign(input(0, i) + at, input(0, i) + at + c * e);
      count(0, c * e);
      for (int64_t q = 1; q < n; ++q) {
        host.Reduce(out.data(), input(q, i) + at, c, dtype, ToReduceOp(op.op), kernels::Stream{});
        count(q, c * e);
      }
    };
    switch (op.prim) {
      case Prim::kAllGather:
        out.resize(static_cast<size_t>(n * c * e));
        for (int64_t q = 0; q < n; ++q) {
          std::memcpy(out.data() + q * c * e, input(q, i), static_cast<size_t>(c * e));
          count(q, c * e);
        }
        break;
      case Prim::kReduceScatter:
        fold(p * c * e);
        break;
      case Prim::kReduce:
        if (op.peer == p) fold(0);
        break;
      case Prim::kBroadcast:
        out.assign(input(op.peer, i), input(op.peer, i) + c * e);
        count(op.peer, c * e);
        break;
      default:
        break;
    }
  }
  ++slot.computed;
  world_.cv_.notify_all();
  WaitFor(lock, [&] { return slot.computed == n; }, what, group);
  lock.unlock();
  // Phase 2: write (every member has read every input).
  for (size_t i = 0; i < ops.size(); ++i) {
    if (results[i].empty()) continue;
    std::memcpy(Resolve(buffers, ops[i].out), results[i].data(), results[i].size());
  }
  lock.lock();
  if (++slot.departed == n) world_.slots_.erase(key);
}

std::vector<int64_t> SimTransport::AllGatherInts(const Group& group, std::span<const int64_t> mine) {
  const auto n = static_cast<int64_t>(group.size());
  const int64_t p = std::find(group.begin(), group.end(), rank_) - group.begin();
  const SimWorld::SlotKey key{1, false, group, seq_[{1, false, group}]++};
  const std::vector<int64_t> copy(mine.begin(), mine.end());
  std::unique_lock lock(world_.mu_);
  SimWorld::Slot& slot = world_.slots_[key];
  if (slot.members.empty()) slot.members.resize(n);
  slot.members[p] = SimWorld::Posted{{}, {}, &copy};
  ++slot.arrived;
  world_.cv_.notify_all();
  WaitFor(lock, [&] { return slot.arrived == n; }, "the collective check", group);
  std::vector<int64_t> all;
  for (int64_t q = 0; q < n; ++q) {
    const std::vector<int64_t>& theirs = *slot.members[q]->ints;
    if (theirs.size() != copy.size()) {
      throw TransportFailure("the collective check: rank " + std::to_string(group[q]) +
                             " sent a record of another size");
    }
    all.insert(all.end(), theirs.begin(), theirs.end());
  }
  ++slot.computed;
  world_.cv_.notify_all();
  // `copy` must outlive every member's read.
  WaitFor(lock, [&] { return slot.computed == n; }, "the collective check", group);
  if (++slot.departed == n) world_.slots_.erase(key);
  return all;
}

std::vector<Header> SimTransport::ExchangeHeaders(std::span<const int64_t> send_peers,
                                                  std::span<const Header> headers,
                                                  std::span<const int64_t> recv_peers) {
  std::unique_lock lock(world_.mu_);
  for (size_t i = 0; i < send_peers.size(); ++i) {
    SimWorld::Message m{DataType::kInt64, 3, std::vector<unsigned char>(sizeof(Header))};
    std::memcpy(m.bytes.data(), headers[i].data(), sizeof(Header));
    world_.mail_[{2, Group{}, rank_, send_peers[i]}].push_back(std::move(m));
  }
  world_.cv_.notify_all();
  std::vector<Header> got;
  for (int64_t from : recv_peers) {
    std::deque<SimWorld::Message>& box = world_.mail_[{2, Group{}, from, rank_}];
    WaitFor(lock, [&box] { return !box.empty(); }, "the header from rank " + std::to_string(from), Group{from});
    Header h;
    std::memcpy(h.data(), box.front().bytes.data(), sizeof(Header));
    box.pop_front();
    got.push_back(h);
  }
  return got;
}

SimNcclCommunicator::SimNcclCommunicator(SimWorld& world, int64_t rank)
    : PlannedCommunicator(rank, world.size(), world.options(), kernels::Device::Host(),
                          kernels::Stream{}),
      world_(world),
      transport_(world, rank) {
  SetTransport(&transport_);
}

void SimNcclCommunicator::Fail(const std::string& message) {
  world_.Abort(message);
  throw CommError(message);
}

void RunSimWorld(SimWorld& world, const std::function<std::unique_ptr<Communicator>(int64_t rank)>& make,
                 const std::function<void(Communicator&)>& fn) {
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(world.size()));
  for (int64_t r = 0; r < world.size(); ++r) {
    threads.emplace_back([&world, &make, &fn, r] {
      const std::unique_ptr<Communicator> comm = make(r);
      try {
        fn(*comm);
        comm->Synchronize();
        kernels::BackendFor(comm->device()).Synchronize(comm->stream());
      } catch (const CommError& e) {
        world.Abort(e.what());
      } catch (const std::exception& e) {
        world.Abort(FailureMessage(*comm, e.what()));
      } catch (...) {
        world.Abort(FailureMessage(*comm, "unknown exception"));
      }
      world.MarkExited(r);
    });
  }
  for (std::thread& t : threads) t.join();
  if (std::optional<std::string> message = world.abort_message()) throw CommError(*message);
}

void RunSimRanks(int64_t size, const std::function<void(Communicator&)>& fn, CommOptions options) {
  SimWorld world(size, options);
  RunSimWorld(world, [&world](int64_t r) { return std::make_unique<SimNcclCommunicator>(world, r); }, fn);
}

}  // namespace spmd::runtime::nccl
