#include "rules/reshard/reshard_cost.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>

#include "rules/model/error.h"
#include "rules/model/layout.h"

namespace spmd {
namespace {

constexpr double kMaxParameter = 1e9;
constexpr int64_t kMaxPicoseconds = int64_t{1} << 62;
constexpr double kResolutionPs = 1e6;  // 1 us

int64_t GroupSize(const Mesh& mesh, const AxisList& axes) {
  int64_t n = 1;
  for (int a : axes) n *= mesh.axis_size(a);
  return n;
}

// The distinct non-empty ranges of dim `d` under `attr` on `mesh`, in order (they tile the
// dim: the ceil layout's chunks at every co-shard level).
std::vector<Range> DimRanges(int64_t size, const AxisList& axes, const Mesh& mesh) {
  std::vector<Range> out;
  std::vector<int64_t> coord(mesh.ndim(), 0);
  while (true) {
    const Range r = DimRangeAt(size, axes, mesh, coord);
    if (r.size() > 0) out.push_back(r);
    size_t k = axes.size();
    while (k > 0) {
      if (++coord[axes[k - 1]] < mesh.axis_size(axes[k - 1])) break;
      coord[axes[k - 1]] = 0;
      --k;
    }
    if (k == 0) break;
  }
  std::sort(out.begin(), out.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin; });
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// The number of ranges of `ranges` (sorted, disjoint) meeting [r.begin, r.end).
int64_t Meeting(const std::vector<Range>& ranges, const Range& r) {
  if (r.size() == 0) return 0;
  const auto first = std::upper_bound(ranges.begin(), ranges.end(), r.begin,
                                      [](int64_t v, const Range& x) { return v < x.end; });
  const auto last = std::lower_bound(ranges.begin(), ranges.end(), r.end,
                                     [](const Range& x, int64_t v) { return x.begin < v; });
  return std::max<int64_t>(0, last - first);
}

// SendRecv: the distinct `before` boxes are the products of each dim's distinct ranges, so
// the pieces a rank receives are the product over dims of the ranges meeting its new box,
// less its own old box when that meets it.
int64_t SendRecvMessages(const StepView& view, const std::vector<int64_t>& shape) {
  std::vector<std::vector<Range>> ranges;
  for (size_t d = 0; d < shape.size(); ++d)
    ranges.push_back(DimRanges(shape[d], view.before.dims[d], view.mesh));
  int64_t most = 0;
  __int128 total = 0;
  std::vector<int64_t> coord(view.to_mesh.ndim(), 0);
  for (int64_t k = 0; k < view.to_mesh.size(); ++k) {
    const Box target = BoxAt(shape, view.after, view.to_mesh, coord);
    int64_t pieces = Volume(target) > 0 ? 1 : 0;
    for (size_t d = 0; d < shape.size() && pieces > 0; ++d) pieces *= Meeting(ranges[d], target[d]);
    const int64_t pid = view.to_mesh.process_ids()[k];
    if (const std::optional<std::vector<int64_t>> own = view.mesh.CoordinateOf(pid)) {
      if (pieces > 0 && Volume(Intersect(target, BoxAt(shape, view.before, view.mesh, *own))) > 0)
        --pieces;
    }
    most = std::max(most, pieces);
    total += pieces;
    for (int a = view.to_mesh.ndim() - 1; a >= 0; --a) {
      if (++coord[a] < view.to_mesh.axis_size(a)) break;
      coord[a] = 0;
    }
  }
  // The replicas of a box share its sending, so a source sends about total / sources.
  const int64_t sources = view.mesh.size();
  const int64_t per_source = static_cast<int64_t>((total + sources - 1) / sources);
  return std::max(most, per_source);
}

void CheckParameter(double value, const std::string& field) {
  if (!std::isfinite(value) || value < 0 || value > kMaxParameter) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%g", value);
    ThrowInvalid(field, std::string(buf) + " is not a time in [0, 1e9] (finite, not negative)");
  }
}

}  // namespace

