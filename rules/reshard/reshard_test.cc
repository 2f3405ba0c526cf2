#include "rules/reshard/reshard.h"

#include "rules/reshard/reshard_print.h"

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "rules/model/error.h"
#include "rules/model/model_test_util.h"
#include "rules/model/layout.h"
#include "rules/engine/partial_split.h"

namespace spmd {
namespace {

using spmd::testing::Shuffled;

// ---- A simulated mesh: one float64 buffer per rank, each step applied by index math ----

struct Local {
  Box box;                   // the global ranges the buffer covers
  std::vector<double> data;  // row-major over `box`
};
using World = std::map<int64_t, Local>;  // process id -> buffer

bool Inside(const Box& box, const std::vector<int64_t>& idx) {
  for (size_t d = 0; d < box.size(); ++d) {
    if (idx[d] < box[d].begin || idx[d] >= box[d].end) return false;
  }
  return true;
}

bool BoxInside(const Box& inner, const Box& outer) {
  if (Volume(inner) == 0) return true;
  for (size_t d = 0; d < inner.size(); ++d) {
    if (inner[d].begin < outer[d].begin || inner[d].end > outer[d].end) return false;
  }
  return true;
}

// Calls fn(global index) for every element of `box`, row-major.
void ForEach(const Box& box, const std::function<void(const std::vector<int64_t>&)>& fn) {
  if (Volume(box) == 0) return;
  std::vector<int64_t> idx(box.size());
  for (size_t d = 0; d < box.size(); ++d) idx[d] = box[d].begin;
  while (true) {
    fn(idx);
    size_t d = box.size();
    while (d > 0) {
      if (++idx[d - 1] < box[d - 1].end) break;
      idx[d - 1] = box[d - 1].begin;
      --d;
    }
    if (d == 0) return;
  }
}

int64_t Offset(const Box& box, const std::vector<int64_t>& idx) {
  int64_t off = 0;
  for (size_t d = 0; d < box.size(); ++d) off = off * box[d].size() + (idx[d] - box[d].begin);
  return off;
}

double& At(Local& local, const std::vector<int64_t>& idx) {
  return local.data[Offset(local.box, idx)];
}
double At(const Local& local, const std::vector<int64_t>& idx) {
  return local.data[Offset(local.box, idx)];
}

Box BoxOf(const std::vector<int64_t>& shape, const DistAttr& attr, const Mesh& mesh,
          const std::vector<int64_t>& coord) {
  Box box;
  for (size_t d = 0; d < shape.size(); ++d)
    box.push_back(DimRangeAt(shape[d], attr.dims[d], mesh, coord));
  return box;
}

Box Whole(const std::vector<int64_t>& shape) {
  Box box;
  for (int64_t s : shape) box.push_back(Range{0, s});
  return box;
}

std::vector<std::vector<int64_t>> Coords(const Mesh& mesh) {
  std::vector<std::vector<int64_t>> coords;
  for (int64_t id : mesh.process_ids()) coords.push_back(*mesh.CoordinateOf(id));
  return coords;
}

// The members of the group of `coord` over `axes`, in group-position order.
std::vector<std::vector<int64_t>> GroupCoords(const Mesh& mesh, const std::vector<int64_t>& coord,
                                              const AxisList& axes) {
  std::vector<std::vector<int64_t>> out;
  std::vector<int64_t> c = coord;
  for (int a : axes) c[a] = 0;
  while (true) {
    out.push_back(c);
    size_t k = axes.size();
    while (k > 0) {
      if (++c[axes[k - 1]] < mesh.axis_size(axes[k - 1])) break;
      c[axes[k - 1]] = 0;
      --k;
    }
    if (k == 0) return out;
  }
}

double Reduce(ReduceOp op, const std::vector<double>& v) {
  double acc = v[0];
  for (size_t i = 1; i < v.size(); ++i) {
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        acc += v[i];
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v[i]);
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, v[i]);
        break;
      case ReduceOp::kProd:
        acc *= v[i];
        break;
      case ReduceOp::kAny:
        acc = (acc != 0 || v[i] != 0) ? 1 : 0;
        break;
      case ReduceOp::kAll:
        acc = (acc != 0 && v[i] != 0) ? 1 : 0;
        break;
    }
  }
  return op == ReduceOp::kAvg ? acc / static_cast<double>(v.size()) : acc;
}

