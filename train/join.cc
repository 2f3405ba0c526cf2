#include "train/join.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "rules/error.h"

namespace spmd::train {

using runtime::DistTensor;

Join::Join(runtime::Communicator& comm, runtime::Group group)
    : comm_(comm), group_(std::move(group)) {
  if (std::find(group_.begin(), group_.end(), comm.rank()) == group_.end()) {
    ThrowInvalid("group",
                 "rank " + std::to_string(comm.rank()) + " is not in " + runtime::ToString(group_));
  }
  // The rounds flatten gradients into host memory (typed host reads): host only, for now.
  if (!comm.device().is_host()) {
    ThrowUnsupported("comm", "Join runs on host communicators only, not on " + kernels::ToString(comm.device()));
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
  double flags[2] = {has_batch ? 1.0 : 0.0, round.my_weight};
  comm_.AllReduce(flags, flags, 2, DType::kFloat64, ReduceOp::kSum, group_);
  comm_.Synchronize();
  round.active = static_cast<int64_t>(std::llround(flags[0]));
  round.weight = flags[1];
  return round;
}

void Join::AverageGradients(const std::vector<Variable>& params, const Round& round,
                            runtime::Communicator& local) {
  if (round.active == 0)
    ThrowInvalid("round", "every rank has joined: there is nothing to average");
  // This rank's gradients in their values' layouts, flat, scaled by its weight.
  std::vector<double> flat;
  std::vector<int64_t> sizes;
  for (const Variable& p : params) {
    const DistTensor& value = p.value();
    const int64_t n = value.has_local() ? value.local().numel() : 0;
    sizes.push_back(n);
    if (!round.mine || n == 0) {
      flat.insert(flat.end(), n, 0.0);
      continue;
    }
    const DistTensor g = Gradient(p, value.dist_attr(), local);
    const kernels::Tensor& t = g.local();
    for (int64_t i = 0; i < n; ++i) {
      const double x = t.dtype() == DType::kFloat64 ? t.data<double>()[i]
                                                    : static_cast<double>(t.data<float>()[i]);
      flat.push_back(round.my_weight * x);
    }
  }
  comm_.SetPhase("join round " + std::to_string(round.index) + " gradients");
  comm_.AllReduce(flat.data(), flat.data(), static_cast<int64_t>(flat.size()), DType::kFloat64,
                  ReduceOp::kSum, group_);
  comm_.Synchronize();
  int64_t offset = 0;
  for (size_t k = 0; k < params.size(); ++k) {
    const DistTensor& value = params[k].value();
    const int64_t n = sizes[k];
    if (!value.has_local()) continue;
    kernels::Tensor t = kernels::Tensor::Uninitialized(value.local().shape(), value.dtype());
    for (int64_t i = 0; i < n; ++i) {
      const double x = flat[offset + i] / round.weight;
      if (value.dtype() == DType::kFloat64) {
        t.data<double>()[i] = x;
      } else {
        t.data<float>()[i] = static_cast<float>(x);
      }
    }
    offset += n;
    params[k].SetGrad(DistTensor::FromLocal(std::move(t), value.shape(), value.dtype(),
                                            value.mesh(), value.dist_attr(), value.process_id()));
  }
}

}  // namespace spmd::train
