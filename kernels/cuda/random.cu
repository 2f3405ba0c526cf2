// CUDA kernels of the random family (the ops of kernels/cpu/random.cc): dropout and
// fused_dropout_add (whose second output is Paddle's seed_offset, [seed, 0]). The mask is rules/ops/counter_rng.h's, drawn at each element's GLOBAL
// linear index (from the localized local.offset / local.global_shape, read and checked by
// rules/ops/dropout_attrs.h as on the CPU), so a shard on the device drops exactly the
// elements the CPU kernel drops for the same seed. Values are computed as the CPU computes
// them (in double, one division, rounded once to the compute dtype), so out and mask equal
// the CPU kernel's bit for bit. float32 / float64; 2-byte floats through RunCudaKernel's
// widening.
#include <utility>
#include <vector>

#include "kernels/cuda/convert.h"
#include "kernels/cuda/cuda.h"
#include "kernels/cuda/family_util.cuh"
#include "kernels/cuda/registry.h"
#include "rules/ops/counter_rng.h"
#include "rules/ops/dropout_attrs.h"
#include "rules/ops/shape_plan.h"

namespace spmd::kernels::cuda {
namespace {

using detail::CheckInputs;
using detail::ci::CheckArity;

template <typename T>
__global__ void DropoutKernel(CopyPlanArgs plan, DropoutArgs a, const void* x, DType xd, T* out, bool* mask) {
  for (SPMD_GRID_STRIDE(i, plan.count)) {
    int64_t global = 0, local = 0;
    PlanOffsets(plan, i, &global, &local);
    bool keep = false;
    out[local] = DropoutValue<T>(a, global, LoadAs<T>(x, xd, local), &keep);
    mask[local] = keep;
  }
}

// dropout of x into a new (out, mask) pair; the checks of the CPU kernel, in its order.
Tensors Dropout1(const Tensor& x, const Attrs& attrs) {
  const dropout::DropoutAttrs da = dropout::ReadDropoutAttrs(attrs);
  const dropout::DropoutLayout layout = dropout::ReadDropoutLayout(attrs, x.shape());
  const DType dtype = IsFloating(x.dtype()) ? x.dtype() : DType::kFloat64;
  Tensor out = detail::NewOut(x, x.shape(), dtype);
  Tensor mask = detail::NewOut(x, x.shape(), DType::kBool);
  if (out.numel() == 0) return TensorList(std::move(out), std::move(mask));
  DropoutArgs a;
  a.p = da.p;
  a.is_test = da.is_test;
  a.upscale = da.upscale;
  a.seed = da.seed;
  const CopyPlan plan = SimplifyPlan(PlanGlobalIndex(x.shape(), layout.offset, layout.global_shape), 1);
  const cudaStream_t stream = detail::StreamOf(x);
  for (const CopyPlan& q : PeelPlan(plan)) {
    const CopyPlanArgs args = PlanArgs(q);
    const LaunchConfig cfg = GridStride(args.count);
    const auto launch = [&](auto zero) {
      using T = decltype(zero);
      if constexpr (!kIsTwoByte<T>) {  // DispatchFloating without `half` never passes one
        DropoutKernel<T><<<cfg.grid, cfg.block, 0, stream>>>(args, a, x.bytes(), x.dtype(),
                                                             reinterpret_cast<T*>(out.bytes()),
                                                             reinterpret_cast<bool*>(mask.bytes()));
        SPMD_CUDA_CHECK_LAUNCH();
      }
    };
    // float32 / float64: 2-byte floats reach dropout widened (HalfInputs::kWidened), and
    // called on its own the kernel refuses them (Unsupported "inputs[0].dtype").
    DispatchFloating(dtype, "inputs[0].dtype", /*half=*/false, launch);
  }
  return TensorList(std::move(out), std::move(mask));
}

Tensors Dropout(const TensorArgs& inputs, const Attrs& attrs) {
  CheckInputs(inputs, false);
  CheckArity(inputs, 1);
  return Dropout1(inputs[0], attrs);
}

template <typename T>
__global__ void AddKernel(const void* a, DType ad, const void* b, DType bd, T* out, int64_t n) {
  for (SPMD_GRID_STRIDE(i, n)) { out[i] = LoadAs<T>(a, ad, i) + LoadAs<T>(b, bd, i); }
}

Tensors FusedDropoutAdd(const TensorArgs& inputs, const Attrs& attrs) {
  CheckInputs(inputs, false);
  CheckArity(inputs, 2);
  shape_plan::CheckSameShape(inputs[0].shape(), inputs[1].shape());
  Tensors dropped = Dropout1(inputs[0], attrs);
  const DType dtype = detail::ci::ComputeDType(inputs, {0, 1});
  Tensor sum = detail::NewOut(inputs[0], inputs[0].shape(), dtype);
  const int64_t n = sum.numel();
  if (n > 0) {
    const LaunchConfig cfg = GridStride(n);
    const auto launch = [&](auto zero) {
      using T = decltype(zero);
      AddKernel<T><<<cfg.grid, cfg.block, 0, detail::StreamOf(inputs[0])>>>(
          dropped[0].bytes(), dropped[0].dtype(), inputs[1].bytes(), inputs[1].dtype(),
          reinterpret_cast<T*>(sum.bytes()), n);
      SPMD_CUDA_CHECK_LAUNCH();
    };
    if (dtype == DType::kFloat32) launch(float{}); else launch(double{});
  }
  // Paddle's seed_offset: [seed, 0] (the generator is keyed by the global index), copied
  // to x's device on its stream (ToDevice returns once the 16 bytes are there).
  const std::vector<int64_t> pair = {attrs.GetInt("seed"), 0};
  Tensor seed_offset = ToDevice(Tensor::FromVector<int64_t>({2}, pair), inputs[0].device(), inputs[0].stream());
  return TensorList(std::move(sum), std::move(seed_offset));
}

}  // namespace

// The random ops' CUDA kernels, by op name (kernels/cuda/registry.h).
const CudaKernel ops::dropout{&Dropout, HalfInputs::kWidened};
const CudaKernel ops::fused_dropout_add{&FusedDropoutAdd, HalfInputs::kWidened};

}  // namespace spmd::kernels::cuda
