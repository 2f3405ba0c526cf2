// NcclCommunicator under mpirun on the GPU (ctest label gpu; np 2 and 4, every rank may use
// GPU 0: the main gives each rank its own NCCL_HOSTID when ranks outnumber devices).
//
// (a) The Communicator contract over real NCCL: the random cases of
//     runtime/testing/communicator_cases.h (every collective, send / recv, random groups and
//     counts, float64 / float32 / int64 / bool, in-place all_reduce), every ordered subset
//     of mesh axes, and the box forms, through a host-staging wrapper (host buffers copied
//     to the device, the NCCL communicator's call, copied back): outputs, counters and the
//     bytes handed to NCCL against the convention; bfloat16 / float16 reductions against
//     exact expectations.
// (b) Reshard round trips on device tensors: a random mesh that fits the world (ids in
//     order or permuted, or a sub-mesh), a random shape (rank 0-3, sizes 0-7) and dtype
//     (all six), random source and target dist attrs (partial sources with sum, avg, max,
//     min, prod), integer values: Reshard then ToGlobal gives the original bit for bit, and
//     every step's counted bytes and the bytes handed to NCCL equal the plan's.
// (c) Every op with a CUDA kernel through Dispatch on device tensors: a random mesh, random
//     input dist attrs (Dispatch reshards), float32 and float64 inputs; every output,
//     gathered, against the same op run unsharded on one GPU (int64 / bool and exact ops
//     equal) and against the float64 reference (float64 within 1e-9 relative, float32 by
//     the op's tolerance class).
//
// Without a GPU on every rank, every test skips on every rank and the program exits 77
// (ctest: SKIP_RETURN_CODE, so the run shows as skipped). One seed for all ranks; verdicts
// combined over the world (FirstError) before any assertion.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <mpi.h>
#include <rapidcheck.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

#include "kernels/cpu/kernels.h"
#include "kernels/cuda/cuda.h"
#include "kernels/cuda/registry.h"
#include "property_tests/generators.h"
#include "property_tests/gpu_test_util.h"
#include "property_tests/tolerance.h"
#include "rules/model/layout.h"
#include "runtime/testing/communicator_cases.h"
#include "runtime/exec/dispatch.h"
#include "runtime/exec/dist_tensor.h"
#include "runtime/testing/mpi_test_main.h"
#include "runtime/comm/nccl_communicator.h"

namespace spmd::runtime {
namespace {

using gpu_test::KTensor;
using gpu_test::KTensors;
namespace ref = reference;

NcclCommunicator* g_nccl = nullptr;
std::string g_no_gpu;  // why the tests skip ("" when they run)

#define SPMD_REQUIRE_NCCL()                            \
  do {                                                 \
    if (g_nccl == nullptr) GTEST_SKIP() << g_no_gpu;   \
  } while (0)

// ---- A host view of the NCCL communicator ---------------------------------------------------

// Host buffers in, host buffers out: each call's buffers are copied to the NCCL
// communicator's device, the call made there, results copied back (collectives at once,
// receives after Synchronize). Counters are this wrapper's (the same convention); the
// transport bytes are the NCCL communicator's.
class Staged final : public Communicator {
 public:
  explicit Staged(NcclCommunicator& inner)
      : Communicator(inner.rank(), inner.world_size(), inner.options()), inner_(inner) {}
  ~Staged() override { Release(); }
  ByteCount transport_bytes() const override { return inner_.transport_bytes(); }

 private:
  struct Copy {
    void* device;
    void* host;
    size_t bytes;
  };

  void* ToDevice(const void* host, size_t bytes) {
    void* d = nullptr;
    cudaMalloc(&d, std::max<size_t>(bytes, 1));
    if (bytes > 0 && host != nullptr) cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice);
    held_.push_back(d);
    return d;
  }
  void Back(void* host, const void* device, size_t bytes) {
    if (bytes > 0) cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost);
  }
  // Frees the buffers held since `from` (a collective's own; pending messages keep theirs
  // until Synchronize).
  void Release(size_t from = 0) {
    for (size_t i = from; i < held_.size(); ++i) cudaFree(held_[i]);
    held_.resize(std::min(from, held_.size()));
  }

