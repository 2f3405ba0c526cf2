#include "cli/flight_dump.h"

#include <dirent.h>

#include <algorithm>
#include <fstream>
#include <istream>
#include <limits>
#include <set>
#include <sstream>

#include "rules/model/error.h"

namespace spmd::cli {

// The records are the runtime's: its collectives, groups and their names.
using namespace spmd::runtime;

// ---- parsing -------------------------------------------------------------------------------

namespace {

// Counts, sequence numbers and timestamps: non-negative and far from overflowing a sum.
constexpr int64_t kMaxCount = int64_t{1} << 61;

[[noreturn]] void Garbled(const std::string& path, int line, const std::string& what) {
  ThrowInvalid(path + ":" + std::to_string(line), what);
}

// `key=value` fields of one line (values may be quoted; quotes never occur inside).
std::map<std::string, std::string> Fields(std::string_view line, const std::string& path,
                                          int number) {
  std::map<std::string, std::string> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ') ++i;
    if (i >= line.size()) break;
    const size_t eq = line.find('=', i);
    if (eq == std::string_view::npos) {
      Garbled(path, number, "expected key=value, got '" + std::string(line.substr(i)) + "'");
    }
    const std::string key(line.substr(i, eq - i));
    if (key.empty() || key.find(' ') != std::string::npos) {
      Garbled(path, number,
              "expected key=value, got '" + std::string(line.substr(i, eq - i + 1)) + "'");
    }
    size_t j = eq + 1;
    std::string value;
    if (j < line.size() && line[j] == '"') {
      const size_t close = line.find('"', j + 1);
      if (close == std::string_view::npos) Garbled(path, number, "unterminated quote in " + key);
      value = std::string(line.substr(j + 1, close - j - 1));
      j = close + 1;
    } else {
      const size_t end = std::min(line.find(' ', j), line.size());
      value = std::string(line.substr(j, end - j));
      j = end;
    }
    if (!out.emplace(key, value).second) Garbled(path, number, "field " + key + " repeats");
    i = j;
  }
  return out;
}

const std::string& Need(const std::map<std::string, std::string>& f, const std::string& key,
                        const std::string& path, int line) {
  auto it = f.find(key);
  if (it == f.end()) Garbled(path, line, "missing field " + key);
  return it->second;
}

int64_t Int(const std::map<std::string, std::string>& f, const std::string& key,
            const std::string& path, int line) {
  const std::string& v = Need(f, key, path, line);
  try {
    size_t used = 0;
    const long long x = std::stoll(v, &used);
    if (used != v.size()) throw std::invalid_argument(v);
    return x;
  } catch (const std::exception&) {
    Garbled(path, line, key + ": expected an integer, got '" + v + "'");
  }
}

uint64_t Unsigned(const std::map<std::string, std::string>& f, const std::string& key,
                  const std::string& path, int line) {
  const std::string& v = Need(f, key, path, line);
  try {
    size_t used = 0;
    if (v.empty() || v[0] == '-') throw std::invalid_argument(v);
    const unsigned long long x = std::stoull(v, &used);
    if (used != v.size()) throw std::invalid_argument(v);
    return x;
  } catch (const std::exception&) {
    Garbled(path, line, key + ": expected an unsigned integer, got '" + v + "'");
  }
}

std::vector<int64_t> List(const std::map<std::string, std::string>& f, const std::string& key,
                          const std::string& path, int line) {
  const std::string& v = Need(f, key, path, line);
  if (v.size() < 2 || v.front() != '[' || v.back() != ']') {
    Garbled(path, line, key + ": expected [a,b,...], got '" + v + "'");
  }
  std::vector<int64_t> out;
  const std::string body = v.substr(1, v.size() - 2);
  if (body.empty()) return out;
  std::stringstream in(body);
  std::string item;
  while (std::getline(in, item, ',')) {
    try {
      size_t used = 0;
      out.push_back(std::stoll(item, &used));
      if (used != item.size()) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      Garbled(path, line, key + ": '" + item + "' is not an integer");
    }
  }
  return out;
}

// A count read from a dump, checked to lie in [lo, hi] before anything uses it.
int64_t Bounded(const std::map<std::string, std::string>& f, const std::string& key, int64_t lo,
                int64_t hi, const std::string& path, int line) {
  const int64_t v = Int(f, key, path, line);
  if (v < lo || v > hi) {
    Garbled(path, line, key + ": " + std::to_string(v) + " is out of range (" +
                            std::to_string(lo) + " to " + std::to_string(hi) + ")");
  }
  return v;
}

// One line of `in` into `line` (without the newline); false at the end of the input. A
// line longer than kMaxFlightLineBytes stops the read there with `too_long` set (the dump
// is refused), so that memory never grows with a line that has no end.
bool ReadCappedLine(std::istream& in, std::string& line, bool& too_long) {
  line.clear();
  too_long = false;
  std::streambuf* buf = in.rdbuf();
  if (buf == nullptr) return false;
  int c = buf->sbumpc();
  if (c == std::char_traits<char>::eof()) return false;
  while (c != std::char_traits<char>::eof() && c != '\n') {
    if (line.size() == kMaxFlightLineBytes) {
      too_long = true;
      return true;
    }
    line.push_back(static_cast<char>(c));
    c = buf->sbumpc();
  }
  return true;
}

template <class Enum, int kCount>
Enum Named(const std::map<std::string, std::string>& f, const std::string& key,
           const std::string& path, int line) {
  const std::string& v = Need(f, key, path, line);
  for (int i = 0; i < kCount; ++i) {
    if (ToString(static_cast<Enum>(i)) == v) return static_cast<Enum>(i);
  }
  Garbled(path, line, key + ": unknown value '" + v + "'");
}

std::string DescribeCall(const FlightCall& c) {
  std::string out = ToString(c.desc);
  if (c.ncounts > kShownCounts || c.nrecv > kShownCounts) {
    out += " (" + std::to_string(c.ncounts) + " counts, the first " + std::to_string(kShownCounts) +
           " shown)";
  }
  return out;
}

std::string RankList(const std::vector<int64_t>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? "," : "") + std::to_string(ranks[i]);
  return out;
}

}  // namespace

