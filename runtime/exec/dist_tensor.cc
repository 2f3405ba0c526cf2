#include "runtime/exec/dist_tensor.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <utility>

#include "kernels/backend.h"
#include "rules/model/error.h"
#include "rules/model/layout.h"
#include "runtime/comm/host_values.h"

namespace spmd::runtime {
namespace {

using kernels::Tensor;

constexpr int64_t kMaxHeaderRank = 16;

void CheckAttr(const Shape& shape, const Mesh& mesh, const DistAttr& attr) {
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0) ThrowInvalid("shape", "dim " + std::to_string(d) + " is negative");
  }
  Validate(attr, mesh, static_cast<int>(shape.size()), "attr");
}

// Applies LocalPartial's contract for every partial axis to this rank's shard.
void ApplyLocalPartial(Tensor& local, const DistAttr& attr, const std::vector<int64_t>& coord) {
  for (const auto& [axis, op] : attr.partial) {
    if (coord[axis] == 0) continue;
    if (op == ReduceOp::kSum || op == ReduceOp::kProd) {  // the identity of the reduction
      kernels::BackendFor(local.device())
          .Fill(local.bytes(), local.numel(), local.dtype(), op == ReduceOp::kSum ? 0.0 : 1.0,
                local.stream());
    }
  }
}

}  // namespace

DistTensor::DistTensor(Shape shape, DType dtype, Mesh mesh, DistAttr attr, int64_t process_id,
                       std::optional<Tensor> local)
    : shape_(std::move(shape)),
      dtype_(dtype),
      mesh_(std::move(mesh)),
      attr_(std::move(attr)),
      process_id_(process_id),
      coord_(mesh_.CoordinateOf(process_id)),
      local_(coord_ ? std::move(local) : std::nullopt) {}

DistTensor::DistTensor(Shape shape, Mesh mesh, DistAttr attr, int64_t process_id, std::vector<int64_t> coord,
                       Tensor local)
    : shape_(std::move(shape)),
      dtype_(local.dtype()),
      mesh_(std::move(mesh)),
      attr_(std::move(attr)),
      process_id_(process_id),
      coord_(std::move(coord)),
      local_(std::move(local)) {}

DistTensor DistTensor::ShardTensor(const Tensor& global, const Mesh& mesh, const DistAttr& attr,
                                   int64_t process_id) {
  const std::optional<std::vector<int64_t>> coord = mesh.CoordinateOf(process_id);
  CheckAttr(global.shape(), mesh, attr);
  std::optional<Tensor> local;
  if (coord) {
    local = SliceBox(global, BoxAt(global.shape(), attr, mesh, *coord));
    ApplyLocalPartial(*local, attr, *coord);
  }
  return DistTensor(global.shape(), global.dtype(), mesh, attr, process_id, std::move(local));
}

DistTensor DistTensor::ShardTensorFrom(const Tensor* global, int64_t root, const Mesh& mesh,
                                       const DistAttr& attr, Communicator& comm) {
  const int64_t me = comm.rank();
  const std::optional<std::vector<int64_t>> coord = mesh.CoordinateOf(me);
  if (!coord && me != root) return DistTensor(Shape{}, DType::kFloat32, mesh, attr, me, std::nullopt);
  if (me == root && global == nullptr) ThrowInvalid("global", "the root holds no tensor");
  // Header: dtype, rank, dims.
  Group group(mesh.process_ids().begin(), mesh.process_ids().end());
  if (std::find(group.begin(), group.end(), root) == group.end()) group.push_back(root);
  std::sort(group.begin(), group.end());
  std::vector<int64_t> header(2 + kMaxHeaderRank, 0);
  if (me == root) {
    if (global->rank() > kMaxHeaderRank) ThrowInvalid("global", "rank above 16");
    header[0] = static_cast<int64_t>(global->dtype());
    header[1] = global->rank();
    for (int64_t d = 0; d < global->rank(); ++d) header[2 + d] = global->shape()[d];
  }
  const kernels::Device device = comm.device();
  kernels::Backend& backend = kernels::BackendFor(device);
  if (me == root && global->device() != device) {
    ThrowInvalid("global", "is on " + kernels::ToString(global->device()) + ", the communicator's buffers on " +
                               kernels::ToString(device));
  }
  HostBroadcast(header.data(), static_cast<int64_t>(header.size()), root, group, comm);
  comm.Synchronize();
  const auto dtype = static_cast<DType>(header[0]);
  const Shape shape(header.begin() + 2, header.begin() + 2 + header[1]);
  CheckAttr(shape, mesh, attr);
  std::vector<Tensor> outgoing;
  std::optional<Tensor> local;
  if (me == root) {
    for (int64_t pid : mesh.process_ids()) {
      const std::vector<int64_t> c = *mesh.CoordinateOf(pid);
      Tensor shard = SliceBox(*global, BoxAt(shape, attr, mesh, c));
      ApplyLocalPartial(shard, attr, c);
      if (pid == me) {
        local = std::move(shard);
      } else if (shard.numel() > 0) {
        comm.Send(shard.bytes(), shard.numel(), dtype, pid);
        outgoing.push_back(std::move(shard));
      }
    }
  } else {
    local = Tensor::Uninitialized(LocalShape(shape, attr, mesh, *coord), dtype, backend.AllocatorFor(device),
                                  comm.stream());
    if (local->numel() > 0) comm.Recv(local->bytes(), local->numel(), dtype, root);
  }
  comm.Synchronize();
  return DistTensor(shape, dtype, mesh, attr, me, std::move(local));
}