  static int64_t ArrayVolume(const BufferBox& box) {
    int64_t v = 1;
    for (int64_t d : box.array) v *= d;
    return v;
  }
  static int64_t Sum(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }

  void Run(const Call& call) override {
    const CollectiveDesc& d = call.desc;
    const auto e = static_cast<size_t>(ElementSize(d.dtype));
    const int64_t p = call.position;
    const size_t mark = held_.size();
    switch (d.kind) {
      case Collective::kAllGather: {
        void* s = ToDevice(call.send, d.counts[p] * e);
        void* r = ToDevice(nullptr, Sum(d.counts) * e);
        inner_.AllGather(s, r, d.counts, d.dtype, d.group);
        Back(call.recv, r, Sum(d.counts) * e);
        break;
      }
      case Collective::kReduceScatter: {
        void* s = ToDevice(call.send, Sum(d.counts) * e);
        void* r = ToDevice(nullptr, d.counts[p] * e);
        inner_.ReduceScatter(s, r, d.counts, d.dtype, d.op, d.group);
        Back(call.recv, r, d.counts[p] * e);
        break;
      }
      case Collective::kAllReduce: {
        void* s = ToDevice(call.send, d.counts[0] * e);
        void* r = call.send == call.recv ? s : ToDevice(nullptr, d.counts[0] * e);
        inner_.AllReduce(s, r, d.counts[0], d.dtype, d.op, d.group);
        Back(call.recv, r, d.counts[0] * e);
        break;
      }
      case Collective::kAllToAll: {
        void* s = ToDevice(call.send, Sum(d.counts) * e);
        void* r = ToDevice(nullptr, Sum(d.recv_counts) * e);
        inner_.AllToAll(s, d.counts, r, d.recv_counts, d.dtype, d.group);
        Back(call.recv, r, Sum(d.recv_counts) * e);
        break;
      }
      case Collective::kBroadcast: {
        void* b = ToDevice(call.recv, d.counts[0] * e);
        inner_.Broadcast(b, d.counts[0], d.dtype, d.root, d.group);
        Back(call.recv, b, d.counts[0] * e);
        break;
      }
      case Collective::kBarrier:
        inner_.Barrier(d.group);
        break;
      case Collective::kSend: {
        const size_t bytes = (call.box ? ArrayVolume(*call.box) : d.counts[0]) * e;
        void* s = ToDevice(call.send, bytes);
        if (call.box) {
          inner_.SendBox(s, *call.box, d.dtype, d.root);
        } else {
          inner_.Send(s, d.counts[0], d.dtype, d.root);
        }
        break;
      }
      case Collective::kRecv: {
        const size_t bytes = (call.box ? ArrayVolume(*call.box) : d.counts[0]) * e;
        void* r = ToDevice(call.recv, bytes);  // a box writes into its array: start from it
        if (call.box) {
          inner_.RecvBox(r, *call.box, d.dtype, d.root);
        } else {
          inner_.Recv(r, d.counts[0], d.dtype, d.root);
        }
        recvs_.push_back({r, call.recv, bytes});
        break;
      }
    }
    if (d.kind != Collective::kSend && d.kind != Collective::kRecv) Release(mark);
  }

  void DoSynchronize() override {
    inner_.Synchronize();
    for (const Copy& c : recvs_) Back(c.host, c.device, c.bytes);
    recvs_.clear();
    Release();
  }

  NcclCommunicator& inner_;
  std::vector<void*> held_;
  std::vector<Copy> recvs_;
};

Staged* g_staged = nullptr;

// ---- (a) The contract ----------------------------------------------------------------------

