#include "rules/reshard/reshard_step.h"

#include <algorithm>
#include <set>
#include <string>
#include <type_traits>

#include "rules/model/error.h"

namespace spmd {
namespace {

static_assert(std::is_same_v<std::variant_alternative_t<static_cast<size_t>(StepKind::kAllGather),
                                                        StepAction>,
                             AllGather>);
static_assert(std::is_same_v<std::variant_alternative_t<static_cast<size_t>(StepKind::kRescale),
                                                        StepAction>,
                             Rescale>);
static_assert(std::is_same_v<std::variant_alternative_t<static_cast<size_t>(StepKind::kSendRecv),
                                                        StepAction>,
                             SendRecv>);
static_assert(std::variant_size_v<StepAction> == static_cast<size_t>(StepKind::kSendRecv) + 1);

std::string AxesText(const AxisList& axes) {
  std::string out = "{";
  for (size_t i = 0; i < axes.size(); ++i) out += (i > 0 ? "," : "") + std::to_string(axes[i]);
  return out + "}";
}

std::string OpText(ReduceOp op) { return "(" + std::string(ToString(op)) + ")"; }

[[noreturn]] void BadStep(const ReshardStep& step, const std::string& why) {
  ThrowInvalid("step", step.Describe() + " on " + ToString(step.before) + ": " + why);
}

// Checks the preconditions shared by the step kinds and derives `after`.
class Applier {
 public:
  explicit Applier(const ReshardStep& step) : step_(step), b_(step.before), rank_(b_.rank()) {}

  DistAttr operator()(const AllGather& s) const {
    CheckGroup(s.group);
    CheckSuffix(s.group, s.dim);
    DistAttr after = b_;
    after.dims[s.dim].resize(b_.dims[s.dim].size() - s.group.size());
    return after;
  }
  DistAttr operator()(const ReduceScatter& s) const {
    CheckGroup(s.group);
    CheckDim(s.dim);
    CheckPartial(s.group, s.op);
    DistAttr after = b_;
    for (int a : s.group) {
      after.partial.erase(a);
      after.dims[s.dim].push_back(a);
    }
    return after;
  }
  DistAttr operator()(const AllReduce& s) const {
    CheckGroup(s.group);
    CheckPartial(s.group, s.op);
    DistAttr after = b_;
    for (int a : s.group) after.partial.erase(a);
    return after;
  }
  DistAttr operator()(const AllToAll& s) const {
    CheckGroup(s.group);
    CheckSuffix(s.group, s.from_dim);
    CheckDim(s.to_dim);
    if (s.from_dim == s.to_dim) BadStep(step_, "all_to_all needs two different dims");
    DistAttr after = b_;
    after.dims[s.from_dim].resize(b_.dims[s.from_dim].size() - s.group.size());
    after.dims[s.to_dim].insert(after.dims[s.to_dim].end(), s.group.begin(), s.group.end());
    return after;
  }
  DistAttr operator()(const LocalSlice& s) const {
    CheckReplicated(s.axis);
    CheckDim(s.dim);
    DistAttr after = b_;
    after.dims[s.dim].push_back(s.axis);
    return after;
  }
  DistAttr operator()(const LocalPartial& s) const {
    CheckReplicated(s.axis);
    DistAttr after = b_;
    after.partial[s.axis] = s.op;
    return after;
  }
  DistAttr operator()(const ShardToPartial& s) const {
    CheckGroup({s.axis});
    CheckSuffix({s.axis}, s.dim);
    DistAttr after = b_;
    after.dims[s.dim].pop_back();
    after.partial[s.axis] = ReduceOp::kSum;
    return after;
  }
  DistAttr operator()(const Rescale& s) const {
    CheckGroup({s.axis});
    CheckPartial({s.axis}, s.from_op);
    const bool linear_pair = (s.from_op == ReduceOp::kSum && s.to_op == ReduceOp::kAvg) ||
                             (s.from_op == ReduceOp::kAvg && s.to_op == ReduceOp::kSum);
    if (!linear_pair) BadStep(step_, "rescale turns sum into avg or avg into sum");
    DistAttr after = b_;
    after.partial[s.axis] = s.to_op;
    return after;
  }
  DistAttr operator()(const SendRecv&) const {
    Validate(step_.after, step_.to_mesh, rank_, "step.after");
    if (b_.IsPartial() || step_.after.IsPartial()) {
      BadStep(step_, "send_recv moves no partial values");
    }
    return step_.after;
  }