// Applies one step to every rank's buffer, following the contract in reshard.h literally;
// counts each rank's bytes as the step moves them. Returns "" or what went wrong.
std::string SimulateStep(const ReshardStep& step, const std::vector<int64_t>& shape, int64_t s,
                         World& world, std::map<int64_t, RankBytes>& bytes) {
  const Mesh& mesh = step.mesh;
  World next;
  std::ostringstream err;
  auto pid_of = [&](const std::vector<int64_t>& c) { return mesh.ProcessIdAt(c); };
  if (step.kind() == StepKind::kSendRecv) {
    const std::vector<Transfer> transfers = SendRecvTransfers(step, shape);
    for (const std::vector<int64_t>& c : Coords(step.to_mesh)) {
      const int64_t pid = step.to_mesh.ProcessIdAt(c);
      Local out{BoxOf(shape, step.after, step.to_mesh, c), {}};
      out.data.assign(Volume(out.box), std::nan(""));
      std::vector<int> filled(out.data.size(), 0);
      if (world.count(pid) && mesh.CoordinateOf(pid)) {
        const Local& own = world.at(pid);
        ForEach(out.box, [&](const std::vector<int64_t>& idx) {
          if (Inside(own.box, idx)) {
            At(out, idx) = At(own, idx);
            ++filled[Offset(out.box, idx)];
          }
        });
      }
      next[pid] = std::move(out);
      for (const Transfer& t : transfers) {
        if (t.to_process != pid) continue;
        if (!world.count(t.from_process))
          return "send_recv: source " + std::to_string(t.from_process) + " holds nothing";
        const Local& src = world.at(t.from_process);
        if (!BoxInside(t.box, src.box)) return "send_recv: source does not hold the piece it sends";
        if (!BoxInside(t.box, next[pid].box)) return "send_recv: piece outside the target box";
        ForEach(t.box, [&](const std::vector<int64_t>& idx) {
          At(next[pid], idx) = At(src, idx);
          ++filled[Offset(next[pid].box, idx)];
        });
        bytes[pid].received += Volume(t.box) * s;
        bytes[t.from_process].sent += Volume(t.box) * s;
      }
      for (int f : filled) {
        if (f != 1)
          return "send_recv: an element of rank " + std::to_string(pid) + " filled " +
                 std::to_string(f) + " times";
      }
    }
    world = std::move(next);
    return "";
  }
  const AxisList axes = step.axes();
  const int64_t n = [&] {
    int64_t v = 1;
    for (int a : axes) v *= mesh.axis_size(a);
    return v;
  }();
  for (const std::vector<int64_t>& c : Coords(mesh)) {
    const int64_t pid = pid_of(c);
    const Local& own = world.at(pid);
    Local out{BoxOf(shape, step.after, mesh, c), {}};
    out.data.assign(Volume(out.box), 0.0);
    const std::vector<std::vector<int64_t>> group = GroupCoords(mesh, c, axes);
    switch (step.kind()) {
      case StepKind::kAllGather: {
        // Concatenation in group order: the members' ranges tile the new range.
        const int dim = std::get<AllGather>(step.action).dim;
        int64_t at = out.box[dim].begin;
        for (const auto& m : group) {
          const Local& src = world.at(pid_of(m));
          for (size_t d = 0; d < shape.size(); ++d) {
            if (static_cast<int>(d) != dim && !(src.box[d] == out.box[d]))
              return "all_gather: members differ off the gathered dim";
          }
          if (src.box[dim].begin != at && src.box[dim].size() > 0)
            return "all_gather: chunks not in group order";
          at += src.box[dim].size();
          if (pid_of(m) != pid) bytes[pid].received += static_cast<int64_t>(src.data.size()) * s;
        }
        if (at != out.box[dim].end) return "all_gather: chunks do not cover the new range";
        ForEach(out.box, [&](const std::vector<int64_t>& idx) {
          for (const auto& m : group) {
            const Local& src = world.at(pid_of(m));
            if (Inside(src.box, idx)) At(out, idx) = At(src, idx);
          }
        });
        bytes[pid].sent += (n - 1) * static_cast<int64_t>(own.data.size()) * s;
        break;
      }
      case StepKind::kReduceScatter:
      case StepKind::kAllReduce: {
        const ReduceOp op = step.kind() == StepKind::kAllReduce
                                ? std::get<AllReduce>(step.action).op
                                : std::get<ReduceScatter>(step.action).op;
        for (const auto& m : group) {
          if (!(world.at(pid_of(m)).box == own.box))
            return "reduction: members hold different boxes";
        }
        if (!BoxInside(out.box, own.box))
          return "reduce_scatter: the new box is not inside the old";
        ForEach(out.box, [&](const std::vector<int64_t>& idx) {
          std::vector<double> values;
          for (const auto& m : group) values.push_back(At(world.at(pid_of(m)), idx));
          At(out, idx) = Reduce(op, values);
        });
        if (n == 1) break;
        // Whole elements, as the algorithms move them: a direct reduce-scatter (n - 1
        // addends of the own chunk in, every other member's chunk out); an all-reduce as a
        // reduce-scatter of a balanced split (count / n, one more at the first count % n
        // positions) then an all-gather of it.
        const auto count = static_cast<int64_t>(own.data.size());
        if (step.kind() == StepKind::kReduceScatter) {
          bytes[pid].received += (n - 1) * Volume(out.box) * s;
          bytes[pid].sent += (count - Volume(out.box)) * s;
        } else {
          const auto position = static_cast<int64_t>(
              std::find(group.begin(), group.end(), c) - group.begin());
          const int64_t chunk = count / n + (position < count % n ? 1 : 0);
          bytes[pid].received += (count + (n - 2) * chunk) * s;
          bytes[pid].sent += (count + (n - 2) * chunk) * s;
        }
        break;
      }
      case StepKind::kAllToAll: {
        ForEach(out.box, [&](const std::vector<int64_t>& idx) {
          int holders = 0;
          for (const auto& m : group) {
            const Local& src = world.at(pid_of(m));
            if (!Inside(src.box, idx)) continue;
            ++holders;
            At(out, idx) = At(src, idx);
            if (pid_of(m) != pid) {
              bytes[pid].received += s;
              bytes[pid_of(m)].sent += s;
            }
          }
          if (holders != 1) err << "all_to_all: " << holders << " holders of an element; ";
        });
        break;
      }
      case StepKind::kLocalSlice:
        if (!BoxInside(out.box, own.box)) return "local_slice: the new box is not inside the old";
        ForEach(out.box, [&](const std::vector<int64_t>& idx) { At(out, idx) = At(own, idx); });
        break;
      case StepKind::kLocalPartial: {
        const LocalPartial& lp = std::get<LocalPartial>(step.action);
        const bool keeper = c[lp.axis] == 0;
        const double other = lp.op == ReduceOp::kSum ? 0.0 : 1.0;
        const bool keep_all = lp.op != ReduceOp::kSum && lp.op != ReduceOp::kProd;
        ForEach(out.box, [&](const std::vector<int64_t>& idx) {
          At(out, idx) = keeper || keep_all ? At(own, idx) : other;
        });
        break;
      }
      case StepKind::kShardToPartial:
        if (!BoxInside(own.box, out.box))
          return "shard_to_partial: the old box is not inside the new";
        ForEach(out.box, [&](const std::vector<int64_t>& idx) {
          At(out, idx) = Inside(own.box, idx) ? At(own, idx) : 0.0;
        });
        break;
      case StepKind::kRescale: {
        const Rescale& r = std::get<Rescale>(step.action);
        const double size = static_cast<double>(mesh.axis_size(r.axis));
        const double f = r.to_op == ReduceOp::kAvg ? size : 1.0 / size;
        out.data = own.data;
        for (double& v : out.data) v *= f;
        break;
      }
      case StepKind::kSendRecv:
        break;
    }
    next[pid] = std::move(out);
  }
  if (!err.str().empty()) return err.str();
  world = std::move(next);
  return "";
}

// Gives every rank of `mesh` its shard of `global` under `attr`; partial axes split into
// addends (rules/engine/partial_split.h).
World Distribute(const std::vector<double>& global, const std::vector<int64_t>& shape,
                 const Mesh& mesh, const DistAttr& attr, std::mt19937_64& rng) {
  const std::vector<std::vector<double>> addends = SplitPartial(global, attr.partial, mesh, {}, rng);
  std::map<int64_t, std::vector<double>> full;
  for (const std::vector<int64_t>& c : Coords(mesh)) {
    full[mesh.ProcessIdAt(c)] = addends[PartialSlot(attr.partial, mesh, c)];
  }
  World world;
  const Box whole = Whole(shape);
  for (const std::vector<int64_t>& c : Coords(mesh)) {
    const int64_t pid = mesh.ProcessIdAt(c);
    Local local{BoxOf(shape, attr, mesh, c), {}};
    local.data.resize(Volume(local.box));
    ForEach(local.box, [&](const std::vector<int64_t>& idx) {
      At(local, idx) = full[pid][Offset(whole, idx)];
    });
    world[pid] = std::move(local);
  }
  return world;
}

// Returns "" when every rank holds its shard of `global` under `attr` (reduced over the
// partial axes for a partial attr).
std::string CheckHolds(const World& world, const std::vector<double>& global,
                       const std::vector<int64_t>& shape, const Mesh& mesh, const DistAttr& attr) {
  const Box whole = Whole(shape);
  AxisList partial_axes;
  for (const auto& [axis, op] : attr.partial) partial_axes.push_back(axis);
  for (const std::vector<int64_t>& c : Coords(mesh)) {
    const int64_t pid = mesh.ProcessIdAt(c);
    if (!world.count(pid)) return "rank " + std::to_string(pid) + " holds nothing";
    if (!(world.at(pid).box == BoxOf(shape, attr, mesh, c)))
      return "rank " + std::to_string(pid) + " holds the wrong box";
    if (static_cast<int64_t>(world.at(pid).data.size()) != Volume(world.at(pid).box))
      return "bad buffer size";
  }
  for (const std::vector<int64_t>& c : Coords(mesh)) {
    bool representative = true;
    for (int a : partial_axes) representative = representative && c[a] == 0;
    if (!representative) continue;
    // Reduce axis by axis: values[coord] for the members still to combine.
    std::map<std::vector<int64_t>, std::vector<double>> values;
    for (const auto& m : GroupCoords(mesh, c, partial_axes))
      values[m] = world.at(mesh.ProcessIdAt(m)).data;
    for (int a : partial_axes) {
      std::map<std::vector<int64_t>, std::vector<double>> reduced;
      for (const auto& [m, data] : values) {
        if (m[a] != 0) continue;
        std::vector<double> out(data.size());
        for (size_t e = 0; e < data.size(); ++e) {
          std::vector<double> line;
          for (const auto& k : GroupCoords(mesh, m, {a})) line.push_back(values.at(k)[e]);
          out[e] = Reduce(attr.partial.at(a), line);
        }
        reduced[m] = std::move(out);
      }
      values = std::move(reduced);
    }
    const std::vector<double>& got = values.begin()->second;
    const Box& box = world.at(mesh.ProcessIdAt(c)).box;
    std::string bad;
    ForEach(box, [&](const std::vector<int64_t>& idx) {
      const double want = global[Offset(whole, idx)];
      const double have = got[Offset(box, idx)];
      if (!(std::abs(have - want) <= 1e-9 * std::max(1.0, std::abs(want))) && bad.empty()) {
        bad = "rank " + std::to_string(mesh.ProcessIdAt(c)) + " element off by " +
              std::to_string(have - want);
      }
    });
    if (!bad.empty()) return bad;
  }
  return "";
}

