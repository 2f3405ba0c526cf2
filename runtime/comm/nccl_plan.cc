#include "runtime/comm/nccl_plan.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace spmd::runtime::nccl {

DataType ToNcclType(DType dtype) {
  switch (dtype) {
    case DType::kFloat64: return DataType::kFloat64;
    case DType::kFloat32: return DataType::kFloat32;
    case DType::kInt64: return DataType::kInt64;
    case DType::kBool: return DataType::kUint8;
    case DType::kBFloat16: return DataType::kBfloat16;
    case DType::kFloat16: return DataType::kFloat16;
  }
  throw std::logic_error("ToNcclType: unknown dtype");
}

DType FromNcclType(DataType type) {
  switch (type) {
    case DataType::kFloat64: return DType::kFloat64;
    case DataType::kFloat32: return DType::kFloat32;
    case DataType::kInt64: return DType::kInt64;
    case DataType::kUint8: return DType::kBool;
    case DataType::kBfloat16: return DType::kBFloat16;
    case DataType::kFloat16: return DType::kFloat16;
  }
  throw std::logic_error("FromNcclType: unknown type");
}

int64_t SizeOf(DataType type) { return static_cast<int64_t>(ElementSize(FromNcclType(type))); }

RedOp ToNcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return RedOp::kSum;
    case ReduceOp::kProd: return RedOp::kProd;
    case ReduceOp::kMax:
    case ReduceOp::kAny: return RedOp::kMax;
    case ReduceOp::kMin:
    case ReduceOp::kAll: return RedOp::kMin;
  }
  throw std::logic_error("ToNcclOp: unknown op");
}

std::string_view ToString(DataType type) {
  switch (type) {
    case DataType::kUint8: return "uint8";
    case DataType::kInt64: return "int64";
    case DataType::kFloat16: return "float16";
    case DataType::kFloat32: return "float32";
    case DataType::kFloat64: return "float64";
    case DataType::kBfloat16: return "bfloat16";
  }
  return "?";
}

std::string_view ToString(RedOp op) {
  switch (op) {
    case RedOp::kSum: return "sum";
    case RedOp::kProd: return "prod";
    case RedOp::kMax: return "max";
    case RedOp::kMin: return "min";
  }
  return "?";
}

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

// ---- The collective check ------------------------------------------------------------------

namespace {

enum RecordField { kKind, kDType, kOp, kRoot, kSize, kGroupHash, kCountsHash, kCountsSize, kStep, kPreview };
constexpr int kPreviewCounts = kRecordSize - kPreview;

int64_t Hash(const std::vector<int64_t>& values) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the bytes
  for (int64_t v : values) {
    for (int i = 0; i < 8; ++i) {
      h ^= (static_cast<uint64_t>(v) >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  }
  return static_cast<int64_t>(h & 0x7fffffffffffffffull);
}

bool SameCall(const Record& a, const Record& b) {
  return std::equal(a.begin(), a.begin() + kStep, b.begin());
}

std::string DescribeRecord(const Record& r, const Group& group) {
  if (r[kKind] < 0 || r[kKind] >= kNumCollectives || r[kDType] < 0 || r[kDType] > 5) {
    return "an unknown call";
  }
  CollectiveDesc d;
  d.kind = static_cast<Collective>(r[kKind]);
  d.dtype = static_cast<DType>(r[kDType]);
  if (r[kOp] >= 0) d.op = static_cast<ReduceOp>(r[kOp]);
  d.root = r[kRoot];
  d.group = group;
  const int64_t shown = std::clamp<int64_t>(r[kCountsSize], 0, kPreviewCounts);
  for (int64_t i = 0; i < shown; ++i) d.counts.push_back(r[kPreview + i]);
  if ((d.kind == Collective::kAllReduce || d.kind == Collective::kBroadcast) && d.counts.empty()) {
    d.counts = {0};
  }
  std::string out;
  if (d.kind == Collective::kAllToAll) {
    out = "all_to_all(" + std::string(ToString(d.dtype)) + ")";
  } else {
    out = ToString(d);
    const size_t on = out.rfind(" on group ");
    if (on != std::string::npos) out.resize(on);
    if (r[kCountsSize] > kPreviewCounts) out += " (counts truncated)";
  }
  if (r[kGroupHash] != Hash(group)) out += " on another group";
  return out;
}

}  // namespace

Record MakeRecord(const CollectiveDesc& d, int64_t step) {
  Record r{};
  r[kKind] = static_cast<int64_t>(d.kind);
  r[kDType] = static_cast<int64_t>(d.dtype);
  const bool reduces = d.kind == Collective::kAllReduce || d.kind == Collective::kReduceScatter;
  r[kOp] = reduces ? static_cast<int64_t>(d.op) : -1;
  r[kRoot] = d.root;
  r[kSize] = static_cast<int64_t>(d.group.size());
  r[kGroupHash] = Hash(d.group);
  // all_to_all counts differ per member by design: checked pairwise (AllToAllCounts).
  r[kCountsHash] = d.kind == Collective::kAllToAll ? 0 : Hash(d.counts);
  r[kCountsSize] = static_cast<int64_t>(d.counts.size());
  r[kStep] = step;
  for (int i = 0; i < kPreviewCounts; ++i) {
    r[kPreview + i] = i < static_cast<int>(d.counts.size()) ? d.counts[i] : -1;
  }
  return r;
}

std::string CompareRecords(std::span<const Record> records, const Group& group) {
  for (size_t q = 1; q < records.size(); ++q) {
    if (!SameCall(records[0], records[q])) {
      return "collective mismatch: rank " + std::to_string(group[0]) + " calls " +
             DescribeRecord(records[0], group) + " at its step " + std::to_string(records[0][kStep]) +
             ", rank " + std::to_string(group[q]) + " calls " + DescribeRecord(records[q], group) +
             " at its step " + std::to_string(records[q][kStep]);
    }
  }
  return "";
}

std::vector<int64_t> AllToAllCounts(const CollectiveDesc& d) {
  std::vector<int64_t> out = d.counts;
  out.insert(out.end(), d.recv_counts.begin(), d.recv_counts.end());
  return out;
}

std::string CompareAllToAllCounts(std::span<const int64_t> all, const Group& group) {
  const auto n = static_cast<int64_t>(group.size());
  if (static_cast<int64_t>(all.size()) != 2 * n * n) {
    return "collective mismatch: the members of group " + ToString(group) +
           " hold different numbers of all_to_all counts";
  }
  // all[q * 2n + r]: what q sends r; all[r * 2n + n + q]: what r expects from q.
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t q = 0; q < n; ++q) {
      const int64_t sent = all[q * 2 * n + r];
      const int64_t expected = all[r * 2 * n + n + q];
      if (sent != expected) {
        return "collective mismatch: rank " + std::to_string(group[q]) + " sends " +
               std::to_string(sent) + " elements to rank " + std::to_string(group[r]) +
               ", which expects " + std::to_string(expected);
      }
    }
  }
  return "";
}