 private:
  void CheckGroup(const AxisList& axes) const {
    if (axes.empty()) BadStep(step_, "the group has no mesh axis");
    std::set<int> seen;
    for (int a : axes) {
      if (a < 0 || a >= step_.mesh.ndim() || !seen.insert(a).second) {
        BadStep(step_, "the group " + AxesText(axes) + " is not a set of mesh axes");
      }
    }
  }
  void CheckDim(int d) const {
    if (d < 0 || d >= rank_) BadStep(step_, "dim " + std::to_string(d) + " is not a dim");
  }
  void CheckSuffix(const AxisList& axes, int d) const {
    CheckDim(d);
    const AxisList& list = b_.dims[d];
    if (list.size() < axes.size() ||
        !std::equal(axes.begin(), axes.end(), list.end() - axes.size())) {
      BadStep(step_, "the group is not the minor-most suffix of dim " + std::to_string(d));
    }
  }
  void CheckPartial(const AxisList& axes, ReduceOp op) const {
    for (int a : axes) {
      const auto it = b_.partial.find(a);
      if (it == b_.partial.end() || it->second != op) {
        BadStep(step_, "mesh axis " + std::to_string(a) + " is not partial" + OpText(op));
      }
    }
  }
  void CheckReplicated(int axis) const {
    CheckGroup({axis});
    if (!IsReplicatedAxis(b_, axis)) BadStep(step_, "the mesh axis is not replicated");
  }

  const ReshardStep& step_;
  const DistAttr& b_;
  int rank_;
};

}  // namespace

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

StepKind KindOf(const StepAction& action) { return static_cast<StepKind>(action.index()); }

AxisList AxesOf(const StepAction& action) {
  return std::visit(
      [](const auto& s) -> AxisList {
        using T = std::decay_t<decltype(s)>;
        if constexpr (std::is_same_v<T, SendRecv>) {
          return {};
        } else if constexpr (requires { s.group; }) {
          return s.group;
        } else {
          return {s.axis};
        }
      },
      action);
}

std::string GroupText(const ReshardStep& step) {
  return step.kind() == StepKind::kSendRecv ? "p2p" : AxesText(step.axes());
}

std::string CollectiveText(const ReshardStep& step) {
  const std::string kind(ToString(step.kind()));
  auto dim = [](int d) { return " dim " + std::to_string(d); };
  return std::visit(
      [&](const auto& s) -> std::string {
        using T = std::decay_t<decltype(s)>;
        if constexpr (std::is_same_v<T, AllGather> || std::is_same_v<T, LocalSlice> ||
                      std::is_same_v<T, ShardToPartial>) {
          return kind + dim(s.dim);
        } else if constexpr (std::is_same_v<T, ReduceScatter>) {
          return kind + OpText(s.op) + " ->" + dim(s.dim);
        } else if constexpr (std::is_same_v<T, AllReduce> || std::is_same_v<T, LocalPartial>) {
          return kind + OpText(s.op);
        } else if constexpr (std::is_same_v<T, AllToAll>) {
          return kind + dim(s.from_dim) + " ->" + dim(s.to_dim);
        } else if constexpr (std::is_same_v<T, Rescale>) {
          return kind + "(" + std::string(ToString(s.from_op)) + " -> " +
                 std::string(ToString(s.to_op)) + ")";
        } else {
          return SameMesh(step.mesh, step.to_mesh) ? kind : kind + " to the target mesh";
        }
      },
      step.action);
}

std::string ReshardStep::Describe() const { return GroupText(*this) + " " + CollectiveText(*this); }

bool SameMesh(const Mesh& a, const Mesh& b) {
  return a.shape() == b.shape() && a.process_ids() == b.process_ids();
}

bool IsReplicatedAxis(const DistAttr& attr, int axis) {
  return attr.DimOfAxis(axis) < 0 && attr.partial.count(axis) == 0;
}

DistAttr ApplyStep(const ReshardStep& step) {
  Validate(step.before, step.mesh, step.before.rank(), "step.before");
  if (step.kind() != StepKind::kSendRecv && !(step.mesh == step.to_mesh)) {
    BadStep(step, "only send_recv changes the mesh");
  }
  return std::visit(Applier(step), step.action);
}

}  // namespace spmd