bool CompatibleOps(const PartialMap& partial) {
  std::set<ReduceOp> ops;
  bool linear = true;
  for (const auto& [a, op] : partial) {
    ops.insert(op);
    linear = linear && (op == ReduceOp::kSum || op == ReduceOp::kAvg);
  }
  return ops.size() <= 1 || linear;
}

// Checks the plan's constraints (reshard.h) and runs it on the simulated mesh.
std::string RunPlan(const ReshardPlan& plan, uint64_t seed) {
  std::ostringstream why;
  const int64_t s = BytesPerElement(plan.dtype);
  DistAttr state = plan.from;
  Mesh mesh = plan.from_mesh;
  int64_t total = 0;
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const ReshardStep& step = plan.steps[i];
    if (!(step.before == state) || !(step.mesh.process_ids() == mesh.process_ids())) {
      return "step " + std::to_string(i + 1) + " does not start where the previous ended";
    }
    try {
      if (!(ApplyStep(step) == step.after))
        return "step " + std::to_string(i + 1) + ": after != ApplyStep";
      Validate(step.after, step.to_mesh, static_cast<int>(plan.shape.size()), "after");
    } catch (const SpmdError& e) {
      return "step " + std::to_string(i + 1) + ": " + e.what();
    }
    if (!CompatibleOps(step.after.partial)) return "mixed reduce ops in an intermediate";
    if (step.bytes_per_rank != MaxStepBytes(step, plan.shape, plan.dtype)) {
      return "step " + std::to_string(i + 1) + ": bytes_per_rank " +
             std::to_string(step.bytes_per_rank) + " != MaxStepBytes " +
             std::to_string(MaxStepBytes(step, plan.shape, plan.dtype));
    }
    total += step.bytes_per_rank;
    state = step.after;
    mesh = step.to_mesh;
  }
  if (!(state == plan.to) || !(mesh.process_ids() == plan.to_mesh.process_ids()))
    return "the plan does not end at `to`";
  if (total != plan.bytes_per_rank) return "bytes_per_rank is not the sum of the steps'";

  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-3.0, 3.0);
  std::vector<double> global(Volume(Whole(plan.shape)));
  for (double& v : global) v = u(rng);
  World world = Distribute(global, plan.shape, plan.from_mesh, plan.from, rng);
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const ReshardStep& step = plan.steps[i];
    std::map<int64_t, RankBytes> counted;
    const std::string err = SimulateStep(step, plan.shape, s, world, counted);
    if (!err.empty()) return "step " + std::to_string(i + 1) + " " + step.Describe() + ": " + err;
    std::set<int64_t> ids(step.mesh.process_ids().begin(), step.mesh.process_ids().end());
    ids.insert(step.to_mesh.process_ids().begin(), step.to_mesh.process_ids().end());
    int64_t max_received = 0;
    for (int64_t id : ids) {
      const RankBytes want = counted[id];
      const RankBytes got = StepBytesOf(step, plan.shape, plan.dtype, id);
      if (!(want == got)) {
        return "step " + std::to_string(i + 1) + " " + step.Describe() + ": rank " +
               std::to_string(id) + " moves " + std::to_string(want.sent) + "/" +
               std::to_string(want.received) + " bytes, StepBytesOf says " +
               std::to_string(got.sent) + "/" + std::to_string(got.received);
      }
      max_received = std::max(max_received, want.received);
    }
    if (max_received != step.bytes_per_rank) return "step bytes_per_rank is not the max received";
  }
  return CheckHolds(world, global, plan.shape, plan.to_mesh, plan.to);
}

std::string Show(const ReshardPlan& plan) { return ToString(plan); }

// ---- Generators --------------------------------------------------------------------------


std::vector<int64_t> Iota(int64_t n, int64_t start = 0) {
  std::vector<int64_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = start + i;
  return ids;
}

Mesh GenMesh() {
  const std::vector<int64_t> shape = *rc::gen::container<std::vector<int64_t>>(
      *rc::gen::inRange(1, 4), rc::gen::inRange<int64_t>(1, 5));
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<int64_t> ids = Iota(n);
  if (*rc::gen::arbitrary<bool>()) ids = Shuffled(ids);
  return Mesh(shape, ids);
}

std::vector<int64_t> GenShape() {
  return *rc::gen::container<std::vector<int64_t>>(*rc::gen::inRange(1, 4),
                                                   rc::gen::inRange<int64_t>(0, 10));
}

// Each axis replicated, sharding a random dim (co-shard orders shuffled) or partial; the
// partial ops of one dist attr are all sum, sum and avg, or all max (defined orders).
DistAttr GenDistAttr(int mesh_ndim, int rank) {
  DistAttr attr = DistAttr::Replicated(rank);
  const int family = *rc::gen::inRange(0, 4);  // 0, 1: sum; 2: sum and avg; 3: max
  for (int axis = 0; axis < mesh_ndim; ++axis) {
    const int role = *rc::gen::inRange(0, 3);
    if (role == 1) attr.dims[*rc::gen::inRange(0, rank)].push_back(axis);
    if (role == 2) {
      ReduceOp op = ReduceOp::kSum;
      if (family == 2 && *rc::gen::arbitrary<bool>()) op = ReduceOp::kAvg;
      if (family == 3) op = ReduceOp::kMax;
      attr.partial[axis] = op;
    }
  }
  for (AxisList& axes : attr.dims) axes = Shuffled(axes);
  return attr;
}

// ---- Golden-style expectations ----------------------------------------------------------

constexpr DType kF32 = DType::kFloat32;

DistAttr P(const std::string& text, int rank) { return ParsePlacementString(text, rank, "test"); }

// SEMANTICS.md §8's table and the lower bound are about bytes: the tests of byte-optimal
// plans ask the bytes planner; the time planner's own tests are under "Time" below.
ReshardOptions ForBytes() {
  ReshardOptions options;
  options.objective = ReshardObjective::kBytes;
  return options;
}
// The time planner (opt-in: bytes are the default objective).
ReshardOptions ForTime() {
  ReshardOptions options;
  options.objective = ReshardObjective::kTime;
  return options;
}
ReshardPlan PlanForBytes(const Mesh& mesh, const std::vector<int64_t>& shape, DType dtype,
                         const DistAttr& from, const DistAttr& to) {
  return PlanReshard(mesh, from, mesh, to, shape, dtype, ForBytes());
}
ReshardPlan PlanForBytes(const Mesh& from_mesh, const DistAttr& from, const Mesh& to_mesh,
                         const DistAttr& to, const std::vector<int64_t>& shape, DType dtype) {
  return PlanReshard(from_mesh, from, to_mesh, to, shape, dtype, ForBytes());
}

