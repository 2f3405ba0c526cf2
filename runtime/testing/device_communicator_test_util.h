// Test support shared by the device communicators' tests (sim_device_communicator_test,
// staged_communicator_test, cuda_staging_test): where a rank's buffers live (the host, its
// sim device or a CUDA device),
// values that differ per rank and element, and every collective run on a rank's buffers with
// the results brought back to the host in call order, so that two communicators can be
// compared byte for byte.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "kernels/sim/sim.h"
#include "rules/engine/registry.h"
#include "runtime/comm/communicator.h"
#include "runtime/exec/dispatch.h"
#include "runtime/exec/dist_tensor.h"
#include "runtime/testing/runtime_test_util.h"

namespace spmd::runtime::testing {

using kernels::Tensor;

inline bool SameBytes(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         (a.nbytes() == 0 || std::memcmp(a.bytes(), b.bytes(), a.nbytes()) == 0);
}

// Where a rank's buffers live: the host (thread ranks), its communicator's sim device, or
// another device through the given transfers (`up` / `down`: CUDA's ToDevice / ToHost).
struct Place {
  Communicator& comm;
  bool sim = false;
  Tensor (*up)(const Tensor& host, kernels::Device device, kernels::Stream stream) = nullptr;
  Tensor (*down)(const Tensor& t) = nullptr;
  Tensor Put(const Tensor& host) const {
    if (up != nullptr) return up(host, comm.device(), comm.stream());
    return sim ? kernels::sim::ToDevice(host, comm.device(), comm.stream()) : host;
  }
  Tensor Empty(const Shape& shape, DType dtype) const {
    return Tensor::Uninitialized(shape, dtype, kernels::BackendFor(comm.device()).AllocatorFor(comm.device()),
                                 comm.stream());
  }
  Tensor Get(const Tensor& t) const {
    if (down != nullptr) return down(t);
    return sim ? kernels::sim::ToHost(t) : t;
  }
};

// Values that differ per rank and element: (rank + 1) * 10 + i, cast to the dtype (bool:
// odd or not; any / all then see mixed inputs).
inline Tensor Values(int64_t rank, int64_t n, DType dtype) {
  Tensor f = Iota({n}, DType::kFloat64);
  for (int64_t i = 0; i < n; ++i) f.data<double>()[i] = static_cast<double>((rank + 1) * 10 + i) / 4.0;
  if (dtype == DType::kFloat64) return f;
  if (dtype == DType::kBool) {
    Tensor b({n}, DType::kBool);
    for (int64_t i = 0; i < n; ++i) b.data<bool>()[i] = ((rank + i) % 3) != 0;
    return b;
  }
  const Attrs attrs = FindOp("cast")->NormalizeAttrs(Attrs().With("dtype", std::string(ToString(dtype))));
  return kernels::RunCpuKernel("cast", {f}, attrs)[0];
}

// Every collective on this rank's buffers; the results, on the host, in call order.
inline std::vector<Tensor> Collectives(const Place& at) {
  Communicator& comm = at.comm;
  const int64_t w = comm.world_size(), r = comm.rank();
  Group all(static_cast<size_t>(w));
  for (int64_t q = 0; q < w; ++q) all[static_cast<size_t>(q)] = q;
  std::vector<Tensor> results;
  struct Reduction {
    DType dtype;
    ReduceOp op;
    int64_t count;
  };
  for (const Reduction& c : {Reduction{DType::kFloat32, ReduceOp::kSum, 7}, Reduction{DType::kFloat64, ReduceOp::kAvg, 8},
                             Reduction{DType::kBFloat16, ReduceOp::kMax, 5}, Reduction{DType::kFloat32, ReduceOp::kAny, 6},
                             Reduction{DType::kInt64, ReduceOp::kProd, 4}, Reduction{DType::kBool, ReduceOp::kAll, 9},
                             Reduction{DType::kFloat16, ReduceOp::kMin, 12}}) {
    const Tensor x = at.Put(Values(r, c.count, c.dtype));
    Tensor y = at.Empty({c.count}, c.dtype);
    comm.AllReduce(x.bytes(), y.bytes(), c.count, c.dtype, c.op, all);
    results.push_back(at.Get(y));
  }
  {  // uneven all-gather: rank q gives q + 1 elements
    std::vector<int64_t> counts;
    int64_t total = 0;
    for (int64_t q = 0; q < w; ++q) counts.push_back(q + 1), total += q + 1;
    const Tensor x = at.Put(Values(r, r + 1, DType::kFloat64));
    Tensor y = at.Empty({total}, DType::kFloat64);
    comm.AllGather(x.bytes(), y.bytes(), counts, DType::kFloat64, all);
    results.push_back(at.Get(y));
    Tensor z = at.Empty({r + 1}, DType::kFloat32);
    const Tensor s = at.Put(Values(r, total, DType::kFloat32));
    comm.ReduceScatter(s.bytes(), z.bytes(), counts, DType::kFloat32, ReduceOp::kSum, all);
    results.push_back(at.Get(z));
  }
  {  // equal reduce-scatter
    const std::vector<int64_t> counts(static_cast<size_t>(w), 3);
    const Tensor s = at.Put(Values(r, 3 * w, DType::kFloat64));
    Tensor z = at.Empty({3}, DType::kFloat64);
    comm.ReduceScatter(s.bytes(), z.bytes(), counts, DType::kFloat64, ReduceOp::kMax, all);
    results.push_back(at.Get(z));
  }
  {  // broadcast from the last rank
    Tensor b = at.Put(Values(r, 5, DType::kInt64));
    comm.Broadcast(b.bytes(), 5, DType::kInt64, w - 1, all);
    results.push_back(at.Get(b));
  }
  {  // all-to-all: rank r sends q + r + 1 elements to q
    std::vector<int64_t> send_counts, recv_counts;
    int64_t sends = 0, recvs = 0;
    for (int64_t q = 0; q < w; ++q) {
      send_counts.push_back(q + r + 1), sends += q + r + 1;
      recv_counts.push_back(r + q + 1), recvs += r + q + 1;
    }
    const Tensor s = at.Put(Values(r, sends, DType::kFloat32));
    Tensor z = at.Empty({recvs}, DType::kFloat32);
    comm.AllToAll(s.bytes(), send_counts, z.bytes(), recv_counts, DType::kFloat32, all);
    results.push_back(at.Get(z));
  }
  {  // a ring of point-to-point messages
    const Tensor s = at.Put(Values(r, 6, DType::kFloat64));
    Tensor z = at.Empty({6}, DType::kFloat64);
    comm.Send(s.bytes(), 6, DType::kFloat64, (r + 1) % w);
    comm.Recv(z.bytes(), 6, DType::kFloat64, (r + w - 1) % w);
    comm.Synchronize();
    results.push_back(at.Get(z));
  }
  return results;
}

// Dispatch on a rank's tensors (host or device): softmax along a sharded dim (an all-gather to reshard), matmul
// leaving a partial sum (an all-reduce to gather), each gathered to the whole tensor.
inline std::vector<Tensor> DispatchAndGather(const Place& at) {
  const Mesh mesh({at.comm.world_size()});
  auto shard = [&](const Tensor& global, const std::string& placement) {
    const DistTensor host = DistTensor::ShardTensor(global, mesh, Parse(placement, 2), at.comm.rank());
    return DistTensor::FromLocal(at.Put(host.local()), global.shape(), global.dtype(), mesh, host.dist_attr(),
                                 at.comm.rank());
  };
  const DistTensor x = shard(Iota({4, 6}, DType::kFloat32), "[S(1)]");
  const DistTensor y = shard(Iota({6, 3}, DType::kFloat32), "[S(0)]");
  std::vector<Tensor> out;
  const std::vector<DistTensor> soft = Dispatch("softmax", {x}, Attrs().With("axis", int64_t{1}), at.comm);
  EXPECT_EQ(soft[0].local().device(), at.comm.device());
  out.push_back(at.Get(*soft[0].ToGlobal(at.comm)));
  const std::vector<DistTensor> prod = Dispatch("matmul", {x, y}, Attrs(), at.comm);
  EXPECT_EQ(prod[0].dist_attr(), Parse("[P(sum)]", 2));
  out.push_back(at.Get(*prod[0].ToGlobal(at.comm)));
  return out;
}

}  // namespace spmd::runtime::testing
