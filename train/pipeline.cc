#include "train/pipeline.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <sstream>

#include "rules/engine/notation.h"
#include "train/device.h"

namespace spmd::train {

// ---- Schedules -----------------------------------------------------------------------------

std::string_view ToString(ActionKind kind) {
  switch (kind) {
    case ActionKind::kForward:
      return "F";
    case ActionKind::kBackward:
      return "B";
    case ActionKind::kSendActivation:
      return "sendA";
    case ActionKind::kRecvActivation:
      return "recvA";
    case ActionKind::kSendGrad:
      return "sendG";
    case ActionKind::kRecvGrad:
      return "recvG";
  }
  return "?";
}

namespace {

bool IsSend(ActionKind k) { return k == ActionKind::kSendActivation || k == ActionKind::kSendGrad; }
bool IsRecv(ActionKind k) { return k == ActionKind::kRecvActivation || k == ActionKind::kRecvGrad; }
bool IsMessage(ActionKind k) { return IsSend(k) || IsRecv(k); }

}  // namespace

std::string ToString(const Action& a) {
  std::ostringstream os;
  os << ToString(a.kind) << "(mb " << a.micro_batch << ", chunk " << a.chunk << ")";
  if (IsSend(a.kind)) os << " -> stage " << a.peer;
  if (IsRecv(a.kind)) os << " <- stage " << a.peer;
  if (IsMessage(a.kind)) os << " [" << a.size << "]";
  return os.str();
}

std::string_view ToString(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kFillDrain:
      return "gpipe";
    case ScheduleKind::kOneFOneB:
      return "1f1b";
    case ScheduleKind::kInterleaved:
      return "interleaved";
  }
  return "?";
}

ScheduleKind ParseScheduleKind(std::string_view text) {
  if (text == "gpipe" || text == "fill-drain") return ScheduleKind::kFillDrain;
  if (text == "1f1b") return ScheduleKind::kOneFOneB;
  if (text == "interleaved") return ScheduleKind::kInterleaved;
  ThrowInvalid("schedule", "'" + std::string(text) + "' is not gpipe, 1f1b or interleaved");
}

std::string_view ToString(Violation v) {
  switch (v) {
    case Violation::kShape:
      return "shape";
    case Violation::kComputeCount:
      return "compute count";
    case Violation::kBackwardBeforeForward:
      return "backward before forward";
    case Violation::kForwardOrder:
      return "forward order";
    case Violation::kBackwardOrder:
      return "backward order";
    case Violation::kUnmatched:
      return "unmatched message";
    case Violation::kMismatched:
      return "mismatched message";
    case Violation::kDeadlock:
      return "deadlock";
  }
  return "?";
}

namespace {

using Pair = std::pair<int64_t, int64_t>;  // (micro-batch, chunk)

// One stage's compute order (interleave: 0 = the next forward, 1 = the next backward) with
// its sends, each just after the compute that produces it. Receives come later
// (PlaceReceives), once every stage's send order is known.
std::vector<Action> ComputeAndSends(const std::vector<Pair>& forwards,
                                    const std::vector<Pair>& backwards,
                                    const std::vector<size_t>& interleave, int64_t p, int64_t v,
                                    int64_t s, const std::vector<int64_t>& sizes) {
  const int64_t last = p * v - 1;
  std::vector<Action> out;
  size_t f = 0, b = 0;
  for (size_t which : interleave) {
    if (which == 0) {
      const auto [mb, c] = forwards[f++];
      out.push_back({ActionKind::kForward, mb, c, -1, 0});
      if (c * p + s < last && p > 1)
        out.push_back({ActionKind::kSendActivation, mb, c, (s + 1) % p, sizes[mb]});
    } else {
      const auto [mb, c] = backwards[b++];
      out.push_back({ActionKind::kBackward, mb, c, -1, 0});
      if (c * p + s > 0 && p > 1)
        out.push_back({ActionKind::kSendGrad, mb, c, (s + p - 1) % p, sizes[mb]});
    }
  }
  return out;
}

// Inserts every stage's receives. Messages between two ranks arrive in the order they were
// sent, so on each channel (a -> b) stage b must receive in a's send order; each receive
// must also come before the compute that consumes it. Going from the channel's last message
// back to its first, each receive goes just before its consumer or just before the next
// message's receive, whichever is earlier: as late as both rules allow.
void PlaceReceives(Schedule& sc) {
  const int64_t p = sc.stages;
  std::vector<std::vector<std::vector<Action>>> before(p);  // per stage, per action: receives
  for (int64_t b = 0; b < p; ++b) before[b].resize(sc.ranks[b].size() + 1);
  for (int64_t b = 0; b < p; ++b) {
    const std::vector<Action>& mine = sc.ranks[b];
    for (int64_t a = 0; a < p; ++a) {
      if (a == b) continue;
      std::vector<Action> incoming;  // a's sends to b, in order, as b's receives
      for (const Action& x : sc.ranks[a]) {
        if (x.kind == ActionKind::kSendActivation && x.peer == b) {
          const int64_t k = x.chunk * p + a + 1;  // the receiving virtual stage
          incoming.push_back({ActionKind::kRecvActivation, x.micro_batch, k / p, a, x.size});
        } else if (x.kind == ActionKind::kSendGrad && x.peer == b) {
          const int64_t k = x.chunk * p + a - 1;
          incoming.push_back({ActionKind::kRecvGrad, x.micro_batch, k / p, a, x.size});
        }
      }
      size_t limit = mine.size();
      std::vector<std::pair<size_t, Action>> placed;
      for (size_t j = incoming.size(); j-- > 0;) {
        const Action& r = incoming[j];
        const ActionKind consumer =
            r.kind == ActionKind::kRecvActivation ? ActionKind::kForward : ActionKind::kBackward;
        size_t at = mine.size();
        for (size_t i = 0; i < mine.size(); ++i) {
          if (mine[i].kind == consumer && mine[i].micro_batch == r.micro_batch &&
              mine[i].chunk == r.chunk)
            at = i;
        }
        limit = std::min(limit, at);
        placed.push_back({limit, r});
      }
      for (size_t j = placed.size(); j-- > 0;)
        before[b][placed[j].first].push_back(placed[j].second);
    }
  }
  for (int64_t b = 0; b < p; ++b) {
    std::vector<Action> merged;
    for (size_t i = 0; i <= sc.ranks[b].size(); ++i) {
      for (const Action& r : before[b][i]) merged.push_back(r);
      if (i < sc.ranks[b].size()) merged.push_back(sc.ranks[b][i]);
    }
    sc.ranks[b] = std::move(merged);
  }
}

// `warm` forwards, then forward and backward in turn, then the remaining backwards.
std::vector<size_t> OneFOneBOrder(int64_t total, int64_t warm) {
  std::vector<size_t> order;
  for (int64_t i = 0; i < warm; ++i) order.push_back(0);
  for (int64_t i = 0; i < total - warm; ++i) {
    order.push_back(0);
    order.push_back(1);
  }
  for (int64_t i = 0; i < warm; ++i) order.push_back(1);
  return order;
}

// Defined with the checker below.
void PostReceivesEarly(Schedule& sc);

}  // namespace