Header MakeHeader(const PointToPoint& send, int64_t step) {
  return {static_cast<int64_t>(send.dtype), send.count, step};
}

std::string CompareHeader(const Header& got, const PointToPoint& recv) {
  if (got[0] == static_cast<int64_t>(recv.dtype) && got[1] == recv.count) return "";
  const std::string dtype = got[0] >= 0 && got[0] <= 5
                                ? std::string(ToString(static_cast<DType>(got[0])))
                                : "elements of an unknown dtype";
  return "mismatch: rank " + std::to_string(recv.peer) + " sends " + std::to_string(got[1]) + " " +
         dtype + " at its step " + std::to_string(got[2]);
}

// ---- Running plans ---------------------------------------------------------------------------

void RunPlan(const Plan& plan, std::vector<void*> buffers, const Group& group,
             Transport& transport, kernels::Backend& backend, kernels::Allocator& allocator,
             kernels::Stream stream, ByteCount& handed) {
  if (buffers.empty()) buffers.push_back(nullptr);
  void* scratch = plan.scratch_bytes > 0
                      ? allocator.Allocate(static_cast<size_t>(plan.scratch_bytes), stream)
                      : nullptr;
  buffers[kScratch] = scratch;
  struct Release {
    kernels::Allocator& allocator;
    void* p;
    size_t n;
    kernels::Stream s;
    ~Release() { allocator.Deallocate(p, n, s); }
  } release{allocator, scratch, static_cast<size_t>(plan.scratch_bytes), stream};

  auto at = [&buffers](const Ref& r) -> std::byte* {
    if (r.buffer < 0) return nullptr;
    if (r.buffer >= static_cast<int>(buffers.size())) throw std::logic_error("RunPlan: no such buffer");
    return static_cast<std::byte*>(buffers[r.buffer]) + r.offset;
  };
  for (const Step& step : plan.steps) {
    if (step.local) {
      const Local& l = *step.local;
      const auto e = static_cast<int64_t>(ElementSize(l.dtype));
      switch (l.kind) {
        case Local::Kind::kCopy:
          backend.Copy(at(l.to), at(l.from), static_cast<size_t>(l.count * e), stream);
          break;
        case Local::Kind::kToTruth:
          backend.ToTruth(at(l.from), at(l.to), l.count, l.dtype, stream);
          break;
        case Local::Kind::kDivide:
          backend.Scale(at(l.to), l.count, l.dtype, l.divisor, /*divide=*/true, stream);
          break;
        case Local::Kind::kPackBox:
          backend.CopyBox(at(l.from), l.box.array, l.box.at, at(l.to), l.box.extent,
                          std::vector<int64_t>(l.box.extent.size(), 0), l.box.extent,
                          static_cast<size_t>(e), stream);
          break;
        case Local::Kind::kUnpackBox:
          backend.CopyBox(at(l.from), l.box.extent, std::vector<int64_t>(l.box.extent.size(), 0),
                          at(l.to), l.box.array, l.box.at, l.box.extent, static_cast<size_t>(e),
                          stream);
          break;
      }
      continue;
    }
    for (const Op& op : step.ops) {
      handed.sent += op.payload ? op.handed.sent : 0;
      handed.received += op.payload ? op.handed.received : 0;
    }
    transport.RunGroup(group, step.world, step.ops, buffers);
  }
}