struct Row {
  const char* from;
  const char* to;
  StepKind kind;
};

// SEMANTICS.md §8, one mesh axis: every transition moves exactly the lower bound, on even
// and uneven shapes, and the even ones match the table's formula. The exception is a
// reduction whose buffer does not split evenly over the group: it moves what the direct
// reduce-scatter (and the all-reduce built on it) moves, in whole elements, which can
// exceed the averaged bound (docs/RESHARD.md "Uneven reductions").
TEST(ReshardTest, OneAxisRowsMeetTheBound) {
  const std::vector<Row> rows = {
      {"[R]", "[S(0)]", StepKind::kLocalSlice},
      {"[R]", "[S(1)]", StepKind::kLocalSlice},
      {"[R]", "[P(sum)]", StepKind::kLocalPartial},
      {"[R]", "[P(max)]", StepKind::kLocalPartial},
      {"[S(0)]", "[R]", StepKind::kAllGather},
      {"[S(1)]", "[R]", StepKind::kAllGather},
      {"[P(sum)]", "[R]", StepKind::kAllReduce},
      {"[P(max)]", "[R]", StepKind::kAllReduce},
      {"[P(avg)]", "[R]", StepKind::kAllReduce},
      {"[P(sum)]", "[S(0)]", StepKind::kReduceScatter},
      {"[P(min)]", "[S(1)]", StepKind::kReduceScatter},
      {"[S(0)]", "[S(1)]", StepKind::kAllToAll},
      {"[S(1)]", "[S(0)]", StepKind::kAllToAll},
      {"[S(0)]", "[P(sum)]", StepKind::kShardToPartial},
      {"[P(sum)]", "[P(avg)]", StepKind::kRescale},
  };
  for (int64_t n : {2, 3, 4, 8}) {
    const Mesh mesh({n});
    for (const std::vector<int64_t>& shape :
         {std::vector<int64_t>{8, 8}, {8, 6}, {5, 3}, {10, 7}, {1, 7}, {0, 4}, {3, 0}}) {
      const int64_t t = shape[0] * shape[1] * 4;
      for (const Row& row : rows) {
        const ReshardPlan plan = PlanForBytes(mesh, shape, kF32, P(row.from, 2), P(row.to, 2));
        SCOPED_TRACE(Show(plan));
        EXPECT_EQ(RunPlan(plan, 7), "");
        const int64_t numel = shape[0] * shape[1];
        const bool reduction =
            row.kind == StepKind::kAllReduce || row.kind == StepKind::kReduceScatter;
        const int dim = row.to[3] == '1' ? 1 : 0;  // "[S(d)]"
        const bool even = row.kind == StepKind::kAllReduce       ? numel % n == 0
                          : row.kind == StepKind::kReduceScatter ? shape[dim] % n == 0
                                                                 : true;
        if (reduction && !even) {
          // Chunk 0 is the largest: ceil(size / n) (ceil layout; balanced split).
          const int64_t other = numel == 0 ? 0 : numel / shape[dim];
          const int64_t want =
              row.kind == StepKind::kAllReduce
                  ? (numel + (n - 2) * ((numel + n - 1) / n)) * 4
                  : (n - 1) * ((shape[dim] + n - 1) / n) * other * 4;
          // The planner may find a cheaper route (a reduce-scatter along the evenly
          // splitting dim, then an all-to-all).
          EXPECT_LE(plan.bytes_per_rank, want);
          EXPECT_GE(plan.bytes_per_rank, plan.lower_bound_bytes);
          continue;
        }
        ASSERT_EQ(plan.steps.size(), 1u);
        EXPECT_EQ(plan.steps[0].kind(), row.kind);
        EXPECT_EQ(plan.bytes_per_rank, plan.lower_bound_bytes);
        EXPECT_EQ(plan.Ratio(), 1.0);
        if (shape[0] % n != 0 || shape[1] % n != 0) continue;
        // The table's formulas where sizes divide.
        int64_t want = 0;
        switch (row.kind) {
          case StepKind::kAllGather:
          case StepKind::kReduceScatter:
            want = (n - 1) * t / n;
            break;
          case StepKind::kAllReduce:
            want = 2 * (n - 1) * t / n;
            break;
          case StepKind::kAllToAll:
            want = (n - 1) * t / (n * n);
            break;
          default:
            want = 0;
        }
        EXPECT_EQ(plan.bytes_per_rank, want);
      }
      // Same placements, another set of process ids: send/recv of what a rank lacks.
      const Mesh other({n}, Iota(n, 100));
      const ReshardPlan move =
          PlanForBytes(mesh, P("[S(0)]", 2), other, P("[S(0)]", 2), shape, kF32);
      SCOPED_TRACE(Show(move));
      ASSERT_EQ(move.steps.size(), 1u);
      EXPECT_EQ(move.steps[0].kind(), StepKind::kSendRecv);
      EXPECT_EQ(move.bytes_per_rank, move.lower_bound_bytes);
      EXPECT_EQ(RunPlan(move, 3), "");
    }
  }
}

TEST(ReshardTest, OneAxisGoldenNumbers) {
  const Mesh mesh({4});
  const std::vector<int64_t> shape = {8, 8};  // float32: T = 256 bytes
  auto bytes = [&](const char* from, const char* to) {
    return PlanForBytes(mesh, shape, kF32, P(from, 2), P(to, 2)).bytes_per_rank;
  };
  EXPECT_EQ(bytes("[R]", "[S(0)]"), 0);
  EXPECT_EQ(bytes("[S(0)]", "[R]"), 192);       // 3/4 T
  EXPECT_EQ(bytes("[P(sum)]", "[R]"), 384);     // 2 * 3/4 T
  EXPECT_EQ(bytes("[P(sum)]", "[S(0)]"), 192);  // 3/4 T
  EXPECT_EQ(bytes("[S(0)]", "[S(1)]"), 48);     // 3/16 T
  EXPECT_EQ(bytes("[S(0)]", "[P(sum)]"), 0);
  const ReshardPlan move =
      PlanForBytes(mesh, P("[S(0)]", 2), Mesh({4}, {4, 5, 6, 7}), P("[S(0)]", 2), shape, kF32);
  EXPECT_EQ(move.bytes_per_rank, 64);  // T/4: the whole target shard
}

// Uneven reductions (docs/RESHARD.md): [8, 8] float32 over 3 ranks, chunks of 24, 24 and
// 16 elements. The direct reduce-scatter makes ranks 0 and 1 receive 2 * 24 elements; the
// averaged bound is ceil((1 * 64 + 64) / 3) = 43 elements. The all-reduce's balanced split
// (22, 21, 21) gives 64 + 22 = 86 elements, the bound ceil(2 * 2 * 64 / 3) = 86.
TEST(ReshardTest, UnevenReductionsMoveWholeElements) {
  const Mesh mesh({3});
  const ReshardPlan scatter = PlanForBytes(mesh, {8, 8}, kF32, P("[P(sum)]", 2), P("[S(0)]", 2));
  SCOPED_TRACE(Show(scatter));
  EXPECT_EQ(scatter.bytes_per_rank, 48 * 4);
  EXPECT_EQ(scatter.lower_bound_bytes, 43 * 4);
  const std::vector<RankBytes> want = {{40 * 4, 48 * 4}, {40 * 4, 48 * 4}, {48 * 4, 32 * 4}};
  for (int64_t pid = 0; pid < 3; ++pid) {
    EXPECT_EQ(StepBytesOf(scatter.steps[0], {8, 8}, kF32, pid), want[pid]) << "rank " << pid;
  }
  const ReshardPlan reduce = PlanForBytes(mesh, {8, 8}, kF32, P("[P(sum)]", 2), P("[R]", 2));
  EXPECT_EQ(reduce.bytes_per_rank, 86 * 4);
  EXPECT_EQ(reduce.lower_bound_bytes, 86 * 4);
  EXPECT_EQ(StepBytesOf(reduce.steps[0], {8, 8}, kF32, 2), (RankBytes{85 * 4, 85 * 4}));
  EXPECT_EQ(RunPlan(scatter, 5), "");
  EXPECT_EQ(RunPlan(reduce, 5), "");
}