Schedule MakeSchedule(ScheduleKind kind, int64_t p, int64_t m, int64_t v,
                      const std::vector<int64_t>& sizes_in) {
  const std::pair<const char*, int64_t> fields[] = {
      {"stages", p}, {"micro_batches", m}, {"chunks", v}};
  for (const auto& [field, value] : fields) {
    if (value < 1 || value > 4096)
      ThrowInvalid(field, std::to_string(value) + " is not in [1, 4096]");
  }
  if (kind != ScheduleKind::kInterleaved && v != 1) {
    ThrowInvalid("chunks", "only the interleaved schedule has more than one chunk per stage");
  }
  if (kind == ScheduleKind::kInterleaved && m > p && m % p != 0) {
    // Megatron's condition: with a smaller last group of micro-batches the warm-up below
    // is not enough and the stages deadlock (CheckSchedule finds it).
    ThrowUnsupported(
        "micro_batches",
        "the interleaved schedule needs micro_batches <= stages or a multiple of stages (" +
            std::to_string(m) + " micro-batches, " + std::to_string(p) + " stages)");
  }
  std::vector<int64_t> sizes = sizes_in;
  if (sizes.empty()) sizes.assign(m, 1);
  if (static_cast<int64_t>(sizes.size()) != m) {
    ThrowInvalid("sizes", "has " + std::to_string(sizes.size()) + " entries for " +
                              std::to_string(m) + " micro-batches");
  }
  for (int64_t size : sizes) {
    if (size < 0) ThrowInvalid("sizes", "a negative size");
  }
  Schedule schedule{std::string(ToString(kind)), p, m, v, {}};
  for (int64_t s = 0; s < p; ++s) {
    std::vector<Pair> forwards, backwards;
    std::vector<size_t> order;
    if (kind == ScheduleKind::kInterleaved) {
      // Megatron's order: micro-batches in groups of p (the last may be smaller), each
      // group through chunk 0, then chunk 1, ...; backwards the same with the chunks
      // reversed. Warm-up: 2 (p - s - 1) + (v - 1) p forwards (all of them at most).
      for (int64_t g = 0; g < m; g += p) {
        const int64_t end = std::min(m, g + p);
        for (int64_t c = 0; c < v; ++c) {
          for (int64_t mb = g; mb < end; ++mb) forwards.push_back({mb, c});
        }
        for (int64_t c = v - 1; c >= 0; --c) {
          for (int64_t mb = g; mb < end; ++mb) backwards.push_back({mb, c});
        }
      }
      const int64_t total = m * v;
      order = OneFOneBOrder(total, std::min(total, 2 * (p - s - 1) + (v - 1) * p));
    } else {
      for (int64_t mb = 0; mb < m; ++mb) {
        forwards.push_back({mb, 0});
        backwards.push_back({mb, 0});
      }
      order = OneFOneBOrder(m, kind == ScheduleKind::kFillDrain ? m : std::min(m, p - s - 1));
    }
    schedule.ranks.push_back(ComputeAndSends(forwards, backwards, order, p, v, s, sizes));
  }
  PlaceReceives(schedule);
  PostReceivesEarly(schedule);
  return schedule;
}

