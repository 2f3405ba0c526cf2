// Optimizer steps on a CUDA device (docs/OPS.md "Optimizer steps"): adamw, one thread per
// element, the CPU kernel's arithmetic (kernels/cpu/optimizer.cc) in float32 or float64
// (2-byte floats are widened by RunCudaKernel). The plan and its errors are
// rules/ops/adamw_plan.h's.
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/internal.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/math_util.cuh"
#include "kernels/cuda/registry.h"
#include "rules/ops/adamw_plan.h"

namespace spmd::kernels::cuda {
namespace {

template <typename T>
struct AdamWConstants {
  T beta1, beta2, c_beta1, c_beta2, inv_c2, eps, step_size, decay;
};

template <typename T>
__global__ void AdamWElements(AdamWConstants<T> c, const T* param, const T* grad, const T* m, const T* v,
                              T* param_out, T* m_out, T* v_out, int64_t n) {
  for (SPMD_GRID_STRIDE(i, n)) {
    const T g = grad[i];
    const T mi = c.beta1 * m[i] + c.c_beta1 * g;
    const T vi = c.beta2 * v[i] + c.c_beta2 * (g * g);
    const T denominator = sqrt(vi * c.inv_c2) + c.eps;
    param_out[i] = c.decay * param[i] - (mi / denominator) * c.step_size;
    m_out[i] = mi;
    v_out[i] = vi;
  }
}

Tensors AdamW(const TensorArgs& inputs, const Attrs& attrs) {
  cpu::internal::CheckArity(inputs, 4);
  std::vector<Shape> shapes;
  for (const Tensor& t : inputs) shapes.push_back(t.shape());
  const optim::AdamWPlan p = optim::PlanAdamW(shapes, attrs);
  const DType dtype = cpu::internal::ComputeDTypeAll(inputs);
  CallContext ctx(inputs);
  Temporaries temps(ctx.stream);
  const Tensor& param = temps.As(inputs[0], dtype);
  const Tensor& grad = temps.As(inputs[1], dtype);
  const Tensor& m = temps.As(inputs[2], dtype);
  const Tensor& v = temps.As(inputs[3], dtype);
  Tensor param_out = NewChecked(inputs[0], inputs[0].shape(), dtype);
  Tensor m_out = NewChecked(inputs[0], inputs[0].shape(), dtype);
  Tensor v_out = NewChecked(inputs[0], inputs[0].shape(), dtype);
  const int64_t n = param_out.numel();
  auto launch = [&](auto zero) {
    using T = decltype(zero);
    const AdamWConstants<T> c{static_cast<T>(p.beta1),           static_cast<T>(p.beta2),
                              static_cast<T>(p.one_minus_beta1), static_cast<T>(p.one_minus_beta2),
                              static_cast<T>(p.inv_correction2), static_cast<T>(p.epsilon),
                              static_cast<T>(p.step_size),       static_cast<T>(p.decay)};
    if (n > 0) {
      LaunchGridStride(AdamWElements<T>, n, ctx.stream, c, DataOf<T>(param), DataOf<T>(grad), DataOf<T>(m),
                       DataOf<T>(v), DataOf<T>(param_out), DataOf<T>(m_out), DataOf<T>(v_out), n);
    }
  };
  if (dtype == DType::kFloat32) {
    launch(float{});
  } else {
    launch(double{});
  }
  return TensorList(std::move(param_out), std::move(m_out), std::move(v_out));
}

}  // namespace

// The optimizer step's CUDA kernel, by op name (kernels/cuda/registry.h).
const CudaKernel ops::adamw{&AdamW, HalfInputs::kWidened};

}  // namespace spmd::kernels::cuda