// (P, P) -> (R, R) reaches 2(N-1)/N * T; two plain all-reduces cost 33% (2x2) and 78% (8x8)
// more.
TEST(ReshardTest, TwoAxisAllReduceReachesTheOptimum) {
  const std::vector<int64_t> shape = {1024, 512};
  const int64_t t = 1024 * 512 * 4;
  for (int64_t n : {2, 8}) {
    const Mesh mesh({n, n});
    const int64_t big_n = n * n;
    const ReshardPlan plan =
        PlanForBytes(mesh, shape, kF32, P("[P(sum), P(sum)]", 2), P("[R, R]", 2));
    SCOPED_TRACE(Show(plan));
    EXPECT_EQ(plan.bytes_per_rank, 2 * (big_n - 1) * t / big_n);
    EXPECT_EQ(plan.lower_bound_bytes, plan.bytes_per_rank);
    ASSERT_EQ(plan.steps.size(), 1u);
    EXPECT_EQ(plan.steps[0].action, (StepAction{AllReduce{{0, 1}, ReduceOp::kSum}}));
    const ReshardPlan naive =
        NaiveReshardPlan(mesh, P("[P(sum), P(sum)]", 2), mesh, P("[R, R]", 2), shape, kF32);
    const double more = static_cast<double>(naive.bytes_per_rank) / plan.bytes_per_rank - 1;
    EXPECT_NEAR(more, n == 2 ? 1.0 / 3 : 0.7778, 1e-3);
  }
  // The same optimum on uneven shapes and on the per-axis route's small sizes.
  const ReshardPlan small =
      PlanForBytes(Mesh({2, 2}), {5, 3}, DType::kFloat64, P("[P(sum), P(sum)]", 2), P("[R, R]", 2));
  EXPECT_EQ(small.bytes_per_rank, small.lower_bound_bytes);
  EXPECT_EQ(RunPlan(small, 11), "");
}

TEST(ReshardTest, ReadmeExampleMeetsTheBound) {
  const ReshardPlan plan =
      PlanForBytes(Mesh({2, 4}), {1024, 512}, kF32, P("[S(0), P(sum)]", 2), P("[R, S(1)]", 2));
  SCOPED_TRACE(Show(plan));
  EXPECT_EQ(plan.bytes_per_rank, 1024 * 512 * 4 / 2);
  EXPECT_EQ(plan.Ratio(), 1.0);
  ASSERT_EQ(plan.steps.size(), 2u);
  EXPECT_EQ(plan.steps[0].kind(), StepKind::kReduceScatter);
  EXPECT_EQ(plan.steps[1].kind(), StepKind::kAllGather);
}

// D6: all-to-all on uneven sizes; every rank's bytes are exact.
TEST(ReshardTest, UnevenAllToAllPerRankBytes) {
  const Mesh mesh({4});
  const std::vector<int64_t> shape = {10, 7};  // rows 3,3,3,1; cols 2,2,2,1
  const ReshardPlan plan = PlanForBytes(mesh, shape, kF32, P("[S(0)]", 2), P("[S(1)]", 2));
  SCOPED_TRACE(Show(plan));
  ASSERT_EQ(plan.steps.size(), 1u);
  const ReshardStep& step = plan.steps[0];
  EXPECT_EQ(step.kind(), StepKind::kAllToAll);
  // received = (10 - own rows) * new cols; sent = own rows * (7 - new cols); 4 bytes each.
  EXPECT_EQ(StepBytesAt(step, shape, kF32, {0}), (RankBytes{60, 56}));
  EXPECT_EQ(StepBytesAt(step, shape, kF32, {1}), (RankBytes{60, 56}));
  EXPECT_EQ(StepBytesAt(step, shape, kF32, {2}), (RankBytes{60, 56}));
  EXPECT_EQ(StepBytesAt(step, shape, kF32, {3}), (RankBytes{24, 36}));
  EXPECT_EQ(plan.bytes_per_rank, 56);
  EXPECT_EQ(plan.lower_bound_bytes, 56);
  EXPECT_EQ(RunPlan(plan, 5), "");
  // Empty shards: 3 rows over 4 ranks (1, 1, 1, 0).
  const ReshardPlan empty = PlanForBytes(mesh, {3, 5}, kF32, P("[S(0)]", 2), P("[S(1)]", 2));
  EXPECT_EQ(empty.bytes_per_rank, empty.lower_bound_bytes);
  EXPECT_EQ(RunPlan(empty, 5), "");
}

TEST(ReshardTest, UnevenAllGatherPerRankBytes) {
  const ReshardPlan plan = PlanForBytes(Mesh({4}), {5, 2}, kF32, P("[S(0)]", 2), P("[R]", 2));
  const ReshardStep& step = plan.steps.at(0);
  // chunks of 5 rows: 2, 2, 1, 0 (2 elements a row, 4 bytes each).
  EXPECT_EQ(StepBytesAt(step, {5, 2}, kF32, {0}), (RankBytes{48, 24}));
  EXPECT_EQ(StepBytesAt(step, {5, 2}, kF32, {2}), (RankBytes{24, 32}));
  EXPECT_EQ(StepBytesAt(step, {5, 2}, kF32, {3}), (RankBytes{0, 40}));
  EXPECT_EQ(plan.bytes_per_rank, 40);
}

// Co-shard orders: a gather removes the minor-most axis first.
TEST(ReshardTest, CoShardOrders) {
  const Mesh mesh({2, 2});
  const std::vector<int64_t> shape = {8, 4};
  // Dropping the minor axis: one gather on it.
  ReshardPlan plan = PlanForBytes(mesh, shape, kF32, P("[S(0)#0, S(0)#1]", 2), P("[S(0), R]", 2));
  ASSERT_EQ(plan.steps.size(), 1u);
  EXPECT_EQ(plan.steps[0].kind(), StepKind::kAllGather);
  EXPECT_EQ(plan.steps[0].axes(), (AxisList{1}));
  EXPECT_EQ(plan.Ratio(), 1.0);
  // Dropping the major axis: never a gather of axis 0 while axis 1 is minor to it.
  for (const char* to : {"[R, S(0)]", "[S(0)#1, S(0)#0]", "[S(1), S(0)]"}) {
    plan = PlanForBytes(mesh, shape, kF32, P("[S(0)#0, S(0)#1]", 2), P(to, 2));
    SCOPED_TRACE(Show(plan));
    EXPECT_EQ(RunPlan(plan, 2), "");
    EXPECT_LE(plan.bytes_per_rank,
              NaiveReshardPlan(mesh, plan.from, mesh, plan.to, shape, kF32).bytes_per_rank);
    EXPECT_EQ(plan.Ratio(), 1.0);  // non-partial to non-partial: the per-rank bound
  }
  const ReshardPlan naive =
      NaiveReshardPlan(mesh, P("[S(0)#0, S(0)#1]", 2), mesh, P("[S(0)#1, S(0)#0]", 2), shape, kF32);
  ASSERT_GE(naive.steps.size(), 2u);
  EXPECT_EQ(naive.steps[0].axes(), (AxisList{1}));
  EXPECT_EQ(naive.steps[1].axes(), (AxisList{0}));
  EXPECT_EQ(RunPlan(naive, 2), "");
  // The contract refuses a gather of the major axis.
  ReshardStep bad = naive.steps[0];
  std::get<AllGather>(bad.action).group = {0};
  bad.after = P("[R, S(0)]", 2);
  EXPECT_THROW(ApplyStep(bad), SpmdError);
}