DistTensor DistTensor::FromLocal(Tensor local, const Shape& global_shape, DType dtype,
                                 const Mesh& mesh, const DistAttr& attr, int64_t process_id) {
  CheckAttr(global_shape, mesh, attr);
  const std::optional<std::vector<int64_t>> coord = mesh.CoordinateOf(process_id);
  if (coord) {
    const Shape want = LocalShape(global_shape, attr, mesh, *coord);
    if (local.shape() != want || local.dtype() != dtype) {
      ThrowInvalid("local", "rank " + std::to_string(process_id) + " holds a " +
                                std::string(ToString(local.dtype())) + " " +
                                kernels::ShapeToString(local.shape()) + " shard; the layout gives " +
                                std::string(ToString(dtype)) + " " + kernels::ShapeToString(want));
    }
    return DistTensor(global_shape, dtype, mesh, attr, process_id, std::move(local));
  }
  return DistTensor(global_shape, dtype, mesh, attr, process_id, std::nullopt);
}

DistTensor DistTensor::FromCheckedLocal(Tensor local, const Shape& global_shape, const Mesh& mesh,
                                        const DistAttr& attr, int64_t process_id,
                                        const std::vector<int64_t>& coord) {
  return DistTensor(global_shape, mesh, attr, process_id, coord, std::move(local));
}

DistTensor DistTensor::Absent(const Shape& global_shape, DType dtype, const Mesh& mesh,
                              const DistAttr& attr, int64_t process_id) {
  if (mesh.CoordinateOf(process_id)) {
    ThrowInvalid("process_id", "rank " + std::to_string(process_id) + " is in " + ToString(mesh));
  }
  return DistTensor(global_shape, dtype, mesh, attr, process_id, std::nullopt);
}

const Tensor& DistTensor::local() const {
  if (!local_) ThrowInvalid("local", "rank " + std::to_string(process_id_) + " is not in " + ToString(mesh_));
  return *local_;
}

Tensor& DistTensor::local() {
  if (!local_) ThrowInvalid("local", "rank " + std::to_string(process_id_) + " is not in " + ToString(mesh_));
  return *local_;
}

Shape DistTensor::local_offset() const {
  if (!coord_) ThrowInvalid("local", "rank " + std::to_string(process_id_) + " is not in " + ToString(mesh_));
  return GlobalOffset(shape_, attr_, mesh_, *coord_);
}

std::optional<Tensor> DistTensor::ToGlobal(Communicator& comm, ReshardReport* report) const {
  if (!coord_) return std::nullopt;
  DistTensor whole = Reshard(DistAttr::Replicated(static_cast<int>(shape_.size())), comm, report);
  return std::move(whole.local_);
}

DistTensor DistTensor::Reshard(const DistAttr& to, Communicator& comm,
                               ReshardReport* report) const& {
  return ReshardBuffer(local_, mesh_, to, comm, report);
}

DistTensor DistTensor::Reshard(const DistAttr& to, Communicator& comm, ReshardReport* report) && {
  return ReshardBuffer(std::move(local_), mesh_, to, comm, report);
}

DistTensor DistTensor::Reshard(const Mesh& to_mesh, const DistAttr& to, Communicator& comm,
                               ReshardReport* report) const& {
  return ReshardBuffer(local_, to_mesh, to, comm, report);
}

DistTensor DistTensor::Reshard(const Mesh& to_mesh, const DistAttr& to, Communicator& comm,
                               ReshardReport* report) && {
  return ReshardBuffer(std::move(local_), to_mesh, to, comm, report);
}

DistTensor DistTensor::ReshardBuffer(std::optional<Tensor> local, const Mesh& to_mesh,
                                     const DistAttr& to, Communicator& comm,
                                     ReshardReport* report) const {
  if (process_id_ != comm.rank()) {
    ThrowInvalid("comm", "the tensor belongs to rank " + std::to_string(process_id_) +
                             ", the communicator to rank " + std::to_string(comm.rank()));
  }
  Validate(to, to_mesh, static_cast<int>(shape_.size()), "to");
  const bool in_to = to_mesh.Contains(process_id_);
  if (report != nullptr) *report = ReshardReport{};
  if (!coord_ && !in_to) return DistTensor(shape_, dtype_, to_mesh, to, process_id_, std::nullopt);
  if (to_mesh == mesh_ && to == attr_) {
    return DistTensor(shape_, dtype_, mesh_, attr_, process_id_, std::move(local));
  }
  const std::shared_ptr<const PreparedPlan> plan =
      CachedPreparedPlan(mesh_, attr_, to_mesh, to, shape_, dtype_);
  std::optional<Tensor> result = ExecutePlan(*plan, std::move(local), comm, report);
  return DistTensor(shape_, dtype_, to_mesh, to, process_id_, std::move(result));
}

}  // namespace spmd::runtime
