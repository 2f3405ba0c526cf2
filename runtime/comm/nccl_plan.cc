#include "runtime/comm/nccl_plan.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <utility>

namespace spmd::runtime::nccl {

std::string_view ToString(Prim prim) {
  switch (prim) {
    case Prim::kAllGather: return "ncclAllGather";
    case Prim::kReduceScatter: return "ncclReduceScatter";
    case Prim::kReduce: return "ncclReduce";
    case Prim::kBroadcast: return "ncclBroadcast";
    case Prim::kSend: return "ncclSend";
    case Prim::kRecv: return "ncclRecv";
  }
  return "?";
}

ByteCount Plan::handed() const {
  ByteCount sum;
  for (const Step& s : steps) {
    for (const Op& op : s.ops) {
      sum.sent += op.handed.sent;
      sum.received += op.handed.received;
    }
  }
  return sum;
}

int64_t Plan::nccl_calls() const {
  int64_t calls = 0;
  for (const Step& s : steps) calls += static_cast<int64_t>(s.ops.size());
  return calls;
}

namespace {

int64_t Sum(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }

bool AllEqual(const std::vector<int64_t>& v) {
  return std::all_of(v.begin(), v.end(), [&](int64_t x) { return x == v.front(); });
}

// Element offsets of the chunks (exclusive prefix sums).
std::vector<int64_t> Offsets(const std::vector<int64_t>& counts) {
  std::vector<int64_t> out(counts.size(), 0);
  for (size_t q = 1; q < counts.size(); ++q) out[q] = out[q - 1] + counts[q - 1];
  return out;
}

Step GroupStep(std::vector<Op> ops) {
  Step s;
  s.ops = std::move(ops);
  return s;
}

Step LocalStep(Local local) {
  Step s;
  s.local = std::move(local);
  return s;
}

void AddGroup(Plan& plan, std::vector<Op> ops) {
  if (!ops.empty()) plan.steps.push_back(GroupStep(std::move(ops)));
}

Ref At(int buffer, int64_t elements, int64_t e) { return Ref{buffer, elements * e}; }

// Reduce of `c` elements to root `q` from `in`; the root's result goes to `out`.
Op MakeReduce(Ref in, Ref out, int64_t c, DataType type, RedOp op, int64_t q, int64_t p,
             int64_t n, int64_t e) {
  Op r{Prim::kReduce, in, out, c, type, op, q};
  r.handed = q == p ? ByteCount{0, (n - 1) * c * e} : ByteCount{c * e, 0};
  return r;
}

Op MakeBroadcast(Ref in, Ref out, int64_t c, DataType type, int64_t q, int64_t p, int64_t n,
               int64_t e) {
  Op b{Prim::kBroadcast, in, out, c, type, RedOp::kSum, q};
  b.handed = q == p ? ByteCount{(n - 1) * c * e, 0} : ByteCount{0, c * e};
  return b;
}

Op MakeAllGather(Ref in, Ref out, int64_t c, DataType type, int64_t n, int64_t e) {
  Op a{Prim::kAllGather, in, out, c, type};
  a.handed = {(n - 1) * c * e, (n - 1) * c * e};
  return a;
}

Op MakeReduceScatter(Ref in, Ref out, int64_t c, DataType type, RedOp op, int64_t n, int64_t e) {
  Op r{Prim::kReduceScatter, in, out, c, type, op};
  r.handed = {(n - 1) * c * e, (n - 1) * c * e};
  return r;
}

}  // namespace

Plan PlanCollective(const CollectiveDesc& d, int64_t p) {
  const auto n = static_cast<int64_t>(d.group.size());
  if (n < 2) throw std::logic_error("PlanCollective: a group of one moves nothing");
  if (p < 0 || p >= n) throw std::logic_error("PlanCollective: position outside the group");
  const DataType type = ToNcclType(d.dtype);
  const int64_t e = ElementSize(d.dtype);
  const RedOp op = ToNcclOp(d.op);
  // any / all on a non-bool dtype: the input mapped to 1 / 0 first, into scratch.
  const bool truth = (d.op == ReduceOp::kAny || d.op == ReduceOp::kAll) && d.dtype != DType::kBool;
  const bool avg = d.op == ReduceOp::kAvg;
  Plan plan;

  // The reduced input: the call's send buffer, or its truth values in scratch.
  auto reduced_input = [&](int64_t total) {
    if (!truth || total == 0) return Ref{kSendBuffer, 0};
    plan.scratch_bytes = std::max(plan.scratch_bytes, total * e);
    plan.steps.push_back(LocalStep({Local::Kind::kToTruth, {kSendBuffer, 0}, {kScratch, 0}, total, d.dtype}));
    return Ref{kScratch, 0};
  };
  auto divide = [&](Ref at, int64_t count) {
    if (avg && count > 0) {
      plan.steps.push_back(LocalStep({Local::Kind::kDivide, {}, at, count, d.dtype, n}));
    }
  };

  switch (d.kind) {
    case Collective::kAllGather: {
      const std::vector<int64_t>& counts = d.counts;
      if (Sum(counts) == 0) return plan;
      if (AllEqual(counts)) {
        AddGroup(plan, {MakeAllGather({kSendBuffer, 0}, {kRecvBuffer, 0}, counts[0], type, n, e)});
        return plan;
      }
      const std::vector<int64_t> offsets = Offsets(counts);
      std::vector<Op> ops;
      for (int64_t q = 0; q < n; ++q) {
        if (counts[q] == 0) continue;
        const Ref in = q == p ? Ref{kSendBuffer, 0} : Ref{};
        ops.push_back(MakeBroadcast(in, At(kRecvBuffer, offsets[q], e), counts[q], type, q, p, n, e));
      }
      AddGroup(plan, std::move(ops));
      return plan;
    }
    case Collective::kReduceScatter: {
      const std::vector<int64_t>& counts = d.counts;
      const int64_t total = Sum(counts);
      if (total == 0) return plan;
      const Ref in = reduced_input(total);
      if (AllEqual(counts)) {
        AddGroup(plan, {MakeReduceScatter(in, {kRecvBuffer, 0}, counts[0], type, op, n, e)});
      } else {
        const std::vector<int64_t> offsets = Offsets(counts);
        std::vector<Op> ops;
        for (int64_t q = 0; q < n; ++q) {
          if (counts[q] == 0) continue;
          const Ref out = q == p ? Ref{kRecvBuffer, 0} : Ref{};
          ops.push_back(MakeReduce({in.buffer, in.offset + offsets[q] * e}, out, counts[q], type, op,
                                  q, p, n, e));
        }
        AddGroup(plan, std::move(ops));
      }
      divide({kRecvBuffer, 0}, counts[p]);
      return plan;
    }
    case Collective::kAllReduce: {
      const int64_t count = d.counts.at(0);
      if (count == 0) return plan;
      std::vector<int64_t> split(n);
      for (int64_t q = 0; q < n; ++q) split[q] = count / n + (q < count % n ? 1 : 0);
      const std::vector<int64_t> offsets = Offsets(split);
      const Ref in = reduced_input(count);
      const Ref mine = At(kRecvBuffer, offsets[p], e);
      if (count % n == 0) {
        const int64_t c = count / n;
        AddGroup(plan, {MakeReduceScatter(in, mine, c, type, op, n, e)});
        divide(mine, c);
        AddGroup(plan, {MakeAllGather(mine, {kRecvBuffer, 0}, c, type, n, e)});
        return plan;
      }
      std::vector<Op> reduces;
      std::vector<Op> broadcasts;
      for (int64_t q = 0; q < n; ++q) {
        if (split[q] == 0) continue;
        const Ref chunk = At(kRecvBuffer, offsets[q], e);
        reduces.push_back(MakeReduce({in.buffer, in.offset + offsets[q] * e},
                                    q == p ? chunk : Ref{}, split[q], type, op, q, p, n, e));
        broadcasts.push_back(MakeBroadcast(q == p ? chunk : Ref{}, chunk, split[q], type, q, p, n, e));
      }
      AddGroup(plan, std::move(reduces));
      divide(mine, split[p]);
      AddGroup(plan, std::move(broadcasts));
      return plan;
    }
    case Collective::kAllToAll: {
      const std::vector<int64_t>& sc = d.counts;
      const std::vector<int64_t>& rc = d.recv_counts;
      const std::vector<int64_t> so = Offsets(sc);
      const std::vector<int64_t> ro = Offsets(rc);
      if (sc[p] > 0) {
        plan.steps.push_back(LocalStep({Local::Kind::kCopy, At(kSendBuffer, so[p], e),
                                        At(kRecvBuffer, ro[p], e), sc[p], d.dtype}));
      }
      std::vector<Op> ops;
      for (int64_t q = 0; q < n; ++q) {
        if (q == p) continue;
        if (sc[q] > 0) {
          Op s{Prim::kSend, At(kSendBuffer, so[q], e), {}, sc[q], type, RedOp::kSum, q};
          s.handed = {sc[q] * e, 0};
          ops.push_back(s);
        }
        if (rc[q] > 0) {
          Op r{Prim::kRecv, {}, At(kRecvBuffer, ro[q], e), rc[q], type, RedOp::kSum, q};
          r.handed = {0, rc[q] * e};
          ops.push_back(r);
        }
      }
      AddGroup(plan, std::move(ops));
      return plan;
    }
    case Collective::kBroadcast: {
      const int64_t count = d.counts.at(0);
      if (count == 0) return plan;
      const int64_t root = std::find(d.group.begin(), d.group.end(), d.root) - d.group.begin();
      if (root >= n) throw std::logic_error("PlanCollective: the root is not in the group");
      AddGroup(plan, {MakeBroadcast({kRecvBuffer, 0}, {kRecvBuffer, 0}, count, type, root, p, n, e)});
      return plan;
    }
    case Collective::kBarrier: {
      plan.scratch_bytes = n;
      Op token{Prim::kAllGather, {kScratch, p}, {kScratch, 0}, 1, DataType::kUint8};
      token.payload = false;
      AddGroup(plan, {token});
      return plan;
    }
    case Collective::kSend:
    case Collective::kRecv:
      break;
  }
  throw std::logic_error("PlanCollective: send / recv are planned by PlanPointToPoint");
}

Plan PlanPointToPoint(std::span<const PointToPoint> pending) {
  Plan plan;
  std::vector<Op> ops;
  std::vector<Step> unpack;
  for (size_t i = 0; i < pending.size(); ++i) {
    const PointToPoint& m = pending[i];
    if (m.kind != Collective::kSend && m.kind != Collective::kRecv) {
      throw std::logic_error("PlanPointToPoint: not a send or recv");
    }
    if (m.count == 0) continue;
    const int buffer = static_cast<int>(i) + 1;
    const DataType type = ToNcclType(m.dtype);
    const int64_t e = ElementSize(m.dtype);
    const int64_t bytes = m.count * e;
    // A box travels through scratch; so does a 0-d "box" (one element, no strides).
    Ref wire{buffer, 0};
    if (m.box) {
      wire = Ref{kScratch, plan.scratch_bytes};
      plan.scratch_bytes += (bytes + 63) / 64 * 64;  // each piece 64-byte aligned
    }
    if (m.kind == Collective::kSend) {
      if (m.box) {
        plan.steps.push_back(LocalStep({Local::Kind::kPackBox, {buffer, 0}, wire, m.count, m.dtype, 1, *m.box}));
      }
      Op s{Prim::kSend, wire, {}, m.count, type, RedOp::kSum, m.peer};
      s.handed = {bytes, 0};
      ops.push_back(s);
    } else {
      Op r{Prim::kRecv, {}, wire, m.count, type, RedOp::kSum, m.peer};
      r.handed = {0, bytes};
      ops.push_back(r);
      if (m.box) {
        unpack.push_back(LocalStep({Local::Kind::kUnpackBox, wire, {buffer, 0}, m.count, m.dtype, 1, *m.box}));
      }
    }
  }
  if (!ops.empty()) {
    Step group = GroupStep(std::move(ops));
    group.world = true;
    plan.steps.push_back(std::move(group));
  }
  for (Step& s : unpack) plan.steps.push_back(std::move(s));
  return plan;
}

}  // namespace spmd::runtime::nccl
