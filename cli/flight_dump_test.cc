// The flight recorder (runtime/diagnostics/flight_recorder.h) read back by the dump parser,
// and the hang analysis (`spmd hangs`, cli/flight_dump.h) on generated records: a random
// program of collectives over random groups is run by a simulation of the ranks (a call
// completes once every member has entered it) with one rank stopping before one of its
// calls, every rank's record is dumped by the real recorder and read back, and the report
// must name that call and that rank. Also: a program run to the end has no divergence, a
// changed descriptor is reported as a mismatch, malformed dumps are typed errors naming
// the file and line, and the thread backend dumps on a timeout.
#include "cli/flight_dump.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <cstddef>
#include <set>
#include <thread>

#include "rules/model/error.h"
#include "runtime/comm/thread_communicator.h"
#include "runtime/diagnostics/flight_recorder.h"

namespace spmd::cli {
namespace {

// The recording side and the communicators it records.
using namespace spmd::runtime;

namespace fs = std::filesystem;

// A fresh empty directory under the system's temporary directory.
std::string FreshDir() {
  static int counter = 0;
  const fs::path dir =
      fs::temp_directory_path() /
      ("spmd_flight_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

struct ProgramCall {
  CollectiveDesc desc;
};

// A random program: `length` collectives, each on a random group of >= 2 ranks (the world
// or a subset), of a random kind.
std::vector<ProgramCall> GenProgram(int64_t world, int64_t length) {
  std::vector<Group> groups;
  Group all(world);
  for (int64_t r = 0; r < world; ++r) all[r] = r;
  groups.push_back(all);
  const int extra = *rc::gen::inRange(0, 4);
  for (int g = 0; g < extra; ++g) {
    Group members;
    for (int64_t r = 0; r < world; ++r) {
      if (*rc::gen::arbitrary<bool>()) members.push_back(r);
    }
    if (members.size() < 2) members = {0, world - 1};
    groups.push_back(members);
  }
  std::vector<ProgramCall> program;
  for (int64_t i = 0; i < length; ++i) {
    const Group& group = groups[*rc::gen::inRange<size_t>(0, groups.size())];
    const int64_t count = *rc::gen::inRange<int64_t>(1, 20);
    CollectiveDesc d;
    d.group = group;
    d.dtype = *rc::gen::element(DType::kFloat64, DType::kFloat32, DType::kInt64);
    switch (*rc::gen::inRange(0, 4)) {
      case 0:
        d.kind = Collective::kAllReduce;
        d.op = *rc::gen::element(ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg);
        d.counts = {count};
        break;
      case 1:
        d.kind = Collective::kAllGather;
        d.counts.assign(group.size(), count);
        break;
      case 2:
        d.kind = Collective::kBroadcast;
        d.root = group[*rc::gen::inRange<size_t>(0, group.size())];
        d.counts = {count};
        break;
      default:
        d.kind = Collective::kBarrier;
        break;
    }
    program.push_back({d});
  }
  return program;
}

bool Member(const Group& g, int64_t r) { return std::find(g.begin(), g.end(), r) != g.end(); }

// Runs `program` on simulated ranks: rank `stop` (or none: -1) makes no call from program
// call `stop_at` on; `changed` (rank, call) makes that rank describe the call with one more
// element. A call completes when every member has entered it; a rank that entered a call
// that cannot complete waits there for ever. Each rank's record is dumped into `dir`.
// `early`: members of call `stop_at` that complete it although `stop` never entered it (as
// an MPI rank may once the stopped rank's data reached it) and go on.
void Simulate(int64_t world, const std::vector<ProgramCall>& program, int64_t capacity,
              int64_t stop, size_t stop_at, std::pair<int64_t, size_t> changed,
              const std::string& dir, const std::set<int64_t>& early = {}) {
  std::vector<std::unique_ptr<FlightRecorder>> recorders;
  for (int64_t r = 0; r < world; ++r) {
    recorders.push_back(std::make_unique<FlightRecorder>(r, world, capacity, dir));
  }
  std::vector<size_t> next(world, 0);  // the program index of each rank's next call
  std::vector<int64_t> steps(world, 0);
  std::vector<bool> blocked(world, false);
  // Each rank's next call is the first program call at or after next[r] with it as a member.
  auto advance = [&](int64_t r) {
    while (next[r] < program.size() && !Member(program[next[r]].desc.group, r)) ++next[r];
  };
  for (int64_t r = 0; r < world; ++r) advance(r);
  for (size_t i = 0; i < program.size(); ++i) {
    const Group& g = program[i].desc.group;
    std::vector<int64_t> handles;
    bool all = true;
    for (int64_t r : g) {
      const bool here = next[r] == i && !blocked[r] && !(r == stop && i >= stop_at);
      if (!here) {
        all = false;
        continue;
      }
      CollectiveDesc d = program[i].desc;
      if (changed.first == r && changed.second == i) d.counts.back() += 1;
      recorders[r]->SetPhase("call " + std::to_string(i));
      const int64_t h = recorders[r]->Enqueued(d, ++steps[r], {});
      recorders[r]->Started(h);
      handles.push_back(h);
      std::this_thread::sleep_for(std::chrono::microseconds(3));  // distinct timestamps
    }
    if (all) {
      size_t k = 0;
      for (int64_t r : g) {
        recorders[r]->Completed(handles[k++]);
        ++next[r];
        advance(r);
      }
    } else {
      size_t k = 0;
      for (int64_t r : g) {
        const bool here = next[r] == i && !blocked[r] && !(r == stop && i >= stop_at);
        if (!here) continue;
        const int64_t h = handles[k++];
        if (i == stop_at && early.count(r)) {
          recorders[r]->Completed(h);
          ++next[r];
          advance(r);
        } else {
          blocked[r] = true;
        }
      }
    }
  }
  for (int64_t r = 0; r < world; ++r) RC_ASSERT(!recorders[r]->Dump("test").empty());
}

RC_GTEST_PROP(FlightRecorder, NamesTheCallARankNeverMade, ()) {
  const int64_t world = *rc::gen::inRange<int64_t>(2, 7);
  const std::vector<ProgramCall> program = GenProgram(world, *rc::gen::inRange<int64_t>(1, 30));
  const size_t at = *rc::gen::inRange<size_t>(0, program.size());
  const Group& g = program[at].desc.group;
  const int64_t stop = g[*rc::gen::inRange<size_t>(0, g.size())];
  const int64_t capacity = *rc::gen::element<int64_t>(1, 3, 256);
  const std::string dir = FreshDir();
  Simulate(world, program, capacity, stop, at, {-1, 0}, dir);
  const HangReport report = AnalyzeFlightDumps(ReadFlightDumps(dir));
  fs::remove_all(dir);

  int64_t seq = 0;  // the call's number on its group
  for (size_t i = 0; i <= at; ++i) seq += program[i].desc.group == g ? 1 : 0;
  RC_ASSERT(!report.divergences.empty());
  const HangDivergence& first = report.divergences.front();
  RC_LOG() << FormatHangReport(report);
  RC_ASSERT(first.group == g);
  RC_ASSERT(first.seq == seq);
  RC_ASSERT(first.call == ToString(program[at].desc));
  RC_ASSERT(Member(first.missing, stop));
  RC_ASSERT(first.missing.size() == 1u);
  RC_ASSERT(first.entered.size() == g.size() - 1);
  RC_ASSERT(report.mismatches.empty());
  const std::string text = FormatHangReport(report);
  RC_ASSERT(text.find("first divergence: " + ToString(program[at].desc) + ", call " +
                      std::to_string(seq) + " of that group") != std::string::npos);
  RC_ASSERT(text.find("not entered by rank " + std::to_string(stop)) != std::string::npos);
}

// A rank stops (SIGSTOP, kill -9) and leaves no dump; every other rank runs until it
// waits, on it or on a rank that waits. For every choice of that rank: it is the one
// suspect, no rank that waits is blamed, and the report says so. With `early`, some
// members of the call it stopped in complete that call anyway and go on (as MPI's
// collective algorithms allow), so the ranks left in it are the ones the others wait on.
RC_GTEST_PROP(FlightRecorder, BlamesTheRankWithNoDumpNeverTheRanksWaitingOnIt, ()) {
  const int64_t world = *rc::gen::inRange<int64_t>(2, 7);
  const std::vector<ProgramCall> program = GenProgram(world, *rc::gen::inRange<int64_t>(1, 30));
  const int64_t capacity = *rc::gen::element<int64_t>(1, 3, 256);
  const bool with_early = *rc::gen::arbitrary<bool>();
  for (int64_t stop = 0; stop < world; ++stop) {
    std::vector<size_t> calls;  // the program calls `stop` is a member of
    for (size_t i = 0; i < program.size(); ++i) {
      if (Member(program[i].desc.group, stop)) calls.push_back(i);
    }
    if (calls.empty()) continue;
    const size_t at = calls[*rc::gen::inRange<size_t>(0, calls.size())];
    std::set<int64_t> early;
    if (with_early) {
      Group others;
      for (int64_t r : program[at].desc.group) {
        if (r != stop) others.push_back(r);
      }
      // A strict subset: at least one member stays in the call, waiting on `stop`.
      const size_t n = *rc::gen::inRange<size_t>(0, others.size());
      early.insert(others.begin(), others.begin() + static_cast<std::ptrdiff_t>(n));
    }
    const std::string dir = FreshDir();
    Simulate(world, program, capacity, stop, at, {-1, 0}, dir, early);
    fs::remove(dir + "/flight_rank" + std::to_string(stop) + ".txt");
    const HangReport report = AnalyzeFlightDumps(ReadFlightDumps(dir));
    fs::remove_all(dir);
    const std::string text = FormatHangReport(report);
    RC_LOG() << "stop " << stop << " at " << at << "\n" << text;
    RC_ASSERT(report.suspects == std::vector<int64_t>{stop});
    for (const auto& [r, on] : report.waits_on) {
      RC_ASSERT(on.empty() || !Member(report.suspects, r));
    }
    RC_ASSERT(report.missing_dumps == std::vector<int64_t>{stop});
    RC_ASSERT(!report.divergences.empty());
    RC_ASSERT(report.divergences.front().root);
    RC_ASSERT(!report.cycle);
    RC_ASSERT(text.find("suspect: rank " + std::to_string(stop) + " (no dump; rank") !=
              std::string::npos);
    // Every rank named as not having entered a call waits, on someone.
    for (const HangDivergence& div : report.divergences) {
      for (int64_t m : div.missing) {
        RC_ASSERT(report.waits_on.count(m) && !report.waits_on.at(m).empty());
      }
    }
  }
}

// The header's counts and every count of a record are bounded before anything uses them,
// with an error naming the field; nothing is allocated for a world the dump only claims.
TEST(FlightRecorder, CountsOutOfRangeAreTypedErrorsNamingTheField) {
  FlightRecorder recorder(1, 2, 8, "");
  CollectiveDesc d{Collective::kAllReduce, DType::kFloat64, ReduceOp::kSum, -1, {0, 1}, {4}, {}};
  recorder.Completed(recorder.Enqueued(d, 1, {}));
  const std::string good = recorder.Format("r");
  ASSERT_NO_THROW(ParseFlightDump(good, "f"));
  auto expect_error = [&](const std::string& from, const std::string& to, const std::string& where,
                          const std::string& says) {
    std::string text = good;
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    try {
      ParseFlightDump(text, "dump.txt");
      ADD_FAILURE() << "no error for " << to;
    } catch (const SpmdError& e) {
      EXPECT_EQ(e.type(), ErrorType::kInvalidArgument);
      EXPECT_EQ(e.field(), where) << e.what();
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  expect_error("world=2", "world=100000000", "dump.txt:2", "world: 100000000 is out of range");
  expect_error("world=2", "world=9223372036854775807", "dump.txt:2", "world: ");
  expect_error("world=2", "world=65537", "dump.txt:2", "world: 65537 is out of range");
  expect_error("capacity=8", "capacity=99999999999", "dump.txt:2", "capacity: ");
  expect_error("recorded=1", "recorded=-1", "dump.txt:2", "recorded: ");
  expect_error("calls=1", "calls=-5", "dump.txt:3", "calls: ");
  expect_error("seq=1", "seq=0", "dump.txt:4", "seq: ");
  expect_error("n=1", "n=-1", "dump.txt:4", "n: ");
  expect_error("ncounts=1", "ncounts=-9223372036854775807", "dump.txt:4", "ncounts: ");
  expect_error("members=[0,1]", "members=[0,1,1]", "dump.txt:3", "members: ");
  // More call records than the ring holds (capacity) or than were made (recorded).
  expect_error("capacity=8", "capacity=0", "dump.txt:4", "call: more call records");
  expect_error("recorded=1", "recorded=0", "dump.txt:4", "call: more call records");
  // A line far longer than any dump writes: refused once past the cap.
  std::string long_line = good;
  long_line.insert(long_line.find("reason="), std::string(kMaxFlightLineBytes + 10, 'x') + " ");
  try {
    ParseFlightDump(long_line, "dump.txt");
    ADD_FAILURE() << "a line over the cap was read";
  } catch (const SpmdError& e) {
    EXPECT_EQ(e.field(), "dump.txt:2") << e.what();
    EXPECT_NE(std::string(e.what()).find("line: longer than"), std::string::npos) << e.what();
  }
  // The largest world is read, and analysed, in full.
  std::string largest = good;
  largest.replace(largest.find("world=2"), 7, "world=65536");
  const FlightDump dump = ParseFlightDump(largest, "f");
  EXPECT_EQ(AnalyzeFlightDumps({dump}).missing_dumps.size(), 65535u);
}

RC_GTEST_PROP(FlightRecorder, AProgramRunToTheEndHasNoDivergence, ()) {
  const int64_t world = *rc::gen::inRange<int64_t>(2, 7);
  const std::vector<ProgramCall> program = GenProgram(world, *rc::gen::inRange<int64_t>(0, 30));
  const std::string dir = FreshDir();
  Simulate(world, program, *rc::gen::element<int64_t>(1, 4, 256), -1, 0, {-1, 0}, dir);
  const HangReport report = AnalyzeFlightDumps(ReadFlightDumps(dir));
  fs::remove_all(dir);
  RC_ASSERT(report.divergences.empty());
  RC_ASSERT(report.mismatches.empty());
  RC_ASSERT(FormatHangReport(report).find("no divergence") != std::string::npos);
}

RC_GTEST_PROP(FlightRecorder, NamesAMismatchedDescriptor, ()) {
  const int64_t world = *rc::gen::inRange<int64_t>(2, 7);
  std::vector<ProgramCall> program = GenProgram(world, *rc::gen::inRange<int64_t>(1, 30));
  const size_t at = *rc::gen::inRange<size_t>(0, program.size());
  if (program[at].desc.counts.empty()) return;  // a barrier has no count to change
  const Group& g = program[at].desc.group;
  const int64_t who = g[*rc::gen::inRange<size_t>(0, g.size())];
  const std::string dir = FreshDir();
  Simulate(world, program, 256, -1, 0, {who, at}, dir);
  const HangReport report = AnalyzeFlightDumps(ReadFlightDumps(dir));
  fs::remove_all(dir);
  int64_t seq = 0;
  for (size_t i = 0; i <= at; ++i) seq += program[i].desc.group == g ? 1 : 0;
  RC_ASSERT(report.divergences.empty());
  RC_ASSERT(report.mismatches.size() == 1u);
  RC_ASSERT(report.mismatches[0].group == g);
  RC_ASSERT(report.mismatches[0].seq == seq);
  CollectiveDesc changed = program[at].desc;
  changed.counts.back() += 1;
  bool named = false;
  for (const auto& [r, text] : report.mismatches[0].calls) {
    if (r == who) named = text == ToString(changed);
  }
  RC_ASSERT(named);
}

TEST(FlightRecorder, RingKeepsTheLastCallsAndTheTotals) {
  FlightRecorder recorder(0, 2, 3, "");
  CollectiveDesc d{Collective::kAllReduce, DType::kFloat64, ReduceOp::kSum, -1, {0, 1}, {4}, {}};
  for (int i = 1; i <= 5; ++i) recorder.Completed(recorder.Enqueued(d, i, {}));
  const FlightDump dump = ParseFlightDump(recorder.Format("request"), "mem");
  ASSERT_EQ(dump.calls.size(), 3u);
  EXPECT_EQ(dump.calls.front().step, 3);
  EXPECT_EQ(dump.calls.back().seq, 5);
  EXPECT_EQ(dump.group_calls, std::vector<int64_t>{5});
  EXPECT_EQ(dump.reason, "request");
  EXPECT_EQ(recorder.Dump("x"), "");  // no directory: nothing written
  FlightRecorder off(0, 2, 0, "/nonexistent");
  EXPECT_EQ(off.Enqueued(d, 1, {}), -1);
  EXPECT_EQ(off.Format("x"), "");
}

TEST(FlightRecorder, GarbledDumpsAreTypedErrorsNamingFileAndLine) {
  FlightRecorder recorder(1, 2, 8, "");
  recorder.SetPhase("step \"1\"\n");
  CollectiveDesc d{Collective::kAllGather, DType::kFloat32, ReduceOp::kSum, -1, {0, 1}, {2, 2}, {}};
  recorder.Completed(recorder.Enqueued(d, 1, {}));
  const std::string good = recorder.Format("r");
  EXPECT_EQ(ParseFlightDump(good, "f").calls.at(0).phase, "step ?1??");
  auto expect_error = [](const std::string& text, const std::string& where) {
    try {
      ParseFlightDump(text, "dump.txt");
      ADD_FAILURE() << "no error for:\n" << text;
    } catch (const SpmdError& e) {
      EXPECT_EQ(e.type(), ErrorType::kInvalidArgument);
      EXPECT_EQ(e.field(), where) << e.what();
    }
  };
  expect_error("", "dump.txt:1");
  expect_error("hello\n", "dump.txt:1");
  std::string cut = good.substr(0, good.rfind("end"));
  expect_error(cut, "dump.txt:4");
  std::string bad_kind = good;
  bad_kind.replace(bad_kind.find("kind=all_gather"), 15, "kind=all_gosh");
  expect_error(bad_kind, "dump.txt:4");
  std::string bad_int = good;
  bad_int.replace(bad_int.find("step=1"), 6, "step=x");
  expect_error(bad_int, "dump.txt:4");
  std::string bad_group = good;
  bad_group.replace(bad_group.find("members=[0,1]"), 13, "members=[0,7]");
  expect_error(bad_group, "dump.txt:3");
}

TEST(FlightRecorder, ReadingADirectory) {
  EXPECT_THROW(ReadFlightDumps("/nonexistent/flight"), SpmdError);
  const std::string dir = FreshDir();
  EXPECT_THROW(ReadFlightDumps(dir), SpmdError);  // no dumps
  FlightRecorder a(0, 2, 4, dir);
  ASSERT_FALSE(a.Dump("x").empty());
  fs::copy_file(dir + "/flight_rank0.txt", dir + "/flight_rank1.txt");  // claims rank 0 too
  try {
    ReadFlightDumps(dir);
    ADD_FAILURE() << "two dumps of rank 0 accepted";
  } catch (const SpmdError& e) {
    EXPECT_NE(std::string(e.what()).find("both hold rank 0"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

// Send and recv are started when posted and completed when Synchronize returns; their
// sequence numbers count the messages per peer.
TEST(FlightRecorder, PointToPointCompletesAtSynchronize) {
  std::vector<std::string> before(2), after(2);
  RunRanks(2, [&](Communicator& comm) {
    double x[2] = {1, 2};
    const int64_t peer = 1 - comm.rank();
    for (int i = 0; i < 2; ++i) {
      if (comm.rank() == 0) comm.Send(x, 2, DType::kFloat64, peer);
      if (comm.rank() == 1) comm.Recv(x, 2, DType::kFloat64, peer);
    }
    before[comm.rank()] = comm.flight_recorder()->Format("x");
    comm.Synchronize();
    after[comm.rank()] = comm.flight_recorder()->Format("x");
  });
  for (int r = 0; r < 2; ++r) {
    const FlightDump b = ParseFlightDump(before[r], "before");
    const FlightDump a = ParseFlightDump(after[r], "after");
    ASSERT_EQ(b.calls.size(), 2u);
    EXPECT_EQ(b.calls[1].seq, 2);
    EXPECT_EQ(b.calls[0].desc.kind, r == 0 ? Collective::kSend : Collective::kRecv);
    EXPECT_EQ(b.calls[1].state, FlightState::kStarted);
    EXPECT_EQ(a.calls[1].state, FlightState::kCompleted);
    EXPECT_EQ(r == 0 ? a.sends.at(1) : a.recvs.at(0), 2);
  }
}

// Synchronize marks exactly the sends / recvs started since the one before it completed,
// whatever came between them (collectives, earlier rounds, the ring wrapping round): the
// recorder's own state against a model of every call's state.
RC_GTEST_PROP(FlightRecorder, SynchronizeCompletesExactlyTheOpenMessages, ()) {
  const int64_t capacity = *rc::gen::inRange<int64_t>(1, 9);
  const int ops = *rc::gen::inRange(1, 40);
  FlightRecorder recorder(0, 2, capacity, "");
  std::vector<FlightState> model;  // by call number - 1
  const CollectiveDesc send{Collective::kSend, DType::kFloat64, ReduceOp::kSum, 1, {0, 1}, {2}, {}};
  const CollectiveDesc recv{Collective::kRecv, DType::kFloat64, ReduceOp::kSum, 1, {0, 1}, {2}, {}};
  const CollectiveDesc reduce{Collective::kAllReduce, DType::kFloat64, ReduceOp::kSum, -1, {0, 1}, {2}, {}};
  for (int i = 0; i < ops; ++i) {
    switch (*rc::gen::inRange(0, 5)) {
      case 0:  // a collective: complete when it returns
        recorder.Completed(recorder.Enqueued(reduce, i + 1, {}));
        model.push_back(FlightState::kCompleted);
        break;
      case 1:
      case 2:  // a send or a recv: started, open until the next Synchronize
        recorder.Started(recorder.Enqueued(i % 2 == 0 ? send : recv, i + 1, {}));
        model.push_back(FlightState::kStarted);
        break;
      default:  // Synchronize returned
        recorder.CompletedPointToPoint();
        for (FlightState& state : model) {
          if (state == FlightState::kStarted) state = FlightState::kCompleted;
        }
    }
  }
  const FlightDump dump = ParseFlightDump(recorder.Format("x"), "x");
  const int64_t kept = std::min<int64_t>(capacity, static_cast<int64_t>(model.size()));
  RC_ASSERT(static_cast<int64_t>(dump.calls.size()) == kept);
  for (const FlightCall& call : dump.calls) {
    RC_ASSERT(call.state == model.at(call.n - 1));
  }
}

// A message sent and never received is a divergence of its channel.
TEST(FlightRecorder, NamesAMessageNeverReceived) {
  const std::string dir = FreshDir();
  {
    FlightRecorder sender(0, 2, 8, dir), receiver(1, 2, 8, dir);
    const CollectiveDesc send{
        Collective::kSend, DType::kFloat64, ReduceOp::kSum, 1, {0, 1}, {2}, {}};
    const CollectiveDesc recv{
        Collective::kRecv, DType::kFloat64, ReduceOp::kSum, 0, {1, 0}, {2}, {}};
    sender.Completed(sender.Enqueued(send, 1, {}));
    receiver.Completed(receiver.Enqueued(recv, 1, {}));
    sender.Started(sender.Enqueued(send, 2, {}));
    sender.Dump("t");
    receiver.Dump("t");
  }
  const HangReport report = AnalyzeFlightDumps(ReadFlightDumps(dir));
  fs::remove_all(dir);
  ASSERT_EQ(report.divergences.size(), 1u) << FormatHangReport(report);
  EXPECT_TRUE(report.divergences[0].p2p);
  EXPECT_EQ(report.divergences[0].seq, 2);
  EXPECT_EQ(report.divergences[0].missing, std::vector<int64_t>{1});
  EXPECT_NE(FormatHangReport(report).find(
                "first divergence: send(float64, count=2, to=1), message 2 "
                "from rank 0 to rank 1: entered by rank 0; not entered by rank 1"),
            std::string::npos)
      << FormatHangReport(report);
}

// SIGUSR1 dumps every live recorder that has a directory, and the process goes on.
TEST(FlightRecorder, DumpsOnSigusr1) {
  const std::string dir = FreshDir();
  FlightRecorder recorder(0, 2, 4, dir);
  CollectiveDesc d{Collective::kBarrier, DType::kFloat64, ReduceOp::kSum, -1, {0, 1}, {}, {}};
  recorder.Started(recorder.Enqueued(d, 1, {}));
  ASSERT_EQ(::raise(SIGUSR1), 0);
  const std::vector<FlightDump> dumps = ReadFlightDumps(dir);
  fs::remove_all(dir);
  ASSERT_EQ(dumps.size(), 1u);
  EXPECT_EQ(dumps[0].reason, "SIGUSR1");
  ASSERT_EQ(dumps[0].calls.size(), 1u);
  EXPECT_EQ(dumps[0].calls[0].state, FlightState::kStarted);
  // A failure's dump is not overwritten by a later signal's.
  const std::string again = FreshDir();
  FlightRecorder failed(0, 2, 4, again);
  ASSERT_FALSE(failed.Dump("timed out", /*final=*/true).empty());
  ASSERT_EQ(::raise(SIGUSR1), 0);
  EXPECT_EQ(ReadFlightDumps(again).at(0).reason, "timed out");
  fs::remove_all(again);
}

// The thread backend: rank 1 skips the second all-reduce and returns (dumping on request);
// the others fail in bounded time, dump on the way out, and the analysis names the call.
TEST(FlightRecorder, ThreadBackendDumpsOnFailure) {
  const std::string dir = FreshDir();
  CommOptions options;
  options.timeout_s = 5;
  options.flight_dir = dir;
  const Group world{0, 1, 2};
  EXPECT_THROW(RunRanks(
                   3,
                   [&](Communicator& comm) {
                     std::vector<double> x(4, 1.0);
                     comm.SetPhase("step 1");
                     comm.AllReduce(x.data(), x.data(), 4, DType::kFloat64, ReduceOp::kSum, world);
                     comm.SetPhase("step 2");
                     if (comm.rank() == 1) {
                       comm.DumpFlightRecord();
                       return;
                     }
                     comm.AllReduce(x.data(), x.data(), 4, DType::kFloat64, ReduceOp::kSum, world);
                   },
                   options),
               CommError);
  const HangReport report = AnalyzeFlightDumps(ReadFlightDumps(dir));
  fs::remove_all(dir);
  ASSERT_EQ(report.divergences.size(), 1u) << FormatHangReport(report);
  EXPECT_EQ(report.divergences[0].seq, 2);
  EXPECT_EQ(report.divergences[0].missing, std::vector<int64_t>{1});
  EXPECT_EQ(report.divergences[0].entered, (std::vector<int64_t>{0, 2}));
}

}  // namespace
}  // namespace spmd::cli