void CheckKind(Collective kind) {
  SPMD_REQUIRE_NCCL();
  const bool ok = rc::check(std::string("nccl ") + std::string(ToString(kind)), [kind] {
    const testing::CollectiveCase c = *testing::GenCase(WorldSize(), kind);
    const std::string error = FirstError(testing::RunCase(*g_staged, c));
    if (!error.empty()) RC_LOG() << error << "\n";
    RC_ASSERT(error.empty());
  });
  EXPECT_TRUE(ok);
}

TEST(NcclCommunicator, AllGather) { CheckKind(Collective::kAllGather); }
TEST(NcclCommunicator, ReduceScatter) { CheckKind(Collective::kReduceScatter); }
TEST(NcclCommunicator, AllReduce) { CheckKind(Collective::kAllReduce); }
TEST(NcclCommunicator, AllToAll) { CheckKind(Collective::kAllToAll); }
TEST(NcclCommunicator, Broadcast) { CheckKind(Collective::kBroadcast); }
TEST(NcclCommunicator, SendRecv) { CheckKind(Collective::kSend); }
TEST(NcclCommunicator, Barrier) { CheckKind(Collective::kBarrier); }

TEST(NcclCommunicator, MeshAxisGroups) {
  SPMD_REQUIRE_NCCL();
  EXPECT_EQ(FirstError(testing::RunMeshAxes(*g_staged)), "");
}

TEST(NcclCommunicator, BoxSendRecv) {
  SPMD_REQUIRE_NCCL();
  EXPECT_EQ(FirstError(testing::RunBoxSendRecv(*g_staged)), "");
}

// bfloat16 / float16: small integers (exact in both), every reduce op, against the exact
// expectation; the world in reverse order and odd counts (the uneven plans).
TEST(NcclCommunicator, TwoByteFloatReductions) {
  SPMD_REQUIRE_NCCL();
  const int64_t w = WorldSize(), me = WorldRank();
  Group group(w);
  std::iota(group.rbegin(), group.rend(), int64_t{0});
  std::string error;
  for (DType dtype : {DType::kBFloat16, DType::kFloat16}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin,
                        ReduceOp::kProd, ReduceOp::kAny, ReduceOp::kAll}) {
      for (int64_t count : {int64_t{1}, w * 3, w * 3 + 1}) {
        auto value = [&](int64_t rank, int64_t i) -> float {
          if (op == ReduceOp::kProd) return (rank + i) % 3 == 0 ? -1.0f : 2.0f;
          if (op == ReduceOp::kAny || op == ReduceOp::kAll) return (rank + i) % 4 == 0 ? 0.0f : 0.5f;
          return static_cast<float>((rank * 7 + i) % 9) - 4.0f;
        };
        std::vector<uint16_t> x(count), y(count);
        for (int64_t i = 0; i < count; ++i) {
          x[i] = dtype == DType::kBFloat16 ? BFloat16(value(me, i)).bits : Float16(value(me, i)).bits;
        }
        g_staged->AllReduce(x.data(), y.data(), count, dtype, op, group);
        for (int64_t i = 0; i < count && error.empty(); ++i) {
          double want = op == ReduceOp::kProd ? 1 : (op == ReduceOp::kMin || op == ReduceOp::kAll) ? 1e9 : op == ReduceOp::kMax ? -1e9 : 0;
          bool any = false, all = true;
          for (int64_t r = 0; r < w; ++r) {
            const double v = value(r, i);
            if (op == ReduceOp::kSum || op == ReduceOp::kAvg) want += v;
            if (op == ReduceOp::kProd) want *= v;
            if (op == ReduceOp::kMax) want = std::max(want, v);
            if (op == ReduceOp::kMin) want = std::min(want, v);
            any = any || v != 0;
            all = all && v != 0;
          }
          if (op == ReduceOp::kAvg) want /= static_cast<double>(w);
          if (op == ReduceOp::kAny) want = any;
          if (op == ReduceOp::kAll) want = all;
          const double rounded = prop::RoundToDType(want, dtype);
          const double got = dtype == DType::kBFloat16 ? static_cast<float>(BFloat16::FromBits(y[i]))
                                                       : static_cast<float>(Float16::FromBits(y[i]));
          if (got != rounded) {
            error = std::string(ToString(dtype)) + " all_reduce " + std::string(ToString(op)) + " count " +
                    std::to_string(count) + " element " + std::to_string(i) + ": got " +
                    std::to_string(got) + ", want " + std::to_string(rounded);
          }
        }
      }
    }
  }
  EXPECT_EQ(FirstError(error), "");
}

