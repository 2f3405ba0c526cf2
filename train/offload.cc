#include "train/offload.h"

#include <utility>

#include "rules/error.h"
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
  ThrowInvalid(field, "'" + text + "' is not none or optimizer");
}

std::string ToString(OffloadKind kind) { return kind == OffloadKind::kOptimizer ? "optimizer" : "none"; }

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