const StepCost& CostModel::Of(StepKind kind) const {
  switch (kind) {
    case StepKind::kAllGather:
      return all_gather;
    case StepKind::kReduceScatter:
      return reduce_scatter;
    case StepKind::kAllReduce:
      return all_reduce;
    case StepKind::kAllToAll:
      return all_to_all;
    case StepKind::kSendRecv:
      return send_recv;
    default:
      return local;
  }
}

CostModel CostModel::Default() {
  CostModel m;
  // Measured by bench/alphabeta_bench.cc --fit (docs/RESHARD.md "Time" has the run, the
  // load and the fit): 2026-12-03, Open MPI 4.1.4 over shared memory (btl vader), 2 ranks
  // on a 2-core x86-64 VM at load average 17; 31 interleaved rounds, lower quartile,
  // Theil-Sen over 8 KiB - 2 MiB per rank.
  m.all_gather = {16.6, 0.305};
  m.reduce_scatter = {7.5, 0.563};
  m.all_reduce = {4.2, 0.294};
  m.all_to_all = {9.3, 0.474};
  m.send_recv = {9.3, 0.089};
  m.local = {6.7, 0.121};
  m.source = "measured 2026-12-03, Open MPI 4.1.4 shared memory, 2 ranks, 2-core x86-64 VM";
  return m;
}

const std::vector<std::string>& CostModelKinds() {
  static const std::vector<std::string> kinds = {"all_gather", "reduce_scatter", "all_reduce",
                                                 "all_to_all", "send_recv",      "local"};
  return kinds;
}

StepCost* CostOf(CostModel& model, const std::string& kind) {
  if (kind == "all_gather") return &model.all_gather;
  if (kind == "reduce_scatter") return &model.reduce_scatter;
  if (kind == "all_reduce") return &model.all_reduce;
  if (kind == "all_to_all") return &model.all_to_all;
  if (kind == "send_recv") return &model.send_recv;
  if (kind == "local") return &model.local;
  return nullptr;
}

void ValidateCostModel(const CostModel& model, const std::string& prefix) {
  CostModel copy = model;
  for (const std::string& kind : CostModelKinds()) {
    const StepCost& c = *CostOf(copy, kind);
    CheckParameter(c.alpha_us, prefix + "." + kind + ".alpha_us");
    CheckParameter(c.beta_ns_per_byte, prefix + "." + kind + ".beta_ns_per_byte");
  }
}

std::string_view ToString(ReshardObjective objective) {
  return objective == ReshardObjective::kTime ? "time" : "bytes";
}

int64_t StepMessages(const StepView& view, const std::vector<int64_t>& shape) {
  const StepKind kind = KindOf(view.action);
  if (!Communicates(kind)) return 1;
  if (kind == StepKind::kSendRecv) return std::max<int64_t>(1, SendRecvMessages(view, shape));
  const int64_t n = GroupSize(view.mesh, AxesOf(view.action));
  return kind == StepKind::kAllReduce ? 2 * (n - 1) : n - 1;
}

int64_t LocalStepBytes(const StepView& view, const std::vector<int64_t>& shape, DType dtype) {
  const StepKind kind = KindOf(view.action);
  if (Communicates(kind) && kind != StepKind::kSendRecv) return 0;
  // Chunk 0 is the largest at every level of the ceil layout.
  const std::vector<int64_t> origin(view.to_mesh.ndim(), 0);
  int64_t elements = 1;
  for (int64_t size : LocalShape(shape, view.after, view.to_mesh, origin)) elements *= size;
  return elements * BytesPerElement(dtype);
}

int64_t StepPicoseconds(const CostModel& model, StepKind kind, int64_t messages, int64_t bytes,
                        int64_t local_bytes) {
  const StepCost& c = model.Of(kind);
  const double ps = c.alpha_us * 1e6 * static_cast<double>(messages) +
                    c.beta_ns_per_byte * 1e3 * static_cast<double>(bytes) +
                    model.local.beta_ns_per_byte * 1e3 * static_cast<double>(local_bytes);
  if (!(ps < static_cast<double>(kMaxPicoseconds))) return kMaxPicoseconds;
  // Whole microseconds: the parameters are not known finer, and plans closer than that
  // tie (then fewer bytes, fewer steps, collectives before SendRecv decide).
  return std::llround(ps / kResolutionPs) * kResolutionPs;
}

}  // namespace spmd