FlightDump ParseFlightDump(std::istream& in, const std::string& path) {
  FlightDump dump;
  dump.path = path;
  std::string line;
  int number = 0;
  bool header = false, ended = false;
  bool too_long = false;
  while (ReadCappedLine(in, line, too_long)) {
    ++number;
    if (too_long) {
      Garbled(path, number, "line: longer than " + std::to_string(kMaxFlightLineBytes) +
                                " bytes (not a flight record)");
    }
    if (number == std::numeric_limits<int>::max()) Garbled(path, number, "too many lines");
    if (ended) {
      if (!line.empty()) Garbled(path, number, "text after the end line");
      continue;
    }
    if (number == 1) {
      if (line != "spmd-flight-record 1") {
        Garbled(path, number, "not a flight record (expected 'spmd-flight-record 1')");
      }
      continue;
    }
    if (number == 2) {
      const auto f = Fields(line, path, number);
      dump.world = Bounded(f, "world", 1, kMaxFlightWorld, path, number);
      dump.rank = Int(f, "rank", path, number);
      dump.capacity = Bounded(f, "capacity", 0, kMaxFlightCapacity, path, number);
      dump.recorded = Bounded(f, "recorded", 0, kMaxCount, path, number);
      dump.reason = Need(f, "reason", path, number);
      if (dump.rank < 0 || dump.rank >= dump.world) {
        Garbled(path, number,
                "rank " + std::to_string(dump.rank) + " is not in a world of " +
                    std::to_string(dump.world));
      }
      header = true;
      continue;
    }
    if (line == "end") {
      ended = true;
      continue;
    }
    const size_t space = line.find(' ');
    const std::string tag = line.substr(0, space);
    const auto f = Fields(
        space == std::string::npos ? "" : std::string_view(line).substr(space + 1), path, number);
    if (tag == "group") {
      const int64_t id = Int(f, "id", path, number);
      if (id != static_cast<int64_t>(dump.groups.size())) {
        Garbled(path, number, "group ids must count up from 0, got " + std::to_string(id));
      }
      if (id >= kMaxFlightGroups) {
        Garbled(path, number, "id: more than " + std::to_string(kMaxFlightGroups) + " groups");
      }
      Group members = List(f, "members", path, number);
      if (std::find(members.begin(), members.end(), dump.rank) == members.end()) {
        Garbled(path, number,
                "group " + ToString(members) + " does not hold rank " + std::to_string(dump.rank));
      }
      for (int64_t m : members) {
        if (m < 0 || m >= dump.world)
          Garbled(path, number, "member " + std::to_string(m) + " is not in the world");
      }
      if (static_cast<int64_t>(members.size()) > dump.world ||
          std::set<int64_t>(members.begin(), members.end()).size() != members.size()) {
        Garbled(path, number, "members: a rank is listed twice");
      }
      dump.group_calls.push_back(Bounded(f, "calls", 0, kMaxCount, path, number));
      dump.groups.push_back(std::move(members));
    } else if (tag == "p2p") {
      const int64_t peer = Int(f, "peer", path, number);
      if (peer < 0 || peer >= dump.world)
        Garbled(path, number, "peer " + std::to_string(peer) + " is not in the world");
      if (peer == dump.rank) Garbled(path, number, "peer: " + std::to_string(peer) + " is this rank");
      if (dump.sends.count(peer)) Garbled(path, number, "peer: " + std::to_string(peer) + " is listed twice");
      dump.sends[peer] = Bounded(f, "sends", 0, kMaxCount, path, number);
      dump.recvs[peer] = Bounded(f, "recvs", 0, kMaxCount, path, number);
    } else if (tag == "call") {
      if (static_cast<int64_t>(dump.calls.size()) >= dump.capacity ||
          static_cast<int64_t>(dump.calls.size()) >= dump.recorded) {
        Garbled(path, number, "call: more call records than capacity=" +
                                  std::to_string(dump.capacity) + " and recorded=" +
                                  std::to_string(dump.recorded) + " allow");
      }
      FlightCall c;
      c.line = number;
      c.n = Bounded(f, "n", 1, kMaxCount, path, number);
      c.step = Bounded(f, "step", 0, kMaxCount, path, number);
      c.group = Int(f, "group", path, number);
      c.seq = Bounded(f, "seq", 1, kMaxCount, path, number);
      c.desc.kind = Named<Collective, kNumCollectives>(f, "kind", path, number);
      c.desc.dtype = Named<DType, 6>(f, "dtype", path, number);
      c.desc.op = Named<ReduceOp, 7>(f, "op", path, number);
      c.desc.root = Int(f, "root", path, number);
      c.ncounts = Bounded(f, "ncounts", 0, kMaxCount, path, number);
      c.desc.counts = List(f, "counts", path, number);
      c.total = Int(f, "total", path, number);
      c.counts_hash = Unsigned(f, "counts_hash", path, number);
      c.nrecv = Bounded(f, "nrecv", 0, kMaxCount, path, number);
      c.desc.recv_counts = List(f, "recv_counts", path, number);
      c.recv_hash = Unsigned(f, "recv_hash", path, number);
      c.state = Named<FlightState, 3>(f, "state", path, number);
      c.enqueued_us = Bounded(f, "enqueued_us", 0, kMaxCount, path, number);
      c.started_us = Bounded(f, "started_us", 0, kMaxCount, path, number);
      c.completed_us = Bounded(f, "completed_us", 0, kMaxCount, path, number);
      c.phase = Need(f, "phase", path, number);
      const bool p2p = c.desc.kind == Collective::kSend || c.desc.kind == Collective::kRecv;
      if (p2p) {
        if (c.desc.root < 0 || c.desc.root >= dump.world || c.desc.root == dump.rank) {
          Garbled(path, number, "peer " + std::to_string(c.desc.root) + " is not another rank");
        }
        c.desc.group = {dump.rank, c.desc.root};
      } else {
        if (c.group < 0 || c.group >= static_cast<int64_t>(dump.groups.size())) {
          Garbled(path, number, "group " + std::to_string(c.group) + " is not listed above");
        }
        c.desc.group = dump.groups[c.group];
      }
      const auto shown = [](int64_t n) { return std::min<int64_t>(n, kShownCounts); };
      if (c.ncounts < 0 || static_cast<int64_t>(c.desc.counts.size()) != shown(c.ncounts) ||
          c.nrecv < 0 || static_cast<int64_t>(c.desc.recv_counts.size()) != shown(c.nrecv)) {
        Garbled(path, number, "counts do not match ncounts / nrecv");
      }
      const bool single =
          c.desc.kind == Collective::kAllReduce || c.desc.kind == Collective::kBroadcast || p2p;
      if (single && c.ncounts != 1) Garbled(path, number, "expected one count");
      if (c.seq < 1) Garbled(path, number, "seq must be at least 1");
      if (!dump.calls.empty() && c.n <= dump.calls.back().n) {
        Garbled(path, number, "call numbers must increase");
      }
      dump.calls.push_back(std::move(c));
    } else {
      Garbled(path, number, "unknown record '" + tag + "'");
    }
  }
  if (!header) Garbled(path, std::max(number, 1), "no header (an empty or cut-off dump)");
  if (!ended) Garbled(path, number, "the dump is cut off (no end line)");
  return dump;
}

