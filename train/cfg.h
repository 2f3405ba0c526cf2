// Classifier-free guidance (CFG) parallelism for a diffusion denoiser step
// (docs/LONG_SEQUENCE.md, "CFG parallelism").
//
// A guided step evaluates the denoiser twice on the same noisy x, once with the condition
// and once with the null condition, and mixes the two predictions:
//   eps   = eps_u + g * (eps_c - eps_u)          eps_c = eps(x, t, cond), eps_u = eps(x, t, null)
//   x'    = x_coef * x + eps_coef * eps          (one DDIM/DDPM-style update)
// The two evaluations are independent, so CFG parallelism runs them at the same time on
// two halves of the ranks: a mesh [2, m] whose axis 0 is the branch (position 0: the
// conditional branch, 1: the unconditional) and whose axis 1 shards the batch. Each half
// holds the whole model (its own sub-mesh, parameters replicated), evaluates its branch
// on its batch rows, swaps its eps shard with the rank at the same batch coordinate in
// the other half (one send and one receive of B/m rows, point to point), and then both
// halves form the same eps and x' locally, so x stays where it was for the next step.
//
// The denoiser is a small MLP built from Dispatch ops (every op a proven rule):
//   h   = gelu(concat(x, E[cond]) W1 + b1 + t * wt)          x [B, F], cond int64 [B]
//   eps = h W2 + b2                                           [B, F]
// with E [classes + 1, embed]: row `classes` is the learned null condition. Parameters are
// counter-based functions of (seed, name, index) (InitValue, train/gpt.h), the same on
// every mesh.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/device.h"
#include "rules/model/mesh.h"
#include "runtime/comm/communicator.h"
#include "runtime/exec/dist_tensor.h"

namespace spmd::train {

struct DenoiserConfig {
  int64_t features = 8;  // F
  int64_t classes = 4;   // condition ids 0 .. classes-1; `classes` is the null condition
  int64_t embed = 4;     // the condition embedding's width
  int64_t hidden = 16;
  uint64_t seed = 1;
  DType dtype = DType::kFloat64;  // float32 or float64
};

class Denoiser {
 public:
  // The parameters, replicated on `mesh`. InvalidArgument naming the field
  // ("config.features" ...) for a size outside [1, 2^20], ("config.dtype") for a dtype
  // that is not float32/float64. The parameters' shards live on `device` (train/device.h's
  // OnDevice, ordered on `stream`; the host by default), which must be the device of the
  // communicator the steps run on: x and cond with them.
  Denoiser(const DenoiserConfig& config, const Mesh& mesh, int64_t process_id,
           kernels::Device device = {}, kernels::Stream stream = {});

  // eps(x, t, cond) on the model's mesh: x [B, F] (config.dtype) and cond int64 [B] with
  // the batch laid out alike (sharded over an axis or replicated). InvalidArgument ("x",
  // "cond") for other shapes or meshes. Collective over the mesh as Dispatch is.
  runtime::DistTensor Eps(const runtime::DistTensor& x, double t, const runtime::DistTensor& cond,
                          runtime::Communicator& comm) const;

  const DenoiserConfig& config() const { return config_; }
  const Mesh& mesh() const { return mesh_; }

 private:
  DenoiserConfig config_;
  Mesh mesh_;
  runtime::DistTensor embedding_, w1_, b1_, wt_, w2_, b2_;
};

struct GuidedStep {
  double guidance = 4.0;  // g; 1: the conditional prediction alone
  double t = 0.5;         // the time fed to the denoiser
  double x_coef = 1.0;    // x' = x_coef * x + eps_coef * eps
  double eps_coef = -0.1;
};

// eps_u + g (eps_c - eps_u) from the two predictions (same layout), and the update of x.
runtime::DistTensor Guide(const runtime::DistTensor& eps_c, const runtime::DistTensor& eps_u,
                          double guidance, runtime::Communicator& comm);
runtime::DistTensor Update(const runtime::DistTensor& x, const runtime::DistTensor& eps,
                           const GuidedStep& step, runtime::Communicator& comm);

// The guided step computed sequentially on the denoiser's mesh: both branches one after
// the other. x [B, F], cond int64 [B], laid out alike; returns x'.
runtime::DistTensor GuidedStepSequential(const Denoiser& model, const runtime::DistTensor& x,
                                         const runtime::DistTensor& cond, const GuidedStep& step,
                                         runtime::Communicator& comm);

// The guided step CFG-parallel on a mesh [2, m] (axis 0 the branch, axis 1 the batch):
// `model` lives on this rank's half, model.mesh() == mesh.SubMesh(coord, {1}); x and cond
// are [B, F] and int64 [B] on that half with the batch sharded over its one axis ([S(0)]).
// The branch at coordinate 0 evaluates eps_c with `cond`, the one at 1 eps_u with the
// null condition (cond is ignored there); the halves swap their predictions and return
// the same x' (laid out as x). Collective over the whole mesh. InvalidArgument ("mesh")
// when the mesh is not [2, m] containing this rank, ("model") when the model is not on
// this rank's half, ("x") when x is not batch-sharded on it.
runtime::DistTensor GuidedStepCfgParallel(const Denoiser& model, const Mesh& mesh,
                                          const runtime::DistTensor& x,
                                          const runtime::DistTensor& cond, const GuidedStep& step,
                                          runtime::Communicator& comm);

}  // namespace spmd::train
