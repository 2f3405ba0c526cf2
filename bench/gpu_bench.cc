// GPU benchmarks (Google Benchmark; docs/GPU.md "Benchmarks"). Without a usable GPU every
// benchmark is skipped with the reason.
//
// - matmul through Dispatch (a one-rank mesh, replicated inputs: the rule, then the CUDA
//   kernel) against one direct cublasGemmEx call on the same buffers, for 4096 x 4096 x 4096
//   and a skinny 16 x 8192 x 8192, float32 and bfloat16 (FLOP/s; the difference is what
//   spmdkit adds around cuBLAS).
// - elementwise add, softmax, layer_norm and rms_norm on 256 MiB float32 inputs through
//   RunCudaKernel, against a device-to-device copy of 256 MiB (bytes read + written per
//   second: the copy is the bandwidth a memory-bound kernel can hope for).
// - under mpirun (np >= 2; every rank on one GPU is fine): DistTensor::Reshard of a 64 MiB
//   float32 tensor on NcclCommunicator for the 1-d transitions S(0)->R, P->R, P->S(0),
//   S(0)->S(1), R->S(0): time per reshard, and the bytes per rank the plan gives, the
//   communicator counted and it handed NCCL (bytes_match = 1 when the three agree on every
//   rank). These run a fixed number of iterations on every rank (rank 0 reports); the
//   single-GPU benchmarks run on rank 0 only.
//
//   build/bin/gpu_bench --benchmark_min_time=0.2s
//   mpirun -np 2 build/bin/gpu_bench --benchmark_filter=Reshard
#include <benchmark/benchmark.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/cuda.h"
#include "kernels/cuda/registry.h"
#include "kernels/tensor.h"
#include "rules/model/dist_attr.h"
#include "rules/model/layout.h"
#include "rules/model/mesh.h"
#include "rules/engine/registry.h"
#include "rules/reshard/reshard.h"
#include "runtime/exec/dispatch.h"
#include "runtime/exec/dist_tensor.h"
#include "runtime/comm/thread_communicator.h"
#ifdef SPMD_HAVE_NCCL
#include "runtime/comm/nccl_communicator.h"
#endif