FlightDump ParseFlightDump(const std::string& text, const std::string& path) {
  std::istringstream in(text);
  return ParseFlightDump(in, path);
}

std::vector<FlightDump> ReadFlightDumps(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) ThrowInvalid("dir", "cannot open '" + dir + "': " + std::strerror(errno));
  std::vector<std::string> names;
  while (dirent* entry = ::readdir(d)) {
    const std::string name = entry->d_name;
    if (name.rfind("flight_rank", 0) == 0 && name.size() > 15 &&
        name.compare(name.size() - 4, 4, ".txt") == 0) {
      names.push_back(name);
    }
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  if (names.empty()) ThrowInvalid("dir", "'" + dir + "' holds no flight_rank*.txt dumps");
  std::vector<FlightDump> dumps;
  std::map<int64_t, std::string> owner;
  for (const std::string& name : names) {
    const std::string path = dir + "/" + name;
    std::ifstream in(path, std::ios::binary);
    if (!in) ThrowInvalid(path, "cannot read the file");
    FlightDump dump = ParseFlightDump(in, path);
    if (!dumps.empty() && dump.world != dumps.front().world) {
      ThrowInvalid("dir", path + " says the world has " + std::to_string(dump.world) + " ranks, " +
                              dumps.front().path + " says " + std::to_string(dumps.front().world));
    }
    if (auto [it, fresh] = owner.emplace(dump.rank, path); !fresh) {
      ThrowInvalid("dir",
                   path + " and " + it->second + " both hold rank " + std::to_string(dump.rank));
    }
    dumps.push_back(std::move(dump));
  }
  return dumps;
}