TEST(ReshardTest, ScalarsAndEmptyTensors) {
  const Mesh mesh({2, 2});
  ReshardPlan plan =
      PlanForBytes(mesh, {}, DType::kFloat64, P("[P(sum), P(sum)]", 0), P("[R, R]", 0));
  // Whole elements: 2 * 3/4 of one element rounds up to 2 (one all-reduce per axis, each
  // receiving one element, meets it).
  EXPECT_EQ(plan.bytes_per_rank, 16);
  EXPECT_EQ(plan.lower_bound_bytes, 16);
  EXPECT_EQ(RunPlan(plan, 1), "");
  plan = PlanForBytes(mesh, {0, 3}, kF32, P("[S(0), P(sum)]", 2), P("[R, S(1)]", 2));
  EXPECT_EQ(plan.bytes_per_rank, 0);
  EXPECT_EQ(RunPlan(plan, 1), "");
  plan = PlanForBytes(mesh, {4, 4}, kF32, P("[S(0), S(1)]", 2), P("[S(0), S(1)]", 2));
  EXPECT_TRUE(plan.steps.empty());
}

TEST(ReshardTest, PartialToPartial) {
  const Mesh mesh({2, 2});
  const std::vector<int64_t> shape = {4, 6};
  // max -> sum needs a reduction; sum -> avg is a local rescale.
  for (const auto& [from, to] :
       std::vector<std::pair<const char*, const char*>>{{"[P(max), R]", "[P(sum), R]"},
                                                        {"[P(sum), P(sum)]", "[P(avg), R]"},
                                                        {"[P(sum), R]", "[R, P(sum)]"},
                                                        {"[P(avg), S(1)]", "[S(0), P(sum)]"},
                                                        {"[P(max), P(max)]", "[S(1), P(max)]"}}) {
    const ReshardPlan plan = PlanForBytes(mesh, shape, DType::kFloat64, P(from, 2), P(to, 2));
    SCOPED_TRACE(Show(plan));
    EXPECT_EQ(RunPlan(plan, 9), "");
    EXPECT_GE(plan.bytes_per_rank, plan.lower_bound_bytes);
  }
  // Rescale needs a floating dtype: int64 goes through a reduction.
  const ReshardPlan ints =
      PlanForBytes(mesh, shape, DType::kInt64, P("[P(sum), R]", 2), P("[P(avg), R]", 2));
  for (const ReshardStep& step : ints.steps) EXPECT_NE(step.kind(), StepKind::kRescale);
}

TEST(ReshardTest, MovesBetweenMeshes) {
  const Mesh mesh({2, 2});
  const std::vector<int64_t> shape = {6, 5};
  struct Move {
    Mesh to_mesh;
    const char* from;
    const char* to;
  };
  const std::vector<Move> moves = {
      {Mesh({2, 2}, {3, 2, 1, 0}), "[S(0), S(1)]", "[S(0), S(1)]"},  // permuted ids
      {Mesh({2}, {0, 1}), "[S(0), R]", "[S(0)]"},                    // a sub-mesh
      {Mesh({4}, {4, 5, 6, 7}), "[S(0), S(1)]", "[S(1)]"},           // a disjoint mesh
      {Mesh({2}, {2, 3}), "[P(sum), S(1)]", "[R]"},                  // partial: reduce first
      {Mesh({3}, {1, 2, 9}), "[R, S(0)]", "[P(sum)]"},               // partial target
  };
  for (const Move& m : moves) {
    const ReshardPlan plan =
        PlanForBytes(mesh, P(m.from, 2), m.to_mesh, P(m.to, 2), shape, DType::kFloat64);
    SCOPED_TRACE(Show(plan));
    EXPECT_EQ(plan.NumSendRecv(), 1);
    EXPECT_EQ(RunPlan(plan, 4), "");
    EXPECT_GE(plan.bytes_per_rank, plan.lower_bound_bytes);
    const ReshardPlan naive =
        NaiveReshardPlan(mesh, P(m.from, 2), m.to_mesh, P(m.to, 2), shape, DType::kFloat64);
    EXPECT_EQ(RunPlan(naive, 4), "");
    EXPECT_LE(plan.bytes_per_rank, naive.bytes_per_rank);
  }
  // Same placements: exactly the bytes of the target shard a rank lacks.
  const ReshardPlan same =
      PlanForBytes(mesh, P("[S(0), S(1)]", 2), moves[0].to_mesh, P("[S(0), S(1)]", 2), shape, kF32);
  EXPECT_EQ(same.Ratio(), 1.0);
  EXPECT_EQ(same.bytes_per_rank, 3 * 3 * 4);  // the largest shard, held by nobody else
}

TEST(ReshardTest, BadInputIsATypedError) {
  const Mesh mesh({2, 2});
  auto expect = [](const std::function<void()>& call, ErrorType type, const std::string& field) {
    try {
      call();
      ADD_FAILURE() << "expected an error on " << field;
    } catch (const SpmdError& e) {
      EXPECT_EQ(e.type(), type) << e.what();
      EXPECT_EQ(e.field().rfind(field, 0), 0u) << e.what();
    }
  };
  expect(
      [&] {
        PlanReshard(mesh, {4, -1}, kF32, P("[R, R]", 2), P("[R, R]", 2));
      },
      ErrorType::kInvalidArgument, "shape[1]");
  expect([&] { PlanReshard(mesh, {4}, kF32, P("[R, R]", 2), P("[R, R]", 2)); },
         ErrorType::kInvalidArgument, "from");
  expect(
      [&] {
        PlanReshard(Mesh({2}), {4, 4}, kF32, P("[R]", 2), P("[R, S(0)]", 2));
      },
      ErrorType::kInvalidArgument, "to");
  expect(
      [&] {
        PlanReshard(mesh, {4, 4}, kF32, P("[P(max), P(sum)]", 2), P("[R, R]", 2));
      },
      ErrorType::kUnsupported, "from.partial");
}

TEST(ReshardTest, PrintedPlan) {
  const ReshardPlan plan =
      PlanReshard(Mesh({2, 2}), {1024, 512}, kF32, P("[P(sum), P(sum)]", 2), P("[R, R]", 2));
  EXPECT_EQ(ToString(plan),
            "reshard [1024, 512] float32 on mesh[2,2] ids=[0,1,2,3]\n"
            "from [P(sum), P(sum)] to [R, R]\n"
            "  #  group  collective       after   bytes/rank  msgs  time/us\n"
            "  1  {0,1}  all_reduce(sum)  [R, R]     3145728     6    950.0\n"
            "total 3145728 bytes per rank; lower bound 3145728 bytes; ratio 1.00\n"
            "modelled time 950.0 us (alpha-beta; planned for least bytes)\n");
}

