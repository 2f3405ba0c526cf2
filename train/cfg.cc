#include "train/cfg.h"

#include <utility>

#include "kernels/backend.h"
#include "rules/model/error.h"
#include "rules/model/layout.h"
#include "rules/engine/notation.h"
#include "runtime/exec/dispatch.h"
#include "train/device.h"
#include "train/gpt.h"

namespace spmd::train {

using notation::MakeAttrs;
using runtime::Communicator;
using runtime::DistTensor;

namespace {

DistTensor Parameter(const DenoiserConfig& config, const std::string& name, const Shape& shape,
                     double scale, const Mesh& mesh, int64_t process_id, kernels::Device device,
                     kernels::Stream stream) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<double> values(n);
  for (int64_t i = 0; i < n; ++i) values[i] = scale * InitValue(config.seed, name, i);
  kernels::Tensor global =
      config.dtype == DType::kFloat64
          ? kernels::Tensor::FromVector(shape, values)
          : kernels::Tensor::FromVector(shape, std::vector<float>(values.begin(), values.end()));
  return OnDevice(DistTensor::ShardTensor(global, mesh, DistAttr::Replicated(static_cast<int>(shape.size())),
                                          process_id),
                  device, stream);
}

DistTensor Call(const char* op, const std::vector<DistTensor>& in, Communicator& comm,
                const Attrs& attrs = {}) {
  return std::move(runtime::Dispatch(op, in, attrs, comm)[0]);
}

DistTensor Scaled(const DistTensor& x, double factor, Communicator& comm) {
  return Call("scale", {x}, comm, MakeAttrs({{"scale", factor}}));
}

}  // namespace

Denoiser::Denoiser(const DenoiserConfig& config, const Mesh& mesh, int64_t process_id,
                   kernels::Device device, kernels::Stream stream)
    : config_(config), mesh_(mesh) {
  const std::pair<const char*, int64_t> sizes[] = {{"config.features", config.features},
                                                   {"config.classes", config.classes},
                                                   {"config.embed", config.embed},
                                                   {"config.hidden", config.hidden}};
  for (const auto& [field, value] : sizes) {
    if (value <= 0 || value > (int64_t{1} << 20)) {
      ThrowInvalid(field, std::to_string(value) + " is not in [1, 2^20]");
    }
  }
  if (config.dtype != DType::kFloat64 && config.dtype != DType::kFloat32) {
    ThrowInvalid("config.dtype", "must be float32 or float64");
  }
  const int64_t f = config.features, e = config.embed, h = config.hidden;
  embedding_ = Parameter(config, "embedding", {config.classes + 1, e}, 1.0, mesh, process_id, device, stream);
  w1_ = Parameter(config, "w1", {f + e, h}, 0.5, mesh, process_id, device, stream);
  b1_ = Parameter(config, "b1", {h}, 0.1, mesh, process_id, device, stream);
  wt_ = Parameter(config, "wt", {h}, 1.0, mesh, process_id, device, stream);
  w2_ = Parameter(config, "w2", {h, f}, 0.5, mesh, process_id, device, stream);
  b2_ = Parameter(config, "b2", {f}, 0.1, mesh, process_id, device, stream);
}

DistTensor Denoiser::Eps(const DistTensor& x, double t, const DistTensor& cond,
                         Communicator& comm) const {
  if (x.shape().size() != 2 || x.shape()[1] != config_.features || x.dtype() != config_.dtype ||
      !(x.mesh() == mesh_)) {
    ThrowInvalid("x", "must be [batch, config.features] of config.dtype on the model's mesh");
  }
  if (cond.shape() != Shape{x.shape()[0]} || cond.dtype() != DType::kInt64 ||
      !(cond.mesh() == mesh_)) {
    ThrowInvalid("cond", "must be int64 [batch] on the model's mesh");
  }
  const DistTensor embedded = Call("lookup_table_v2", {cond, embedding_}, comm);  // [B, E]
  const DistTensor in = Call("concat", {x, embedded}, comm, MakeAttrs({{"axis", int64_t{1}}}));
  DistTensor h = Call("add", {Call("matmul", {in, w1_}, comm), b1_}, comm);
  h = Call("gelu", {Call("add", {h, Scaled(wt_, t, comm)}, comm)}, comm);
  return Call("add", {Call("matmul", {h, w2_}, comm), b2_}, comm);
}