// ---- the analysis ----------------------------------------------------------------------------

namespace {

// The calls of one group (p2p: one channel) as the members recorded them.
struct Lane {
  Group members;
  bool p2p = false;
  std::map<int64_t, int64_t> count;  // rank -> calls made on it (all members with a dump)
  std::map<int64_t, std::map<int64_t, const FlightCall*>> calls;  // seq -> rank -> call
};

bool SameCall(const FlightCall& a, const FlightCall& b) {
  if (a.desc.kind != b.desc.kind || a.desc.dtype != b.desc.dtype) return false;
  const Collective k = a.desc.kind;
  const bool reduces = k == Collective::kAllReduce || k == Collective::kReduceScatter;
  if (reduces && a.desc.op != b.desc.op) return false;
  if (k == Collective::kBroadcast && a.desc.root != b.desc.root) return false;
  if (k == Collective::kAllToAll) return a.ncounts == b.ncounts;  // counts differ by design
  return a.ncounts == b.ncounts && a.counts_hash == b.counts_hash;
}

// The lane of a call made by `rank`: its group, or for send / recv the channel {from, to}.
std::pair<Group, bool> LaneOf(const FlightCall& c, int64_t rank) {
  if (c.desc.kind == Collective::kSend) return {Group{rank, c.desc.root}, true};
  if (c.desc.kind == Collective::kRecv) return {Group{c.desc.root, rank}, true};
  return {c.desc.group, false};
}

bool SameMessage(const FlightCall& send, const FlightCall& recv) {
  return send.desc.dtype == recv.desc.dtype && send.total == recv.total;
}

}  // namespace