// ---- (b) Reshard round trips on device tensors ----------------------------------------------

Mesh GenMeshFor(int64_t world) {
  static const std::vector<std::vector<int64_t>> kShapes = {{2}, {3}, {4}, {2, 2}};
  std::vector<std::vector<int64_t>> fits;
  for (const auto& s : kShapes) {
    if (std::accumulate(s.begin(), s.end(), int64_t{1}, std::multiplies<>()) <= world) fits.push_back(s);
  }
  const std::vector<int64_t> shape = *rc::gen::elementOf(fits);
  const int64_t n = std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
  std::vector<int64_t> ids(world);
  std::iota(ids.begin(), ids.end(), 0);
  if (*rc::gen::arbitrary<bool>()) std::shuffle(ids.begin(), ids.end(), std::mt19937(*rc::gen::arbitrary<uint32_t>()));
  ids.resize(n);
  return Mesh(shape, ids);
}

// A dist attr whose partial ops keep the value (no any / all: those map it to 1 / 0).
DistAttr GenAttrFor(const Mesh& mesh, int rank, DType dtype) {
  DistAttr attr = *prop::GenDistAttr(mesh, rank, /*allow_partial=*/true);
  for (auto& [axis, op] : attr.partial) {
    if (op == ReduceOp::kAny || op == ReduceOp::kAll) op = ReduceOp::kMax;
    if (dtype == DType::kBool && (op == ReduceOp::kSum || op == ReduceOp::kAvg)) op = ReduceOp::kMin;
  }
  return attr;
}

KTensor Integers(const Shape& shape, DType dtype, uint64_t seed) {
  ref::Tensor t;
  t.shape = shape;
  t.dtype = dtype;
  t.data.resize(static_cast<size_t>(prop::Numel(shape)));
  std::mt19937_64 rng(seed);
  for (double& v : t.data) {
    v = dtype == DType::kBool ? static_cast<double>(rng() % 2) : static_cast<double>(static_cast<int64_t>(rng() % 17) - 8);
  }
  return gpu_test::ToKernel(t, dtype);
}

// This rank's part of `dist` moved to the NCCL communicator's device and stream.
DistTensor OnDevice(const DistTensor& dist, Communicator& comm) {
  if (!dist.has_local()) return dist;
  return DistTensor::FromLocal(kernels::cuda::ToDevice(dist.local(), comm.device(), comm.stream()),
                               dist.shape(), dist.dtype(), dist.mesh(), dist.dist_attr(), dist.process_id());
}

std::string CheckSteps(const ReshardReport& report) {
  for (size_t k = 0; k < report.steps.size(); ++k) {
    const StepRecord& r = report.steps[k];
    if (r.counted != r.planned || r.transport != r.planned) {
      return "step " + std::to_string(k + 1) + ": planned sent " + std::to_string(r.planned.sent) +
             ", counted " + std::to_string(r.counted.sent) + ", handed to NCCL " +
             std::to_string(r.transport.sent);
    }
  }
  return "";
}