// ---- The checker -----------------------------------------------------------------------------

namespace {

[[noreturn]] void Fail(Violation v, int64_t s, size_t i, const std::vector<Action>& actions,
                       const std::string& what) {
  const std::string at = "schedule.ranks[" + std::to_string(s) + "][" + std::to_string(i) + "]";
  throw ScheduleError(v, at,
                      "stage " + std::to_string(s) + ", " + ToString(actions[i]) + ": " + what);
}

// Per stage: where each (kind, micro-batch, chunk) action sits; duplicates are refused.
struct Positions {
  std::map<std::tuple<ActionKind, int64_t, int64_t>, size_t> at;
  int64_t Of(ActionKind k, int64_t mb, int64_t c) const {
    auto it = at.find({k, mb, c});
    return it == at.end() ? -1 : static_cast<int64_t>(it->second);
  }
};

// The n-th message between an ordered pair of stages: (sender position, receiver position).
struct Channel {
  std::vector<size_t> sends;  // indices into the sender's list
  std::vector<size_t> recvs;  // indices into the receiver's list
};

// The end of the run of consecutive messages starting at `i`.
size_t RunEnd(const std::vector<Action>& actions, size_t i) {
  while (i < actions.size() && IsMessage(actions[i].kind)) ++i;
  return i;
}

struct Blocking {
  bool done = false;
  std::vector<size_t> pc;  // per stage: where it stopped
  // Per stage: its sends whose receive is not posted yet: (channel, message index).
  std::vector<std::vector<std::pair<Pair, int64_t>>> unreceived;
  std::map<Pair, int64_t> received;  // per channel: receives posted
};

// The greedy blocking simulation. A run of consecutive messages is one batch: every send
// and receive of it is posted, then the stage waits for the batch's receives (and, under
// rendezvous, for every send it has posted to be received: Synchronize). Compute waits
// for nothing under buffered semantics and, under rendezvous, for every posted send to be
// received (a compute may synchronize).
Blocking SimulateBlocking(const Schedule& sc, SendSemantics semantics) {
  const int64_t p = sc.stages;
  const bool rendezvous = semantics == SendSemantics::kRendezvous;
  std::map<Pair, int64_t> sent, received;
  std::vector<size_t> pc(p, 0);
  std::vector<bool> posted(p, false);
  std::vector<std::vector<int64_t>> recv_index(p);  // the posted batch's receive indices
  std::vector<std::vector<std::pair<Pair, int64_t>>> pending(p);
  auto sends_done = [&](int64_t s) {
    for (const auto& [key, n] : pending[s]) {
      if (received[key] <= n) return false;
    }
    return true;
  };
  bool progress = true;
  while (progress) {
    progress = false;
    for (int64_t s = 0; s < p; ++s) {
      const std::vector<Action>& actions = sc.ranks[s];
      while (pc[s] < actions.size()) {
        const Action& a = actions[pc[s]];
        if (IsMessage(a.kind)) {
          const size_t end = RunEnd(actions, pc[s]);
          if (!posted[s]) {
            recv_index[s].clear();
            for (size_t i = pc[s]; i < end; ++i) {
              const Action& x = actions[i];
              if (IsSend(x.kind)) {
                const Pair key{s, x.peer};
                pending[s].push_back({key, sent[key]++});
              } else {
                recv_index[s].push_back(received[{x.peer, s}]++);
              }
            }
            posted[s] = true;
            progress = true;
          }
          bool ready = true;
          size_t r = 0;
          for (size_t i = pc[s]; i < end; ++i) {
            const Action& x = actions[i];
            if (IsRecv(x.kind) && sent[{x.peer, s}] <= recv_index[s][r++]) ready = false;
          }
          const bool waits = !recv_index[s].empty();
          if (!ready || (waits && rendezvous && !sends_done(s))) break;
          if (waits && rendezvous) pending[s].clear();
          posted[s] = false;
          pc[s] = end;
        } else {
          if (rendezvous && !sends_done(s)) break;
          if (rendezvous) pending[s].clear();
          ++pc[s];
        }
        progress = true;
      }
    }
  }
  Blocking out;
  out.done = true;
  out.pc = pc;
  out.unreceived.resize(p);
  for (int64_t s = 0; s < p; ++s) {
    for (const auto& [key, n] : pending[s]) {
      if (received[key] <= n) out.unreceived[s].push_back({key, n});
    }
    if (pc[s] < sc.ranks[s].size() || (rendezvous && !out.unreceived[s].empty())) out.done = false;
  }
  out.received = received;
  return out;
}

// Makes a schedule that runs under buffered semantics run under rendezvous too: while the
// rendezvous simulation stops, each send that waits for its receive gets it posted
// earlier. The receiving stage's receives on that channel, up to the one the send needs,
// move to where that stage stands (into the batch it waits in, or as a new batch before the
// compute it waits at): Megatron's send-and-receive pairs. Receives only move earlier, in
// their channel's order, so the checks of CheckSchedule 2-4 still hold.
void PostReceivesEarly(Schedule& sc) {
  const int64_t p = sc.stages;
  for (int round = 0; round < 100000; ++round) {
    const Blocking sim = SimulateBlocking(sc, SendSemantics::kRendezvous);
    if (sim.done) return;
    bool moved = false;
    for (int64_t a = 0; a < p && !moved; ++a) {
      for (const auto& [key, n] : sim.unreceived[a]) {
        const int64_t b = key.second;
        std::vector<Action>& list = sc.ranks[b];
        // b's receives on channel (a -> b) not yet posted, up to message n.
        int64_t index = sim.received.count(key) ? sim.received.at(key) : 0;
        const size_t at = sim.pc[b] < list.size() && IsMessage(list[sim.pc[b]].kind)
                              ? RunEnd(list, sim.pc[b])
                              : sim.pc[b];
        std::vector<Action> take;
        std::vector<Action> rest(list.begin(), list.begin() + static_cast<std::ptrdiff_t>(at));
        for (size_t i = at; i < list.size(); ++i) {
          const Action& x = list[i];
          if (IsRecv(x.kind) && x.peer == a && index <= n) {
            take.push_back(x);
            ++index;
          } else {
            rest.push_back(x);
          }
        }
        if (take.empty()) continue;
        rest.insert(rest.begin() + static_cast<std::ptrdiff_t>(at), take.begin(), take.end());
        list = std::move(rest);
        moved = true;
        break;
      }
    }
    if (!moved) return;  // CheckSchedule will report the deadlock
  }
}

}  // namespace