namespace {

using spmd::DType;
using spmd::kernels::Device;
using spmd::kernels::Stream;
using spmd::kernels::Tensor;
namespace cuda = spmd::kernels::cuda;

int g_rank = 0;
int g_size = 1;

// "" when a GPU is usable.
const std::string& NoGpu() {
  static const std::string reason = [] {
    std::string why;
    if (cuda::DeviceCount(&why) <= 0) return "no usable GPU: " + why;
    try {
      cuda::EnableCuda();
    } catch (const std::exception& e) {
      return std::string("the CUDA backend cannot start: ") + e.what();
    }
    return std::string();
  }();
  return reason;
}

// Skips unless a GPU is usable (and, for single-GPU benchmarks, on ranks other than 0).
bool Skip(benchmark::State& state, bool rank0_only = true) {
  if (!NoGpu().empty()) {
    state.SkipWithError(NoGpu().c_str());
    return true;
  }
  if (rank0_only && g_rank != 0) {
    state.SkipWithError("runs on rank 0");
    return true;
  }
  return false;
}

Device Gpu() { return Device::Cuda(0); }
Stream BenchStream() {
  static const Stream s = cuda::NewStream(Gpu());
  return s;
}
spmd::kernels::Backend& Backend() { return spmd::kernels::BackendFor(Gpu()); }

// A device tensor filled with `value`.
Tensor Filled(const spmd::kernels::Shape& shape, DType dtype, double value) {
  Tensor t = Tensor::Uninitialized(shape, dtype, Backend().AllocatorFor(Gpu()), BenchStream());
  Backend().Fill(t.bytes(), t.numel(), dtype, value, BenchStream());
  return t;
}

void Sync() { Backend().Synchronize(BenchStream()); }

// ---- matmul -----------------------------------------------------------------------------------

void MatmulDispatch(benchmark::State& state, DType dtype) {
  if (Skip(state)) return;
  if (cuda::FindCudaKernel("matmul") == nullptr) {
    state.SkipWithError("matmul has no CUDA kernel");
    return;
  }
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  const spmd::Mesh mesh({1});
  spmd::runtime::ThreadWorld world(1);
  spmd::runtime::ThreadCommunicator comm(world, 0);
  using spmd::runtime::DistTensor;
  const DistTensor x = DistTensor::FromLocal(Filled({m, k}, dtype, 0.5), {m, k}, dtype, mesh,
                                             spmd::DistAttr::Replicated(2), 0);
  const DistTensor y = DistTensor::FromLocal(Filled({k, n}, dtype, 0.25), {k, n}, dtype, mesh,
                                             spmd::DistAttr::Replicated(2), 0);
  const spmd::OpDecl& op = *spmd::FindOp("matmul");
  const spmd::Attrs attrs = op.NormalizeAttrs(spmd::Attrs());
  // One untimed call first: the first benchmark of the program otherwise pays the CUDA
  // module's lazy loading and cuBLAS's first-call setup inside its one timed iteration (on
  // the H200 that read as 112 ms for a 2.8 ms GEMM: docs/GPU.md).
  (void)spmd::runtime::Dispatch(op, {x, y}, attrs, comm);
  Sync();
  for (auto _ : state) {
    std::vector<DistTensor> out = spmd::runtime::Dispatch(op, {x, y}, attrs, comm);
    Sync();
    benchmark::DoNotOptimize(out);
  }
  state.counters["FLOP/s"] = benchmark::Counter(2.0 * m * n * k, benchmark::Counter::kIsIterationInvariantRate);
}

// The matmul kernel alone (the device Backend's RunKernel, no rule, no DistTensor): between
// it, the direct calls below and Dispatch, where Dispatch's time goes.
void MatmulKernel(benchmark::State& state, DType dtype) {
  if (Skip(state)) return;
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  const Tensor x = Filled({m, k}, dtype, 0.5), y = Filled({k, n}, dtype, 0.25);
  const spmd::OpDecl& op = *spmd::FindOp("matmul");
  const spmd::Attrs attrs = op.NormalizeAttrs(spmd::Attrs());
  const spmd::kernels::TensorArgs args(std::vector<const Tensor*>{&x, &y});
  (void)Backend().RunKernel(spmd::KernelRef("matmul"), args, attrs);  // untimed: as above
  Sync();
  for (auto _ : state) {
    spmd::kernels::Tensors out = Backend().RunKernel(
        spmd::KernelRef("matmul"), args, attrs);
    Sync();
    benchmark::DoNotOptimize(out);
  }
  state.counters["FLOP/s"] = benchmark::Counter(2.0 * m * n * k, benchmark::Counter::kIsIterationInvariantRate);
}

// How the direct cuBLAS call is made: cublasGemmEx on a default handle; the same with its
// output allocated from the pool every iteration, as the kernel's is; on a handle with the
// math mode the kernels set (no reduced-precision reduction); and
// cublasGemmStridedBatchedEx_64 with one batch entry (the call the kernels make).
enum class CublasCall { kGemmEx, kGemmExPooledOutput, kGemmExStrictMath, kStridedBatched64 };

void MatmulCublasCall(benchmark::State& state, DType dtype, CublasCall how) {
  if (Skip(state)) return;
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  const Tensor a = Filled({m, k}, dtype, 0.5), b = Filled({k, n}, dtype, 0.25);
  Tensor c = Filled({m, n}, dtype, 0);
  cublasHandle_t handle = nullptr;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
    state.SkipWithError("cublasCreate failed");
    return;
  }
  cublasSetStream(handle, static_cast<cudaStream_t>(BenchStream().handle));
  if (how == CublasCall::kGemmExStrictMath) {
    cublasSetMathMode(handle, static_cast<cublasMath_t>(
                                  CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
  }
  const cudaDataType_t type = dtype == DType::kBFloat16 ? CUDA_R_16BF : CUDA_R_32F;
  const float alpha = 1, beta = 0;
  Sync();
  // Row-major C = A B is column-major C^T = B^T A^T.
  for (auto _ : state) {
    if (how == CublasCall::kGemmExPooledOutput) {
      c = Tensor::Uninitialized({m, n}, dtype, Backend().AllocatorFor(Gpu()), BenchStream());
    }
    const cublasStatus_t s =
        how == CublasCall::kStridedBatched64
            ? cublasGemmStridedBatchedEx_64(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha,
                                            b.bytes(), type, n, k * n, a.bytes(), type, k, m * k,
                                            &beta, c.bytes(), type, n, m * n, 1,
                                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)
            : cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n),
                           static_cast<int>(m), static_cast<int>(k), &alpha, b.bytes(), type,
                           static_cast<int>(n), a.bytes(), type, static_cast<int>(k), &beta,
                           c.bytes(), type, static_cast<int>(n), CUBLAS_COMPUTE_32F,
                           CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS) {
      state.SkipWithError("cublasGemmEx failed");
      break;
    }
    Sync();
  }
  cublasDestroy(handle);
  state.counters["FLOP/s"] = benchmark::Counter(2.0 * m * n * k, benchmark::Counter::kIsIterationInvariantRate);
}

