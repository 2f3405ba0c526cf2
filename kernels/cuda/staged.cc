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
#include "rules/ops/exchange_ops.h"
#include "rules/engine/phase.h"

namespace spmd::kernels::cuda {
namespace {

Tensors RunStaged(const KernelRef& kernel, const TensorArgs& inputs, const Attrs& attrs) {
  std::vector<Tensor> host;
  host.reserve(inputs.size());
  std::vector<const Tensor*> args;
  args.reserve(inputs.size());
  for (const Tensor& t : inputs) host.push_back(ToHost(t));
  for (const Tensor& t : host) args.push_back(&t);
  Tensors outputs = RunCpuKernel(kernel, TensorArgs(std::move(args)), attrs);
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

// One phase of an op's exchange (Dispatch runs the all-gather between them).
template <const std::string_view& Op, Phase P>
Tensors StagedPhase(const TensorArgs& inputs, const Attrs& attrs) {
  return RunStaged(KernelRef(Op, P), inputs, attrs);
}

constexpr std::string_view kConv2d = "conv2d";
constexpr std::string_view kConv2dGrad = "conv2d_grad";
constexpr std::string_view kDepthwiseConv2d = "depthwise_conv2d";
constexpr std::string_view kConv3d = "conv3d";
constexpr std::string_view kConv3dGrad = "conv3d_grad";
constexpr std::string_view kConv2dTranspose = "conv2d_transpose";
constexpr std::string_view kRoiAlign = "roi_align";
constexpr std::string_view kRoiAlignGrad = "roi_align_grad";
constexpr std::string_view kCummax = "cummax";
constexpr std::string_view kCummin = "cummin";
constexpr std::string_view kLabelSmooth = "label_smooth";
constexpr std::string_view kGroupNorm = "group_norm";
constexpr std::string_view kInstanceNorm = "instance_norm";
constexpr std::string_view kBatchNorm = "batch_norm";
constexpr std::string_view kTakeAlongAxis = "take_along_axis";
constexpr std::string_view kPutAlongAxis = "put_along_axis";
constexpr std::string_view kIndexPut = "index_put";
constexpr std::string_view kMoeCombine = "moe_combine";
constexpr std::string_view kMoeGateDispatch = "moe_gate_dispatch";
constexpr std::string_view kBernoulli = "bernoulli";
constexpr std::string_view kPoisson = "poisson";
constexpr std::string_view kFusedGemmEpilogue = "fused_gemm_epilogue";
constexpr std::string_view kFusedLinearParamGradAdd = "fused_linear_param_grad_add";
constexpr std::string_view kLinearV2 = "linear_v2";
constexpr std::string_view kFlashAttention = "flash_attention";
constexpr std::string_view kFlashAttnGrad = "flash_attn_grad";
constexpr std::string_view kCSoftmaxGrad = "c_softmax_with_cross_entropy_grad";
constexpr std::string_view kNonzero = "nonzero";
constexpr std::string_view kUnique = "unique";
constexpr std::string_view kCSoftmaxMultiLabelGrad = "c_softmax_with_multi_label_cross_entropy_grad";
// The ops whose exchange phases are staged (all of rules/ops/exchange_ops.h); the row
// reductions themselves have device kernels, the c_softmax ops staged ones (below).
#define SPMD_STAGED_PHASE_OP_NAME(name) constexpr std::string_view k_##name = #name;
SPMD_FOR_EACH_EXCHANGE_OP(SPMD_STAGED_PHASE_OP_NAME)
#undef SPMD_STAGED_PHASE_OP_NAME

}  // namespace

// The host-staged ops' CUDA kernels, by op name (kernels/cuda/registry.h). RunCpuKernel
// computes 2-byte floats in float32 itself.
const CudaKernel ops::conv2d{&Staged<kConv2d>, HalfInputs::kNative};
const CudaKernel ops::conv2d_grad{&Staged<kConv2dGrad>, HalfInputs::kNative};
const CudaKernel ops::depthwise_conv2d{&Staged<kDepthwiseConv2d>, HalfInputs::kNative};
const CudaKernel ops::conv3d{&Staged<kConv3d>, HalfInputs::kNative};
const CudaKernel ops::conv3d_grad{&Staged<kConv3dGrad>, HalfInputs::kNative};
const CudaKernel ops::conv2d_transpose{&Staged<kConv2dTranspose>, HalfInputs::kNative};
const CudaKernel ops::roi_align{&Staged<kRoiAlign>, HalfInputs::kNative};
const CudaKernel ops::roi_align_grad{&Staged<kRoiAlignGrad>, HalfInputs::kNative};
const CudaKernel ops::cummax{&Staged<kCummax>, HalfInputs::kNative};
const CudaKernel ops::cummin{&Staged<kCummin>, HalfInputs::kNative};
// Outputs sized by x's values: the host run learns the count, which a device kernel would
// have to read back before it could allocate (docs/GPU.md "Host-staged ops").
const CudaKernel ops::nonzero{&Staged<kNonzero>, HalfInputs::kNative};
const CudaKernel ops::unique{&Staged<kUnique>, HalfInputs::kNative};
const CudaKernel ops::label_smooth{&Staged<kLabelSmooth>, HalfInputs::kNative};
const CudaKernel ops::group_norm{&Staged<kGroupNorm>, HalfInputs::kNative};
const CudaKernel ops::instance_norm{&Staged<kInstanceNorm>, HalfInputs::kNative};
const CudaKernel ops::batch_norm{&Staged<kBatchNorm>, HalfInputs::kNative};
const CudaKernel ops::take_along_axis{&Staged<kTakeAlongAxis>, HalfInputs::kNative};
const CudaKernel ops::put_along_axis{&Staged<kPutAlongAxis>, HalfInputs::kNative};
const CudaKernel ops::index_put{&Staged<kIndexPut>, HalfInputs::kNative};
const CudaKernel ops::moe_combine{&Staged<kMoeCombine>, HalfInputs::kNative};
const CudaKernel ops::moe_gate_dispatch{&Staged<kMoeGateDispatch>, HalfInputs::kNative};
const CudaKernel ops::bernoulli{&Staged<kBernoulli>, HalfInputs::kNative};
const CudaKernel ops::poisson{&Staged<kPoisson>, HalfInputs::kNative};
const CudaKernel ops::fused_gemm_epilogue{&Staged<kFusedGemmEpilogue>, HalfInputs::kNative};
const CudaKernel ops::fused_linear_param_grad_add{&Staged<kFusedLinearParamGradAdd>, HalfInputs::kNative};
const CudaKernel ops::linear_v2{&Staged<kLinearV2>, HalfInputs::kNative};
const CudaKernel ops::flash_attention{&Staged<kFlashAttention>, HalfInputs::kNative};
const CudaKernel ops::flash_attn_grad{&Staged<kFlashAttnGrad>, HalfInputs::kNative};
const CudaKernel ops::c_softmax_with_cross_entropy{&Staged<k_c_softmax_with_cross_entropy>, HalfInputs::kNative};
const CudaKernel ops::c_softmax_with_cross_entropy_grad{&Staged<kCSoftmaxGrad>, HalfInputs::kNative};
const CudaKernel ops::c_softmax_with_multi_label_cross_entropy{&Staged<k_c_softmax_with_multi_label_cross_entropy>,
                                                                HalfInputs::kNative};
const CudaKernel ops::c_softmax_with_multi_label_cross_entropy_grad{&Staged<kCSoftmaxMultiLabelGrad>,
                                                                     HalfInputs::kNative};
// The exchange phases: one line per phase, as every kernel, so that op_completeness_test
// reads them (rules/ops/exchange_ops.h lists the ops).
const CudaKernel ops::c_softmax_with_cross_entropy_stats{&StagedPhase<k_c_softmax_with_cross_entropy, Phase::kStats>,
                                                          HalfInputs::kNative};
const CudaKernel ops::c_softmax_with_cross_entropy_finish{&StagedPhase<k_c_softmax_with_cross_entropy, Phase::kFinish>,
                                                           HalfInputs::kNative};
const CudaKernel ops::c_softmax_with_multi_label_cross_entropy_stats{
    &StagedPhase<k_c_softmax_with_multi_label_cross_entropy, Phase::kStats>, HalfInputs::kNative};
const CudaKernel ops::c_softmax_with_multi_label_cross_entropy_finish{
    &StagedPhase<k_c_softmax_with_multi_label_cross_entropy, Phase::kFinish>, HalfInputs::kNative};
const CudaKernel ops::softmax_stats{&StagedPhase<k_softmax, Phase::kStats>, HalfInputs::kNative};
const CudaKernel ops::softmax_finish{&StagedPhase<k_softmax, Phase::kFinish>, HalfInputs::kNative};
const CudaKernel ops::log_softmax_stats{&StagedPhase<k_log_softmax, Phase::kStats>, HalfInputs::kNative};
const CudaKernel ops::log_softmax_finish{&StagedPhase<k_log_softmax, Phase::kFinish>, HalfInputs::kNative};
const CudaKernel ops::softmax_grad_stats{&StagedPhase<k_softmax_grad, Phase::kStats>, HalfInputs::kNative};
const CudaKernel ops::softmax_grad_finish{&StagedPhase<k_softmax_grad, Phase::kFinish>, HalfInputs::kNative};
const CudaKernel ops::logsumexp_stats{&StagedPhase<k_logsumexp, Phase::kStats>, HalfInputs::kNative};
const CudaKernel ops::logsumexp_finish{&StagedPhase<k_logsumexp, Phase::kFinish>, HalfInputs::kNative};
const CudaKernel ops::layer_norm_stats{&StagedPhase<k_layer_norm, Phase::kStats>, HalfInputs::kNative};
const CudaKernel ops::layer_norm_finish{&StagedPhase<k_layer_norm, Phase::kFinish>, HalfInputs::kNative};
const CudaKernel ops::rms_norm_stats{&StagedPhase<k_rms_norm, Phase::kStats>, HalfInputs::kNative};
const CudaKernel ops::rms_norm_finish{&StagedPhase<k_rms_norm, Phase::kFinish>, HalfInputs::kNative};
const CudaKernel ops::cumsum_stats{&StagedPhase<k_cumsum, Phase::kStats>, HalfInputs::kNative};
const CudaKernel ops::cumsum_finish{&StagedPhase<k_cumsum, Phase::kFinish>, HalfInputs::kNative};
const CudaKernel ops::layer_norm_grad_stats{&StagedPhase<k_layer_norm_grad, Phase::kStats>, HalfInputs::kNative};
const CudaKernel ops::layer_norm_grad_finish{&StagedPhase<k_layer_norm_grad, Phase::kFinish>, HalfInputs::kNative};
const CudaKernel ops::rms_norm_grad_stats{&StagedPhase<k_rms_norm_grad, Phase::kStats>, HalfInputs::kNative};
const CudaKernel ops::rms_norm_grad_finish{&StagedPhase<k_rms_norm_grad, Phase::kFinish>, HalfInputs::kNative};
const CudaKernel ops::cross_entropy_with_softmax_stats{&StagedPhase<k_cross_entropy_with_softmax, Phase::kStats>,
                                                        HalfInputs::kNative};
const CudaKernel ops::cross_entropy_with_softmax_finish{&StagedPhase<k_cross_entropy_with_softmax, Phase::kFinish>,
                                                         HalfInputs::kNative};
const CudaKernel ops::batch_norm_stats{&StagedPhase<k_batch_norm, Phase::kStats>, HalfInputs::kNative};
const CudaKernel ops::batch_norm_finish{&StagedPhase<k_batch_norm, Phase::kFinish>, HalfInputs::kNative};
const CudaKernel ops::cummax_stats{&StagedPhase<k_cummax, Phase::kStats>, HalfInputs::kNative};
const CudaKernel ops::cummax_finish{&StagedPhase<k_cummax, Phase::kFinish>, HalfInputs::kNative};
const CudaKernel ops::cummin_stats{&StagedPhase<k_cummin, Phase::kStats>, HalfInputs::kNative};
const CudaKernel ops::cummin_finish{&StagedPhase<k_cummin, Phase::kFinish>, HalfInputs::kNative};

}  // namespace spmd::kernels::cuda