// Partial sources: an element that no rank both holds (an addend of) and needs takes one
// reception more than the (N_P - 2) E + sum |target| count. On 2x4, [P(sum), S(0)] ->
// [R, S(1)] and [S(0), P(sum)] -> [S(1), R] now meet the bound (they sat 1.38x and 1.08x
// above the old one); [P(sum), S(0)] -> [S(0), S(1)] on 2x2 went from 2x to 1.33x.
// [S(0), P(sum)] -> [R, S(0)] on 2x2 stays 1.5x above: the bound is reached only by
// reducing at a rank that needs the value and forwarding the sum point to point, a step
// the planner does not have (docs/RESHARD.md "Lower bound").
TEST(ReshardTest, PartialSourceBoundCountsElementsNoHolderNeeds) {
  const std::vector<int64_t> shape = {1024, 512};
  struct Case {
    std::vector<int64_t> mesh;
    const char* from;
    const char* to;
    int64_t bytes, bound;
  };
  for (const Case& c : std::vector<Case>{
           {{2, 4}, "[P(sum), S(0)]", "[R, S(1)]", 720896, 720896},
           {{2, 4}, "[S(0), P(sum)]", "[S(1), R]", 1703936, 1703936},
           {{2, 2}, "[P(sum), S(0)]", "[S(0), S(1)]", 1048576, 786432},
           {{2, 2}, "[S(0), P(sum)]", "[R, S(0)]", 1572864, 1048576}}) {
    const ReshardPlan plan = PlanForBytes(Mesh(c.mesh), shape, kF32, P(c.from, 2), P(c.to, 2));
    SCOPED_TRACE(Show(plan));
    EXPECT_EQ(plan.bytes_per_rank, c.bytes);
    EXPECT_EQ(plan.lower_bound_bytes, c.bound);
  }
}

// ---- Time (rules/reshard/reshard_cost.h) --------------------------------------------------------------

CostModel Flat() {
  CostModel m;
  for (const std::string& kind : CostModelKinds()) *CostOf(m, kind) = StepCost{10, 1.0};
  return m;
}

// time = alpha * messages + beta * bytes, in whole microseconds.
TEST(ReshardTimeTest, StepTimeIsAlphaBeta) {
  ReshardOptions options = ForTime();
  options.model = Flat();
  const Mesh mesh({4});
  const ReshardPlan plan =
      PlanReshard(mesh, P("[S(0)]", 2), mesh, P("[R]", 2), {1024, 1024}, kF32, options);
  SCOPED_TRACE(Show(plan));
  ASSERT_EQ(plan.steps.size(), 1u);
  EXPECT_EQ(plan.steps[0].messages, 3);                    // n - 1
  EXPECT_EQ(plan.steps[0].bytes_per_rank, 3 << 20);        // 3/4 of 4 MiB
  EXPECT_EQ(plan.picoseconds, 3176 * int64_t{1000000});    // 3 * 10 us + 3145728 B * 1 ns
  EXPECT_EQ(plan.model, options.model);
  // all_reduce: 2 (n - 1) messages; a local step: 1 message, its largest new shard.
  const ReshardPlan reduce =
      PlanReshard(mesh, P("[P(sum)]", 1), mesh, P("[R]", 1), {8}, kF32, options);
  EXPECT_EQ(reduce.steps.at(0).messages, 6);
  const ReshardPlan slice = PlanReshard(mesh, P("[R]", 1), mesh, P("[S(0)]", 1), {8}, kF32, options);
  ASSERT_EQ(slice.steps.size(), 1u);
  EXPECT_EQ(slice.steps[0].kind(), StepKind::kLocalSlice);
  EXPECT_EQ(slice.picoseconds, 10 * int64_t{1000000});  // 10 us + 8 B * 1 ns, rounded
}

// The model decides between a SendRecv exchange and its collective alternatives.
TEST(ReshardTimeTest, TheModelPicksBetweenSendRecvAndCollectives) {
  const Mesh mesh({4});
  const std::vector<int64_t> shape = {64, 64};
  ReshardOptions options = ForTime();
  options.model = Flat();
  options.model.send_recv.alpha_us = 1000;
  ReshardPlan plan = PlanReshard(mesh, P("[S(0)]", 2), mesh, P("[S(1)]", 2), shape, kF32, options);
  ASSERT_EQ(plan.steps.size(), 1u);
  EXPECT_EQ(plan.steps[0].kind(), StepKind::kAllToAll);
  options.model = Flat();
  options.model.all_to_all.alpha_us = 1000;
  options.model.reduce_scatter.alpha_us = 1000;
  plan = PlanReshard(mesh, P("[S(0)]", 2), mesh, P("[S(1)]", 2), shape, kF32, options);
  ASSERT_EQ(plan.steps.size(), 1u);
  EXPECT_EQ(plan.steps[0].kind(), StepKind::kSendRecv);
  EXPECT_EQ(plan.bytes_per_rank, plan.lower_bound_bytes);
  EXPECT_EQ(RunPlan(plan, 3), "");
}

// Where fewer messages beat fewer bytes: P(sum) -> S(0) of [1, 7] over 3 ranks. The bytes
// planner reduce-scatters onto dim 1 and all-to-alls to dim 0 (40 bytes, two steps); the
// time planner reduce-scatters onto dim 0 directly (56 bytes, one step).
TEST(ReshardTimeTest, FewerStepsCanBeatFewerBytes) {
  const Mesh mesh({3});
  const ReshardPlan bytes = PlanForBytes(mesh, {1, 7}, kF32, P("[P(sum)]", 2), P("[S(0)]", 2));
  const ReshardPlan time =
      PlanReshard(mesh, P("[P(sum)]", 2), mesh, P("[S(0)]", 2), {1, 7}, kF32, ForTime());
  SCOPED_TRACE(Show(bytes) + Show(time));
  EXPECT_EQ(bytes.bytes_per_rank, 40);
  EXPECT_EQ(bytes.steps.size(), 2u);
  EXPECT_EQ(time.bytes_per_rank, 56);
  ASSERT_EQ(time.steps.size(), 1u);
  EXPECT_EQ(time.steps[0].kind(), StepKind::kReduceScatter);
  EXPECT_LT(time.picoseconds, bytes.picoseconds);
  EXPECT_EQ(time.objective, ReshardObjective::kTime);
  EXPECT_EQ(bytes.objective, ReshardObjective::kBytes);
  EXPECT_EQ(RunPlan(time, 4), "");
}

TEST(ReshardTimeTest, ExcludedKindsAreNeverUsed) {
  const Mesh mesh({2, 2});
  const std::vector<int64_t> shape = {8, 6};
  for (StepKind kind : {StepKind::kAllGather, StepKind::kAllToAll, StepKind::kSendRecv}) {
    ReshardOptions options;
    options.excluded = {kind};
    const ReshardPlan plan = PlanReshard(mesh, P("[S(0)#0, S(0)#1]", 2), mesh,
                                         P("[S(0)#1, S(0)#0]", 2), shape, kF32, options);
    SCOPED_TRACE(Show(plan));
    for (const ReshardStep& step : plan.steps) EXPECT_NE(step.kind(), kind);
    EXPECT_EQ(RunPlan(plan, 5), "");
  }
  ReshardOptions none;
  none.excluded = {StepKind::kAllGather, StepKind::kAllToAll, StepKind::kSendRecv,
                   StepKind::kShardToPartial};
  EXPECT_THROW(PlanReshard(mesh, P("[S(0), R]", 2), mesh, P("[R, R]", 2), shape, kF32, none),
               SpmdError);
}

