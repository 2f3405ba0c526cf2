#include "rules/reshard.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <queue>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include "rules/error.h"

namespace spmd {
namespace {

using Box = std::vector<Range>;  // one global range per dim

// A search this large is a mistake in the request, not a tensor anyone shards.
constexpr size_t kMaxSearchStates = 2'000'000;
// Beyond this many SendRecv targets (a partial target on many axes), only the replicated
// one is tried: the others only matter for exotic requests.
constexpr size_t kMaxSendRecvTargets = 64;

int64_t Volume(const Box& box) {
  int64_t v = 1;
  for (const Range& r : box) v *= r.size();
  return v;
}

Box Intersect(const Box& a, const Box& b) {
  Box out(a.size());
  for (size_t d = 0; d < a.size(); ++d) {
    const int64_t begin = std::max(a[d].begin, b[d].begin);
    out[d] = Range{begin, std::max(begin, std::min(a[d].end, b[d].end))};
  }
  return out;
}

Box BoxAt(const std::vector<int64_t>& shape, const DistAttr& attr, const Mesh& mesh,
          const std::vector<int64_t>& coord) {
  Box box(shape.size());
  for (size_t d = 0; d < shape.size(); ++d)
    box[d] = DimRangeAt(shape[d], attr.dims[d], mesh, coord);
  return box;
}

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

int64_t CeilDiv(__int128 num, int64_t den) { return static_cast<int64_t>((num + den - 1) / den); }

bool IsReplicatedAxis(const DistAttr& attr, int axis) {
  return attr.DimOfAxis(axis) < 0 && attr.partial.count(axis) == 0;
}

// Mixed reduce ops have no defined order (SEMANTICS.md §2.1 reduces "over each"); sum and
// avg commute (both linear), equal ops commute trivially.
bool OpsCompatible(const PartialMap& partial) {
  bool all_linear = true;
  std::set<ReduceOp> ops;
  for (const auto& [axis, op] : partial) {
    ops.insert(op);
    all_linear = all_linear && (op == ReduceOp::kSum || op == ReduceOp::kAvg);
  }
  return ops.size() <= 1 || all_linear;
}

bool SameMesh(const Mesh& a, const Mesh& b) {
  return a.shape() == b.shape() && a.process_ids() == b.process_ids();
}

std::string Join(const std::vector<int64_t>& values) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) {
    out += (i > 0 ? ", " : "") + std::to_string(values[i]);
  }
  return out;
}

std::string GroupText(const AxisList& axes) {
  std::string out = "{";
  for (size_t i = 0; i < axes.size(); ++i) out += (i > 0 ? "," : "") + std::to_string(axes[i]);
  return out + "}";
}

// A step without its meshes: what the search and the byte functions need.
struct StepRef {
  StepKind kind;
  const AxisList& axes;
  const Mesh& mesh;
  const Mesh& to_mesh;
  const DistAttr& before;
  const DistAttr& after;
};

StepRef RefOf(const ReshardStep& step) {
  return StepRef{step.kind, step.axes, step.mesh, step.to_mesh, step.before, step.after};
}

// SendRecv: per distinct `before` box, its holders (row-major).
struct Holding {
  Box box;
  std::vector<int64_t> holders;
};

std::vector<Holding> Holdings(const StepRef& step, const std::vector<int64_t>& shape) {
  std::vector<Holding> classes;
  std::map<std::vector<int64_t>, size_t> index;  // box as begin, end, begin, end, ...
  const std::vector<std::vector<int64_t>> coords = AllCoords(step.mesh);
  for (size_t i = 0; i < coords.size(); ++i) {
    Box box = BoxAt(shape, step.before, step.mesh, coords[i]);
    std::vector<int64_t> key;
    for (const Range& r : box) {
      key.push_back(r.begin);
      key.push_back(r.end);
    }
    auto [it, inserted] = index.emplace(std::move(key), classes.size());
    if (inserted) classes.push_back(Holding{std::move(box), {}});
    classes[it->second].holders.push_back(step.mesh.process_ids()[i]);
  }
  return classes;
}

