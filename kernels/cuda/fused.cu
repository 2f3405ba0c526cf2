// CUDA kernels of the fused family (the ops of kernels/cpu/fused.cc):
// - fused_rotary_position_embedding: one thread per element of q (k, v), its two products
//   and their sum in double with explicit round-to-nearest operations (__dmul_rn,
//   __dadd_rn: no fused multiply-add), rounded once to the output dtype, which is what the
//   CPU computes: equal bit for bit. float32 / float64; 2-byte floats through
//   RunCudaKernel's widening.
// - bmm_grad: bmm's shape checks, then matmul_grad's CUDA kernel (the contraction family's),
//   as the CPU kernel calls matmul_grad's.
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/family_util.cuh"
#include "kernels/cuda/registry.h"
#include "rules/ops/contraction_plan.h"
#include "rules/ops/fused_plan.h"

namespace spmd::kernels::cuda {
namespace {

using detail::CheckInputs;
using detail::ci::InputField;

template <typename T>
__global__ void RopeKernel(RopeArgs a, const void* x, DType xd, const void* sin, DType sd, const void* cos,
                           DType cd, T* out, int64_t n) {
  for (SPMD_GRID_STRIDE(e, n)) {
    int64_t table = 0, partner = 0;
    double sign = 1.0;
    RopeIndex(a, e, &table, &partner, &sign);
    const double c = static_cast<double>(LoadAs<T>(cos, cd, table));
    const double t = static_cast<double>(LoadAs<T>(sin, sd, table));
    const double xv = static_cast<double>(LoadAs<T>(x, xd, e));
    const double xp = static_cast<double>(LoadAs<T>(x, xd, partner));
    out[e] = static_cast<T>(RopeValue(c, t, xv, xp, sign));
  }
}

Tensors FusedRope(const TensorArgs& inputs, const Attrs& attrs) {
  CheckInputs(inputs, false);
  const plan::RopePlan p = plan::PlanRope(plan::ShapesOf(inputs), attrs);
  const size_t n = inputs.size();
  const DType dtype = detail::ci::ComputeDTypeAll(inputs);
  const Tensor& sin = inputs[n - 2];
  const Tensor& cos = inputs[n - 1];
  Tensors outs;
  for (size_t r = 0; r < p.rotated; ++r) {
    const Tensor& x = inputs[r];
    Tensor out = detail::NewOut(x, x.shape(), dtype);
    const int64_t count = out.numel();
    if (count > 0 && p.head_dim > 0) {
      RopeArgs a;
      a.d1 = x.shape()[1];
      a.heads = x.shape()[2];
      a.head_dim = p.head_dim;
      a.time_major = p.time_major;
      a.neox = p.neox;
      const LaunchConfig cfg = GridStride(count);
      const auto launch = [&](auto zero) {
        using T = decltype(zero);
        RopeKernel<T><<<cfg.grid, cfg.block, 0, detail::StreamOf(inputs[0])>>>(
            a, x.bytes(), x.dtype(), sin.bytes(), sin.dtype(), cos.bytes(), cos.dtype(),
            reinterpret_cast<T*>(out.bytes()), count);
        SPMD_CUDA_CHECK_LAUNCH();
      };
      if (dtype == DType::kFloat32) launch(float{}); else launch(double{});
    }
    outs.push_back(std::move(out));
  }
  return outs;
}

Tensors BmmGrad(const TensorArgs& inputs, const Attrs&) {
  CheckInputs(inputs, false);
  (void)plan::PlanBmmGrad(plan::ShapesOf(inputs));
  // matmul_grad's kernel, named in the generated table (kernels/cuda/registry.h): a build
  // without it does not link.
  Attrs plain;
  plain.Set("trans_x", false);
  plain.Set("trans_y", false);
  return ops::matmul_grad.fn(inputs, plain);
}

}  // namespace

// The fused ops' CUDA kernels, by op name (kernels/cuda/registry.h).
const CudaKernel ops::fused_rotary_position_embedding{&FusedRope, HalfInputs::kWidened};
const CudaKernel ops::bmm_grad{&BmmGrad, HalfInputs::kWidened};

}  // namespace spmd::kernels::cuda
