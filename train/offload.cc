#include "train/offload.h"

#include <utility>

#include "rules/model/error.h"
#include "train/device.h"

namespace spmd::train {

using runtime::DistTensor;

namespace {

int64_t LocalBytes(const DistTensor& t) { return t.has_local() ? static_cast<int64_t>(t.local().nbytes()) : 0; }

bool OnHost(const DistTensor& t) { return !t.has_local() || t.local().device().is_host(); }

// `t` with its shard copied by the backend (`to_host`: down, else up to device/stream).
DistTensor Moved(const DistTensor& t, bool to_host, kernels::Device device, kernels::Stream stream) {
  if (!t.has_local()) return t;
  kernels::Tensor local = to_host ? ToHostTensor(t.local()) : OnDevice(t.local(), device, stream);
  return DistTensor::FromLocal(std::move(local), t.shape(), t.dtype(), t.mesh(), t.dist_attr(), t.process_id());
}

}  // namespace

OffloadKind ParseOffload(const std::string& text, const std::string& field) {
  if (text == "none") return OffloadKind::kNone;
  if (text == "optimizer") return OffloadKind::kOptimizer;
  if (text == "params") return OffloadKind::kParams;
  ThrowInvalid(field, "'" + text + "' is not none, optimizer or params");
}

std::string ToString(OffloadKind kind) {
  return kind == OffloadKind::kParams ? "params" : kind == OffloadKind::kOptimizer ? "optimizer" : "none";
}

void HostStateHome::StoreParams(const std::vector<NamedParam>& params) {
  if (param_homes_.size() < params.size()) param_homes_.resize(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const DistTensor& value = params[i].value.value();
    if (OnHost(value)) continue;
    Home& home = param_homes_[i];
    home.device = value.local().device();
    home.stream = value.local().stream();
    DistTensor moved = Moved(value, /*to_host=*/true, {}, {});
    home.bytes = LocalBytes(moved);
    counters_.device_to_host += home.bytes;
    counters_.param_host_bytes += home.bytes;
    params[i].value.SetValue(std::move(moved));
  }
}

void HostStateHome::FetchParams(const std::vector<NamedParam>& params) {
  for (size_t i = 0; i < params.size() && i < param_homes_.size(); ++i) {
    const DistTensor& value = params[i].value.value();
    Home& home = param_homes_[i];
    if (!value.has_local() || !OnHost(value) || home.device.is_host()) continue;
    DistTensor moved = Moved(value, /*to_host=*/false, home.device, home.stream);
    counters_.host_to_device += LocalBytes(moved);
    counters_.param_host_bytes -= home.bytes;
    home.bytes = 0;
    params[i].value.SetValue(std::move(moved));
  }
}

HostStateHome::Home& HostStateHome::HomeOf(size_t i) {
  if (i >= homes_.size()) homes_.resize(i + 1);
  return homes_[i];
}

void HostStateHome::Store(size_t i, DistTensor& m, DistTensor& v) {
  Home& home = HomeOf(i);
  for (DistTensor* t : {&m, &v}) {
    if (OnHost(*t)) continue;
    home.device = t->local().device();
    home.stream = t->local().stream();
    *t = Moved(*t, /*to_host=*/true, {}, {});
    counters_.device_to_host += LocalBytes(*t);
  }
  counters_.host_bytes -= home.bytes;
  home.bytes = LocalBytes(m) + LocalBytes(v);
  counters_.host_bytes += home.bytes;
}

void HostStateHome::Fetch(size_t i, DistTensor& m, DistTensor& v) {
  Home& home = HomeOf(i);
  for (DistTensor* t : {&m, &v}) {
    if (!OnHost(*t) || !t->has_local() || home.device.is_host()) continue;
    *t = Moved(*t, /*to_host=*/false, home.device, home.stream);
    counters_.host_to_device += LocalBytes(*t);
  }
  counters_.host_bytes -= home.bytes;
  home.bytes = 0;
}

}  // namespace spmd::train