void CheckSchedule(const Schedule& sc, SendSemantics semantics) {
  const int64_t p = sc.stages, m = sc.micro_batches, v = sc.chunks;
  if (p < 1 || m < 1 || v < 1 || static_cast<int64_t>(sc.ranks.size()) != p) {
    throw ScheduleError(
        Violation::kShape, "schedule",
        "stages, micro_batches and chunks must be >= 1 and ranks must have one list per stage");
  }
  const int64_t last = p * v - 1;
  std::vector<Positions> pos(p);
  std::map<Pair, Channel> channels;  // (from, to)
  // 1, 2: shape and counts.
  for (int64_t s = 0; s < p; ++s) {
    const std::vector<Action>& actions = sc.ranks[s];
    for (size_t i = 0; i < actions.size(); ++i) {
      const Action& a = actions[i];
      if (a.micro_batch < 0 || a.micro_batch >= m)
        Fail(Violation::kShape, s, i, actions, "micro-batch out of range");
      if (a.chunk < 0 || a.chunk >= v) Fail(Violation::kShape, s, i, actions, "chunk out of range");
      if (IsMessage(a.kind)) {
        if (a.peer < 0 || a.peer >= p || a.peer == s)
          Fail(Violation::kShape, s, i, actions, "peer is not another stage");
        if (a.size < 0) Fail(Violation::kShape, s, i, actions, "negative size");
        if (IsSend(a.kind)) {
          channels[{s, a.peer}].sends.push_back(i);
        } else {
          channels[{a.peer, s}].recvs.push_back(i);
        }
      } else if (a.peer != -1) {
        Fail(Violation::kShape, s, i, actions, "a compute action has no peer");
      }
      if (!pos[s].at.emplace(std::make_tuple(a.kind, a.micro_batch, a.chunk), i).second) {
        Fail(IsMessage(a.kind) ? Violation::kUnmatched : Violation::kComputeCount, s, i, actions,
             "appears twice on this stage");
      }
    }
  }
  for (int64_t s = 0; s < p; ++s) {
    const std::vector<Action>& actions = sc.ranks[s];
    for (int64_t mb = 0; mb < m; ++mb) {
      for (int64_t c = 0; c < v; ++c) {
        if (pos[s].Of(ActionKind::kForward, mb, c) < 0 ||
            pos[s].Of(ActionKind::kBackward, mb, c) < 0) {
          throw ScheduleError(
              Violation::kComputeCount, "schedule.ranks[" + std::to_string(s) + "]",
              "stage " + std::to_string(s) + " lacks the " +
                  (pos[s].Of(ActionKind::kForward, mb, c) < 0 ? "forward" : "backward") +
                  " of micro-batch " + std::to_string(mb) + ", chunk " + std::to_string(c));
        }
      }
    }
    // 3: dependencies on this stage.
    for (size_t i = 0; i < actions.size(); ++i) {
      const Action& a = actions[i];
      const int64_t k = a.chunk * p + s, mb = a.micro_batch, c = a.chunk;
      const auto here = static_cast<int64_t>(i);
      auto before = [&](ActionKind kind, int64_t chunk) {
        const int64_t at = pos[s].Of(kind, mb, chunk);
        return at >= 0 && at < here;
      };
      switch (a.kind) {
        case ActionKind::kForward:
          if (k > 0 && ((p == 1 && !before(ActionKind::kForward, c - 1)) ||
                        (p > 1 && !before(ActionKind::kRecvActivation, c)))) {
            Fail(Violation::kForwardOrder, s, i, actions,
                 "its input (virtual stage " + std::to_string(k - 1) + ") has not arrived");
          }
          break;
        case ActionKind::kBackward:
          if (!before(ActionKind::kForward, c)) {
            Fail(Violation::kBackwardBeforeForward, s, i, actions,
                 "before this stage's forward of it");
          }
          if (k < last && ((p == 1 && !before(ActionKind::kBackward, c + 1)) ||
                           (p > 1 && !before(ActionKind::kRecvGrad, c)))) {
            Fail(Violation::kBackwardOrder, s, i, actions,
                 "its output gradient (virtual stage " + std::to_string(k + 1) +
                     ") has not arrived");
          }
          break;
        case ActionKind::kSendActivation:
          if (k == last)
            Fail(Violation::kMismatched, s, i, actions,
                 "the last virtual stage sends no activation");
          if (a.peer != (s + 1) % p)
            Fail(Violation::kMismatched, s, i, actions,
                 "virtual stage " + std::to_string(k + 1) + " is on stage " +
                     std::to_string((s + 1) % p));
          if (!before(ActionKind::kForward, c))
            Fail(Violation::kForwardOrder, s, i, actions, "sent before it is computed");
          break;
        case ActionKind::kRecvActivation:
          if (k == 0)
            Fail(Violation::kMismatched, s, i, actions, "virtual stage 0 receives no activation");
          if (a.peer != (s + p - 1) % p)
            Fail(Violation::kMismatched, s, i, actions,
                 "virtual stage " + std::to_string(k - 1) + " is on stage " +
                     std::to_string((s + p - 1) % p));
          break;
        case ActionKind::kSendGrad:
          if (k == 0)
            Fail(Violation::kMismatched, s, i, actions, "virtual stage 0 sends no gradient");
          if (a.peer != (s + p - 1) % p)
            Fail(Violation::kMismatched, s, i, actions,
                 "virtual stage " + std::to_string(k - 1) + " is on stage " +
                     std::to_string((s + p - 1) % p));
          if (!before(ActionKind::kBackward, c))
            Fail(Violation::kBackwardOrder, s, i, actions, "sent before it is computed");
          break;
        case ActionKind::kRecvGrad:
          if (k == last)
            Fail(Violation::kMismatched, s, i, actions,
                 "the last virtual stage receives no gradient");
          if (a.peer != (s + 1) % p)
            Fail(Violation::kMismatched, s, i, actions,
                 "virtual stage " + std::to_string(k + 1) + " is on stage " +
                     std::to_string((s + 1) % p));
          break;
      }
    }
  }
  // 4: the n-th send between two stages meets the n-th receive.
  for (const auto& [key, ch] : channels) {
    const auto [from, to] = key;
    const std::vector<Action>& sends = sc.ranks[from];
    const std::vector<Action>& recvs = sc.ranks[to];
    const size_t n = std::min(ch.sends.size(), ch.recvs.size());
    for (size_t j = 0; j < n; ++j) {
      const Action& a = sends[ch.sends[j]];
      const Action& b = recvs[ch.recvs[j]];
      const bool activation = a.kind == ActionKind::kSendActivation;
      const int64_t ka = a.chunk * p + from, kb = b.chunk * p + to;
      std::string what;
      if (b.kind != (activation ? ActionKind::kRecvActivation : ActionKind::kRecvGrad)) {
        what = "kind";
      } else if (a.micro_batch != b.micro_batch) {
        what = "micro-batch";
      } else if (kb != (activation ? ka + 1 : ka - 1)) {
        what = "virtual stage";
      } else if (a.size != b.size) {
        what = "size";
      }
      if (!what.empty()) {
        Fail(Violation::kMismatched, to, ch.recvs[j], recvs,
             "meets " + ToString(a) + " of stage " + std::to_string(from) + " (message " +
                 std::to_string(j) + " between them): another " + what);
      }
    }
    if (ch.sends.size() > n) {
      Fail(Violation::kUnmatched, from, ch.sends[n], sends,
           "no receive on stage " + std::to_string(to) + " meets it");
    }
    if (ch.recvs.size() > n) {
      Fail(Violation::kUnmatched, to, ch.recvs[n], recvs,
           "no send on stage " + std::to_string(from) + " meets it");
    }
  }
  // 5: the blocking simulation.
  const Blocking sim = SimulateBlocking(sc, semantics);
  if (sim.done) return;
  std::ostringstream waiting;
  for (int64_t s = 0; s < p; ++s) {
    const std::vector<Action>& actions = sc.ranks[s];
    if (sim.pc[s] < actions.size()) {
      waiting << (waiting.tellp() > 0 ? "; " : "") << "stage " << s << " at [" << sim.pc[s] << "] "
              << ToString(actions[sim.pc[s]]);
    } else if (!sim.unreceived[s].empty()) {
      waiting << (waiting.tellp() > 0 ? "; " : "") << "stage " << s << " at its end";
    } else {
      continue;
    }
    waiting << (sim.unreceived[s].empty() ? " (waits for a send)"
                                          : " (its sends not yet received)");
  }
  throw ScheduleError(Violation::kDeadlock, "schedule", "no stage can progress: " + waiting.str());
}

