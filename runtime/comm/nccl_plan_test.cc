// The NCCL backend's plans on the CPU (runtime/comm/nccl_plan.h): the same PlannedCommunicator
// as NcclCommunicator, over a simulated NCCL on threads (runtime/testing/nccl_sim.h).
//
// - Every collective and send / recv on random groups and counts (communicator_cases:
//   outputs against a local fold, counters against the convention, and the bytes the
//   simulated NCCL really copied between ranks against CountBytes), plus the box forms,
//   every ordered subset of mesh axes, and failures (mismatch, timeout) with their messages.
// - The same random calls, all six dtypes (bfloat16 and float16 included), on the thread
//   backend and on the simulated NCCL: bit for bit the same outputs.
// - The plans themselves for every position of random calls: the ops' `handed` bytes add
//   up to CountBytes; the members post matching NCCL calls (what NCCL requires: the same
//   collectives in the same order, and a matching ncclRecv for every ncclSend); buffers stay
//   inside the call's buffers and the scratch; the reduce-op mapping and the ToTruth /
//   divide steps.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <thread>

#include "rules/model/half.h"
#include "runtime/comm/collective_check.h"
#include "runtime/comm/nccl_plan.h"
#include "runtime/comm/planned_communicator.h"
#include "runtime/comm/thread_communicator.h"
#include "runtime/testing/communicator_cases.h"
#include "runtime/testing/nccl_sim.h"

