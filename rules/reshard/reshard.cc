#include "rules/reshard/reshard.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <queue>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include "rules/model/error.h"

namespace spmd {
namespace {

// A search this large is a mistake in the request, not a tensor anyone shards.
constexpr size_t kMaxSearchStates = 2'000'000;
// Beyond this many SendRecv targets (a partial target on many axes), only the replicated
// one is tried: the others only matter for exotic requests.
constexpr size_t kMaxSendRecvTargets = 64;

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

std::string Join(const std::vector<int64_t>& values) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) {
    out += (i > 0 ? ", " : "") + std::to_string(values[i]);
  }
  return out;
}

// ---- The search ------------------------------------------------------------------------

// An edge of the search graph: a step from a state on mesh `mesh_index`.
struct Edge {
  StepAction action;
  int to_mesh_index = 0;
  DistAttr after;
};

struct Request {
  const std::vector<int64_t>& shape;
  DType dtype;
  std::vector<Mesh> meshes;  // [from_mesh] or [from_mesh, to_mesh]
  DistAttr from;
  DistAttr to;
  ReshardOptions options;
  bool Allowed(const StepAction& action) const {
    const StepKind kind = KindOf(action);
    return std::find(options.excluded.begin(), options.excluded.end(), kind) ==
           options.excluded.end();
  }
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
    if (OpsCompatible(e.after.partial) && req.Allowed(e.action)) out.push_back(std::move(e));
  };
  // Reductions: every group of partial axes sharing an op.
  std::map<ReduceOp, AxisList> by_op;
  for (const auto& [axis, op] : s.partial) by_op[op].push_back(axis);
  for (const auto& [op, axes] : by_op) {
    const int k = static_cast<int>(axes.size());
    for (int mask = 1; mask < (1 << k); ++mask) {
      AxisList group;
      Edge e{AllReduce{}, mesh_index, s};
      for (int i = 0; i < k; ++i) {
        if (mask & (1 << i)) {
          group.push_back(axes[i]);
          e.after.partial.erase(axes[i]);
        }
      }
      e.action = AllReduce{std::move(group), op};
      push(std::move(e));
    }
    const ReduceOp reduce = op;  // a copy: clang 14 cannot capture a structured binding
    ForEachOrderedSubset(axes, [&](const AxisList& group) {
      for (int d = 0; d < rank; ++d) {
        Edge e{ReduceScatter{group, d, reduce}, mesh_index, s};
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
      Edge e{AllGather{group, d}, mesh_index, s};
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
        Edge e{AllToAll{group, i, j}, mesh_index, s};
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
      Edge e{LocalSlice{a, d}, mesh_index, s};
      e.after.dims[d].push_back(a);
      push(std::move(e));
    }
    for (ReduceOp op : target_ops) {
      Edge e{LocalPartial{a, op}, mesh_index, s};
      e.after.partial[a] = op;
      push(std::move(e));
    }
  }
  for (int d = 0; d < rank; ++d) {
    if (s.dims[d].empty()) continue;
    const int a = s.dims[d].back();
    Edge e{ShardToPartial{a, d}, mesh_index, s};
    e.after.dims[d].pop_back();
    e.after.partial[a] = ReduceOp::kSum;
    push(std::move(e));
  }
  if (IsFloating(req.dtype)) {
    for (const auto& [a, op] : s.partial) {
      if (op != ReduceOp::kSum && op != ReduceOp::kAvg) continue;
      const ReduceOp to_op = op == ReduceOp::kSum ? ReduceOp::kAvg : ReduceOp::kSum;
      Edge e{Rescale{a, op, to_op}, mesh_index, s};
      e.after.partial[a] = to_op;
      push(std::move(e));
    }
  }
  // Point-to-point: from a non-partial state straight to a state `to` is 0 bytes from
  // (between meshes: only from the source mesh).
  if (!s.IsPartial() && mesh_index == 0 && req.Allowed(SendRecv{})) {
    const int target = req.target_index();
    for (const DistAttr& b : sr_targets) {
      if (target == mesh_index && b == s) continue;
      out.push_back(Edge{SendRecv{}, target, b});
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
  step.action = e.action;
  step.mesh = req.meshes[mesh_index];
  step.to_mesh = req.meshes[e.to_mesh_index];
  step.before = before;
  step.after = e.after;
  const StepView view{step.action, step.mesh, step.to_mesh, step.before, step.after};
  step.bytes_per_rank = FastMaxStepBytes(view, req.shape, req.dtype);
  step.messages = StepMessages(view, req.shape);
  step.picoseconds = StepPicoseconds(req.options.model, step.kind(), step.messages,
                                     step.bytes_per_rank, LocalStepBytes(view, req.shape, req.dtype));
  return step;
}

// The search's order: `first` is the objective (picoseconds or bytes), then bytes, steps
// and SendRecv steps.
struct Cost {
  int64_t first = 0;
  int64_t bytes = 0;
  int steps = 0;
  int send_recvs = 0;
  auto operator<=>(const Cost&) const = default;
};

// The cost of reaching `view.after` from a state of cost `cost`.
Cost Extend(const Request& req, const Cost& cost, const StepView& view) {
  const StepKind kind = KindOf(view.action);
  const int64_t bytes = FastMaxStepBytes(view, req.shape, req.dtype);
  int64_t first = bytes;
  if (req.options.objective == ReshardObjective::kTime) {
    first = StepPicoseconds(req.options.model, kind, StepMessages(view, req.shape), bytes,
                            LocalStepBytes(view, req.shape, req.dtype));
  }
  return Cost{SaturatingAdd(cost.first, first), cost.bytes + bytes, cost.steps + 1,
              cost.send_recvs + (kind == StepKind::kSendRecv ? 1 : 0)};
}

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
      const StepView view{e.action, req.meshes[mesh_index], req.meshes[e.to_mesh_index], here,
                          e.after};
      const Cost next = Extend(req, cost, view);
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
                    const DistAttr& to, const std::vector<int64_t>& shape, DType dtype,
                    const ReshardOptions& options) {
  ValidateCostModel(options.model);
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
  return Request{shape, dtype, std::move(meshes), from, to, options};
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
  plan.objective = req.options.objective;
  plan.model = req.options.model;
  for (const ReshardStep& step : plan.steps) {
    plan.bytes_per_rank += step.bytes_per_rank;
    plan.picoseconds = SaturatingAdd(plan.picoseconds, step.picoseconds);
  }
  plan.lower_bound_bytes =
      ReshardLowerBound(plan.from_mesh, plan.from, plan.to_mesh, plan.to, plan.shape, plan.dtype);
  return plan;
}

}  // namespace

double ReshardPlan::Ratio() const {
  if (lower_bound_bytes == 0) {
    return bytes_per_rank == 0 ? 1.0 : std::numeric_limits<double>::infinity();
  }
  return static_cast<double>(bytes_per_rank) / static_cast<double>(lower_bound_bytes);
}

int ReshardPlan::NumSendRecv() const {
  return static_cast<int>(std::count_if(steps.begin(), steps.end(), [](const ReshardStep& s) {
    return s.kind() == StepKind::kSendRecv;
  }));
}

ReshardPlan PlanReshard(const Mesh& mesh, const std::vector<int64_t>& shape, DType dtype,
                        const DistAttr& from, const DistAttr& to) {
  return PlanReshard(mesh, from, mesh, to, shape, dtype);
}

ReshardPlan PlanReshard(const Mesh& from_mesh, const DistAttr& from, const Mesh& to_mesh,
                        const DistAttr& to, const std::vector<int64_t>& shape, DType dtype) {
  return PlanReshard(from_mesh, from, to_mesh, to, shape, dtype, ReshardOptions{});
}

ReshardPlan PlanReshard(const Mesh& from_mesh, const DistAttr& from, const Mesh& to_mesh,
                        const DistAttr& to, const std::vector<int64_t>& shape, DType dtype,
                        const ReshardOptions& options) {
  const Request req = MakeRequest(from_mesh, from, to_mesh, to, shape, dtype, options);
  return Finish(req, Search(req));
}

ReshardPlan NaiveReshardPlan(const Mesh& from_mesh, const DistAttr& from, const Mesh& to_mesh,
                             const DistAttr& to, const std::vector<int64_t>& shape, DType dtype,
                             const CostModel& model) {
  ReshardOptions options;
  options.model = model;
  const Request req = MakeRequest(from_mesh, from, to_mesh, to, shape, dtype, options);
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
    Edge e{AllReduce{{axis}, op}, mesh_index, state};
    e.after.partial.erase(axis);
    apply(e);
  }
  if (move) {
    DistAttr target = to;
    target.partial.clear();
    apply(Edge{SendRecv{}, 1, target});
  }
  for (int d = 0; d < state.rank(); ++d) {
    size_t keep = 0;
    while (keep < state.dims[d].size() && keep < to.dims[d].size() &&
           state.dims[d][keep] == to.dims[d][keep]) {
      ++keep;
    }
    while (state.dims[d].size() > keep) {
      Edge e{AllGather{{state.dims[d].back()}, d}, mesh_index, state};
      e.after.dims[d].pop_back();
      apply(e);
    }
  }
  for (int d = 0; d < state.rank(); ++d) {
    for (size_t k = state.dims[d].size(); k < to.dims[d].size(); ++k) {
      Edge e{LocalSlice{to.dims[d][k], d}, mesh_index, state};
      e.after.dims[d].push_back(to.dims[d][k]);
      apply(e);
    }
  }
  for (const auto& [axis, op] : to.partial) {
    const auto has = state.partial.find(axis);
    if (has != state.partial.end() && has->second == op) continue;
    Edge e{LocalPartial{axis, op}, mesh_index, state};
    e.after.partial[axis] = op;
    apply(e);
  }
  return Finish(req, std::move(steps));
}

}  // namespace spmd
