// The flight recorder: every Communicator keeps the last N calls it made, so that a job
// that hangs or fails can say which collective each rank was in. The analysis that reads
// every rank's record and names the first collective the ranks disagree on is offline, in
// the CLI (`spmd hangs DIR`, cli/flight_dump.h, docs/OPERATIONS.md): a training binary
// links only the recording.
//
// Recording (Communicator's call path, so every backend gets it): each call is one entry
// of a ring buffer of `capacity` entries (env SPMD_FLIGHT_RECORDER, default 256; 0 turns
// the recorder off): its kind, dtype, op, root or peer, group, counts (the first
// kShownCounts of them, their number, total and a hash), the bytes the accounting says it
// moves, the communicator step, its sequence number on its group (the n-th call this rank
// makes on that group; send / recv: the n-th message to / from that peer), the phase label
// set by `SetPhase` when it was made, and three timestamps with its state: enqueued (the
// call was made), started (handed to the backend), completed (the backend returned;
// send / recv: the next Synchronize returned). Besides the ring, the recorder counts the
// calls per group and the messages per peer since the start, so a rank's totals survive
// the ring wrapping round.
//
// Dumps: `Dump(reason)` writes the record to SPMD_FLIGHT_DIR/flight_rank<R>.txt (nothing
// when SPMD_FLIGHT_DIR is unset or empty). The communicator dumps on a timeout or error
// (before MPI_Abort; before the thread backend throws CommError), GuardedMain dumps when
// the body throws, and once some recorder has a directory the process dumps every live
// recorder on SIGUSR1 (and goes on) and on SIGTERM (then dies of it, as it would have:
// mpirun ends the other ranks of an aborted job with SIGTERM, so they dump too).
// Signal safety: the dump is written from the signal handler itself, with no allocation
// and no locks: entries are fixed-size records, group texts are formatted when a group is
// first seen and never change, and the writer formats integers into a stack buffer and
// calls open / write / close (async-signal-safe). An entry is marked invalid while it is
// rewritten, so a signal that lands then skips it; one that lands between a call's state
// change and its timestamp can show that one entry with a stale timestamp.
//
// Format (text, one record per line, `key=value` fields; values with spaces quoted):
//   spmd-flight-record 1
//   rank=2 world=4 capacity=256 recorded=6 pid=1234 reason="timeout"
//   group id=0 members=[0,1,2,3] calls=2
//   p2p peer=1 sends=2 recvs=0
//   call n=1 step=1 group=0 seq=1 kind=all_reduce dtype=float64 op=sum root=-1 ncounts=1
//        counts=[4] total=4 counts_hash=... nrecv=0 recv_counts=[] recv_hash=0 sent=48
//        received=48 state=completed enqueued_us=... started_us=... completed_us=...
//        phase="step 3 backward"
//   end
// (a `call` record is one line; `end` marks a dump that was written to the end).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "runtime/comm/communicator.h"

namespace spmd::runtime {

inline constexpr int kShownCounts = 8;
inline constexpr int kPhaseSize = 64;
inline constexpr int kMaxFlightGroups = 1024;

enum class FlightState : int { kEnqueued = 0, kStarted = 1, kCompleted = 2 };
std::string_view ToString(FlightState state);  // "enqueued", "started", "completed"

class FlightRecorder {
 public:
  // capacity 0: records nothing (every call below is a no-op, Dump writes nothing).
  // `dir` empty: Dump writes nothing. Registers for the signal dumps when dir is set.
  FlightRecorder(int64_t rank, int64_t world_size, int64_t capacity, std::string dir);
  ~FlightRecorder();
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  int64_t capacity() const { return capacity_; }
  const std::string& dir() const { return dir_; }

  // The label copied into every later entry (truncated to kPhaseSize - 1 bytes; quotes
  // and control characters become '?').
  void SetPhase(std::string_view phase);
  std::string phase() const { return phase_; }

  // Records a call made at communicator step `step`; returns its handle for the state
  // changes (-1 when recording is off).
  int64_t Enqueued(const CollectiveDesc& desc, int64_t step, ByteCount bytes);
  void Started(int64_t handle);
  void Completed(int64_t handle);
  // Marks every started send / recv completed (Synchronize returned).
  void CompletedPointToPoint();

  // Writes the record to dir()/flight_rank<R>.txt; returns the path, or "" when there is
  // no directory or recording is off, or the file cannot be written. Async-signal-safe
  // when `reason` is a string literal. `final`: the dump of a failure (a timeout, an
  // error), which the signal dumps do not overwrite (an aborting rank also receives the
  // SIGTERM mpirun sends every rank).
  std::string Dump(const char* reason, bool final = false) const;
  // The same record into a string (for tests and the request path).
  std::string Format(const char* reason) const;

  // Dumps every live recorder that has a directory and no final dump yet, with `reason`
  // (the signal handlers use it; callable on request).
  static void DumpAll(const char* reason);

 private:
  struct Entry;
  struct GroupInfo {
    std::string text;  // `[0,1,2,3]`
    std::atomic<int64_t> calls{0};
  };
  template <class Sink>
  void Write(Sink& sink, const char* reason) const;
  int GroupIndex(const Group& group);

  int64_t rank_;
  int64_t world_size_;
  int64_t capacity_;
  std::string dir_;
  std::string path_;  // dir_/flight_rank<R>.txt, formatted once
  std::unique_ptr<Entry[]> ring_;
  std::atomic<int64_t> recorded_{0};
  std::map<Group, int> group_index_;
  std::unique_ptr<GroupInfo> groups_[kMaxFlightGroups];
  std::atomic<int> group_count_{0};
  std::unique_ptr<std::atomic<int64_t>[]> sends_;  // per peer
  std::unique_ptr<std::atomic<int64_t>[]> recvs_;
  char phase_[kPhaseSize] = {};
  int registry_slot_ = -1;
  mutable std::atomic<bool> final_dumped_{false};
  int64_t open_p2p_ = 0;  // send / recv recorded since the last CompletedPointToPoint
  int64_t first_open_p2p_ = 1;  // the number of the first of them
};

}  // namespace spmd::runtime