namespace spmd::runtime::nccl {
namespace {

CommOptions Options(double timeout_s, bool check = false) {
  CommOptions options;
  options.timeout_s = timeout_s;
  options.check_collectives = check;
  options.flight_entries = 0;
  return options;
}

void CheckKind(Collective kind, bool check) {
  const int64_t world = *rc::gen::inRange<int64_t>(1, 9);
  const testing::CollectiveCase c = *testing::GenCase(world, kind);
  std::vector<std::string> errors(world);
  RunSimRanks(world, [&](Communicator& comm) {
    errors[comm.rank()] = testing::RunCase(comm, c);
    // The plan's bytes are what the simulated NCCL copied.
    const auto& sim = dynamic_cast<const SimNcclCommunicator&>(comm);
    if (errors[comm.rank()].empty() && !(sim.planned_bytes() == sim.transport_bytes())) {
      errors[comm.rank()] = "rank " + std::to_string(comm.rank()) + ": planned sent " +
                            std::to_string(sim.planned_bytes().sent) + ", copied " +
                            std::to_string(sim.transport_bytes().sent);
    }
  }, Options(20, check));
  for (const std::string& error : errors) {
    if (!error.empty()) RC_LOG() << error << "\n";
    RC_ASSERT(error.empty());
  }
}

RC_GTEST_PROP(NcclPlanSim, AllGather, (bool check)) { CheckKind(Collective::kAllGather, check); }
RC_GTEST_PROP(NcclPlanSim, ReduceScatter, (bool check)) { CheckKind(Collective::kReduceScatter, check); }
RC_GTEST_PROP(NcclPlanSim, AllReduce, (bool check)) { CheckKind(Collective::kAllReduce, check); }
RC_GTEST_PROP(NcclPlanSim, AllToAll, (bool check)) { CheckKind(Collective::kAllToAll, check); }
RC_GTEST_PROP(NcclPlanSim, Broadcast, (bool check)) { CheckKind(Collective::kBroadcast, check); }
RC_GTEST_PROP(NcclPlanSim, SendRecv, (bool check)) { CheckKind(Collective::kSend, check); }
RC_GTEST_PROP(NcclPlanSim, Barrier, (bool check)) { CheckKind(Collective::kBarrier, check); }

TEST(NcclPlanSim, MeshAxisGroups) {
  for (int64_t world : {1, 2, 3, 4, 8}) {
    std::vector<std::string> errors(world);
    RunSimRanks(world, [&](Communicator& comm) { errors[comm.rank()] = testing::RunMeshAxes(comm); },
                Options(20));
    for (const std::string& error : errors) EXPECT_EQ(error, "") << "world " << world;
  }
}

TEST(NcclPlanSim, BoxSendRecv) {
  for (bool check : {false, true}) {
    for (int64_t world : {2, 3, 4}) {
      std::vector<std::string> errors(world);
      RunSimRanks(world, [&](Communicator& comm) { errors[comm.rank()] = testing::RunBoxSendRecv(comm); },
                  Options(20, check));
      for (const std::string& error : errors) EXPECT_EQ(error, "") << "world " << world;
    }
  }
}

// ---- Against the thread backend, every dtype ------------------------------------------------

struct DiffCase {
  Collective kind = Collective::kAllReduce;
  DType dtype = DType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int64_t world = 2;
  Group group;                  // the ranks taking part (in this order); the rest idle
  std::vector<int64_t> counts;  // per position (all_to_all: n*n, [from * n + to]); else {count}
  int64_t root = 0;             // broadcast: position
  bool in_place = false;
  uint64_t seed = 0;
};

std::ostream& operator<<(std::ostream& os, const DiffCase& c) {
  return os << ToString(c.kind) << " " << ToString(c.dtype) << " op=" << ToString(c.op)
            << " world=" << c.world << " group=" << ToString(c.group)
            << " counts=" << ToString(c.counts) << " root@" << c.root
            << (c.in_place ? " in_place" : "") << " seed=" << c.seed;
}

bool Reduces(Collective kind) {
  return kind == Collective::kAllReduce || kind == Collective::kReduceScatter;
}

// Small integers (exact in every dtype and every fold order), zeros and NaN for any / all.
double Value(const DiffCase& c, int64_t rank, int64_t i) {
  std::mt19937_64 g(c.seed ^ (static_cast<uint64_t>(rank) << 32) ^ static_cast<uint64_t>(i));
  const uint64_t h = g();
  if (c.dtype == DType::kBool) return static_cast<double>(h % 3 == 0);
  switch (c.op) {
    case ReduceOp::kProd: {
      constexpr double kFactors[] = {-2, -1, 1, 2};
      return kFactors[h % 4];
    }
    case ReduceOp::kAny:
    case ReduceOp::kAll:
      if (h % 3 == 0) return 0;
      if (c.dtype == DType::kInt64) return -3;
      return (h >> 8) % 2 ? std::numeric_limits<double>::quiet_NaN() : 0.5;
    default:
      return static_cast<double>(static_cast<int64_t>(h % 9) - 4);
  }
}

std::vector<unsigned char> Bytes(const DiffCase& c, int64_t rank, int64_t count) {
  const int64_t e = ElementSize(c.dtype);
  std::vector<unsigned char> out(count * e);
  for (int64_t i = 0; i < count; ++i) {
    const double v = Value(c, rank, i);
    unsigned char* at = out.data() + i * e;
    switch (c.dtype) {
      case DType::kFloat64: std::memcpy(at, &v, 8); break;
      case DType::kFloat32: { const float f = static_cast<float>(v); std::memcpy(at, &f, 4); break; }
      case DType::kInt64: { const int64_t x = static_cast<int64_t>(v); std::memcpy(at, &x, 8); break; }
      case DType::kBool: *at = v != 0; break;
      case DType::kBFloat16: { const BFloat16 b(static_cast<float>(v)); std::memcpy(at, &b, 2); break; }
      case DType::kFloat16: { const Float16 h(static_cast<float>(v)); std::memcpy(at, &h, 2); break; }
    }
  }
  return out;
}

int64_t Total(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }

// Runs the case on this rank; returns the output bytes (empty for idle ranks).
std::vector<unsigned char> RunDiff(Communicator& comm, const DiffCase& c) {
  const auto it = std::find(c.group.begin(), c.group.end(), comm.rank());
  if (it == c.group.end()) return {};
  const int64_t p = it - c.group.begin();
  const auto n = static_cast<int64_t>(c.group.size());
  const int64_t e = ElementSize(c.dtype);
  std::vector<unsigned char> out;
  switch (c.kind) {
    case Collective::kAllGather: {
      std::vector<unsigned char> send = Bytes(c, comm.rank(), c.counts[p]);
      out.assign(Total(c.counts) * e, 0xAB);
      comm.AllGather(send.data(), out.data(), c.counts, c.dtype, c.group);
      break;
    }
    case Collective::kReduceScatter: {
      std::vector<unsigned char> send = Bytes(c, comm.rank(), Total(c.counts));
      out.assign(c.counts[p] * e, 0xAB);
      comm.ReduceScatter(send.data(), out.data(), c.counts, c.dtype, c.op, c.group);
      break;
    }
    case Collective::kAllReduce: {
      out = Bytes(c, comm.rank(), c.counts[0]);
      if (c.in_place) {
        comm.AllReduce(out.data(), out.data(), c.counts[0], c.dtype, c.op, c.group);
      } else {
        const std::vector<unsigned char> send = out;
        std::fill(out.begin(), out.end(), 0xAB);
        comm.AllReduce(send.data(), out.data(), c.counts[0], c.dtype, c.op, c.group);
      }
      break;
    }
    case Collective::kAllToAll: {
      std::vector<int64_t> sc(n), rc(n);
      for (int64_t q = 0; q < n; ++q) {
        sc[q] = c.counts[p * n + q];
        rc[q] = c.counts[q * n + p];
      }
      std::vector<unsigned char> send = Bytes(c, comm.rank(), Total(sc));
      out.assign(Total(rc) * e, 0xAB);
      comm.AllToAll(send.data(), sc, out.data(), rc, c.dtype, c.group);
      break;
    }
    case Collective::kBroadcast: {
      out = p == c.root ? Bytes(c, comm.rank(), c.counts[0])
                        : std::vector<unsigned char>(c.counts[0] * e, 0xAB);
      comm.Broadcast(out.data(), c.counts[0], c.dtype, c.group[c.root], c.group);
      break;
    }
    default:
      break;
  }
  comm.Synchronize();
  return out;
}

rc::Gen<DiffCase> GenDiff() {
  return rc::gen::exec([] {
    DiffCase c;
    c.kind = *rc::gen::element(Collective::kAllGather, Collective::kReduceScatter,
                               Collective::kAllReduce, Collective::kAllToAll, Collective::kBroadcast);
    c.dtype = *rc::gen::element(DType::kFloat64, DType::kFloat32, DType::kInt64, DType::kBool,
                                DType::kBFloat16, DType::kFloat16);
    if (Reduces(c.kind)) {
      c.op = c.dtype == DType::kBool
                 ? *rc::gen::element(ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProd, ReduceOp::kAny, ReduceOp::kAll)
                 : *rc::gen::element(ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin,
                                     ReduceOp::kProd, ReduceOp::kAny, ReduceOp::kAll);
    }
    c.world = *rc::gen::inRange<int64_t>(2, 9);
    std::vector<int64_t> order(c.world);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937(*rc::gen::arbitrary<uint32_t>()));
    const int64_t n = *rc::gen::inRange<int64_t>(2, c.world + 1);
    c.group.assign(order.begin(), order.begin() + n);
    const auto count = [](int64_t small) {
      return rc::gen::weightedOneOf<int64_t>(
          {{6, rc::gen::inRange<int64_t>(0, small)}, {1, rc::gen::inRange<int64_t>(0, 600)}});
    };
    switch (c.kind) {
      case Collective::kAllGather:
      case Collective::kReduceScatter:
        c.counts = *rc::gen::oneOf(rc::gen::container<std::vector<int64_t>>(n, count(9)),
                                   rc::gen::map(count(9), [n](int64_t k) { return std::vector<int64_t>(n, k); }));
        break;
      case Collective::kAllToAll:
        c.counts = *rc::gen::container<std::vector<int64_t>>(n * n, count(6));
        break;
      default:
        c.counts = {*count(40)};
    }
    c.root = *rc::gen::inRange<int64_t>(0, n);
    c.in_place = *rc::gen::arbitrary<bool>();
    c.seed = *rc::gen::arbitrary<uint64_t>();
    return c;
  });
}

RC_GTEST_PROP(NcclPlanSim, MatchesTheThreadBackendBitForBit, ()) {
  const DiffCase c = *GenDiff();
  RC_TAG(ToString(c.kind), ToString(c.dtype));
  std::vector<std::vector<unsigned char>> threads(c.world), sim(c.world);
  RunRanks(c.world, [&](Communicator& comm) { threads[comm.rank()] = RunDiff(comm, c); }, Options(20));
  RunSimRanks(c.world, [&](Communicator& comm) { sim[comm.rank()] = RunDiff(comm, c); }, Options(20));
  for (int64_t r = 0; r < c.world; ++r) {
    if (threads[r] != sim[r]) RC_LOG() << "rank " << r << " differs\n";
    RC_ASSERT(threads[r] == sim[r]);
  }
}

// ---- The plans themselves -------------------------------------------------------------------

// A random collective call as every member makes it.
rc::Gen<CollectiveDesc> GenDesc() {
  return rc::gen::exec([] {
    CollectiveDesc d;
    d.kind = *rc::gen::element(Collective::kAllGather, Collective::kReduceScatter,
                               Collective::kAllReduce, Collective::kAllToAll,
                               Collective::kBroadcast, Collective::kBarrier);
    d.dtype = *rc::gen::element(DType::kFloat64, DType::kFloat32, DType::kInt64, DType::kBool,
                                DType::kBFloat16, DType::kFloat16);
    d.op = d.dtype == DType::kBool
               ? *rc::gen::element(ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProd, ReduceOp::kAny, ReduceOp::kAll)
               : *rc::gen::element(ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin,
                                   ReduceOp::kProd, ReduceOp::kAny, ReduceOp::kAll);
    const int64_t n = *rc::gen::inRange<int64_t>(2, 17);
    std::vector<int64_t> ranks(64);
    std::iota(ranks.begin(), ranks.end(), 0);
    std::shuffle(ranks.begin(), ranks.end(), std::mt19937(*rc::gen::arbitrary<uint32_t>()));
    d.group.assign(ranks.begin(), ranks.begin() + n);
    const auto count = rc::gen::weightedOneOf<int64_t>(
        {{4, rc::gen::inRange<int64_t>(0, 10)}, {1, rc::gen::inRange<int64_t>(0, 100000)}});
    switch (d.kind) {
      case Collective::kAllGather:
      case Collective::kReduceScatter:
        d.counts = *rc::gen::oneOf(rc::gen::container<std::vector<int64_t>>(n, count),
                                   rc::gen::map(count, [n](int64_t k) { return std::vector<int64_t>(n, k); }));
        break;
      case Collective::kAllToAll:
        d.counts = *rc::gen::container<std::vector<int64_t>>(n * n, count);  // [from * n + to]
        break;
      case Collective::kAllReduce:
        d.counts = {*rc::gen::oneOf(count, rc::gen::map(count, [n](int64_t k) { return k * n; }))};
        break;
      case Collective::kBroadcast:
        d.counts = {*count};
        d.root = d.group[*rc::gen::inRange<int64_t>(0, n)];
        break;
      default:
        break;
    }
    return d;
  });
}

// The call as the member at `p` makes it (all_to_all: its own row and column).
CollectiveDesc MemberDesc(const CollectiveDesc& d, int64_t p) {
  if (d.kind != Collective::kAllToAll) return d;
  const auto n = static_cast<int64_t>(d.group.size());
  CollectiveDesc m = d;
  m.counts.assign(n, 0);
  m.recv_counts.assign(n, 0);
  for (int64_t q = 0; q < n; ++q) {
    m.counts[q] = d.counts[p * n + q];
    m.recv_counts[q] = d.counts[q * n + p];
  }
  m.recv_counts[p] = m.counts[p];
  return m;
}

// Bytes of each buffer the plan may touch at `p`.
std::vector<int64_t> BufferBytes(const CollectiveDesc& m, int64_t p, const Plan& plan) {
  const int64_t e = ElementSize(m.dtype);
  int64_t send = 0, recv = 0;
  switch (m.kind) {
    case Collective::kAllGather: send = m.counts[p]; recv = Total(m.counts); break;
    case Collective::kReduceScatter: send = Total(m.counts); recv = m.counts[p]; break;
    case Collective::kAllReduce:
    case Collective::kBroadcast: send = recv = m.counts[0]; break;
    case Collective::kAllToAll: send = Total(m.counts); recv = Total(m.recv_counts); break;
    default: break;
  }
  return {plan.scratch_bytes, send * e, recv * e};
}

std::string CheckRef(const Ref& r, int64_t bytes, const std::vector<int64_t>& sizes, const std::string& what) {
  if (r.buffer < 0) return what + " has no buffer";
  if (r.buffer >= static_cast<int>(sizes.size())) return what + " names buffer " + std::to_string(r.buffer);
  if (r.offset < 0 || r.offset + bytes > sizes[r.buffer]) {
    return what + " [" + std::to_string(r.offset) + ", +" + std::to_string(bytes) + ") outside buffer " +
           std::to_string(r.buffer) + " of " + std::to_string(sizes[r.buffer]) + " bytes";
  }
  return "";
}

RC_GTEST_PROP(NcclPlan, BytesAddUpAndMembersPostMatchingCalls, ()) {
  const CollectiveDesc d = *GenDesc();
  const auto n = static_cast<int64_t>(d.group.size());
  std::vector<Plan> plans;
  for (int64_t p = 0; p < n; ++p) {
    const CollectiveDesc m = MemberDesc(d, p);
    const Plan plan = PlanCollective(m, p);
    // Bytes: the convention (the barrier's token is not payload).
    ByteCount payload;
    for (const Step& s : plan.steps) {
      for (const Op& op : s.ops) {
        if (op.payload) payload = {payload.sent + op.handed.sent, payload.received + op.handed.received};
      }
    }
    RC_ASSERT(payload == CountBytes(m, p));
    // Every Ref inside its buffer; counts within what NCCL takes (size_t) and nonzero.
    const std::vector<int64_t> sizes = BufferBytes(m, p, plan);
    for (const Step& s : plan.steps) {
      RC_ASSERT(!s.world);
      if (s.local) {
        const Local& l = *s.local;
        const int64_t bytes = l.count * ElementSize(l.dtype);
        if (l.kind != Local::Kind::kDivide) RC_ASSERT(CheckRef(l.from, bytes, sizes, "local from") == "");
        RC_ASSERT(CheckRef(l.to, bytes, sizes, "local to") == "");
        continue;
      }
      for (const Op& op : s.ops) {
        RC_ASSERT(op.count > 0);
        const int64_t e = SizeOf(op.type);
        const int64_t in_bytes = op.prim == Prim::kReduceScatter ? op.count * n * e : op.count * e;
        const int64_t out_bytes = op.prim == Prim::kAllGather ? op.count * n * e : op.count * e;
        const bool reads = op.prim != Prim::kRecv && !(op.prim == Prim::kBroadcast && op.peer != p);
        const bool writes = op.prim != Prim::kSend && !(op.prim == Prim::kReduce && op.peer != p);
        if (reads) RC_ASSERT(CheckRef(op.in, in_bytes, sizes, std::string(ToString(op.prim)) + " in") == "");
        if (writes) RC_ASSERT(CheckRef(op.out, out_bytes, sizes, std::string(ToString(op.prim)) + " out") == "");
        RC_ASSERT(op.type == (op.payload ? ToNcclType(m.dtype) : DataType::kUint8));
      }
    }
    plans.push_back(plan);
  }
  // Collectives: every member's plan has the same NCCL groups (same calls, same order).
  // Point to point (all_to_all): what p sends q in its group is what q receives from p.
  auto collectives = [](const Plan& plan) {
    std::vector<std::vector<std::tuple<Prim, int64_t, DataType, RedOp, int64_t>>> groups;
    for (const Step& s : plan.steps) {
      if (s.local) continue;
      std::vector<std::tuple<Prim, int64_t, DataType, RedOp, int64_t>> group;
      for (const Op& op : s.ops) {
        if (op.prim == Prim::kSend || op.prim == Prim::kRecv) continue;
        group.emplace_back(op.prim, op.count, op.type, op.op, op.peer);
      }
      // A group of point-to-point calls only (all_to_all) is the member's own business.
      if (!group.empty()) groups.push_back(std::move(group));
    }
    return groups;
  };
  for (int64_t p = 1; p < n; ++p) RC_ASSERT(collectives(plans[p]) == collectives(plans[0]));
  for (int64_t p = 0; p < n; ++p) {
    for (int64_t q = 0; q < n; ++q) {
      std::vector<int64_t> sent, received;
      for (const Step& s : plans[p].steps) {
        for (const Op& op : s.ops) {
          if (op.prim == Prim::kSend && op.peer == q) sent.push_back(op.count);
        }
      }
      for (const Step& s : plans[q].steps) {
        for (const Op& op : s.ops) {
          if (op.prim == Prim::kRecv && op.peer == p) received.push_back(op.count);
        }
      }
      RC_ASSERT(sent == received);
      RC_ASSERT(p != q || sent.empty());
    }
  }
}

TEST(NcclPlan, ReduceOpsMapToWhatNcclHas) {
  EXPECT_EQ(ToNcclOp(ReduceOp::kSum), RedOp::kSum);
  EXPECT_EQ(ToNcclOp(ReduceOp::kAvg), RedOp::kSum);
  EXPECT_EQ(ToNcclOp(ReduceOp::kProd), RedOp::kProd);
  EXPECT_EQ(ToNcclOp(ReduceOp::kMax), RedOp::kMax);
  EXPECT_EQ(ToNcclOp(ReduceOp::kAny), RedOp::kMax);
  EXPECT_EQ(ToNcclOp(ReduceOp::kMin), RedOp::kMin);
  EXPECT_EQ(ToNcclOp(ReduceOp::kAll), RedOp::kMin);
  EXPECT_EQ(ToNcclType(DType::kBool), DataType::kUint8);
  EXPECT_EQ(ToNcclType(DType::kBFloat16), DataType::kBfloat16);
  EXPECT_EQ(ToNcclType(DType::kFloat16), DataType::kFloat16);
  for (DType t : {DType::kFloat64, DType::kFloat32, DType::kInt64, DType::kBool, DType::kBFloat16,
                  DType::kFloat16}) {
    EXPECT_EQ(FromNcclType(ToNcclType(t)), t);
    EXPECT_EQ(SizeOf(ToNcclType(t)), static_cast<int64_t>(ElementSize(t)));
  }
}

TEST(NcclPlan, AllReduceIsReduceScatterThenAllGather) {
  // n = 4 divides 8: ncclReduceScatter into place 1 of the output, divide, in-place
  // ncclAllGather; any on float32 maps to 1 / 0 in scratch first.
  CollectiveDesc d{Collective::kAllReduce, DType::kFloat32, ReduceOp::kAvg, -1, {5, 2, 7, 0}, {8}, {}};
  Plan plan = PlanCollective(d, 1);
  ASSERT_EQ(plan.steps.size(), 3u);
  EXPECT_EQ(plan.steps[0].ops.at(0).prim, Prim::kReduceScatter);
  EXPECT_EQ(plan.steps[0].ops.at(0).count, 2);
  EXPECT_EQ(plan.steps[0].ops.at(0).out, (Ref{kRecvBuffer, 2 * 4}));
  ASSERT_TRUE(plan.steps[1].local);
  EXPECT_EQ(plan.steps[1].local->kind, Local::Kind::kDivide);
  EXPECT_EQ(plan.steps[1].local->divisor, 4);
  EXPECT_EQ(plan.steps[2].ops.at(0).prim, Prim::kAllGather);
  EXPECT_EQ(plan.steps[2].ops.at(0).in, (Ref{kRecvBuffer, 2 * 4}));
  EXPECT_EQ(plan.scratch_bytes, 0);

  d.op = ReduceOp::kAny;
  plan = PlanCollective(d, 1);
  ASSERT_TRUE(plan.steps.at(0).local);
  EXPECT_EQ(plan.steps[0].local->kind, Local::Kind::kToTruth);
  EXPECT_EQ(plan.steps[1].ops.at(0).op, RedOp::kMax);
  EXPECT_EQ(plan.steps[1].ops.at(0).in, (Ref{kScratch, 0}));
  EXPECT_EQ(plan.scratch_bytes, 8 * 4);

  // bool: already 0 / 1, no truth step.
  d.dtype = DType::kBool;
  d.op = ReduceOp::kAll;
  plan = PlanCollective(d, 1);
  EXPECT_FALSE(plan.steps.at(0).local);
  EXPECT_EQ(plan.steps[0].ops.at(0).op, RedOp::kMin);
  EXPECT_EQ(plan.steps[0].ops.at(0).type, DataType::kUint8);

  // 4 does not divide 7: a group of ncclReduce (roots 0..3), then of ncclBroadcast.
  d = {Collective::kAllReduce, DType::kInt64, ReduceOp::kSum, -1, {5, 2, 7, 0}, {7}, {}};
  plan = PlanCollective(d, 3);
  ASSERT_EQ(plan.steps.size(), 2u);
  ASSERT_EQ(plan.steps[0].ops.size(), 4u);
  ASSERT_EQ(plan.steps[1].ops.size(), 4u);
  EXPECT_EQ(plan.steps[0].ops[3].prim, Prim::kReduce);
  EXPECT_EQ(plan.steps[0].ops[3].count, 1);  // chunks 2, 2, 2, 1
  EXPECT_EQ(plan.steps[0].ops[3].in, (Ref{kSendBuffer, 6 * 8}));
  EXPECT_EQ(plan.steps[1].ops[0].prim, Prim::kBroadcast);
  EXPECT_EQ(plan.steps[1].ops[0].peer, 0);
  EXPECT_EQ(plan.handed(), CountBytes(d, 3));
}

TEST(NcclPlan, PointToPointIsOneGroupOnTheWorld) {
  const BufferBox box{{4, 5}, {1, 1}, {2, 3}};
  const std::vector<PointToPoint> pending = {
      {Collective::kRecv, DType::kFloat32, 6, 3, box},
      {Collective::kSend, DType::kFloat32, 0, 3, std::nullopt},  // empty: left out
      {Collective::kSend, DType::kBFloat16, 5, 1, std::nullopt},
      {Collective::kSend, DType::kFloat64, 6, 2, box},
  };
  const Plan plan = PlanPointToPoint(pending);
  // pack (the send box), the group, unpack (the recv box).
  ASSERT_EQ(plan.steps.size(), 3u);
  ASSERT_TRUE(plan.steps[0].local);
  EXPECT_EQ(plan.steps[0].local->kind, Local::Kind::kPackBox);
  EXPECT_EQ(plan.steps[0].local->from, (Ref{4, 0}));
  EXPECT_TRUE(plan.steps[1].world);
  ASSERT_EQ(plan.steps[1].ops.size(), 3u);
  EXPECT_EQ(plan.steps[1].ops[0].prim, Prim::kRecv);
  EXPECT_EQ(plan.steps[1].ops[0].out, (Ref{kScratch, 0}));
  EXPECT_EQ(plan.steps[1].ops[1].in, (Ref{3, 0}));
  EXPECT_EQ(plan.steps[1].ops[1].type, DataType::kBfloat16);
  EXPECT_EQ(plan.steps[1].ops[2].in, (Ref{kScratch, 64}));
  ASSERT_TRUE(plan.steps[2].local);
  EXPECT_EQ(plan.steps[2].local->kind, Local::Kind::kUnpackBox);
  EXPECT_EQ(plan.steps[2].local->to, (Ref{1, 0}));
  EXPECT_EQ(plan.handed(), (ByteCount{5 * 2 + 6 * 8, 6 * 4}));
  EXPECT_EQ(plan.scratch_bytes, 64 + 64);
}

TEST(NcclPlan, RecordsNameTheFirstDifference) {
  const Group group = {2, 0};
  const CollectiveDesc a{Collective::kAllReduce, DType::kFloat64, ReduceOp::kSum, -1, group, {4}, {}};
  CollectiveDesc b = a;
  b.counts = {5};
  const std::vector<Record> same = {MakeRecord(a, 3), MakeRecord(a, 7)};  // steps may differ
  EXPECT_EQ(CompareRecords(same, group), "");
  const std::vector<Record> differ = {MakeRecord(a, 3), MakeRecord(b, 3)};
  EXPECT_EQ(CompareRecords(differ, group),
            "collective mismatch: rank 2 calls all_reduce(float64, count=4, op=sum) at its step 3, "
            "rank 0 calls all_reduce(float64, count=5, op=sum) at its step 3");
  // all_to_all: rank 0 (position 1) sends 2 to rank 2, which expects 1.
  const std::vector<int64_t> counts = {0, 1, 0, 1, /*position 1:*/ 2, 0, 1, 0};
  EXPECT_EQ(CompareAllToAllCounts(counts, group),
            "collective mismatch: rank 0 sends 2 elements to rank 2, which expects 1");
  const PointToPoint recv{Collective::kRecv, DType::kFloat64, 2, 0, std::nullopt};
  EXPECT_EQ(CompareHeader(Header{static_cast<int64_t>(DType::kFloat64), 2, 9}, recv), "");
  EXPECT_EQ(CompareHeader(Header{static_cast<int64_t>(DType::kFloat64), 3, 9}, recv),
            "mismatch: rank 0 sends 3 float64 at its step 9");
}

// ---- Failures ---------------------------------------------------------------------------------

std::string FailureOf(int64_t world, const std::function<void(Communicator&)>& fn, CommOptions options) {
  try {
    RunSimRanks(world, fn, options);
  } catch (const CommError& e) {
    return e.what();
  }
  return "";
}

Group World(const Communicator& comm) {
  Group g(comm.world_size());
  std::iota(g.begin(), g.end(), 0);
  return g;
}

TEST(NcclPlanSimFailure, CollectiveMismatchIsNamed) {
  const std::string message = FailureOf(4, [](Communicator& comm) {
    std::vector<double> x(4, 1.0), y(16);
    comm.AllReduce(x.data(), x.data(), 4, DType::kFloat64, ReduceOp::kSum, World(comm));
    comm.AllReduce(x.data(), x.data(), 4, DType::kFloat64, ReduceOp::kSum, World(comm));
    if (comm.rank() == 1) {
      comm.AllGather(x.data(), y.data(), std::vector<int64_t>(4, 4), DType::kFloat64, World(comm));
    } else {
      comm.AllReduce(x.data(), x.data(), 4, DType::kFloat64, ReduceOp::kSum, World(comm));
    }
  }, Options(5, /*check=*/true));
  EXPECT_NE(message.find("at step 3: collective mismatch: rank 0 calls all_reduce(float64, count=4, "
                         "op=sum) at its step 3, rank 1 calls all_gather(float64, counts=[4,4,4,4]) "
                         "at its step 3"),
            std::string::npos)
      << message;
}

TEST(NcclPlanSimFailure, AllToAllCountsAreChecked) {
  const std::string message = FailureOf(2, [](Communicator& comm) {
    std::vector<double> x(4, 1.0), y(4);
    const std::vector<int64_t> sc = comm.rank() == 1 ? std::vector<int64_t>{2, 1} : std::vector<int64_t>{1, 1};
    const std::vector<int64_t> rc = {1, 1};
    comm.AllToAll(x.data(), sc, y.data(), rc, DType::kFloat64, World(comm));
  }, Options(5, true));
  EXPECT_NE(message.find("collective mismatch: rank 1 sends 2 elements to rank 0, which expects 1"),
            std::string::npos)
      << message;
}

TEST(NcclPlanSimFailure, SendRecvHeadersAreChecked) {
  const std::string message = FailureOf(2, [](Communicator& comm) {
    std::vector<double> x(3, 1.0);
    if (comm.rank() == 0) comm.Send(x.data(), 3, DType::kFloat64, 1);
    if (comm.rank() == 1) comm.Recv(x.data(), 2, DType::kFloat64, 0);
  }, Options(5, true));
  EXPECT_NE(message.find("rank 1: recv(float64, count=2, from=0) at step 1: mismatch: rank 0 sends 3 "
                         "float64 at its step 1"),
            std::string::npos)
      << message;
}

TEST(NcclPlanSimFailure, TimeoutNamesRankCollectiveAndStep) {
  const std::string message = FailureOf(2, [](Communicator& comm) {
    std::vector<double> x(4, 1.0);
    comm.AllReduce(x.data(), x.data(), 4, DType::kFloat64, ReduceOp::kSum, World(comm));
    if (comm.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(600));
      return;
    }
    comm.AllReduce(x.data(), x.data(), 4, DType::kFloat64, ReduceOp::kSum, World(comm));
  }, Options(0.2));
  EXPECT_NE(message.find("rank 0: all_reduce(float64, count=4, op=sum) on group [0,1] at step 2: "
                         "timed out after 0.2 s in ncclReduceScatter on group [0,1]"),
            std::string::npos)
      << message;
}

}  // namespace
}  // namespace spmd::runtime::nccl