ScheduleStats SimulateSchedule(const Schedule& sc, double tf, double tb) {
  CheckSchedule(sc);
  const int64_t p = sc.stages;
  ScheduleStats stats;
  stats.times.resize(p);
  stats.peak_live.assign(p, 0);
  for (int64_t s = 0; s < p; ++s) {
    int64_t live = 0;
    for (const Action& a : sc.ranks[s]) {
      if (a.kind == ActionKind::kForward) stats.peak_live[s] = std::max(stats.peak_live[s], ++live);
      if (a.kind == ActionKind::kBackward) --live;
    }
    stats.times[s].resize(sc.ranks[s].size());
  }
  // The buffered simulation again, with clocks: a receive starts no earlier than its send.
  std::map<Pair, std::vector<double>> posted;  // per channel: send times
  std::map<Pair, size_t> consumed;
  std::vector<size_t> pc(p, 0);
  std::vector<double> clock(p, 0);
  bool progress = true;
  while (progress) {
    progress = false;
    for (int64_t s = 0; s < p; ++s) {
      const std::vector<Action>& actions = sc.ranks[s];
      while (pc[s] < actions.size()) {
        const Action& a = actions[pc[s]];
        double start = clock[s], end = clock[s];
        if (IsSend(a.kind)) {
          posted[{s, a.peer}].push_back(clock[s]);
        } else if (IsRecv(a.kind)) {
          const Pair key{a.peer, s};
          const size_t n = consumed[key];
          if (posted[key].size() <= n) break;
          consumed[key] = n + 1;
          start = end = std::max(clock[s], posted[key][n]);
        } else {
          end = start + (a.kind == ActionKind::kForward ? tf : tb);
          stats.busy += end - start;
        }
        stats.times[s][pc[s]] = {start, end};
        clock[s] = end;
        stats.makespan = std::max(stats.makespan, end);
        ++pc[s];
        progress = true;
      }
    }
  }
  stats.bubble =
      stats.makespan > 0 ? 1.0 - stats.busy / (static_cast<double>(p) * stats.makespan) : 0;
  return stats;
}

