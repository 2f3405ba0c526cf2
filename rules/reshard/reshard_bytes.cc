#include "rules/reshard/reshard_bytes.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "rules/model/error.h"

namespace spmd {
namespace {

int64_t GroupSize(const Mesh& mesh, const AxisList& axes) {
  int64_t n = 1;
  for (int a : axes) n *= mesh.axis_size(a);
  return n;
}

// Returns every coordinate of `mesh`, row-major (the order of process_ids).
std::vector<std::vector<int64_t>> AllCoords(const Mesh& mesh) {
  std::vector<std::vector<int64_t>> coords;
  coords.reserve(mesh.size());
  std::vector<int64_t> c(mesh.ndim(), 0);
  for (int64_t i = 0; i < mesh.size(); ++i) {
    coords.push_back(c);
    for (int a = mesh.ndim() - 1; a >= 0; --a) {
      if (++c[a] < mesh.axis_size(a)) break;
      c[a] = 0;
    }
  }
  return coords;
}

// The position of the rank at `coord` in its group along `axes` (major to minor, as
// Mesh::GroupOf orders the group).
int64_t GroupPosition(const Mesh& mesh, const AxisList& axes, const std::vector<int64_t>& coord) {
  int64_t p = 0;
  for (int a : axes) p = p * mesh.axis_size(a) + coord[a];
  return p;
}

__int128 CeilDiv(__int128 num, int64_t den) { return (num + den - 1) / den; }

StepView ViewOf(const ReshardStep& step) {
  return StepView{step.action, step.mesh, step.to_mesh, step.before, step.after};
}

// SendRecv: per distinct `before` box, its holders (row-major).
struct Holding {
  Box box;
  std::vector<int64_t> holders;
};

std::vector<Holding> Holdings(const Mesh& mesh, const DistAttr& before,
                              const std::vector<int64_t>& shape) {
  std::vector<Holding> classes;
  std::map<std::vector<int64_t>, size_t> index;  // box as begin, end, begin, end, ...
  const std::vector<std::vector<int64_t>> coords = AllCoords(mesh);
  for (size_t i = 0; i < coords.size(); ++i) {
    Box box = BoxAt(shape, before, mesh, coords[i]);
    std::vector<int64_t> key;
    for (const Range& r : box) {
      key.push_back(r.begin);
      key.push_back(r.end);
    }
    auto [it, inserted] = index.emplace(std::move(key), classes.size());
    if (inserted) classes.push_back(Holding{std::move(box), {}});
    classes[it->second].holders.push_back(mesh.process_ids()[i]);
  }
  return classes;
}

std::vector<Transfer> TransfersOf(const StepView& step, const std::vector<int64_t>& shape) {
  const std::vector<Holding> classes = Holdings(step.mesh, step.before, shape);
  std::vector<Transfer> out;
  const std::vector<std::vector<int64_t>> coords = AllCoords(step.to_mesh);
  for (size_t k = 0; k < coords.size(); ++k) {
    const int64_t pid = step.to_mesh.process_ids()[k];
    const Box target = BoxAt(shape, step.after, step.to_mesh, coords[k]);
    const std::optional<std::vector<int64_t>> own_coord = step.mesh.CoordinateOf(pid);
    std::optional<Box> own;
    if (own_coord) own = BoxAt(shape, step.before, step.mesh, *own_coord);
    for (const Holding& c : classes) {
      if (own && c.box == *own) continue;
      Box piece = Intersect(target, c.box);
      if (Volume(piece) == 0) continue;
      const int64_t holder = c.holders[k % c.holders.size()];
      out.push_back(Transfer{holder, pid, std::move(piece)});
    }
  }
  return out;
}

// SendRecv: bytes received by `pid` (0 when it is not in to_mesh).
int64_t SendRecvReceived(const StepView& step, const std::vector<int64_t>& shape, int64_t s,
                         int64_t pid) {
  const std::optional<std::vector<int64_t>> to_coord = step.to_mesh.CoordinateOf(pid);
  if (!to_coord) return 0;
  const Box target = BoxAt(shape, step.after, step.to_mesh, *to_coord);
  int64_t held = 0;
  if (const std::optional<std::vector<int64_t>> own = step.mesh.CoordinateOf(pid)) {
    held = Volume(Intersect(target, BoxAt(shape, step.before, step.mesh, *own)));
  }
  return (Volume(target) - held) * s;
}

// Bytes of a collective or local step for the rank at `coord` of step.mesh; `axes` is
// AxesOf(step.action).
RankBytes CollectiveBytesAt(const StepView& step, const AxisList& axes,
                            const std::vector<int64_t>& shape, int64_t s,
                            const std::vector<int64_t>& coord) {
  const Box before = BoxAt(shape, step.before, step.mesh, coord);
  const int64_t n = GroupSize(step.mesh, axes);
  switch (KindOf(step.action)) {
    case StepKind::kAllGather: {
      const Box after = BoxAt(shape, step.after, step.mesh, coord);
      return RankBytes{(n - 1) * Volume(before) * s, (Volume(after) - Volume(before)) * s};
    }
    case StepKind::kReduceScatter: {
      // Direct reduce-scatter: the rank sends every member its chunk and receives n - 1
      // addends of its own.
      const Box after = BoxAt(shape, step.after, step.mesh, coord);
      if (n <= 1) return RankBytes{};
      return RankBytes{(Volume(before) - Volume(after)) * s, (n - 1) * Volume(after) * s};
    }
    case StepKind::kAllReduce: {
      // Reduce-scatter then all-gather over the balanced split of the buffer: the member at
      // position p owns count / n elements, one more when p < count % n.
      if (n <= 1) return RankBytes{};
      const int64_t count = Volume(before);
      const int64_t p = GroupPosition(step.mesh, axes, coord);
      const int64_t chunk = count / n + (p < count % n ? 1 : 0);
      const int64_t b = (count - chunk + (n - 1) * chunk) * s;
      return RankBytes{b, b};
    }
    case StepKind::kAllToAll: {
      const Box after = BoxAt(shape, step.after, step.mesh, coord);
      const int64_t kept = Volume(Intersect(before, after));
      return RankBytes{(Volume(before) - kept) * s, (Volume(after) - kept) * s};
    }
    default:
      return RankBytes{};
  }
}

}  // namespace

int64_t BytesPerElement(DType dtype) { return ElementSize(dtype); }

int64_t FastMaxStepBytes(const StepView& step, const std::vector<int64_t>& shape, DType dtype) {
  const int64_t s = BytesPerElement(dtype);
  const StepKind kind = KindOf(step.action);
  if (kind == StepKind::kSendRecv) {
    int64_t best = 0;
    for (int64_t pid : step.to_mesh.process_ids()) {
      best = std::max(best, SendRecvReceived(step, shape, s, pid));
    }
    return best;
  }
  if (!Communicates(kind)) return 0;
  const AxisList axes = AxesOf(step.action);
  std::vector<int> relevant;
  for (size_t d = 0; d < step.before.dims.size(); ++d) {
    if (step.before.dims[d] == step.after.dims[d]) continue;
    for (int a : step.before.dims[d]) relevant.push_back(a);
    for (int a : step.after.dims[d]) relevant.push_back(a);
  }
  std::sort(relevant.begin(), relevant.end());
  relevant.erase(std::unique(relevant.begin(), relevant.end()), relevant.end());
  std::vector<int64_t> coord(step.mesh.ndim(), 0);
  int64_t best = 0;
  while (true) {
    best = std::max(best, CollectiveBytesAt(step, axes, shape, s, coord).received);
    size_t k = relevant.size();
    while (k > 0) {
      const int a = relevant[k - 1];
      if (++coord[a] < step.mesh.axis_size(a)) break;
      coord[a] = 0;
      --k;
    }
    if (k == 0) break;
  }
  return best;
}

RankBytes StepBytesOf(const ReshardStep& step, const std::vector<int64_t>& shape, DType dtype,
                      int64_t process_id) {
  const int64_t s = BytesPerElement(dtype);
  const StepView view = ViewOf(step);
  if (step.kind() == StepKind::kSendRecv) {
    RankBytes bytes;
    bytes.received = SendRecvReceived(view, shape, s, process_id);
    for (const Transfer& t : TransfersOf(view, shape)) {
      if (t.from_process == process_id) bytes.sent += Volume(t.box) * s;
    }
    return bytes;
  }
  const std::optional<std::vector<int64_t>> coord = step.mesh.CoordinateOf(process_id);
  if (!coord) return RankBytes{};
  return CollectiveBytesAt(view, step.axes(), shape, s, *coord);
}

RankBytes StepBytesAt(const ReshardStep& step, const std::vector<int64_t>& shape, DType dtype,
                      const std::vector<int64_t>& coord) {
  return StepBytesOf(step, shape, dtype, step.mesh.ProcessIdAt(coord));
}

int64_t MaxStepBytes(const ReshardStep& step, const std::vector<int64_t>& shape, DType dtype) {
  std::set<int64_t> ids(step.mesh.process_ids().begin(), step.mesh.process_ids().end());
  ids.insert(step.to_mesh.process_ids().begin(), step.to_mesh.process_ids().end());
  int64_t best = 0;
  for (int64_t id : ids) best = std::max(best, StepBytesOf(step, shape, dtype, id).received);
  return best;
}

std::vector<Transfer> SendRecvTransfers(const ReshardStep& step,
                                        const std::vector<int64_t>& shape) {
  if (step.kind() != StepKind::kSendRecv) {
    ThrowInvalid("step", step.Describe() + " on " + ToString(step.before) +
                             ": not a send_recv step");
  }
  return TransfersOf(ViewOf(step), shape);
}

int64_t ReshardLowerBound(const Mesh& from_mesh, const DistAttr& from, const Mesh& to_mesh,
                          const DistAttr& to, const std::vector<int64_t>& shape, DType dtype) {
  // Bytes are counted in 128 bits and saturate at 2^62 (a checked shape holds at most 2^62
  // elements, of up to 8 bytes each).
  const __int128 s = BytesPerElement(dtype);
  __int128 elements = 1;
  for (int64_t size : shape) elements *= size;
  // The rules price their candidates with this bound on one mesh (most calls of the
  // exhaustive sweep): a rank's own source coordinate is then its target coordinate, and
  // the ranks are the mesh's.
  const bool same_mesh = from_mesh == to_mesh;
  int64_t rank_count = from_mesh.size();
  if (!same_mesh) {
    std::set<int64_t> ranks(from_mesh.process_ids().begin(), from_mesh.process_ids().end());
    ranks.insert(to_mesh.process_ids().begin(), to_mesh.process_ids().end());
    rank_count = static_cast<int64_t>(ranks.size());
  }
  // Partial axes of size 1 hold the value itself.
  int64_t addends = 1;
  for (const auto& [axis, op] : from.partial) addends *= from_mesh.axis_size(axis);
  AxisList target_partial;
  for (const auto& [axis, op] : to.partial) {
    if (to_mesh.axis_size(axis) > 1) target_partial.push_back(axis);
  }
  __int128 bound = 0;
  const auto saturated = [](__int128 bytes) {
    return static_cast<int64_t>(std::min<__int128>(bytes, __int128{1} << 62));
  };
  if (target_partial.empty()) {
    for (const DistAttr* attr : {&to, &from}) {  // as BoxAt says it
      if (attr->dims.size() != shape.size()) {
        ThrowInvalid("attr", "has " + std::to_string(attr->dims.size()) + " dims for a rank-" +
                                 std::to_string(shape.size()) + " shape");
      }
    }
    // Per target rank, its box and the source box of the same process (if it has one), one
    // dim at a time: no boxes are built. With every size >= 0 and every axis of both dist
    // attrs on its mesh, DimRangeAt's checks (which throw otherwise) pass for every rank's
    // coordinate, and the ranges are computed without them.
    bool checked = true;
    for (int64_t size : shape) checked = checked && size >= 0;
    for (const auto& [attr, mesh] : {std::pair{&to, &to_mesh}, std::pair{&from, &from_mesh}}) {
      for (const AxisList& axes : attr->dims) {
        for (int axis : axes) checked = checked && axis >= 0 && axis < mesh->ndim();
      }
    }
    auto range_at = [checked](int64_t size, const AxisList& axes, const Mesh& mesh,
                              const std::vector<int64_t>& at) {
      return checked ? DimRangeAtUnchecked(size, axes, mesh, at) : DimRangeAt(size, axes, mesh, at);
    };
    Box target(shape.size()), source(shape.size());
    std::vector<int64_t> coord(to_mesh.ndim(), 0);
    std::optional<std::vector<int64_t>> other_coord;
    __int128 target_total = 0;
    // A partial source: each rank's (source box, target box), as begin, end per dim of the
    // one then of the other, and the elements it both holds and needs.
    const size_t key_size = 4 * shape.size();
    std::vector<int64_t> pair_keys;
    std::vector<__int128> pair_held;
    for (int64_t k = 0; k < to_mesh.size(); ++k) {
      const std::vector<int64_t>* own = &coord;
      if (!same_mesh) {
        other_coord = from_mesh.CoordinateOf(to_mesh.process_ids()[k]);
        own = other_coord ? &*other_coord : nullptr;
      }
      __int128 target_volume = 1, held = 1;
      for (size_t d = 0; d < shape.size(); ++d) {
        target[d] = range_at(shape[d], to.dims[d], to_mesh, coord);
        target_volume *= target[d].size();
        if (own) {
          source[d] = range_at(shape[d], from.dims[d], from_mesh, *own);
          const int64_t begin = std::max(target[d].begin, source[d].begin);
          held *= std::max<int64_t>(0, std::min(target[d].end, source[d].end) - begin);
        }
      }
      if (!own) held = 0;
      target_total += target_volume;
      // Every rank needs its whole target shard: what it does not hold must arrive (all of
      // it when it holds only an addend).
      bound = std::max(bound, (target_volume - (addends == 1 ? held : 0)) * s);
      if (addends > 1 && own) {
        for (size_t d = 0; d < shape.size(); ++d) pair_keys.insert(pair_keys.end(), {source[d].begin, source[d].end});
        for (size_t d = 0; d < shape.size(); ++d) pair_keys.insert(pair_keys.end(), {target[d].begin, target[d].end});
        pair_held.push_back(held);
      }
      for (int a = to_mesh.ndim() - 1; a >= 0; --a) {  // row-major, as process_ids
        if (++coord[a] < to_mesh.axis_size(a)) break;
        coord[a] = 0;
      }
    }
    // The elements held and needed, over the distinct (source box, target box) pairs (one
    // pair's count is a function of its boxes): sorted, each pair counted at its first.
    __int128 held_and_needed = 0;
    if (!pair_held.empty()) {
      std::vector<size_t> order(pair_held.size());
      for (size_t k = 0; k < order.size(); ++k) order[k] = k;
      auto key = [&](size_t k) { return pair_keys.begin() + static_cast<std::ptrdiff_t>(k * key_size); };
      auto less = [&](size_t x, size_t y) {
        return std::lexicographical_compare(key(x), key(x) + key_size, key(y), key(y) + key_size);
      };
      std::sort(order.begin(), order.end(), less);
      for (size_t k = 0; k < order.size(); ++k) {
        if (k == 0 || less(order[k - 1], order[k])) held_and_needed += pair_held[order[k]];
      }
    }
    if (addends > 1) {
      // Each element: (N_P - 1) receptions to combine its addends (a rank holds at most one
      // addend of it), plus one for every rank needing it but the first to complete it, plus
      // one more when no rank needing it holds an addend of it (the value is completed away
      // from every rank needing it, or at one with two receptions); spread over every rank
      // at best. The elements some rank both holds and needs are the union of its source
      // box with its target box over the ranks of both meshes; distinct (source box, target
      // box) pairs meet in disjoint parts (each family partitions the tensor), so the union
      // is the sum over distinct pairs.
      const __int128 receptions = static_cast<__int128>(addends - 2) * elements + target_total +
                                  (elements - held_and_needed);
      // Receptions are of whole elements.
      bound = std::max(bound, CeilDiv(receptions, rank_count) * s);
    }
    return saturated(bound);
  }
  if (addends > 1) return 0;  // partial to partial: no bound derived (docs/RESHARD.md)
  // A target partial group (ranks varying the partial axes) needs, together, every element
  // of its common box; what no member holds must arrive at some member.
  const std::vector<Holding> classes = Holdings(from_mesh, from, shape);
  const std::vector<std::vector<int64_t>> to_coords = AllCoords(to_mesh);
  std::map<std::vector<int64_t>, std::vector<int64_t>> groups;  // key -> member ids
  for (size_t k = 0; k < to_coords.size(); ++k) {
    std::vector<int64_t> key = to_coords[k];
    for (int a : target_partial) key[a] = 0;
    groups[key].push_back(to_mesh.process_ids()[k]);
  }
  // The distinct boxes of a block layout are disjoint and cover the tensor, so what a group
  // misses is its box less what its members hold: one pass over the holders, O(n log n),
  // instead of every group against every box (minutes on 2^16 ranks). The volumes adding
  // up to the tensor's is the check that the boxes do partition it.
  __int128 class_volume = 0;
  for (const Holding& c : classes) class_volume += Volume(c.box);
  if (class_volume == elements) {
    std::map<std::vector<int64_t>, std::vector<size_t>> held;  // key -> classes, repeated
    for (size_t i = 0; i < classes.size(); ++i) {
      for (int64_t id : classes[i].holders) {
        std::optional<std::vector<int64_t>> key = to_mesh.CoordinateOf(id);
        if (!key) continue;
        for (int a : target_partial) (*key)[a] = 0;
        held[*key].push_back(i);
      }
    }
    for (auto& [key, members] : groups) {
      const Box target = BoxAt(shape, to, to_mesh, key);
      int64_t missing = Volume(target);
      std::vector<size_t>& mine = held[key];
      std::sort(mine.begin(), mine.end());
      mine.erase(std::unique(mine.begin(), mine.end()), mine.end());
      for (size_t i : mine) missing -= Volume(Intersect(target, classes[i].box));
      bound = std::max(bound, CeilDiv(missing, static_cast<int64_t>(members.size())) * s);
    }
    return saturated(bound);
  }
  for (const auto& [key, members] : groups) {
    const Box target = BoxAt(shape, to, to_mesh, key);
    int64_t missing = 0;
    for (const Holding& c : classes) {
      const bool held = std::any_of(members.begin(), members.end(), [&](int64_t id) {
        return std::find(c.holders.begin(), c.holders.end(), id) != c.holders.end();
      });
      if (!held) missing += Volume(Intersect(target, c.box));
    }
    bound = std::max(bound, CeilDiv(missing, static_cast<int64_t>(members.size())) * s);
  }
  return saturated(bound);
}

}  // namespace spmd
