#include "train/join.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/backend.h"
#include "rules/model/error.h"
#include "rules/engine/notation.h"
#include "rules/engine/registry.h"
#include "runtime/exec/dispatch.h"
#include "train/device.h"

namespace spmd::train {

using runtime::DistTensor;

Join::Join(runtime::Communicator& comm, runtime::Group group)
    : comm_(comm), group_(std::move(group)) {
  if (std::find(group_.begin(), group_.end(), comm.rank()) == group_.end()) {
    ThrowInvalid("group",
                 "rank " + std::to_string(comm.rank()) + " is not in " + runtime::ToString(group_));
  }
}

Join::Round Join::Next(bool has_batch, double weight) {
  if (has_batch && joined_) {
    ThrowInvalid("has_batch", "rank " + std::to_string(comm_.rank()) +
                                  " has a batch after it joined (round " +
                                  std::to_string(rounds_ + 1) + ")");
  }
  if (has_batch && !(weight > 0 && std::isfinite(weight))) {
    ThrowInvalid("weight", "expected a positive finite weight, got " + std::to_string(weight));
  }
  joined_ = !has_batch;
  Round round;
  round.index = ++rounds_;
  round.mine = has_batch;
  round.my_weight = has_batch ? weight : 0;
  comm_.SetPhase("join round " + std::to_string(round.index) + (has_batch ? "" : " (joined)"));
  // The two flags travel in a buffer of the communicator's device (train/device.h's door).
  double flags[2] = {has_batch ? 1.0 : 0.0, round.my_weight};
  HostAllReduce(flags, 2, ReduceOp::kSum, group_, comm_);
  comm_.Synchronize();
  round.active = static_cast<int64_t>(std::llround(flags[0]));
  round.weight = flags[1];
  return round;
}

namespace {

DistTensor Run(const char* op, const Attrs& attrs, const DistTensor& x, runtime::Communicator& comm) {
  return std::move(runtime::Dispatch(*FindOp(op), std::vector<const DistTensor*>{&x}, attrs, comm)[0]);
}

DistTensor Cast(const DistTensor& x, DType dtype, runtime::Communicator& comm) {
  if (x.dtype() == dtype) return x;
  return Run("cast", notation::MakeAttrs({{"dtype", std::string(ToString(dtype))}}), x, comm);
}

DistTensor Scale(const DistTensor& x, double scale, runtime::Communicator& comm) {
  return Run("scale", notation::MakeAttrs({{"scale", scale}, {"bias", 0.0}}), x, comm);
}

}  // namespace

void Join::AverageGradients(const std::vector<Variable>& params, const Round& round,
                            runtime::Communicator& local) {
  if (round.active == 0)
    ThrowInvalid("round", "every rank has joined: there is nothing to average");
  if (local.device() != comm_.device()) {
    ThrowInvalid("local", "the parameters' communicator is on " + kernels::ToString(local.device()) +
                              ", the join's on " + kernels::ToString(comm_.device()));
  }
  // Every step runs where the gradients live: the scaling and the casts through Dispatch on
  // `local` (its stream), the packing and unpacking as Backend copies and fills, the sum as
  // one all-reduce of a float64 buffer on the join's device. Nothing is read on the host.
  const kernels::Device device = comm_.device();
  kernels::Backend& backend = kernels::BackendFor(device);
  const bool other_stream = local.stream() != comm_.stream();
  std::vector<int64_t> sizes;
  int64_t total = 0;
  for (const Variable& p : params) {
    const DistTensor& value = p.value();
    sizes.push_back(value.has_local() ? value.local().numel() : 0);
    total += sizes.back();
  }
  // This rank's gradients in their values' layouts, widened to float64 and scaled by its
  // weight (a joined rank: zeros), packed into one buffer on the join's stream.
  kernels::Tensor flat =
      kernels::Tensor::Uninitialized({total}, DType::kFloat64, backend.AllocatorFor(device), comm_.stream());
  std::vector<DistTensor> scaled;  // alive until the copies out of them have run
  if (round.mine) {
    for (const Variable& p : params) {
      const DistTensor& value = p.value();
      if (!value.has_local() || value.local().numel() == 0) continue;
      scaled.push_back(Scale(Cast(Gradient(p, value.dist_attr(), local), DType::kFloat64, local), round.my_weight,
                             local));
    }
    if (other_stream) backend.Synchronize(local.stream());  // the scaled gradients exist
    int64_t offset = 0;
    size_t next = 0;
    for (int64_t n : sizes) {
      if (n == 0) continue;
      backend.Copy(flat.bytes() + offset * sizeof(double), scaled[next++].local().bytes(),
                   static_cast<size_t>(n) * sizeof(double), comm_.stream());
      offset += n;
    }
  } else {
    backend.Fill(flat.bytes(), total, DType::kFloat64, 0.0, comm_.stream());
  }
  comm_.SetPhase("join round " + std::to_string(round.index) + " gradients");
  comm_.AllReduce(flat.bytes(), flat.bytes(), total, DType::kFloat64, ReduceOp::kSum, group_);
  comm_.Synchronize();
  if (other_stream) backend.Synchronize(comm_.stream());  // the sum has landed; `scaled` may go
  scaled.clear();
  // Unpacked into each parameter's layout on `local`'s stream, divided by the total weight
  // and rounded back to the parameter's dtype.
  int64_t offset = 0;
  for (size_t k = 0; k < params.size(); ++k) {
    const DistTensor& value = params[k].value();
    const int64_t n = sizes[k];
    if (!value.has_local()) continue;
    kernels::Tensor sum =
        kernels::Tensor::Uninitialized(value.local().shape(), DType::kFloat64, backend.AllocatorFor(device),
                                       local.stream());
    if (n > 0) {
      backend.Copy(sum.bytes(), flat.bytes() + offset * sizeof(double), static_cast<size_t>(n) * sizeof(double),
                   local.stream());
    }
    offset += n;
    const DistTensor summed = DistTensor::FromLocal(std::move(sum), value.shape(), DType::kFloat64, value.mesh(),
                                                    value.dist_attr(), value.process_id());
    params[k].SetGrad(Cast(Scale(summed, 1.0 / round.weight, local), value.dtype(), local));
  }
  // `flat` is freed on the join's stream; the copies out of it ran on `local`'s.
  if (other_stream) backend.Synchronize(local.stream());
}

}  // namespace spmd::train
