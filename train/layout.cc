#include "train/layout.h"

#include <cstdint>
#include <sstream>
#include <utility>
#include <vector>

#include "rules/model/error.h"
#include "rules/model/mesh_spec.h"

namespace spmd::train {

Layout::Layout(Mesh mesh, Strategy strategy) : mesh_(std::move(mesh)), strategy_(strategy) {
  const auto& names = mesh_.axis_names();
  for (int axis = 0; axis < mesh_.ndim(); ++axis) {
    const std::string name = axis < static_cast<int>(names.size()) ? names[axis] : "";
    std::optional<int>* slot = name == "dp" ? &dp_ : name == "tp" ? &tp_ : name == "sp" ? &sp_ : nullptr;
    if (slot == nullptr) {
      ThrowInvalid("mesh.axis_names", "axis " + std::to_string(axis) + " is named '" + name +
                                          "'; a training mesh names its axes dp, tp and sp");
    }
    if (slot->has_value()) ThrowInvalid("mesh.axis_names", "'" + name + "' names two axes");
    *slot = axis;
  }
  if (strategy_.zero_stage < 0 || strategy_.zero_stage > 3) {
    ThrowInvalid("strategy.zero_stage", std::to_string(strategy_.zero_stage) + " is not 0, 1, 2 or 3");
  }
  if (strategy_.sequence_parallel && !tp_) {
    ThrowInvalid("strategy.sequence_parallel", "sequence parallelism shards over tp; the mesh has none");
  }
}

DistAttr Layout::Compute(ParamRole role, int rank) const {
  DistAttr attr = DistAttr::Replicated(rank);
  if (!tp_ || rank == 0) return attr;
  auto shard = [&](int dim) {
    if (dim < rank) attr.dims[dim].push_back(*tp_);
  };
  switch (role) {
    case ParamRole::kReplicated: break;
    case ParamRole::kColumn: shard(1); break;
    case ParamRole::kColumnBias: shard(0); break;
    case ParamRole::kRow: shard(0); break;
    case ParamRole::kVocabRows: shard(0); break;
    case ParamRole::kVocabColumns: shard(1); break;
  }
  return attr;
}

DistAttr Layout::WithDp(DistAttr attr) const {
  if (dp_ && attr.rank() > 0) attr.dims[0].push_back(*dp_);
  return attr;
}

DistAttr Layout::Storage(ParamRole role, int rank) const {
  const DistAttr compute = Compute(role, rank);
  return strategy_.zero_stage >= 3 ? WithDp(compute) : compute;
}

DistAttr Layout::State(ParamRole role, int rank) const {
  const DistAttr compute = Compute(role, rank);
  return strategy_.zero_stage >= 1 ? WithDp(compute) : compute;
}

std::optional<DistAttr> Layout::GradLayout(ParamRole role, int rank) const {
  if (strategy_.zero_stage >= 2) return State(role, rank);
  return std::nullopt;
}

DistAttr Layout::Tokens(int rank) const {
  DistAttr attr = DistAttr::Replicated(rank);
  if (dp_ && rank > 0) attr.dims[0].push_back(*dp_);
  if (sp_ && rank > 1) attr.dims[1].push_back(*sp_);
  return attr;
}

DistAttr Layout::Residual() const {
  DistAttr attr = Tokens(3);
  if (strategy_.sequence_parallel) attr.dims[1].push_back(*tp_);  // minor to sp
  return attr;
}

DistAttr Layout::BlockInput() const { return Tokens(3); }

std::string Layout::ToString() const {
  std::ostringstream os;
  for (int axis = 0; axis < mesh_.ndim(); ++axis) {
    os << (axis ? "," : "") << mesh_.axis_names()[axis] << "=" << mesh_.axis_size(axis);
  }
  os << " zero=" << strategy_.zero_stage << " sp=" << (strategy_.sequence_parallel ? 1 : 0);
  return os.str();
}

Mesh ParseNamedMesh(const std::string& text) { return ParseMeshSpec(text); }

}  // namespace spmd::train
