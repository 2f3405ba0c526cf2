// Reading flight records (runtime/diagnostics/flight_recorder.h: the format) and the hang
// analysis behind `spmd hangs DIR` (cli/hangs.h, docs/OPERATIONS.md): parse every rank's
// dump, then name the first collective some ranks entered and others did not, the ranks
// each side, the suspects, and any call the ranks describe differently. Offline: only the
// CLI links it, not the training binaries.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/diagnostics/flight_recorder.h"

namespace spmd::cli {

using runtime::CollectiveDesc;
using runtime::FlightState;
using runtime::Group;

// What a dump may claim (ParseFlightDump refuses more, naming the field): the world (the
// largest mesh spmdkit handles, rules/model/mesh.h's kMaxMeshRanks), the ring's capacity (the
// largest SPMD_FLIGHT_RECORDER) and the length of one line (a group of the largest world
// is under 400 KB).
inline constexpr int64_t kMaxFlightWorld = int64_t{1} << 16;
inline constexpr int64_t kMaxFlightCapacity = int64_t{1} << 24;
inline constexpr size_t kMaxFlightLineBytes = size_t{1} << 20;


// One call as a dump records it.
struct FlightCall {
  int64_t n = 0, step = 0, seq = 0, group = -1;
  CollectiveDesc desc;  // counts / recv_counts: the shown ones
  int64_t ncounts = 0, nrecv = 0, total = 0;
  uint64_t counts_hash = 0, recv_hash = 0;
  FlightState state = FlightState::kEnqueued;
  int64_t enqueued_us = 0, started_us = 0, completed_us = 0;
  std::string phase;
  int line = 0;  // in its file
};

struct FlightDump {
  std::string path;
  int64_t rank = 0, world = 0, capacity = 0, recorded = 0;
  std::string reason;
  std::vector<Group> groups;                // by id
  std::vector<int64_t> group_calls;         // by id
  std::map<int64_t, int64_t> sends, recvs;  // per peer
  std::vector<FlightCall> calls;            // oldest first
};

// Parses one dump; InvalidArgument naming `path:line` for anything malformed (a dump cut
// short, with no `end` line, included) and for any count out of its range (the message
// starts with the field: `world: 100000000 is out of range (1 to 65536)`). Reads line by
// line, each line capped at kMaxFlightLineBytes; nothing is allocated in proportion to a
// number the dump claims.
FlightDump ParseFlightDump(std::istream& in, const std::string& path);
FlightDump ParseFlightDump(const std::string& text, const std::string& path);
// Reads every flight_rank*.txt in `dir`; InvalidArgument ("dir") when it is missing or
// holds none, or when two dumps claim one rank or disagree on the world size.
std::vector<FlightDump> ReadFlightDumps(const std::string& dir);

struct HangDivergence {
  Group group;  // p2p: {from, to}
  bool p2p = false;
  int64_t seq = 0;   // the call of that group (message of that channel) not entered by all
  std::string call;  // its description, from a rank that entered it
  std::vector<int64_t> entered, missing, unknown;  // unknown: members with no dump
  int64_t first_entered_us = 0;
  bool root = false;  // some missing or unknown member is a suspect
};

struct HangMismatch {
  Group group;
  int64_t seq = 0;
  std::vector<std::pair<int64_t, std::string>> calls;  // (rank, its call) that differ
};

struct HangReport {
  std::vector<int64_t> ranks;                // with a dump
  std::vector<int64_t> missing_dumps;        // world ranks without one
  std::vector<HangDivergence> divergences;   // the first one first
  std::vector<HangMismatch> mismatches;      // earliest first
  std::map<int64_t, std::string> last_call;  // per rank: its last call, in words
  // Per rank whose last call has not completed: the members of that call's group (or the
  // peer) that have not entered it, ranks without a dump included.
  std::map<int64_t, std::vector<int64_t>> waits_on;
  // The ranks to look at: every rank without a dump that some rank waits on, and every rank
  // with a dump that did not enter a divergent call and waits on no one. Never a rank that
  // waits on another.
  std::vector<int64_t> suspects;
  bool cycle = false;  // divergences but no suspect: every missing rank waits in another
};

HangReport AnalyzeFlightDumps(const std::vector<FlightDump>& dumps);
// The report in words: `first divergence: ...` or `no divergence ...`.
std::string FormatHangReport(const HangReport& report);

}  // namespace spmd::cli