// ---- Training over pipeline stages -----------------------------------------------------------

namespace {

using runtime::Communicator;
using runtime::DistTensor;

int PpAxis(const Mesh& mesh) {
  const auto& names = mesh.axis_names();
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == "pp") return static_cast<int>(i);
  }
  return -1;
}

std::vector<int64_t> CoordOf(const Mesh& mesh, int64_t rank) {
  const auto coord = mesh.CoordinateOf(rank);
  if (!coord) ThrowInvalid("mesh", "rank " + std::to_string(rank) + " is not in the mesh");
  return *coord;
}

// This rank's stage: the mesh without its pp axis at this rank's pp coordinate (a one-rank
// "dp" mesh when pp is the only axis).
Mesh StageMesh(const Mesh& mesh, int64_t rank) {
  const int pp = PpAxis(mesh);
  const std::vector<int64_t> coord = CoordOf(mesh, rank);
  if (pp < 0) return mesh;
  std::vector<int> rest;
  for (int a = 0; a < mesh.ndim(); ++a) {
    if (a != pp) rest.push_back(a);
  }
  if (rest.empty()) return Mesh({1}, {rank}, {"dp"});
  return mesh.SubMesh(coord, rest);
}

int64_t SumBytes(const runtime::CommCounters& c, bool sent) {
  int64_t total = 0;
  for (const auto& k : c.per_kind) total += sent ? k.sent : k.received;
  return total;
}

}  // namespace

PipelineTrainer::PipelineTrainer(const GptConfig& config, const Mesh& mesh, Strategy strategy,
                                 const TrainOptions& options, const PipelineOptions& pipeline,
                                 Communicator& comm)
    : coord_(CoordOf(mesh, comm.rank())),
      pp_axis_(PpAxis(mesh)),
      mesh_(mesh),
      layout_(StageMesh(mesh, comm.rank()), strategy),
      pipeline_(pipeline),
      options_(options),
      config_(config),
      optimizer_(options.lr, options.beta1, options.beta2, options.eps, options.weight_decay) {
  if (options.micro_batches < 1) ThrowInvalid("options.micro_batches", "must be at least 1");
  if (options.precision != Precision::kFp32) {  // train/precision.h: the Trainer's only
    ThrowUnsupported("options.precision", std::string(ToString(options.precision)) +
                                              " is not supported under pipeline parallelism (fp32 is)");
  }
  if (pipeline.chunks < 1 || pipeline.chunks > 4096 ||
      (pipeline.schedule != ScheduleKind::kInterleaved && pipeline.chunks != 1)) {
    ThrowInvalid("pipeline.chunks", "must be 1, or >= 1 with the interleaved schedule");
  }
  if (pp_axis_ >= 0) {
    stages_ = mesh.axis_size(pp_axis_);
    stage_ = coord_[pp_axis_];
  }
  const int64_t virtual_stages = stages_ * pipeline.chunks;
  for (int64_t c = 0; c < pipeline.chunks; ++c) {
    const int64_t k = c * stages_ + stage_;
    GptPart part;
    part.first_layer = config.layers * k / virtual_stages;
    part.end_layer = config.layers * (k + 1) / virtual_stages;
    part.embedding = k == 0;
    part.head = k == virtual_stages - 1;
    chunks_.emplace_back(config, layout_, comm, part);
    chunks_.back().set_recompute(options.recompute);
  }
  if (options.offload != OffloadKind::kNone) {
    ThrowUnsupported("options.offload", "optimizer-state offload is not wired into pipeline stages");
  }
  if (options.device.kind != comm.device().kind) {
    ThrowInvalid("options.device", kernels::ToString(options.device) + ", but the communicator's buffers are on " +
                                       kernels::ToString(comm.device()));
  }
  optimizer_.set_max_grad_norm(options.max_grad_norm);
  if (stages_ > 1) optimizer_.set_norm_group(mesh.GroupOf(coord_, {pp_axis_}));
  for (const Gpt& chunk : chunks_) {
    for (const NamedParam& p : chunk.params()) {
      const int rank = static_cast<int>(p.value.value().shape().size());
      optimizer_.Add(p.value, layout_.State(p.role, rank));
      if (auto grad_layout = layout_.GradLayout(p.role, rank))
        p.value.set_grad_layout(*grad_layout);
    }
  }
}

