#include "runtime/comm/collective_check.h"

#include <algorithm>
#include <string>

namespace spmd::runtime::nccl {

namespace {

enum RecordField { kKind, kDType, kOp, kRoot, kSize, kGroupHash, kCountsHash, kCountsSize, kStep, kPreview };
constexpr int kPreviewCounts = kRecordSize - kPreview;

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
  if (r[kGroupHash] != HashValues(group)) out += " on another group";
  return out;
}

}  // namespace

int64_t HashValues(const std::vector<int64_t>& values) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the bytes
  for (int64_t v : values) {
    for (int i = 0; i < 8; ++i) {
      h ^= (static_cast<uint64_t>(v) >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  }
  return static_cast<int64_t>(h & 0x7fffffffffffffffull);
}

Record MakeRecord(const CollectiveDesc& d, int64_t step) {
  Record r{};
  r[kKind] = static_cast<int64_t>(d.kind);
  r[kDType] = static_cast<int64_t>(d.dtype);
  const bool reduces = d.kind == Collective::kAllReduce || d.kind == Collective::kReduceScatter;
  r[kOp] = reduces ? static_cast<int64_t>(d.op) : -1;
  r[kRoot] = d.root;
  r[kSize] = static_cast<int64_t>(d.group.size());
  r[kGroupHash] = HashValues(d.group);
  // all_to_all counts differ per member by design: checked pairwise (AllToAllCounts).
  r[kCountsHash] = d.kind == Collective::kAllToAll ? 0 : HashValues(d.counts);
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

}  // namespace spmd::runtime::nccl