void MatmulCublas(benchmark::State& state, DType dtype) {
  MatmulCublasCall(state, dtype, CublasCall::kGemmEx);
}
void MatmulCublasPooledOutput(benchmark::State& state, DType dtype) {
  MatmulCublasCall(state, dtype, CublasCall::kGemmExPooledOutput);
}

void MatmulShapes(benchmark::internal::Benchmark* b) {
  b->Args({4096, 4096, 4096})->Args({16, 8192, 8192})->Unit(benchmark::kMicrosecond)->UseRealTime();
}
BENCHMARK_CAPTURE(MatmulDispatch, float32, DType::kFloat32)->Apply(MatmulShapes);
BENCHMARK_CAPTURE(MatmulCublas, float32, DType::kFloat32)->Apply(MatmulShapes);
BENCHMARK_CAPTURE(MatmulKernel, float32, DType::kFloat32)->Apply(MatmulShapes);
BENCHMARK_CAPTURE(MatmulCublasPooledOutput, float32, DType::kFloat32)->Apply(MatmulShapes);
BENCHMARK_CAPTURE(MatmulCublasCall, float32_strict_math, DType::kFloat32,
                  CublasCall::kGemmExStrictMath)->Apply(MatmulShapes);
BENCHMARK_CAPTURE(MatmulCublasCall, float32_strided_batched_64, DType::kFloat32,
                  CublasCall::kStridedBatched64)->Apply(MatmulShapes);
BENCHMARK_CAPTURE(MatmulDispatch, bfloat16, DType::kBFloat16)->Apply(MatmulShapes);
BENCHMARK_CAPTURE(MatmulCublas, bfloat16, DType::kBFloat16)->Apply(MatmulShapes);

// ---- memory-bound kernels at 256 MiB ----------------------------------------------------------

constexpr int64_t kRows = 16384, kCols = 4096;  // 64 Mi float32 = 256 MiB

void Kernel(benchmark::State& state, const char* name) {
  if (Skip(state)) return;
  if (cuda::FindCudaKernel(name) == nullptr) {
    state.SkipWithError((std::string(name) + " has no CUDA kernel").c_str());
    return;
  }
  const spmd::OpDecl& op = *spmd::FindOp(name);
  std::vector<Tensor> inputs = {Filled({kRows, kCols}, DType::kFloat32, 0.5)};
  const std::string n(name);
  if (n == "add") inputs.push_back(Filled({kRows, kCols}, DType::kFloat32, 0.25));
  if (n == "layer_norm" || n == "rms_norm") inputs.push_back(Filled({kCols}, DType::kFloat32, 1.0));
  if (n == "layer_norm") inputs.push_back(Filled({kCols}, DType::kFloat32, 0.0));
  const spmd::Attrs attrs = op.NormalizeAttrs(spmd::Attrs());
  int64_t bytes = 0;
  Sync();
  for (auto _ : state) {
    spmd::kernels::Tensors out = cuda::RunCudaKernel(name, inputs, attrs);
    Sync();
    if (bytes == 0) {
      for (const Tensor& t : inputs) bytes += static_cast<int64_t>(t.nbytes());
      for (const Tensor& t : out) bytes += static_cast<int64_t>(t.nbytes());
    }
  }
  state.SetBytesProcessed(bytes * state.iterations());  // read + written
}

void DeviceCopy(benchmark::State& state) {
  if (Skip(state)) return;
  const Tensor a = Filled({kRows, kCols}, DType::kFloat32, 0.5);
  Tensor b = Filled({kRows, kCols}, DType::kFloat32, 0);
  Sync();
  for (auto _ : state) {
    Backend().Copy(b.bytes(), a.bytes(), a.nbytes(), BenchStream());
    Sync();
  }
  state.SetBytesProcessed(2 * static_cast<int64_t>(a.nbytes()) * state.iterations());
}