int64_t PipelineTrainer::PeerRank(int64_t stage) const {
  std::vector<int64_t> coord = coord_;
  coord[pp_axis_] = stage;
  return mesh_.ProcessIdAt(coord);
}

StepStats PipelineTrainer::Step(const BatchSpec& batch, int64_t step, Communicator& comm) {
  const int64_t m = options_.micro_batches, p = stages_, v = pipeline_.chunks, last = p * v - 1;
  if (batch.batch < m || batch.sequence < 1 || batch.sequence > config_.sequence) {
    ThrowInvalid("batch", "needs at least one row per micro-batch and 1 <= sequence <= " +
                              std::to_string(config_.sequence));
  }
  const auto start = std::chrono::steady_clock::now();
  const runtime::CommCounters before = comm.counters();
  ResetActivationPeak();
  kernels::Tensor tokens, labels;
  MakeBatch(batch, config_.vocab, step, &tokens, &labels);
  const Mesh& mesh = layout_.mesh();
  const int64_t width = batch.sequence;
  // Rows [r0, r1) of micro-batch mb, as the Trainer splits them.
  auto rows = [&](int64_t mb) {
    return std::pair<int64_t, int64_t>{batch.batch * mb / m, batch.batch * (mb + 1) / m};
  };
  std::vector<int64_t> sizes;
  for (int64_t mb = 0; mb < m; ++mb) {
    sizes.push_back((rows(mb).second - rows(mb).first) * width * config_.width);
  }
  schedule_ = MakeSchedule(pipeline_.schedule, p, m, v, sizes);
  CheckSchedule(schedule_, SendSemantics::kBuffered);
  CheckSchedule(schedule_, SendSemantics::kRendezvous);

  auto rows_of = [&](const kernels::Tensor& all, int64_t mb) {
    const auto [r0, r1] = rows(mb);
    // `all` is a host tensor (MakeBatch builds it there); the shard goes to the device.
    std::vector<int64_t> values(all.data<int64_t>() + r0 * width, all.data<int64_t>() + r1 * width);
    return OnDevice(DistTensor::ShardTensor(kernels::Tensor::FromVector({r1 - r0, width}, values), mesh,
                                            layout_.Tokens(2), comm.rank()),
                    comm.device(), comm.stream());
  };
  auto activation_shape = [&](int64_t mb) {
    return Shape{rows(mb).second - rows(mb).first, width, config_.width};
  };

  struct Stashed {
    Variable input;   // the received activation (a leaf); undefined on virtual stage 0
    Variable output;  // the activation sent on, or the scaled loss
  };
  using Key = std::pair<int64_t, int64_t>;  // (micro-batch, chunk)
  std::map<Key, Stashed> stash;
  std::map<Key, DistTensor> inputs, output_grads, input_grads;  // arrived or computed
  std::deque<DistTensor> in_flight;  // send buffers, alive until the next Synchronize
  int64_t peak = 0;
  double loss_sum = 0;
  auto take = [](std::map<Key, DistTensor>& from, Key key, const char* what) {
    auto it = from.find(key);
    if (it == from.end()) {
      ThrowInvalid("schedule", std::string("no ") + what + " for micro-batch " +
                                   std::to_string(key.first) + ", chunk " +
                                   std::to_string(key.second));
    }
    DistTensor t = std::move(it->second);
    from.erase(it);
    return t;
  };

  const std::vector<Action>& list = schedule_.ranks[stage_];
  for (size_t i = 0; i < list.size();) {
    const Action& a = list[i];
    const Key key{a.micro_batch, a.chunk};
    const int64_t k = a.chunk * p + stage_;
    if (a.kind == ActionKind::kForward) {
      Gpt& part = chunks_[a.chunk];
      Stashed entry;
      Variable x;
      if (k == 0) {
        x = part.Embed(rows_of(tokens, a.micro_batch), comm, step, a.micro_batch);
      } else {
        entry.input = Variable(take(inputs, key, "activation"), /*requires_grad=*/true);
        x = entry.input;
      }
      x = part.Blocks(x, comm, step, a.micro_batch);
      if (k == last) {
        const Variable loss = part.Head(x, rows_of(labels, a.micro_batch), comm);
        const auto [r0, r1] = rows(a.micro_batch);
        const double share = static_cast<double>(r1 - r0) / static_cast<double>(batch.batch);
        x = m == 1 ? loss : Apply1("scale", {loss}, notation::MakeAttrs({{"scale", share}}), comm);
        loss_sum += ReadScalar(*x.value().ToGlobal(comm));
      } else {
        // The next stage receives its shard as the residual stream's layout: the same on
        // both sides, so the message is this rank's shard (the rules may have left the
        // output in another layout: a recorded reshard, undone in the backward).
        if (!(x.value().dist_attr() == layout_.Residual()))
          x = Redistribute(x, layout_.Residual(), comm);
        if (p == 1) inputs[{a.micro_batch, a.chunk + 1}] = x.value();  // the next chunk is here
      }
      entry.output = x;
      stash[key] = std::move(entry);
      peak = std::max(peak, static_cast<int64_t>(stash.size()));
      ++i;
    } else if (a.kind == ActionKind::kBackward) {
      auto it = stash.find(key);
      if (it == stash.end()) ThrowInvalid("schedule", "a backward without its forward");
      if (k == last) {
        Backward(it->second.output, comm);
      } else {
        Backward(it->second.output, take(output_grads, key, "output gradient"), comm);
      }
      if (k > 0) {
        DistTensor g = Gradient(it->second.input, layout_.Residual(), comm);
        if (p == 1) {
          output_grads[{a.micro_batch, a.chunk - 1}] = std::move(g);
        } else {
          input_grads[key] = std::move(g);
        }
      }
      stash.erase(it);
      ++i;
    } else {
      // A run of messages: post every send and receive, then wait once if it receives.
      bool receives = false;
      for (; i < list.size() && list[i].kind != ActionKind::kForward &&
             list[i].kind != ActionKind::kBackward;
           ++i) {
        const Action& x = list[i];
        const Key mine{x.micro_batch, x.chunk};
        const int64_t peer = PeerRank(x.peer);
        if (x.kind == ActionKind::kSendActivation || x.kind == ActionKind::kSendGrad) {
          if (x.kind == ActionKind::kSendActivation) {
            auto it = stash.find(mine);
            if (it == stash.end())
              ThrowInvalid("schedule", "an activation sent before its forward");
            in_flight.push_back(it->second.output.value());
          } else {
            in_flight.push_back(take(input_grads, mine, "input gradient"));
          }
          const kernels::Tensor& local = in_flight.back().local();
          comm.Send(local.bytes(), local.numel(), local.dtype(), peer);
        } else {
          std::map<Key, DistTensor>& into =
              x.kind == ActionKind::kRecvActivation ? inputs : output_grads;
          DistTensor& slot = into[mine] = Constant(activation_shape(x.micro_batch), config_.dtype,
                                                   mesh, layout_.Residual(), comm.rank(), 0,
                                                   comm.device(), comm.stream());
          kernels::Tensor& local = slot.local();
          comm.Recv(local.bytes(), local.numel(), local.dtype(), peer);
          receives = true;
        }
      }
      if (receives) {
        comm.Synchronize();
        in_flight.clear();
      }
    }
  }
  comm.Synchronize();
  in_flight.clear();
  last_peak_live_ = peak;

  StepStats stats;
  // The loss lives on the last stage: summed over the stages (the others add 0). Every
  // rank then holds the same loss and checks it before the update (Trainer::Step's guard).
  if (p > 1) {  // on a buffer of the communicator's device
    kernels::Tensor sum = OnDevice(kernels::Tensor::FromVector({1}, std::vector<double>{loss_sum}),
                                   comm.device(), comm.stream());
    comm.AllReduce(sum.bytes(), sum.bytes(), 1, DType::kFloat64, ReduceOp::kSum,
                   mesh_.GroupOf(coord_, {pp_axis_}));
    loss_sum = ReadScalar(sum);
  }
  stats.loss = loss_sum;
  CheckFinite(step, "loss", stats.loss);
  optimizer_.Step(comm);
  stats.grad_norm = optimizer_.last_grad_norm();
  CheckFinite(step, "gradient norm", stats.grad_norm);  // summed over the stages
  const runtime::CommCounters& after = comm.counters();
  stats.bytes_sent = SumBytes(after, true) - SumBytes(before, true);
  stats.bytes_received = SumBytes(after, false) - SumBytes(before, false);
  stats.activation_peak_bytes = ActivationBytes().peak_bytes;
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

std::vector<std::pair<std::string, std::vector<double>>> PipelineTrainer::GatherParams(
    Communicator& comm) const {
  std::vector<std::pair<std::string, std::vector<double>>> out;
  for (const Gpt& chunk : chunks_) {
    for (const NamedParam& p : chunk.params()) {
      const std::optional<kernels::Tensor> g = p.value.value().ToGlobal(comm);
      std::vector<double> values;
      if (g) {
        const kernels::Tensor host = ToHostTensor(*g);
        for (int64_t i = 0; i < host.numel(); ++i) values.push_back(ReadScalar(host, i));
      }
      out.push_back({p.name, std::move(values)});
    }
  }
  return out;
}

}  // namespace spmd::train