// ---- PlannedCommunicator -------------------------------------------------------------------

PlannedCommunicator::PlannedCommunicator(int64_t rank, int64_t world_size, CommOptions options,
                                         kernels::Device device, kernels::Stream stream)
    : Communicator(rank, world_size, std::move(options), device, stream) {}

void PlannedCommunicator::CheckCollective(const Call& call) {
  const CollectiveDesc& d = call.desc;
  const Record mine = MakeRecord(d, call.step);
  const std::vector<int64_t> all = transport_->AllGatherInts(d.group, mine);
  std::vector<Record> records(d.group.size());
  for (size_t q = 0; q < records.size(); ++q) {
    std::copy_n(all.begin() + static_cast<int64_t>(q) * kRecordSize, kRecordSize, records[q].begin());
  }
  std::string mismatch = CompareRecords(records, d.group);
  if (mismatch.empty() && d.kind == Collective::kAllToAll) {
    mismatch = CompareAllToAllCounts(transport_->AllGatherInts(d.group, AllToAllCounts(d)), d.group);
  }
  if (!mismatch.empty()) Fail(Describe(call) + ": " + mismatch);
}

void PlannedCommunicator::Run(const Call& call) {
  if (call.desc.kind == Collective::kSend || call.desc.kind == Collective::kRecv) {
    pending_.push_back(call);
    return;
  }
  std::string failure;
  try {
    if (options().check_collectives) CheckCollective(call);
    const Plan plan = PlanCollective(call.desc, call.position);
    // The plan reads `send` and writes `recv` (broadcast: its one buffer).
    std::vector<void*> buffers = {nullptr, const_cast<void*>(call.send), call.recv};
    RunPlan(plan, std::move(buffers), call.desc.group, *transport_, backend(),
            backend().AllocatorFor(device()), stream(), handed_);
    transport_->Wait(std::string(ToString(call.desc.kind)));
    return;
  } catch (const TransportFailure& f) {
    failure = f.what();
  }
  Fail(Describe(call) + ": " + failure);
}

void PlannedCommunicator::DoSynchronize() {
  if (pending_.empty()) return;
  std::vector<Call> calls;
  calls.swap(pending_);
  std::vector<PointToPoint> messages;
  std::vector<void*> buffers = {nullptr};
  for (const Call& c : calls) {
    const bool send = c.desc.kind == Collective::kSend;
    messages.push_back({c.desc.kind, c.desc.dtype, c.desc.counts.at(0), c.desc.root, c.box});
    buffers.push_back(send ? const_cast<void*>(c.send) : c.recv);
  }
  std::string failure;
  const Call* failed = &calls.front();
  try {
    if (options().check_collectives) {
      std::vector<int64_t> send_peers;
      std::vector<Header> headers;
      std::vector<int64_t> recv_peers;
      std::vector<size_t> recvs;
      for (size_t i = 0; i < calls.size(); ++i) {
        if (messages[i].kind == Collective::kSend) {
          send_peers.push_back(messages[i].peer);
          headers.push_back(MakeHeader(messages[i], calls[i].step));
        } else {
          recv_peers.push_back(messages[i].peer);
          recvs.push_back(i);
        }
      }
      const std::vector<Header> got = transport_->ExchangeHeaders(send_peers, headers, recv_peers);
      for (size_t k = 0; k < recvs.size(); ++k) {
        const std::string mismatch = CompareHeader(got.at(k), messages[recvs[k]]);
        if (!mismatch.empty()) Fail(Describe(calls[recvs[k]]) + ": " + mismatch);
      }
    }
    const Plan plan = PlanPointToPoint(messages);
    Group world(static_cast<size_t>(world_size()));
    std::iota(world.begin(), world.end(), int64_t{0});
    RunPlan(plan, std::move(buffers), world, *transport_, backend(),
            backend().AllocatorFor(device()), stream(), handed_);
    transport_->Wait("waiting for the point-to-point peers");
    return;
  } catch (const TransportFailure& f) {
    failure = f.what();
  }
  Fail(Describe(*failed) + ": " + failure);
}

}  // namespace spmd::runtime::nccl