TEST(ReshardTimeTest, ABadModelIsATypedErrorNamingTheField) {
  ReshardOptions options;
  options.model.send_recv.alpha_us = -1;
  try {
    PlanReshard(Mesh({2}), P("[S(0)]", 1), Mesh({2}), P("[R]", 1), {4}, kF32, options);
    ADD_FAILURE() << "a negative alpha was accepted";
  } catch (const SpmdError& e) {
    EXPECT_EQ(e.type(), ErrorType::kInvalidArgument);
    EXPECT_EQ(e.field(), "cost_model.send_recv.alpha_us");
  }
  options.model = CostModel::Default();
  options.model.local.beta_ns_per_byte = std::nan("");
  EXPECT_THROW(PlanReshard(Mesh({2}), P("[R]", 1), Mesh({2}), P("[S(0)]", 1), {4}, kF32, options),
               SpmdError);
}

// ---- Properties ----------------------------------------------------------------------------

RC_GTEST_PROP(ReshardProperty, PlansChainAndSimulateToTheTarget, ()) {
  const Mesh mesh = GenMesh();
  const std::vector<int64_t> shape = GenShape();
  const int rank = static_cast<int>(shape.size());
  const DistAttr from = GenDistAttr(mesh.ndim(), rank);
  const DistAttr to = GenDistAttr(mesh.ndim(), rank);
  const uint64_t seed = *rc::gen::arbitrary<uint64_t>();
  const ReshardPlan plan = PlanForBytes(mesh, shape, DType::kFloat64, from, to);
  RC_LOG() << ToString(plan);
  for (const ReshardStep& step : plan.steps) RC_TAG(std::string(ToString(step.kind())));
  const std::string err = RunPlan(plan, seed);
  RC_ASSERT(err == "");
  const ReshardPlan naive = NaiveReshardPlan(mesh, from, mesh, to, shape, DType::kFloat64);
  RC_LOG() << "naive:\n" << ToString(naive);
  RC_ASSERT(RunPlan(naive, seed) == "");
  RC_ASSERT(plan.bytes_per_rank <= naive.bytes_per_rank);
  RC_ASSERT(plan.bytes_per_rank >= plan.lower_bound_bytes);
  // Non-partial to non-partial always meets the per-rank bound (one send/recv does).
  if (!from.IsPartial() && !to.IsPartial())
    RC_ASSERT(plan.bytes_per_rank == plan.lower_bound_bytes);
  // The time planner: as sound (it chains and simulates to the target, moving what it
  // says), never slower in the model than the bytes planner's or the naive plan, and never
  // fewer bytes than the bound; its time is the sum of its steps' priced by the model.
  const ReshardPlan fast = PlanReshard(mesh, from, mesh, to, shape, DType::kFloat64, ForTime());
  RC_LOG() << "time planner:\n" << ToString(fast);
  RC_ASSERT(RunPlan(fast, seed) == "");
  RC_ASSERT(fast.picoseconds <= plan.picoseconds);
  RC_ASSERT(fast.picoseconds <= naive.picoseconds);
  RC_ASSERT(fast.bytes_per_rank >= fast.lower_bound_bytes);
  RC_ASSERT(fast.lower_bound_bytes == plan.lower_bound_bytes);
  int64_t sum = 0;
  for (const ReshardStep& step : fast.steps) sum += step.picoseconds;
  RC_ASSERT(sum == fast.picoseconds);
}

RC_GTEST_PROP(ReshardProperty, MovesChainAndSimulateToTheTarget, ()) {
  const Mesh mesh = GenMesh();
  const std::vector<int64_t> shape = GenShape();
  const int rank = static_cast<int>(shape.size());
  Mesh to_mesh;
  switch (*rc::gen::inRange(0, 3)) {
    case 0:  // same shape, other ids
      to_mesh = Mesh(mesh.shape(), Shuffled(Iota(mesh.size(), *rc::gen::inRange<int64_t>(0, 3))));
      break;
    case 1: {  // a sub-mesh
      std::vector<int64_t> coord(mesh.ndim());
      for (int a = 0; a < mesh.ndim(); ++a)
        coord[a] = *rc::gen::inRange<int64_t>(0, mesh.axis_size(a));
      std::vector<int> axes;
      for (int a = 0; a < mesh.ndim(); ++a) {
        if (*rc::gen::arbitrary<bool>()) axes.push_back(a);
      }
      if (axes.empty()) axes.push_back(0);
      to_mesh = mesh.SubMesh(coord, axes);
      break;
    }
    default: {  // another shape over overlapping ids
      const Mesh shape_only = GenMesh();
      to_mesh = Mesh(shape_only.shape(),
                     Shuffled(Iota(shape_only.size(), *rc::gen::inRange<int64_t>(0, 4))));
    }
  }
  const DistAttr from = GenDistAttr(mesh.ndim(), rank);
  const DistAttr to = GenDistAttr(to_mesh.ndim(), rank);
  const uint64_t seed = *rc::gen::arbitrary<uint64_t>();
  const ReshardPlan plan = PlanForBytes(mesh, from, to_mesh, to, shape, DType::kFloat64);
  RC_LOG() << ToString(plan);
  RC_ASSERT(RunPlan(plan, seed) == "");
  const ReshardPlan naive = NaiveReshardPlan(mesh, from, to_mesh, to, shape, DType::kFloat64);
  RC_ASSERT(RunPlan(naive, seed) == "");
  RC_ASSERT(plan.bytes_per_rank <= naive.bytes_per_rank);
  RC_ASSERT(plan.bytes_per_rank >= plan.lower_bound_bytes);
  const ReshardPlan fast = PlanReshard(mesh, from, to_mesh, to, shape, DType::kFloat64, ForTime());
  RC_LOG() << "time planner:\n" << ToString(fast);
  RC_ASSERT(RunPlan(fast, seed) == "");
  RC_ASSERT(fast.picoseconds <= plan.picoseconds);
  RC_ASSERT(fast.picoseconds <= naive.picoseconds);
  RC_ASSERT(fast.bytes_per_rank >= fast.lower_bound_bytes);
}

// StepMessages of a SendRecv counts what SendRecvTransfers sends: the most pieces a rank
// receives, or the pieces per source rank when more, at least 1.
RC_GTEST_PROP(ReshardProperty, SendRecvMessagesCountTheTransfers, ()) {
  const Mesh mesh = GenMesh();
  const std::vector<int64_t> shape = GenShape();
  const int rank = static_cast<int>(shape.size());
  const bool move = *rc::gen::arbitrary<bool>();
  const Mesh to_mesh = move ? Mesh(GenMesh().shape()) : mesh;
  ReshardStep step;
  step.action = SendRecv{};
  step.mesh = mesh;
  step.to_mesh = Mesh(to_mesh.shape(), Shuffled(to_mesh.process_ids()));
  step.before = GenDistAttr(mesh.ndim(), rank);
  step.before.partial.clear();
  step.after = GenDistAttr(step.to_mesh.ndim(), rank);
  step.after.partial.clear();
  std::map<int64_t, int64_t> received;
  const std::vector<Transfer> transfers = SendRecvTransfers(step, shape);
  int64_t most = 0;
  for (const Transfer& t : transfers) most = std::max(most, ++received[t.to_process]);
  const int64_t sources = mesh.size();
  const int64_t per_source = (static_cast<int64_t>(transfers.size()) + sources - 1) / sources;
  const StepView view{step.action, step.mesh, step.to_mesh, step.before, step.after};
  RC_ASSERT(StepMessages(view, shape) == std::max<int64_t>({1, most, per_source}));
}

}  // namespace
}  // namespace spmd