DistTensor Guide(const DistTensor& eps_c, const DistTensor& eps_u, double guidance,
                 Communicator& comm) {
  return Call("add", {eps_u, Scaled(Call("subtract", {eps_c, eps_u}, comm), guidance, comm)}, comm);
}

DistTensor Update(const DistTensor& x, const DistTensor& eps, const GuidedStep& step,
                  Communicator& comm) {
  return Call("add", {Scaled(x, step.x_coef, comm), Scaled(eps, step.eps_coef, comm)}, comm);
}

namespace {

// The null condition's ids (all `classes`), laid out as `cond` would be for x's batch.
DistTensor NullIds(const Denoiser& model, const DistTensor& x) {
  const Shape shape{x.shape()[0]};
  DistAttr attr = DistAttr::Replicated(1);
  attr.dims[0] = x.dist_attr().dims[0];
  const Mesh& mesh = x.mesh();
  const std::optional<std::vector<int64_t>> coord = mesh.CoordinateOf(x.process_id());
  if (!coord) return DistTensor::Absent(shape, DType::kInt64, mesh, attr, x.process_id());
  const Shape local = LocalShape(shape, attr, mesh, *coord);
  // Made on the host and put where x's shard lives, ordered on its stream.
  return DistTensor::FromLocal(
      OnDevice(kernels::Tensor::FromVector(local, std::vector<int64_t>(local[0], model.config().classes)),
               x.local().device(), x.local().stream()),
      shape, DType::kInt64, mesh, attr, x.process_id());
}

}  // namespace

DistTensor GuidedStepSequential(const Denoiser& model, const DistTensor& x, const DistTensor& cond,
                                const GuidedStep& step, Communicator& comm) {
  const DistTensor eps_c = model.Eps(x, step.t, cond, comm);
  const DistTensor eps_u = model.Eps(x, step.t, NullIds(model, x), comm);
  return Update(x, Guide(eps_c, eps_u, step.guidance, comm), step, comm);
}

DistTensor GuidedStepCfgParallel(const Denoiser& model, const Mesh& mesh, const DistTensor& x,
                                 const DistTensor& cond, const GuidedStep& step,
                                 Communicator& comm) {
  const std::optional<std::vector<int64_t>> coord = mesh.CoordinateOf(comm.rank());
  if (mesh.ndim() != 2 || mesh.axis_size(0) != 2 || !coord) {
    ThrowInvalid("mesh", ToString(mesh) + " is not a [2, m] mesh containing rank " +
                             std::to_string(comm.rank()));
  }
  if (!(model.mesh() == mesh.SubMesh(*coord, {1}))) {
    ThrowInvalid("model", "must live on this rank's half of the mesh, " +
                              ToString(mesh.SubMesh(*coord, {1})));
  }
  if (!(x.mesh() == model.mesh())) ThrowInvalid("x", "must be on the model's mesh");
  const int64_t branch = (*coord)[0];
  // This half's prediction: the conditional one at branch 0, the unconditional at 1.
  DistTensor mine = model.Eps(x, step.t, branch == 0 ? cond : NullIds(model, x), comm);
  // Laid out as x (the rules may replicate a batch of one row: a broadcastable dim), so
  // that both halves swap the same shards.
  if (!(mine.dist_attr() == x.dist_attr())) mine = std::move(mine).Reshard(x.dist_attr(), comm);
  // Swap with the rank at the same batch coordinate in the other half: both hold shards
  // of the same rows, laid out alike.
  const int64_t peer = mesh.ProcessIdAt({1 - branch, (*coord)[1]});
  // The peer's shard lands in a buffer of this rank's device, ordered on the communicator's
  // stream (the receive writes every element).
  const kernels::Device device = mine.local().device();
  kernels::Tensor theirs = kernels::Tensor::Uninitialized(
      mine.local().shape(), mine.dtype(), kernels::BackendFor(device).AllocatorFor(device), comm.stream());
  comm.Send(mine.local().bytes(), mine.local().numel(), mine.dtype(), peer);
  comm.Recv(theirs.bytes(), theirs.numel(), mine.dtype(), peer);
  comm.Synchronize();
  const DistTensor other = DistTensor::FromLocal(std::move(theirs), mine.shape(), mine.dtype(),
                                                 mine.mesh(), mine.dist_attr(), mine.process_id());
  const DistTensor& eps_c = branch == 0 ? mine : other;
  const DistTensor& eps_u = branch == 0 ? other : mine;
  return Update(x, Guide(eps_c, eps_u, step.guidance, comm), step, comm);
}

}  // namespace spmd::train