TEST(NcclReshard, RoundTripsBitForBitOnDevice) {
  SPMD_REQUIRE_NCCL();
  const bool ok = rc::check("reshard round trip on NCCL", [] {
    const Mesh mesh = GenMeshFor(WorldSize());
    const int rank = *rc::gen::inRange(0, 4);
    const Shape shape = *rc::gen::container<Shape>(rank, rc::gen::inRange<int64_t>(0, 8));
    const DType dtype = *rc::gen::element(DType::kFloat64, DType::kFloat32, DType::kInt64,
                                          DType::kBool, DType::kBFloat16, DType::kFloat16);
    const DistAttr from = GenAttrFor(mesh, rank, dtype);
    const DistAttr to = GenAttrFor(mesh, rank, dtype);
    const uint64_t seed = *rc::gen::arbitrary<uint32_t>();
    std::string error;
    try {
      const KTensor global = Integers(shape, dtype, seed);
      const DistTensor source = OnDevice(DistTensor::ShardTensor(global, mesh, from, WorldRank()), *g_nccl);
      ReshardReport report, back_report;
      const DistTensor moved = source.Reshard(to, *g_nccl, &report);
      error = CheckSteps(report);
      const std::optional<KTensor> back = moved.ToGlobal(*g_nccl, &back_report);
      if (error.empty()) error = CheckSteps(back_report);
      if (error.empty() && back) {
        const KTensor host = kernels::cuda::ToHost(*back);
        if (!(host == global)) error = "ToGlobal after the reshard differs from the original";
      }
      if (error.empty() && mesh.CoordinateOf(WorldRank()) && !back) error = "no global tensor on a rank of the mesh";
    } catch (const std::exception& e) {
      error = std::string("threw: ") + e.what();
    }
    error = FirstError(error);
    if (!error.empty()) {
      RC_LOG() << ToString(mesh) << " shape " << kernels::ShapeToString(shape) << " " << ToString(dtype)
               << " " << ToPlacementString(from, mesh.ndim()) << " -> " << ToPlacementString(to, mesh.ndim())
               << ": " << error << "\n";
    }
    RC_ASSERT(error.empty());
  });
  EXPECT_TRUE(ok);
}

// ---- (c) Ops through Dispatch on device tensors ---------------------------------------------

class NcclDispatch : public ::testing::TestWithParam<std::string> {};

// "" when the outputs agree with the one-GPU run and the reference.
std::string CompareOp(const OpDecl& op, const ref::Tensors& inputs, const Attrs& attrs,
                      const ref::Tensors& expected, const KTensors& one_gpu, const KTensors& got) {
  if (got.size() != one_gpu.size()) return "output counts differ";
  const bool exact = op.tolerance == ToleranceClass::kExact;
  std::optional<prop::Bounds> bounds;
  for (size_t o = 0; o < got.size(); ++o) {
    const std::string where = "outputs[" + std::to_string(o) + "]";
    if (got[o].shape() != one_gpu[o].shape() || got[o].dtype() != one_gpu[o].dtype()) {
      return where + ": shape or dtype differs from the one-GPU run";
    }
    if ((!IsFloating(got[o].dtype()) || exact) && !(got[o] == one_gpu[o])) {
      return where + ": differs from the one-GPU run" + (exact ? " (an exact op)" : "");
    }
    if (!IsFloating(got[o].dtype())) continue;
    const std::string error = prop::CompareValues(
        op, o, where, got[o].dtype(), gpu_test::ValuesOf(got[o]), expected[o].data, 1e-9, bounds,
        [&] { return prop::MakeBounds(op, inputs, attrs, expected); });
    if (!error.empty()) return error;
  }
  return "";
}

