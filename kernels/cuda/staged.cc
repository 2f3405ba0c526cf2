// CUDA kernels staged through the host, for ops whose device kernel is not written yet:
// the inputs are copied to the host (ToHost waits for their stream), the CPU kernel runs
// (RunCpuKernel: its checks, errors and 2-byte handling), and its outputs are copied back
// to the inputs' device on inputs[0]'s stream. Correct by construction and tested by the
// GPU suite like every kernel, but slow and synchronizing: docs/GPU.md "Host-staged ops"
// lists them, and an op leaves this list when its device kernel is written.
#include <string_view>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "kernels/cuda/cuda.h"
#include "kernels/cuda/registry.h"
#include "rules/row_exchange_ops.h"

namespace spmd::kernels::cuda {
namespace {

Tensors RunStaged(std::string_view op, const TensorArgs& inputs, const Attrs& attrs) {
  std::vector<Tensor> host;
  host.reserve(inputs.size());
  std::vector<const Tensor*> args;
  args.reserve(inputs.size());
  for (const Tensor& t : inputs) host.push_back(ToHost(t));
  for (const Tensor& t : host) args.push_back(&t);
  Tensors outputs = RunCpuKernel(op, TensorArgs(std::move(args)), attrs);
  if (inputs.empty()) return outputs;
  Tensors on_device;
  on_device.reserve(outputs.size());
  for (const Tensor& t : outputs) {
    on_device.push_back(ToDevice(t, inputs[0].device(), inputs[0].stream()));
  }
  return on_device;
}

template <const std::string_view& Op>
Tensors Staged(const TensorArgs& inputs, const Attrs& attrs) {
  return RunStaged(Op, inputs, attrs);
}

constexpr std::string_view kConv2d = "conv2d";
constexpr std::string_view kConv2dGrad = "conv2d_grad";
constexpr std::string_view kFlashAttention = "flash_attention";
constexpr std::string_view kFlashAttnGrad = "flash_attn_grad";
constexpr std::string_view kCSoftmax = "c_softmax_with_cross_entropy";
constexpr std::string_view kCSoftmaxStats = "c_softmax_with_cross_entropy@stats";
constexpr std::string_view kCSoftmaxFinish = "c_softmax_with_cross_entropy@finish";
constexpr std::string_view kCSoftmaxGrad = "c_softmax_with_cross_entropy_grad";
// The exchange phases of the row reductions whose reduced axis may stay sharded
// (rules/norm_pieces.h); the ops themselves have device kernels.
#define SPMD_STAGED_PHASE_NAMES(name)                                  \
  constexpr std::string_view k_##name##_stats = #name "@stats"; \
  constexpr std::string_view k_##name##_finish = #name "@finish";
SPMD_FOR_EACH_ROW_EXCHANGE_OP(SPMD_STAGED_PHASE_NAMES)
#undef SPMD_STAGED_PHASE_NAMES

}  // namespace

void RegisterStagedKernels(KernelTable& table) {
  // RunCpuKernel computes 2-byte floats in float32 itself.
  table.Add(kConv2d, &Staged<kConv2d>, /*takes_half=*/true);
  table.Add(kConv2dGrad, &Staged<kConv2dGrad>, /*takes_half=*/true);
  table.Add(kFlashAttention, &Staged<kFlashAttention>, /*takes_half=*/true);
  table.Add(kFlashAttnGrad, &Staged<kFlashAttnGrad>, /*takes_half=*/true);
  // The op and its two exchange phases (Dispatch runs the all-gather between them).
  table.Add(kCSoftmax, &Staged<kCSoftmax>, /*takes_half=*/true);
  table.Add(kCSoftmaxStats, &Staged<kCSoftmaxStats>, /*takes_half=*/true);
  table.Add(kCSoftmaxFinish, &Staged<kCSoftmaxFinish>, /*takes_half=*/true);
  table.Add(kCSoftmaxGrad, &Staged<kCSoftmaxGrad>, /*takes_half=*/true);
#define SPMD_ADD_STAGED_PHASES(name)                                               \
  table.Add(k_##name##_stats, &Staged<k_##name##_stats>, /*takes_half=*/true); \
  table.Add(k_##name##_finish, &Staged<k_##name##_finish>, /*takes_half=*/true);
  SPMD_FOR_EACH_ROW_EXCHANGE_OP(SPMD_ADD_STAGED_PHASES)
#undef SPMD_ADD_STAGED_PHASES
}

}  // namespace spmd::kernels::cuda