BENCHMARK(DeviceCopy)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(Kernel, add, "add")->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(Kernel, softmax, "softmax")->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(Kernel, layer_norm, "layer_norm")->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(Kernel, rms_norm, "rms_norm")->Unit(benchmark::kMicrosecond)->UseRealTime();

// ---- reshard on NCCL --------------------------------------------------------------------------

#ifdef SPMD_HAVE_NCCL
std::unique_ptr<spmd::runtime::NcclCommunicator> g_nccl;  // reset before MPI_Finalize

spmd::runtime::NcclCommunicator& Nccl() {
  if (!g_nccl) g_nccl = std::make_unique<spmd::runtime::NcclCommunicator>(MPI_COMM_WORLD);
  return *g_nccl;
}
#endif

void Reshard(benchmark::State& state, const char* from_text, const char* to_text) {
#ifdef SPMD_HAVE_NCCL
  if (Skip(state, /*rank0_only=*/false)) return;
  if (g_size < 2) {
    state.SkipWithError("needs mpirun -np >= 2");
    return;
  }
  // Every rank arrives here after rank 0's single-GPU benchmarks: wait for it outside NCCL
  // (whose waits are bounded by SPMD_COLLECTIVE_TIMEOUT_S).
  MPI_Barrier(MPI_COMM_WORLD);
  auto& comm = Nccl();
  using spmd::runtime::DistTensor;
  const spmd::Mesh mesh({g_size});
  const spmd::DistAttr from = spmd::ParsePlacementString(from_text, 2, "from");
  const spmd::DistAttr to = spmd::ParsePlacementString(to_text, 2, "to");
  const int64_t rows = 4096 * g_size, cols = 4096;  // 64 MiB per rank of float32 when sharded
  const spmd::kernels::Shape shape = {rows, cols};
  const spmd::Shape local = spmd::LocalShape(shape, from, mesh, {g_rank});
  const DistTensor x = DistTensor::FromLocal(
      cuda::ToDevice(Tensor(local, DType::kFloat32), comm.device(), comm.stream()), shape,
      DType::kFloat32, mesh, from, g_rank);
  spmd::runtime::ReshardReport report;
  for (auto _ : state) {
    report = {};
    DistTensor y = x.Reshard(to, comm, &report);
    spmd::kernels::BackendFor(comm.device()).Synchronize(comm.stream());
    benchmark::DoNotOptimize(y);
  }
  int match = report.planned == report.counted && report.planned == report.transport ? 1 : 0;
  int all = 0;
  MPI_Allreduce(&match, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  state.counters["planned_MiB"] = static_cast<double>(report.planned.sent) / (1 << 20);
  state.counters["counted_MiB"] = static_cast<double>(report.counted.sent) / (1 << 20);
  state.counters["handed_MiB"] = static_cast<double>(report.transport.sent) / (1 << 20);
  state.counters["bytes_match"] = all;
#else
  (void)from_text;
  (void)to_text;
  state.SkipWithError("built without NCCL");
#endif
}

#define SPMD_RESHARD(name, from, to) \
  BENCHMARK_CAPTURE(Reshard, name, from, to)->Iterations(10)->Unit(benchmark::kMillisecond)->UseRealTime()
SPMD_RESHARD(S0_to_R, "[S(0)]", "[R]");
SPMD_RESHARD(P_to_R, "[P(sum)]", "[R]");
SPMD_RESHARD(P_to_S0, "[P(sum)]", "[S(0)]");
SPMD_RESHARD(S0_to_S1, "[S(0)]", "[S(1)]");
SPMD_RESHARD(R_to_S0, "[R]", "[S(0)]");

// Ranks other than 0 run every benchmark and report nothing.
class Quiet : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  benchmark::Initialize(&argc, argv);
  if (g_rank == 0) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    Quiet quiet;
    benchmark::RunSpecifiedBenchmarks(&quiet);
  }
  benchmark::Shutdown();
#ifdef SPMD_HAVE_NCCL
  g_nccl.reset();
#endif
  MPI_Finalize();
  return 0;
}
