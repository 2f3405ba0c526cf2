#include "io/plan_json.h"

#include <limits>
#include <string>
#include <type_traits>
#include <utility>

namespace spmd::io {
namespace {

using nlohmann::json;

json MeshJson(const Mesh& mesh) {
  return json{{"shape", mesh.shape()}, {"process_ids", mesh.process_ids()}};
}

std::string OpName(ReduceOp op) { return std::string(ToString(op)); }

// The fields of one step kind.
void AddActionFields(const ReshardStep& step, json& j) {
  std::visit(
      [&](const auto& s) {
        using T = std::decay_t<decltype(s)>;
        if constexpr (std::is_same_v<T, AllGather> || std::is_same_v<T, LocalSlice> ||
                      std::is_same_v<T, ShardToPartial>) {
          j["dim"] = s.dim;
        } else if constexpr (std::is_same_v<T, ReduceScatter>) {
          j["dim"] = s.dim;
          j["op"] = OpName(s.op);
        } else if constexpr (std::is_same_v<T, AllReduce> || std::is_same_v<T, LocalPartial>) {
          j["op"] = OpName(s.op);
        } else if constexpr (std::is_same_v<T, AllToAll>) {
          j["dim"] = s.from_dim;
          j["to_dim"] = s.to_dim;
        } else if constexpr (std::is_same_v<T, Rescale>) {
          j["op"] = OpName(s.from_op);
          j["to_op"] = OpName(s.to_op);
        } else {
          static_assert(std::is_same_v<T, SendRecv>);
          j["between_meshes"] = !SameMesh(step.mesh, step.to_mesh);
        }
      },
      step.action);
}

}  // namespace

json ToJson(const ReshardPlan& plan) {
  json steps = json::array();
  for (const ReshardStep& step : plan.steps) {
    json j{{"kind", std::string(ToString(step.kind()))}, {"group", step.axes()}};
    AddActionFields(step, j);
    j["before"] = ToPlacementString(step.before, step.mesh.ndim());
    j["after"] = ToPlacementString(step.after, step.to_mesh.ndim());
    j["bytes_per_rank"] = step.bytes_per_rank;
    j["messages"] = step.messages;
    j["seconds"] = static_cast<double>(step.picoseconds) * 1e-12;
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
      {"seconds", plan.Seconds()},
      {"objective", std::string(ToString(plan.objective))},
      {"cost_model_source", plan.model.source},
      {"ratio", ratio == std::numeric_limits<double>::infinity() ? json(nullptr) : json(ratio)}};
}

}  // namespace spmd::io