TEST_P(NcclDispatch, MatchesOneGpuAndReference) {
  SPMD_REQUIRE_NCCL();
  const OpDecl& op = *FindOp(GetParam());
  const bool ok = rc::check(op.name + " through Dispatch on NCCL", [&op] {
    const auto sizes = *rc::gen::container<std::vector<int64_t>>(4, rc::gen::inRange<int64_t>(1, 9));
    const std::vector<Example> examples = op.examples(SizePalette{sizes});
    RC_PRE(!examples.empty());
    const Example& example = examples[*rc::gen::inRange<size_t>(0, examples.size())];
    const DType run = *rc::gen::element(DType::kFloat64, DType::kFloat32);
    const Mesh mesh = GenMeshFor(WorldSize());
    const uint64_t seed = *rc::gen::arbitrary<uint32_t>();
    std::vector<DistAttr> attrs_in;
    for (const Shape& s : example.shapes) attrs_in.push_back(*prop::GenDistAttr(mesh, static_cast<int>(s.size()), false));
    // Requests the declaration or the reference refuses are discarded (the same on every
    // rank: both are pure functions of the case); the kernel tests cover refusals.
    Attrs attrs;
    ref::Tensors inputs, expected;
    try {
      attrs = op.NormalizeAttrs(example.attrs);
      inputs = gpu_test::MakeInputs(op, example.shapes, attrs, run, seed);
      expected = ref::FindReference(op.name)(inputs, attrs);
    } catch (const SpmdError& e) {
      RC_DISCARD(std::string("refused: ") + e.what());
    }
    std::string error;
    try {
      KTensors device_global;
      std::vector<DistTensor> dist;
      for (size_t i = 0; i < inputs.size(); ++i) {
        const bool floating = inputs[i].dtype == DType::kFloat64 || inputs[i].dtype == DType::kFloat32;
        const KTensor host = gpu_test::ToKernel(inputs[i], floating ? run : inputs[i].dtype);
        device_global.push_back(kernels::cuda::ToDevice(host, g_nccl->device(), g_nccl->stream()));
        dist.push_back(OnDevice(DistTensor::ShardTensor(host, mesh, attrs_in[i], WorldRank()), *g_nccl));
      }
      KTensors one_gpu;
      for (const KTensor& t : kernels::cuda::RunCudaKernel(op.name, device_global, attrs)) {
        one_gpu.push_back(kernels::cuda::ToHost(t));
      }
      const std::vector<DistTensor> outs = Dispatch(op, dist, attrs, *g_nccl);
      KTensors got;
      for (const DistTensor& out : outs) {
        const std::optional<KTensor> global = out.ToGlobal(*g_nccl);
        if (global) got.push_back(kernels::cuda::ToHost(*global));
      }
      if (mesh.CoordinateOf(WorldRank())) error = CompareOp(op, inputs, attrs, expected, one_gpu, got);
    } catch (const std::exception& e) {
      error = std::string("threw: ") + e.what();
    }
    error = FirstError(error);
    if (!error.empty()) RC_LOG() << op.name << " on " << ToString(mesh) << ": " << error << "\n";
    RC_ASSERT(error.empty());
  });
  EXPECT_TRUE(ok);
}

INSTANTIATE_TEST_SUITE_P(AllOps, NcclDispatch, ::testing::ValuesIn(gpu_test::OpsUnderTest()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace spmd::runtime

int main(int argc, char** argv) {
  using namespace spmd;
  // Several ranks on one GPU: NCCL wants a distinct host id per rank (it then talks over
  // sockets on loopback, NCCL_SOCKET_IFNAME=lo).
  const char* local_size = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const char* world_rank = std::getenv("OMPI_COMM_WORLD_RANK");
  const int devices = kernels::cuda::DeviceCount();
  if (std::getenv("NCCL_HOSTID") == nullptr && local_size != nullptr && world_rank != nullptr &&
      devices > 0 && std::atoi(local_size) > devices) {
    setenv("NCCL_HOSTID", (std::string("spmd-rank-") + world_rank).c_str(), 1);
  }
  bool skipped = false;
  const int code = runtime::RunMpiTests(argc, argv, "max_success=30", [&](runtime::MpiCommunicator* comm) {
    if (comm == nullptr) {
      delete runtime::g_staged;
      runtime::g_staged = nullptr;
      delete runtime::g_nccl;
      runtime::g_nccl = nullptr;
      return;
    }
    // Every rank needs a GPU, or every rank skips.
    std::string why = gpu_test::NoGpuReason();
    int mine = why.empty() ? 1 : 0, all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (all == 0) {
      runtime::g_no_gpu = why.empty() ? "another rank has no usable GPU" : why;
      skipped = true;
      return;
    }
    runtime::g_nccl = new runtime::NcclCommunicator(MPI_COMM_WORLD);
    runtime::g_staged = new runtime::Staged(*runtime::g_nccl);
  });
  return code == 0 && skipped ? 77 : code;
}