HangReport AnalyzeFlightDumps(const std::vector<FlightDump>& dumps) {
  HangReport report;
  if (dumps.empty()) return report;
  const int64_t world = dumps.front().world;
  std::map<int64_t, const FlightDump*> by_rank;
  for (const FlightDump& d : dumps) by_rank[d.rank] = &d;
  for (int64_t r = 0; r < world; ++r) {
    if (by_rank.count(r)) {
      report.ranks.push_back(r);
    } else {
      report.missing_dumps.push_back(r);
    }
  }

  // Lanes: collective groups by their member list; p2p channels as {from, to}.
  std::map<std::pair<Group, bool>, Lane> lanes;
  for (const FlightDump& d : dumps) {
    for (size_t g = 0; g < d.groups.size(); ++g) {
      Lane& lane = lanes[{d.groups[g], false}];
      lane.members = d.groups[g];
      lane.count[d.rank] = d.group_calls[g];
    }
    for (const auto& [peer, n] : d.sends) {
      Lane& lane = lanes[{Group{d.rank, peer}, true}];
      lane.members = {d.rank, peer};
      lane.p2p = true;
      lane.count[d.rank] = n;
    }
    for (const auto& [peer, n] : d.recvs) {
      Lane& lane = lanes[{Group{peer, d.rank}, true}];
      lane.members = {peer, d.rank};
      lane.p2p = true;
      lane.count[d.rank] = n;
    }
    for (const FlightCall& c : d.calls) lanes[LaneOf(c, d.rank)].calls[c.seq][d.rank] = &c;
  }
  // A member with a dump that never used the lane made 0 calls on it.
  for (auto& [key, lane] : lanes) {
    for (int64_t m : lane.members) {
      if (by_rank.count(m) && !lane.count.count(m)) lane.count[m] = 0;
    }
  }

  // Where each rank waits: its last call when that has not completed, and the members of
  // that call's lane that have not entered it. A member with no dump may not have: it is
  // counted as one the rank waits on.
  std::map<std::pair<Group, bool>, int64_t> waited_seq;  // lane -> highest seq waited in
  for (const FlightDump& d : dumps) {
    if (d.calls.empty() || d.calls.back().state == FlightState::kCompleted) continue;
    const FlightCall& last = d.calls.back();
    const auto key = LaneOf(last, d.rank);
    const Lane& lane = lanes.at(key);
    std::vector<int64_t>& on = report.waits_on[d.rank];
    for (int64_t m : lane.members) {
      if (m == d.rank) continue;
      auto it = lane.count.find(m);
      if (it == lane.count.end() || it->second < last.seq) on.push_back(m);
    }
    int64_t& seq = waited_seq[key];
    seq = std::max(seq, last.seq);
  }

  for (const auto& [key, lane] : lanes) {
    int64_t lo = INT64_MAX, hi = 0;
    for (const auto& [r, n] : lane.count) {
      lo = std::min(lo, n);
      hi = std::max(hi, n);
    }
    // Mismatched descriptors at one sequence number (collectives: all members; p2p: the
    // send against the recv).
    for (const auto& [seq, calls] : lane.calls) {
      if (calls.size() < 2) continue;
      const FlightCall& first = *calls.begin()->second;
      bool differ = false;
      for (const auto& [r, c] : calls) {
        if (lane.p2p ? !SameMessage(first, *c) : !SameCall(first, *c)) differ = true;
      }
      if (!differ) continue;
      HangMismatch m{lane.members, seq, {}};
      for (const auto& [r, c] : calls) m.calls.emplace_back(r, DescribeCall(*c));
      report.mismatches.push_back(std::move(m));
    }
    HangDivergence div;
    if (lo != hi) {
      div.seq = lo + 1;
    } else {
      // Every member with a dump made as many calls; still a divergence when one of them
      // waits in the last of them and a member has no dump (which may never have entered).
      const bool dumpless = lane.count.size() < lane.members.size();
      auto it = waited_seq.find(key);
      if (!dumpless || it == waited_seq.end() || it->second != hi) continue;
      div.seq = hi;
    }
    div.group = lane.members;
    div.p2p = lane.p2p;
    div.first_entered_us = INT64_MAX;
    for (int64_t m : lane.members) {
      auto it = lane.count.find(m);
      if (it == lane.count.end()) {
        div.unknown.push_back(m);
      } else if (it->second >= div.seq) {
        div.entered.push_back(m);
      } else {
        div.missing.push_back(m);
      }
    }
    if (auto it = lane.calls.find(div.seq); it != lane.calls.end()) {
      const FlightCall* c = it->second.begin()->second;
      div.call = DescribeCall(*c);
      for (const auto& [r, call] : it->second) {
        div.first_entered_us = std::min(div.first_entered_us, call->enqueued_us);
      }
    } else {
      div.call = lane.p2p ? "message " + std::to_string(div.seq) + " from rank " +
                                std::to_string(div.group[0]) + " to rank " +
                                std::to_string(div.group[1]) + " (no longer in the ring)"
                          : "a call on group " + ToString(div.group) + " (no longer in the ring)";
    }
    report.divergences.push_back(std::move(div));
  }

  for (const FlightDump& d : dumps) {
    if (d.calls.empty()) {
      report.last_call[d.rank] = "none recorded";
      continue;
    }
    const FlightCall& last = d.calls.back();
    std::string text = DescribeCall(last) + " at step " + std::to_string(last.step) + ", " +
                       std::string(ToString(last.state));
    if (!last.phase.empty()) text += ", phase \"" + last.phase + "\"";
    report.last_call[d.rank] = text;
  }

  // The suspects: every rank without a dump that a rank waits on (it may be stopped,
  // killed or anywhere: a rank waiting on it is never blamed), and every rank with a dump
  // that has not entered a divergent call and waits on no one (it is somewhere outside the
  // calls the others wait in). A rank that waits on others is not a suspect.
  std::set<int64_t> suspects;
  for (const auto& [r, on] : report.waits_on) {
    for (int64_t m : on) {
      if (!by_rank.count(m)) suspects.insert(m);
    }
  }
  const auto waits = [&](int64_t r) {
    auto it = report.waits_on.find(r);
    return it != report.waits_on.end() && !it->second.empty();
  };
  for (const HangDivergence& div : report.divergences) {
    for (int64_t m : div.missing) {
      if (!waits(m)) suspects.insert(m);
    }
  }
  report.suspects.assign(suspects.begin(), suspects.end());
  for (HangDivergence& div : report.divergences) {
    for (int64_t m : div.missing) div.root = div.root || suspects.count(m) > 0;
    for (int64_t m : div.unknown) div.root = div.root || suspects.count(m) > 0;
  }
  report.cycle = !report.divergences.empty() && report.suspects.empty();
  std::stable_sort(report.divergences.begin(), report.divergences.end(),
                   [](const HangDivergence& a, const HangDivergence& b) {
                     if (a.root != b.root) return a.root;
                     return a.first_entered_us < b.first_entered_us;
                   });
  std::stable_sort(report.mismatches.begin(), report.mismatches.end(),
                   [](const HangMismatch& a, const HangMismatch& b) { return a.seq < b.seq; });
  return report;
}

