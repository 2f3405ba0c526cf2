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

namespace spmd::kernels::cuda {
namespace {

using detail::CheckInputs;
using detail::ci::InputField;

int64_t RopeTableSeq(const Tensor& table, size_t i) {
  constexpr int seq_dim = 1;
  const std::string field = InputField(i, "shape");
  if (table.rank() == 2) return table.shape()[0];
  if (table.rank() != 4) ThrowInvalid(field, "sin and cos must be [seq, head_dim] or 4-D");
  for (int d = 0; d < 3; ++d) {
    if (d != seq_dim && table.shape()[d] != 1) {
      ThrowInvalid(field, "sin and cos must be 1 on every dim but the sequence and head dims");
    }
  }
  return table.shape()[seq_dim];
}

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
  const size_t n = inputs.size();
  if (n < 3 || n > 5) {
    ThrowInvalid("inputs", "expected q, [k, [v,]] sin, cos: 3 to 5 inputs, got " + std::to_string(n));
  }
  const bool neox = attrs.GetBool("use_neox_rotary_style");
  const bool time_major = attrs.GetBool("time_major");
  const size_t rotated = n - 2;
  for (size_t i = 0; i < rotated; ++i) {
    if (inputs[i].rank() != 4) ThrowInvalid(InputField(i, "shape"), "q, k and v must be 4-D");
  }
  const Shape& q = inputs[0].shape();
  const int64_t head_dim = q[3];
  if (head_dim % 2 != 0) {
    ThrowInvalid(InputField(0, "shape"), "head_dim " + std::to_string(head_dim) + " must be even");
  }
  const int seq_dim = time_major ? 0 : 1;
  const int64_t table_seq[2] = {RopeTableSeq(inputs[n - 2], n - 2), RopeTableSeq(inputs[n - 1], n - 1)};
  for (size_t i = 1; i < rotated; ++i) {
    const Shape& s = inputs[i].shape();
    if (s != q) ThrowInvalid(InputField(i, "shape"), ShapeToString(s) + " does not fit q " + ShapeToString(q));
  }
  for (size_t t = 0; t < 2; ++t) {
    const size_t i = n - 2 + t;
    if (table_seq[t] != q[seq_dim] || inputs[i].shape().back() != head_dim) {
      ThrowInvalid(InputField(i, "shape"), ShapeToString(inputs[i].shape()) + " does not fit seq " +
                                               std::to_string(q[seq_dim]) + ", head_dim " + std::to_string(head_dim));
    }
  }
  const DType dtype = detail::ci::ComputeDTypeAll(inputs);
  const Tensor& sin = inputs[n - 2];
  const Tensor& cos = inputs[n - 1];
  Tensors outs;
  for (size_t r = 0; r < rotated; ++r) {
    const Tensor& x = inputs[r];
    Tensor out = detail::NewOut(x, x.shape(), dtype);
    const int64_t count = out.numel();
    if (count > 0 && head_dim > 0) {
      RopeArgs a;
      a.d1 = x.shape()[1];
      a.heads = x.shape()[2];
      a.head_dim = head_dim;
      a.time_major = time_major;
      a.neox = neox;
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
  detail::ci::CheckArity(inputs, 3);
  for (size_t i = 0; i < 3; ++i) {
    if (inputs[i].rank() != 3) {
      ThrowInvalid(InputField(i, "shape"), "bmm_grad needs rank 3, got " + ShapeToString(inputs[i].shape()));
    }
  }
  const Shape& x = inputs[0].shape();
  const Shape& y = inputs[1].shape();
  if (y[0] != x[0] || y[1] != x[2]) {
    ThrowInvalid(InputField(1, "shape"), ShapeToString(y) + " does not fit x " + ShapeToString(x) + " as [b, k, n]");
  }
  if (inputs[2].shape() != Shape{x[0], x[1], y[2]}) {
    ThrowInvalid(InputField(2, "shape"), "out_grad " + ShapeToString(inputs[2].shape()) + " != bmm output " +
                                             ShapeToString(Shape{x[0], x[1], y[2]}));
  }
  const CudaKernelFn matmul_grad = FindCudaKernel("matmul_grad");
  if (matmul_grad == nullptr) ThrowUnsupported("op", "bmm_grad runs matmul_grad's CUDA kernel, which is missing");
  Attrs plain;
  plain.Set("trans_x", false);
  plain.Set("trans_y", false);
  return matmul_grad(inputs, plain);
}

}  // namespace

// The fused ops' CUDA kernels, by op name (kernels/cuda/registry.h).
const CudaKernel ops::fused_rotary_position_embedding{&FusedRope, HalfInputs::kWidened};
const CudaKernel ops::bmm_grad{&BmmGrad, HalfInputs::kWidened};

}  // namespace spmd::kernels::cuda
