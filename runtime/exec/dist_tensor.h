// DistTensor: one tensor laid out over a mesh (SEMANTICS.md §2), as one rank sees it.
//
// A DistTensor knows the global shape, the dtype (float32, float64; int64 for ids; bool),
// the mesh, the dist attr, and, on a rank of the mesh, its local buffer: the shard
// LocalShape(shape, attr, mesh, coord) gives that rank (a kernels::Tensor, contiguous and
// row-major, which the Communicator sends from and receives into). Partial axes hold
// addends: the tensor's value is the reduction over the partial axes (SEMANTICS.md §2.1).
//
// Ranks outside the mesh hold no buffer (has_local() is false) and never take part in
// communication for this tensor: every operation below is a no-op for them, and they may
// call it or not. Every rank of the mesh must call the communicating operations (ToGlobal,
// Reshard, ShardTensorFrom) in the same order with the same arguments, as for any
// collective.
//
// Example (2 ranks, mesh [2]):
//   Mesh mesh({2});
//   DistTensor x = DistTensor::ShardTensor(global, mesh, ParsePlacementString("[S(0)]", 2, "x"),
//                                          comm.rank());
//   DistTensor y = x.Reshard(DistAttr::Replicated(2), comm);  // all_gather along dim 0
//   kernels::Tensor g = *y.ToGlobal(comm);                    // == global
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "kernels/tensor.h"
#include "rules/model/dist_attr.h"
#include "rules/model/mesh.h"
#include "runtime/comm/communicator.h"
#include "runtime/exec/reshard_executor.h"

namespace spmd::runtime {

class DistTensor {
 public:
  // An empty tensor: no mesh, shape [].
  DistTensor() = default;

  // Every rank slices its own shard of `global` (the same tensor on every rank of the
  // mesh; other ranks may pass anything). Partial axes follow LocalPartial's contract: for
  // sum the rank at coordinate 0 of the axis holds the value and the others 0; for prod
  // the others 1; for avg, max, min, any, all every rank holds the value. Throws
  // SpmdError(kInvalidArgument, "attr") when `attr` is not valid for the shape and mesh.
  static DistTensor ShardTensor(const kernels::Tensor& global, const Mesh& mesh,
                                const DistAttr& attr, int64_t process_id);
  // From one rank's tensor: `root` (a world rank, in the mesh or not) holds `global`
  // (others pass nullptr); the shape and dtype are broadcast from it and each rank of the
  // mesh receives only its own shard (point to point). Collective over the mesh and root.
  // The shards are on the communicator's device (comm.device(), on its stream): `global`
  // must be there too (InvalidArgument "global" otherwise), and the header goes through a
  // buffer of that device by the backend's copies, so a sim or CUDA communicator gets only
  // device buffers.
  static DistTensor ShardTensorFrom(const kernels::Tensor* global, int64_t root,
                                    const Mesh& mesh, const DistAttr& attr, Communicator& comm);
  // Wraps this rank's shard. On a rank of the mesh `local` must have the shape the layout
  // gives it and `dtype` (SpmdError(kInvalidArgument, "local") otherwise); elsewhere
  // `local` is ignored.
  static DistTensor FromLocal(kernels::Tensor local, const Shape& global_shape, DType dtype,
                              const Mesh& mesh, const DistAttr& attr, int64_t process_id);
  // FromLocal where the caller has checked it all already: `attr` valid on `mesh` for
  // `global_shape`, `coord` = mesh.CoordinateOf(process_id), and `local` of the shape the
  // layout gives it there (Dispatch: the rule's output layouts and the kernel's shapes,
  // checked against LocalShape). Nothing is validated again (Dispatch's per-call cost).
  static DistTensor FromCheckedLocal(kernels::Tensor local, const Shape& global_shape, const Mesh& mesh,
                                     const DistAttr& attr, int64_t process_id, const std::vector<int64_t>& coord);

  // The view of a rank outside `mesh`: metadata only, no buffer (Dispatch's outputs there;
  // a dim of `global_shape` may be -1 when that rank cannot know it). Throws
  // SpmdError(kInvalidArgument, "process_id") for a rank of the mesh.
  static DistTensor Absent(const Shape& global_shape, DType dtype, const Mesh& mesh,
                           const DistAttr& attr, int64_t process_id);

  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  const Mesh& mesh() const { return mesh_; }
  const DistAttr& dist_attr() const { return attr_; }
  int64_t process_id() const { return process_id_; }
  // This rank's coordinate on the mesh, or nothing outside it.
  const std::optional<std::vector<int64_t>>& coordinate() const { return coord_; }
  bool has_local() const { return local_.has_value(); }
  // This rank's shard; throws SpmdError(kInvalidArgument, "local") outside the mesh.
  const kernels::Tensor& local() const;
  kernels::Tensor& local();
  // The shard's global offset (one entry per dim) on a rank of the mesh.
  Shape local_offset() const;

  // Every rank of the mesh gets the global tensor (partial axes reduced, shards gathered:
  // a reshard to replicated planned by PlanReshard); ranks outside the mesh get nothing.
  std::optional<kernels::Tensor> ToGlobal(Communicator& comm, ReshardReport* report = nullptr) const;

  // The same tensor under `to` on the same mesh: runs PlanReshard's plan with the
  // executor. Returns a copy of this tensor when `to` equals the current dist attr.
  DistTensor Reshard(const DistAttr& to, Communicator& comm,
                     ReshardReport* report = nullptr) const&;
  // The same, reusing this tensor's buffer (no copy of the local shard first).
  DistTensor Reshard(const DistAttr& to, Communicator& comm, ReshardReport* report = nullptr) &&;
  // The same tensor moved to `to_mesh` under `to` (a sub-mesh, other process ids, another
  // shape; partial values are reduced on this mesh first). Ranks of this mesh and of
  // to_mesh take part; the result holds a buffer on the ranks of to_mesh only.
  DistTensor Reshard(const Mesh& to_mesh, const DistAttr& to, Communicator& comm,
                     ReshardReport* report = nullptr) const&;
  DistTensor Reshard(const Mesh& to_mesh, const DistAttr& to, Communicator& comm,
                     ReshardReport* report = nullptr) &&;

 private:
  DistTensor(Shape shape, DType dtype, Mesh mesh, DistAttr attr, int64_t process_id,
             std::optional<kernels::Tensor> local);
  DistTensor(Shape shape, Mesh mesh, DistAttr attr, int64_t process_id, std::vector<int64_t> coord,
             kernels::Tensor local);
  DistTensor ReshardBuffer(std::optional<kernels::Tensor> local, const Mesh& to_mesh,
                           const DistAttr& to, Communicator& comm, ReshardReport* report) const;

  Shape shape_;
  DType dtype_ = DType::kFloat32;
  Mesh mesh_;
  DistAttr attr_;
  int64_t process_id_ = -1;
  std::optional<std::vector<int64_t>> coord_;
  std::optional<kernels::Tensor> local_;
};

}  // namespace spmd::runtime