std::vector<Transfer> TransfersOf(const StepRef& step, const std::vector<int64_t>& shape) {
  const std::vector<Holding> classes = Holdings(step, shape);
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
int64_t SendRecvReceived(const StepRef& step, const std::vector<int64_t>& shape, int64_t s,
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

// Bytes of a collective or local step for the rank at `coord` of step.mesh.
RankBytes CollectiveBytesAt(const StepRef& step, const std::vector<int64_t>& shape, int64_t s,
                            const std::vector<int64_t>& coord) {
  const Box before = BoxAt(shape, step.before, step.mesh, coord);
  const int64_t n = GroupSize(step.mesh, step.axes);
  switch (step.kind) {
    case StepKind::kAllGather: {
      const Box after = BoxAt(shape, step.after, step.mesh, coord);
      return RankBytes{(n - 1) * Volume(before) * s, (Volume(after) - Volume(before)) * s};
    }
    case StepKind::kReduceScatter: {
      // Direct reduce-scatter: the rank sends every member its chunk and receives n - 1
      // addends of its own (the Communicator's accounting, runtime/communicator.h).
      const Box after = BoxAt(shape, step.after, step.mesh, coord);
      if (n <= 1) return RankBytes{};
      return RankBytes{(Volume(before) - Volume(after)) * s, (n - 1) * Volume(after) * s};
    }
    case StepKind::kAllReduce: {
      // Reduce-scatter then all-gather over the balanced split of the buffer: the member at
      // position p owns count / n elements, one more when p < count % n.
      if (n <= 1) return RankBytes{};
      const int64_t count = Volume(before);
      const int64_t p = GroupPosition(step.mesh, step.axes, coord);
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

// The max over ranks of bytes received, fast: a rank's bytes depend on its coordinates on
// the axes of the dims the step changes, times the sizes of the other dims, which are
// largest at coordinate 0 (chunk 0 is the largest at every level of the ceil layout). So
// enumerate those axes and fix the others to 0. Tests compare it with MaxStepBytes.
int64_t FastMaxReceived(const StepRef& step, const std::vector<int64_t>& shape, int64_t s) {
  if (step.kind == StepKind::kSendRecv) {
    int64_t best = 0;
    for (int64_t pid : step.to_mesh.process_ids()) {
      best = std::max(best, SendRecvReceived(step, shape, s, pid));
    }
    return best;
  }
  if (!Communicates(step.kind)) return 0;
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
    best = std::max(best, CollectiveBytesAt(step, shape, s, coord).received);
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

// ---- The search ------------------------------------------------------------------------

// An edge of the search graph: a step from a state on mesh `mesh_index`.
struct Edge {
  StepKind kind;
  AxisList axes;
  int dim = -1;
  int to_dim = -1;
  ReduceOp op = ReduceOp::kSum;
  ReduceOp to_op = ReduceOp::kSum;
  int to_mesh_index = 0;
  DistAttr after;
};

struct Request {
  const std::vector<int64_t>& shape;
  DType dtype;
  int64_t s;
  std::vector<Mesh> meshes;  // [from_mesh] or [from_mesh, to_mesh]
  DistAttr from;
  DistAttr to;
  int target_index() const { return static_cast<int>(meshes.size()) - 1; }
};

// The non-partial states of the target mesh from which `to` is reached by 0-byte local
// steps: `to` with each partial axis replicated, or (sum, or avg on floating dtypes)
// appended to a dim to be turned partial by ShardToPartial. The all-replicated one first.
std::vector<DistAttr> SendRecvTargets(const Request& req) {
  std::vector<std::pair<int, ReduceOp>> partial(req.to.partial.begin(), req.to.partial.end());
  DistAttr base = req.to;
  base.partial.clear();
  std::vector<DistAttr> out = {base};
  // choice[i] = -1 (replicated) or the dim that partial axis i is appended to.
  std::vector<int> choice(partial.size(), -1);
  const int rank = static_cast<int>(req.shape.size());
  auto can_shard = [&](ReduceOp op) {
    return op == ReduceOp::kSum || (op == ReduceOp::kAvg && IsFloating(req.dtype));
  };
  while (true) {
    size_t i = 0;
    for (; i < partial.size(); ++i) {
      if (!can_shard(partial[i].second) || rank == 0) continue;
      if (++choice[i] < rank) break;
      choice[i] = -1;
    }
    if (i == partial.size()) break;
    DistAttr b = base;
    for (size_t k = 0; k < partial.size(); ++k) {
      if (choice[k] >= 0) b.dims[choice[k]].push_back(partial[k].first);
    }
    out.push_back(std::move(b));
    if (out.size() > kMaxSendRecvTargets) return {base};
  }
  return out;
}

std::vector<ReduceOp> TargetOps(const DistAttr& to) {
  std::set<ReduceOp> ops;
  for (const auto& [axis, op] : to.partial) ops.insert(op);
  return {ops.begin(), ops.end()};
}

// Calls `fn` with every ordering of every non-empty subset of `axes`.
void ForEachOrderedSubset(const AxisList& axes, const std::function<void(const AxisList&)>& fn) {
  const int k = static_cast<int>(axes.size());
  for (int mask = 1; mask < (1 << k); ++mask) {
    AxisList subset;
    for (int i = 0; i < k; ++i) {
      if (mask & (1 << i)) subset.push_back(axes[i]);
    }
    do {
      fn(subset);
    } while (std::next_permutation(subset.begin(), subset.end()));
  }
}

void AddEdges(const Request& req, int mesh_index, const DistAttr& s,
              const std::vector<DistAttr>& sr_targets, std::vector<Edge>& out) {
  const Mesh& mesh = req.meshes[mesh_index];
  const int rank = s.rank();
  auto push = [&](Edge e) {
    if (OpsCompatible(e.after.partial)) out.push_back(std::move(e));
  };
  // Reductions: every group of partial axes sharing an op.
  std::map<ReduceOp, AxisList> by_op;
  for (const auto& [axis, op] : s.partial) by_op[op].push_back(axis);
  for (const auto& [op, axes] : by_op) {
    const int k = static_cast<int>(axes.size());
    for (int mask = 1; mask < (1 << k); ++mask) {
      Edge e{StepKind::kAllReduce, {}, -1, -1, op, op, mesh_index, s};
      for (int i = 0; i < k; ++i) {
        if (mask & (1 << i)) {
          e.axes.push_back(axes[i]);
          e.after.partial.erase(axes[i]);
        }
      }
      push(std::move(e));
    }
    ForEachOrderedSubset(axes, [&](const AxisList& group) {
      for (int d = 0; d < rank; ++d) {
        Edge e{StepKind::kReduceScatter, group, d, -1, op, op, mesh_index, s};
        for (int a : group) {
          e.after.partial.erase(a);
          e.after.dims[d].push_back(a);
        }
        push(std::move(e));
      }
    });
  }
  // Gathers and all-to-alls of every minor-most suffix.
  for (int d = 0; d < rank; ++d) {
    const AxisList& list = s.dims[d];
    for (size_t len = 1; len <= list.size(); ++len) {
      const AxisList group(list.end() - len, list.end());
      Edge e{StepKind::kAllGather, group, d, -1, ReduceOp::kSum, ReduceOp::kSum, mesh_index, s};
      e.after.dims[d].resize(list.size() - len);
      push(std::move(e));
    }
  }
  for (int i = 0; i < rank; ++i) {
    const AxisList& list = s.dims[i];
    for (size_t len = 1; len <= list.size(); ++len) {
      const AxisList group(list.end() - len, list.end());
      for (int j = 0; j < rank; ++j) {
        if (j == i) continue;
        Edge e{StepKind::kAllToAll, group, i, j, ReduceOp::kSum, ReduceOp::kSum, mesh_index, s};
        e.after.dims[i].resize(list.size() - len);
        e.after.dims[j].insert(e.after.dims[j].end(), group.begin(), group.end());
        push(std::move(e));
      }
    }
  }
  // Local steps.
  const std::vector<ReduceOp> target_ops = TargetOps(req.to);
  for (int a = 0; a < mesh.ndim(); ++a) {
    if (!IsReplicatedAxis(s, a)) continue;
    for (int d = 0; d < rank; ++d) {
      Edge e{StepKind::kLocalSlice, {a}, d, -1, ReduceOp::kSum, ReduceOp::kSum, mesh_index, s};
      e.after.dims[d].push_back(a);
      push(std::move(e));
    }
    for (ReduceOp op : target_ops) {
      Edge e{StepKind::kLocalPartial, {a}, -1, -1, op, op, mesh_index, s};
      e.after.partial[a] = op;
      push(std::move(e));
    }
  }
  for (int d = 0; d < rank; ++d) {
    if (s.dims[d].empty()) continue;
    const int a = s.dims[d].back();
    Edge e{StepKind::kShardToPartial, {a}, d, -1, ReduceOp::kSum, ReduceOp::kSum, mesh_index, s};
    e.after.dims[d].pop_back();
    e.after.partial[a] = ReduceOp::kSum;
    push(std::move(e));
  }
  if (IsFloating(req.dtype)) {
    for (const auto& [a, op] : s.partial) {
      if (op != ReduceOp::kSum && op != ReduceOp::kAvg) continue;
      const ReduceOp to_op = op == ReduceOp::kSum ? ReduceOp::kAvg : ReduceOp::kSum;
      Edge e{StepKind::kRescale, {a}, -1, -1, op, to_op, mesh_index, s};
      e.after.partial[a] = to_op;
      push(std::move(e));
    }
  }
  // Point-to-point: from a non-partial state straight to a state `to` is 0 bytes from
  // (between meshes: only from the source mesh).
  if (!s.IsPartial() && mesh_index == 0) {
    const int target = req.target_index();
    for (const DistAttr& b : sr_targets) {
      if (target == mesh_index && b == s) continue;
      out.push_back(
          Edge{StepKind::kSendRecv, {}, -1, -1, ReduceOp::kSum, ReduceOp::kSum, target, b});
    }
  }
}

// A state's key: the mesh index and the dims form, as ints.
std::vector<int> KeyOf(int mesh_index, const DistAttr& attr) {
  std::vector<int> key = {mesh_index};
  for (const AxisList& axes : attr.dims) {
    key.push_back(-1);
    key.insert(key.end(), axes.begin(), axes.end());
  }
  key.push_back(-2);
  for (const auto& [axis, op] : attr.partial) {
    key.push_back(axis);
    key.push_back(static_cast<int>(op));
  }
  return key;
}

ReshardStep MakeStep(const Request& req, int mesh_index, const DistAttr& before, const Edge& e) {
  ReshardStep step;
  step.kind = e.kind;
  step.axes = e.axes;
  step.dim = e.dim;
  step.to_dim = e.to_dim;
  step.op = e.op;
  step.to_op = e.to_op;
  step.mesh = req.meshes[mesh_index];
  step.to_mesh = req.meshes[e.to_mesh_index];
  step.before = before;
  step.after = e.after;
  step.bytes_per_rank = FastMaxReceived(RefOf(step), req.shape, req.s);
  return step;
}

struct Cost {
  int64_t bytes = 0;
  int steps = 0;
  int send_recvs = 0;
  auto operator<=>(const Cost&) const = default;
};

std::vector<ReshardStep> Search(const Request& req) {
  struct Node {
    int mesh_index;
    DistAttr attr;
    Cost cost;
    int parent = -1;
    Edge via;
    bool done = false;
  };
  std::vector<Node> nodes;
  std::map<std::vector<int>, int> index;
  using Item = std::tuple<Cost, int>;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> queue;
  const std::vector<DistAttr> sr_targets = SendRecvTargets(req);
  const std::vector<int> goal = KeyOf(req.target_index(), req.to);

  nodes.push_back(Node{0, req.from, Cost{}, -1, Edge{}, false});
  index.emplace(KeyOf(0, req.from), 0);
  queue.emplace(Cost{}, 0);
  int found = -1;
  std::vector<Edge> edges;
  while (!queue.empty()) {
    const auto [cost, id] = queue.top();
    queue.pop();
    if (nodes[id].done || cost != nodes[id].cost) continue;
    nodes[id].done = true;
    const int mesh_index = nodes[id].mesh_index;
    if (KeyOf(mesh_index, nodes[id].attr) == goal) {
      found = id;
      break;
    }
    edges.clear();
    const DistAttr here = nodes[id].attr;  // nodes may reallocate below
    AddEdges(req, mesh_index, here, sr_targets, edges);
    for (Edge& e : edges) {
      const StepRef ref{e.kind, e.axes, req.meshes[mesh_index], req.meshes[e.to_mesh_index],
                        here,   e.after};
      const Cost next{cost.bytes + FastMaxReceived(ref, req.shape, req.s), cost.steps + 1,
                      cost.send_recvs + (e.kind == StepKind::kSendRecv ? 1 : 0)};
      std::vector<int> key = KeyOf(e.to_mesh_index, e.after);
      auto it = index.find(key);
      if (it == index.end()) {
        if (nodes.size() >= kMaxSearchStates) {
          ThrowUnsupported(
              "to", "the reshard search exceeded " + std::to_string(kMaxSearchStates) + " states");
        }
        it = index.emplace(std::move(key), static_cast<int>(nodes.size())).first;
        nodes.push_back(Node{e.to_mesh_index, e.after, next, id, e, false});
        queue.emplace(next, it->second);
      } else if (!nodes[it->second].done && next < nodes[it->second].cost) {
        nodes[it->second].cost = next;
        nodes[it->second].parent = id;
        nodes[it->second].via = e;
        queue.emplace(next, it->second);
      }
    }
  }
  if (found < 0) ThrowUnsupported("to", "no reshard plan reaches " + ToString(req.to));
  std::vector<ReshardStep> steps;
  for (int id = found; nodes[id].parent >= 0; id = nodes[id].parent) {
    const Node& p = nodes[nodes[id].parent];
    steps.push_back(MakeStep(req, p.mesh_index, p.attr, nodes[id].via));
  }
  std::reverse(steps.begin(), steps.end());
  return steps;
}

Request MakeRequest(const Mesh& from_mesh, const DistAttr& from, const Mesh& to_mesh,
                    const DistAttr& to, const std::vector<int64_t>& shape, DType dtype) {
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0) {
      ThrowInvalid("shape[" + std::to_string(d) + "]",
                   "size " + std::to_string(shape[d]) + " is negative or unknown");
    }
  }
  const int64_t s = BytesPerElement(dtype);
  __int128 bytes = s;
  for (int64_t size : shape) {
    bytes *= size;
    if (bytes > (int64_t{1} << 50)) ThrowInvalid("shape", "[" + Join(shape) + "] is too large");
  }
  const int rank = static_cast<int>(shape.size());
  Validate(from, from_mesh, rank, "from");
  Validate(to, to_mesh, rank, "to");
  if (!OpsCompatible(from.partial)) {
    ThrowUnsupported("from.partial",
                     ToString(from) + " mixes reduce ops; only sum with avg has a defined order");
  }
  if (!OpsCompatible(to.partial)) {
    ThrowUnsupported("to.partial",
                     ToString(to) + " mixes reduce ops; only sum with avg has a defined order");
  }
  std::vector<Mesh> meshes = {from_mesh};
  if (!SameMesh(from_mesh, to_mesh)) meshes.push_back(to_mesh);
  return Request{shape, dtype, s, std::move(meshes), from, to};
}

ReshardPlan Finish(const Request& req, std::vector<ReshardStep> steps) {
  ReshardPlan plan;
  plan.shape = req.shape;
  plan.dtype = req.dtype;
  plan.from_mesh = req.meshes.front();
  plan.to_mesh = req.meshes.back();
  plan.from = req.from;
  plan.to = req.to;
  plan.steps = std::move(steps);
  for (const ReshardStep& step : plan.steps) plan.bytes_per_rank += step.bytes_per_rank;
  plan.lower_bound_bytes =
      ReshardLowerBound(plan.from_mesh, plan.from, plan.to_mesh, plan.to, plan.shape, plan.dtype);
  return plan;
}

std::string CollectiveText(const ReshardStep& step) {
  const std::string op = "(" + std::string(ToString(step.op)) + ")";
  const std::string kind(ToString(step.kind));
  switch (step.kind) {
    case StepKind::kAllGather:
      return kind + " dim " + std::to_string(step.dim);
    case StepKind::kReduceScatter:
      return kind + op + " -> dim " + std::to_string(step.dim);
    case StepKind::kAllReduce:
      return kind + op;
    case StepKind::kAllToAll:
      return kind + " dim " + std::to_string(step.dim) + " -> dim " + std::to_string(step.to_dim);
    case StepKind::kLocalSlice:
      return kind + " dim " + std::to_string(step.dim);
    case StepKind::kLocalPartial:
      return kind + op;
    case StepKind::kShardToPartial:
      return kind + " dim " + std::to_string(step.dim);
    case StepKind::kRescale:
      return kind + "(" + std::string(ToString(step.op)) + " -> " +
             std::string(ToString(step.to_op)) + ")";
    case StepKind::kSendRecv:
      return SameMesh(step.mesh, step.to_mesh) ? kind : kind + " to the target mesh";
  }
  return kind;
}

std::string StepGroupText(const ReshardStep& step) {
  return step.kind == StepKind::kSendRecv ? "p2p" : GroupText(step.axes);
}

nlohmann::json MeshJson(const Mesh& mesh) {
  return nlohmann::json{{"shape", mesh.shape()}, {"process_ids", mesh.process_ids()}};
}

std::string RatioText(const ReshardPlan& plan) {
  const double ratio = plan.Ratio();
  if (ratio == std::numeric_limits<double>::infinity()) return "n/a (the bound is 0)";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", ratio);
  return buf;
}

[[noreturn]] void BadStep(const ReshardStep& step, const std::string& why) {
  ThrowInvalid("step", step.Describe() + " on " + ToString(step.before) + ": " + why);
}

}  // namespace

int64_t BytesPerElement(DType dtype) {
  switch (dtype) {
    case DType::kFloat64:
      return 8;
    case DType::kFloat32:
      return 4;
    case DType::kInt64:
      return 8;
    case DType::kBool:
      return 1;
  }
  return 8;
}

std::string_view ToString(StepKind kind) {
  switch (kind) {
    case StepKind::kAllGather:
      return "all_gather";
    case StepKind::kReduceScatter:
      return "reduce_scatter";
    case StepKind::kAllReduce:
      return "all_reduce";
    case StepKind::kAllToAll:
      return "all_to_all";
    case StepKind::kLocalSlice:
      return "local_slice";
    case StepKind::kLocalPartial:
      return "local_partial";
    case StepKind::kShardToPartial:
      return "shard_to_partial";
    case StepKind::kRescale:
      return "rescale";
    case StepKind::kSendRecv:
      return "send_recv";
  }
  return "all_gather";
}

bool Communicates(StepKind kind) {
  switch (kind) {
    case StepKind::kAllGather:
    case StepKind::kReduceScatter:
    case StepKind::kAllReduce:
    case StepKind::kAllToAll:
    case StepKind::kSendRecv:
      return true;
    default:
      return false;
  }
}

std::string ReshardStep::Describe() const {
  return StepGroupText(*this) + " " + CollectiveText(*this);
}

double ReshardPlan::Ratio() const {
  if (lower_bound_bytes == 0) {
    return bytes_per_rank == 0 ? 1.0 : std::numeric_limits<double>::infinity();
  }
  return static_cast<double>(bytes_per_rank) / static_cast<double>(lower_bound_bytes);
}

int ReshardPlan::NumSendRecv() const {
  return static_cast<int>(std::count_if(steps.begin(), steps.end(), [](const ReshardStep& s) {
    return s.kind == StepKind::kSendRecv;
  }));
}

ReshardPlan PlanReshard(const Mesh& mesh, const std::vector<int64_t>& shape, DType dtype,
                        const DistAttr& from, const DistAttr& to) {
  return PlanReshard(mesh, from, mesh, to, shape, dtype);
}

ReshardPlan PlanReshard(const Mesh& from_mesh, const DistAttr& from, const Mesh& to_mesh,
                        const DistAttr& to, const std::vector<int64_t>& shape, DType dtype) {
  const Request req = MakeRequest(from_mesh, from, to_mesh, to, shape, dtype);
  return Finish(req, Search(req));
}

ReshardPlan NaiveReshardPlan(const Mesh& from_mesh, const DistAttr& from, const Mesh& to_mesh,
                             const DistAttr& to, const std::vector<int64_t>& shape, DType dtype) {
  const Request req = MakeRequest(from_mesh, from, to_mesh, to, shape, dtype);
  const bool move = req.meshes.size() == 2;
  std::vector<ReshardStep> steps;
  DistAttr state = from;
  int mesh_index = 0;
  auto apply = [&](Edge e) {
    steps.push_back(MakeStep(req, mesh_index, state, e));
    state = e.after;
    mesh_index = e.to_mesh_index;
  };
  for (const auto& [axis, op] : from.partial) {
    const auto kept = to.partial.find(axis);
    if (!move && kept != to.partial.end() && kept->second == op) continue;
    Edge e{StepKind::kAllReduce, {axis}, -1, -1, op, op, mesh_index, state};
    e.after.partial.erase(axis);
    apply(e);
  }
  if (move) {
    DistAttr target = to;
    target.partial.clear();
    apply(Edge{StepKind::kSendRecv, {}, -1, -1, ReduceOp::kSum, ReduceOp::kSum, 1, target});
  }
  for (int d = 0; d < state.rank(); ++d) {
    size_t keep = 0;
    while (keep < state.dims[d].size() && keep < to.dims[d].size() &&
           state.dims[d][keep] == to.dims[d][keep]) {
      ++keep;
    }
    while (state.dims[d].size() > keep) {
      Edge e{StepKind::kAllGather, {state.dims[d].back()}, d,          -1,
             ReduceOp::kSum,       ReduceOp::kSum,         mesh_index, state};
      e.after.dims[d].pop_back();
      apply(e);
    }
  }
  for (int d = 0; d < state.rank(); ++d) {
    for (size_t k = state.dims[d].size(); k < to.dims[d].size(); ++k) {
      Edge e{StepKind::kLocalSlice, {to.dims[d][k]}, d,          -1,
             ReduceOp::kSum,        ReduceOp::kSum,  mesh_index, state};
      e.after.dims[d].push_back(to.dims[d][k]);
      apply(e);
    }
  }
  for (const auto& [axis, op] : to.partial) {
    const auto has = state.partial.find(axis);
    if (has != state.partial.end() && has->second == op) continue;
    Edge e{StepKind::kLocalPartial, {axis}, -1, -1, op, op, mesh_index, state};
    e.after.partial[axis] = op;
    apply(e);
  }
  return Finish(req, std::move(steps));
}

int64_t ReshardLowerBound(const Mesh& from_mesh, const DistAttr& from, const Mesh& to_mesh,
                          const DistAttr& to, const std::vector<int64_t>& shape, DType dtype) {
  const int64_t s = BytesPerElement(dtype);
  int64_t elements = 1;
  for (int64_t size : shape) elements *= size;
  std::set<int64_t> ranks(from_mesh.process_ids().begin(), from_mesh.process_ids().end());
  ranks.insert(to_mesh.process_ids().begin(), to_mesh.process_ids().end());
  // Partial axes of size 1 hold the value itself.
  int64_t addends = 1;
  for (const auto& [axis, op] : from.partial) addends *= from_mesh.axis_size(axis);
  AxisList target_partial;
  for (const auto& [axis, op] : to.partial) {
    if (to_mesh.axis_size(axis) > 1) target_partial.push_back(axis);
  }
  const std::vector<std::vector<int64_t>> to_coords = AllCoords(to_mesh);
  int64_t bound = 0;
  if (target_partial.empty()) {
    __int128 target_total = 0;
    for (size_t k = 0; k < to_coords.size(); ++k) {
      const Box target = BoxAt(shape, to, to_mesh, to_coords[k]);
      target_total += Volume(target);
      // Every rank needs its whole target shard: what it does not hold must arrive (all of
      // it when it holds only an addend).
      int64_t held = 0;
      const std::optional<std::vector<int64_t>> own =
          from_mesh.CoordinateOf(to_mesh.process_ids()[k]);
      if (addends == 1 && own)
        held = Volume(Intersect(target, BoxAt(shape, from, from_mesh, *own)));
      bound = std::max(bound, (Volume(target) - held) * s);
    }
    if (addends > 1) {
      // Each element: (N_P - 1) receptions to combine its addends, plus one for every rank
      // needing it but the first to complete it; spread over every rank at best.
      const __int128 receptions = static_cast<__int128>(addends - 2) * elements + target_total;
      // Receptions are of whole elements.
      bound = std::max(bound, CeilDiv(receptions, static_cast<int64_t>(ranks.size())) * s);
    }
    return bound;
  }
  if (addends > 1) return 0;  // partial to partial: no bound derived (docs/RESHARD.md)
  // A target partial group (ranks varying the partial axes) needs, together, every element
  // of its common box; what no member holds must arrive at some member.
  const AxisList no_axes;
  const DistAttr no_partial = DistAttr::Replicated(static_cast<int>(shape.size()));
  const StepRef ref{StepKind::kSendRecv, no_axes, from_mesh, to_mesh, from, no_partial};
  const std::vector<Holding> classes = Holdings(ref, shape);
  std::map<std::vector<int64_t>, std::vector<int64_t>> groups;  // key -> member ids
  for (size_t k = 0; k < to_coords.size(); ++k) {
    std::vector<int64_t> key = to_coords[k];
    for (int a : target_partial) key[a] = 0;
    groups[key].push_back(to_mesh.process_ids()[k]);
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
  return bound;
}

DistAttr ApplyStep(const ReshardStep& step) {
  const DistAttr& b = step.before;
  const int rank = b.rank();
  Validate(b, step.mesh, rank, "step.before");
  if (step.kind == StepKind::kSendRecv) {
    Validate(step.after, step.to_mesh, rank, "step.after");
    if (b.IsPartial() || step.after.IsPartial()) BadStep(step, "send_recv moves no partial values");
    return step.after;
  }
  if (!(step.mesh == step.to_mesh)) BadStep(step, "only send_recv changes the mesh");
  if (step.axes.empty()) BadStep(step, "the group has no mesh axis");
  std::set<int> seen;
  for (int a : step.axes) {
    if (a < 0 || a >= step.mesh.ndim() || !seen.insert(a).second) {
      BadStep(step, "the group " + GroupText(step.axes) + " is not a set of mesh axes");
    }
  }
  auto check_dim = [&](int d) {
    if (d < 0 || d >= rank) BadStep(step, "dim " + std::to_string(d) + " is not a dim");
  };
  auto check_suffix = [&](int d) {
    check_dim(d);
    const AxisList& list = b.dims[d];
    if (list.size() < step.axes.size() ||
        !std::equal(step.axes.begin(), step.axes.end(), list.end() - step.axes.size())) {
      BadStep(step, "the group is not the minor-most suffix of dim " + std::to_string(d));
    }
  };
  auto check_partial = [&](ReduceOp op) {
    for (int a : step.axes) {
      const auto it = b.partial.find(a);
      if (it == b.partial.end() || it->second != op) {
        BadStep(step, "mesh axis " + std::to_string(a) + " is not partial(" +
                          std::string(ToString(op)) + ")");
      }
    }
  };
  auto check_single_replicated = [&]() {
    if (step.axes.size() != 1) BadStep(step, "a local step acts on one mesh axis");
    if (!IsReplicatedAxis(b, step.axes[0])) BadStep(step, "the mesh axis is not replicated");
  };
  DistAttr after = b;
  switch (step.kind) {
    case StepKind::kAllGather:
      check_suffix(step.dim);
      after.dims[step.dim].resize(b.dims[step.dim].size() - step.axes.size());
      break;
    case StepKind::kReduceScatter:
      check_dim(step.dim);
      check_partial(step.op);
      for (int a : step.axes) {
        after.partial.erase(a);
        after.dims[step.dim].push_back(a);
      }
      break;
    case StepKind::kAllReduce:
      check_partial(step.op);
      for (int a : step.axes) after.partial.erase(a);
      break;
    case StepKind::kAllToAll:
      check_suffix(step.dim);
      check_dim(step.to_dim);
      if (step.dim == step.to_dim) BadStep(step, "all_to_all needs two different dims");
      after.dims[step.dim].resize(b.dims[step.dim].size() - step.axes.size());
      after.dims[step.to_dim].insert(after.dims[step.to_dim].end(), step.axes.begin(),
                                     step.axes.end());
      break;
    case StepKind::kLocalSlice:
      check_single_replicated();
      check_dim(step.dim);
      after.dims[step.dim].push_back(step.axes[0]);
      break;
    case StepKind::kLocalPartial:
      check_single_replicated();
      after.partial[step.axes[0]] = step.op;
      break;
    case StepKind::kShardToPartial:
      if (step.axes.size() != 1) BadStep(step, "a local step acts on one mesh axis");
      check_suffix(step.dim);
      after.dims[step.dim].pop_back();
      after.partial[step.axes[0]] = ReduceOp::kSum;
      break;
    case StepKind::kRescale: {
      if (step.axes.size() != 1) BadStep(step, "a local step acts on one mesh axis");
      check_partial(step.op);
      const bool linear_pair = (step.op == ReduceOp::kSum && step.to_op == ReduceOp::kAvg) ||
                               (step.op == ReduceOp::kAvg && step.to_op == ReduceOp::kSum);
      if (!linear_pair) BadStep(step, "rescale turns sum into avg or avg into sum");
      after.partial[step.axes[0]] = step.to_op;
      break;
    }
    case StepKind::kSendRecv:
      break;
  }
  return after;
}

RankBytes StepBytesOf(const ReshardStep& step, const std::vector<int64_t>& shape, DType dtype,
                      int64_t process_id) {
  const int64_t s = BytesPerElement(dtype);
  const StepRef ref = RefOf(step);
  if (step.kind == StepKind::kSendRecv) {
    RankBytes bytes;
    bytes.received = SendRecvReceived(ref, shape, s, process_id);
    for (const Transfer& t : TransfersOf(ref, shape)) {
      if (t.from_process == process_id) bytes.sent += Volume(t.box) * s;
    }
    return bytes;
  }
  const std::optional<std::vector<int64_t>> coord = step.mesh.CoordinateOf(process_id);
  if (!coord) return RankBytes{};
  return CollectiveBytesAt(ref, shape, s, *coord);
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
  if (step.kind != StepKind::kSendRecv) BadStep(step, "not a send_recv step");
  return TransfersOf(RefOf(step), shape);
}

std::string ToString(const ReshardPlan& plan) {
  const bool move = !SameMesh(plan.from_mesh, plan.to_mesh);
  std::string out = "reshard [" + Join(plan.shape) + "] " + std::string(ToString(plan.dtype));
  out += move ? " from " + ToString(plan.from_mesh) + " to " + ToString(plan.to_mesh)
              : " on " + ToString(plan.from_mesh);
  out += "\nfrom " + ToPlacementString(plan.from, plan.from_mesh.ndim()) + " to " +
         ToPlacementString(plan.to, plan.to_mesh.ndim()) + "\n";
  // Columns sized to their widest cell.
  std::vector<std::vector<std::string>> rows = {
      {"#", "group", "collective", "after", "bytes/rank"}};
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const ReshardStep& step = plan.steps[i];
    rows.push_back({std::to_string(i + 1), StepGroupText(step), CollectiveText(step),
                    ToPlacementString(step.after, step.to_mesh.ndim()),
                    std::to_string(step.bytes_per_rank)});
  }
  std::vector<size_t> width(5, 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  for (const auto& row : rows) {
    std::string line = " ";
    for (size_t c = 0; c < row.size(); ++c) {
      const size_t pad = width[c] - row[c].size();
      // Numbers right-aligned, text left-aligned.
      if (c == 0 || c == 4) {
        line += " " + std::string(pad, ' ') + row[c];
      } else {
        line += " " + row[c] + std::string(pad, ' ');
      }
      if (c + 1 < row.size()) line += " ";
    }
    out += line + "\n";
  }
  if (plan.steps.empty()) out += "  (no steps: the tensor already has the target dist attr)\n";
  out += "total " + std::to_string(plan.bytes_per_rank) + " bytes per rank; lower bound " +
         std::to_string(plan.lower_bound_bytes) + " bytes; ratio " + RatioText(plan) + "\n";
  return out;
}

nlohmann::json ToJson(const ReshardPlan& plan) {
  using nlohmann::json;
  json steps = json::array();
  for (const ReshardStep& step : plan.steps) {
    json j{{"kind", std::string(ToString(step.kind))}, {"group", step.axes}};
    switch (step.kind) {
      case StepKind::kAllToAll:
        j["to_dim"] = step.to_dim;
        [[fallthrough]];
      case StepKind::kAllGather:
      case StepKind::kLocalSlice:
      case StepKind::kShardToPartial:
        j["dim"] = step.dim;
        break;
      case StepKind::kReduceScatter:
        j["dim"] = step.dim;
        j["op"] = std::string(ToString(step.op));
        break;
      case StepKind::kAllReduce:
      case StepKind::kLocalPartial:
        j["op"] = std::string(ToString(step.op));
        break;
      case StepKind::kRescale:
        j["op"] = std::string(ToString(step.op));
        j["to_op"] = std::string(ToString(step.to_op));
        break;
      case StepKind::kSendRecv:
        j["between_meshes"] = !SameMesh(step.mesh, step.to_mesh);
        break;
    }
    j["before"] = ToPlacementString(step.before, step.mesh.ndim());
    j["after"] = ToPlacementString(step.after, step.to_mesh.ndim());
    j["bytes_per_rank"] = step.bytes_per_rank;
    steps.push_back(std::move(j));
  }
  const double ratio = plan.Ratio();
  return json{
      {"shape", plan.shape},
      {"dtype", std::string(ToString(plan.dtype))},
      {"from_mesh", MeshJson(plan.from_mesh)},
      {"to_mesh", MeshJson(plan.to_mesh)},
      {"from", ToPlacementString(plan.from, plan.from_mesh.ndim())},
      {"to", ToPlacementString(plan.to, plan.to_mesh.ndim())},
      {"steps", std::move(steps)},
      {"bytes_per_rank", plan.bytes_per_rank},
      {"lower_bound_bytes", plan.lower_bound_bytes},
      {"ratio", ratio == std::numeric_limits<double>::infinity() ? json(nullptr) : json(ratio)}};
}

}  // namespace spmd
