// Optimizer-state offload (TrainOptions::offload, spmd-train --offload optimizer): on a
// device run, AdamW's moments live in host memory between updates. Each parameter's pair
// is streamed to the device just before its update (OnDevice: the backend's host-to-device
// copy) and back right after it (ToHostTensor: its device-to-host copy), so the device
// holds one parameter's moments at a time instead of all of them: the optimizer states
// cost the device the largest parameter's pair, not the model's. Copies keep every bit,
// so training is bitwise what it is without offload.
//
// Counters: the bytes copied each way (this rank's shards) and the bytes the moments take
// on the host between steps (what the device no longer holds). Per step, both directions
// move every moment once: 2 x the state bytes each way (m and v), after the first store.
//
// Parameter offload (--offload params, ZeRO-3 only): the optimizer's states as above, and
// the parameters' own sharded values (each rank's 1/dp shard, the values the optimizer
// updates) live on the host between steps: copied up when a step starts, down after its
// update. It lowers what the device holds between steps, not the peak within one (the
// forward gathers every parameter).
//
// On the host (--device cpu) there is nothing to offload to: Trainer refuses it
// (InvalidArgument "options.offload", docs/DECISIONS.md).
#pragma once

#include <cstdint>
#include <string>

#include "kernels/device.h"
#include "runtime/exec/dist_tensor.h"
#include "train/gpt.h"
#include "train/optimizer.h"

namespace spmd::train {

enum class OffloadKind { kNone, kOptimizer, kParams };  // kParams: the states and the parameters

// "none", "optimizer" or "params"; InvalidArgument naming `field` otherwise.
OffloadKind ParseOffload(const std::string& text, const std::string& field);
std::string ToString(OffloadKind kind);

struct OffloadCounters {
  int64_t host_to_device = 0;  // bytes copied up (Fetch), since construction
  int64_t device_to_host = 0;  // bytes copied down (Store)
  int64_t host_bytes = 0;      // the moments' bytes held on the host now
  int64_t param_host_bytes = 0;  // the parameters' bytes held on the host now (kParams)
};

// AdamW's StateHome keeping the moments on the host: Store copies a device pair down (a
// pair already on the host stays as it is), Fetch copies it up to the device and stream
// it came from.
class HostStateHome final : public StateHome {
 public:
  void Fetch(size_t i, runtime::DistTensor& m, runtime::DistTensor& v) override;
  void Store(size_t i, runtime::DistTensor& m, runtime::DistTensor& v) override;
  const OffloadCounters& counters() const { return counters_; }

  // kParams: every parameter's value to the device it was on (those on the host), or to
  // the host (those on a device), through Variable::SetValue (same layout, same bits).
  void FetchParams(const std::vector<NamedParam>& params);
  void StoreParams(const std::vector<NamedParam>& params);

 private:
  struct Home {
    kernels::Device device;
    kernels::Stream stream;
    int64_t bytes = 0;  // on the host now
  };
  Home& HomeOf(size_t i);
  std::vector<Home> homes_;
  std::vector<Home> param_homes_;
  OffloadCounters counters_;
};

}  // namespace spmd::train