std::string FormatHangReport(const HangReport& report) {
  std::ostringstream out;
  out << "dumps from ranks " << RankList(report.ranks);
  if (!report.missing_dumps.empty())
    out << "; no dump from ranks " << RankList(report.missing_dumps);
  out << "\n";
  for (int64_t r : report.suspects) {
    std::vector<int64_t> waiters;
    for (const auto& [w, on] : report.waits_on) {
      if (std::find(on.begin(), on.end(), r) != on.end()) waiters.push_back(w);
    }
    const bool dumped = report.last_call.count(r) > 0;
    out << "suspect: rank " << r << " (";
    if (!dumped) out << "no dump";
    if (!waiters.empty()) {
      out << (dumped ? "" : "; ") << "rank" << (waiters.size() == 1 ? " " : "s ")
          << RankList(waiters) << (waiters.size() == 1 ? " waits" : " wait") << " on it";
    } else if (dumped) {
      out << "did not enter a call the others entered";
    }
    out << ")\n";
  }
  // Ranks that wait on a rank with no dump: said where they are named, so that no one
  // reads "not entered by" as blame.
  const auto waits_on_dumpless = [&](int64_t r) -> std::vector<int64_t> {
    std::vector<int64_t> out_ranks;
    auto it = report.waits_on.find(r);
    if (it == report.waits_on.end()) return out_ranks;
    for (int64_t m : it->second) {
      if (!report.last_call.count(m)) out_ranks.push_back(m);
    }
    return out_ranks;
  };
  const auto describe = [&](const HangDivergence& d) {
    std::ostringstream s;
    if (d.p2p) {
      s << d.call << ", message " << d.seq << " from rank " << d.group[0] << " to rank "
        << d.group[1];
    } else {
      s << d.call << ", call " << d.seq << " of that group";
    }
    s << ": entered by rank" << (d.entered.size() == 1 ? " " : "s ") << RankList(d.entered);
    if (!d.missing.empty()) {
      s << "; not entered by rank" << (d.missing.size() == 1 ? " " : "s ") << RankList(d.missing);
    }
    for (int64_t m : d.missing) {
      auto it = report.last_call.find(m);
      if (it == report.last_call.end()) continue;
      s << " (rank " << m;
      if (const std::vector<int64_t> on = waits_on_dumpless(m); !on.empty()) {
        s << " waits on rank" << (on.size() == 1 ? " " : "s ") << RankList(on)
          << ", which left no dump; its";
      } else {
        s << "'s";
      }
      s << " last call: " << it->second << ")";
    }
    if (!d.unknown.empty()) s << "; unknown (no dump): ranks " << RankList(d.unknown);
    return s.str();
  };
  if (report.divergences.empty()) {
    out << "no divergence: every group's members made the same number of calls\n";
  } else {
    out << "first divergence: " << describe(report.divergences.front()) << "\n";
    if (report.cycle) {
      out << "  (a cycle: every rank that did not enter a divergent call waits in another one)\n";
    }
    for (size_t i = 1; i < report.divergences.size(); ++i) {
      out << "also: " << describe(report.divergences[i]) << "\n";
    }
  }
  for (const HangMismatch& m : report.mismatches) {
    out << "mismatch on group " << ToString(m.group) << ", call " << m.seq << ":";
    for (const auto& [r, text] : m.calls) out << " rank " << r << " calls " << text << ";";
    out << "\n";
  }
  for (const auto& [r, text] : report.last_call)
    out << "rank " << r << ": last call " << text << "\n";
  return out.str();
}

}  // namespace spmd::cli
