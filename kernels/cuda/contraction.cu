// CUDA kernels of the contraction family (the ops of kernels/cpu/contraction.cc): matmul,
// bmm, matmul_grad and einsum, all through cublasGemmStridedBatchedEx_64 following the
// plans of kernels/cuda/gemm_plan.h (transposes folded into the call, the operands swapped
// for row-major outputs, broadcast batch dims as a stride of 0 or a loop of calls).
//
// Dtypes: float32 (CUBLAS_COMPUTE_32F, no TF32), float64 (CUBLAS_COMPUTE_64F); matmul, bmm
// and matmul_grad take bfloat16 / float16 themselves (2-byte operands and output,
// CUBLAS_COMPUTE_32F: float32 accumulation, one rounding, as the CPU kernels); einsum gets
// them widened to float32 by RunCudaKernel. int64 / bool value inputs are converted to the
// compute dtype first, as the CPU kernels convert them.
#include <deque>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/cpu/internal.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cublas_handle.h"
#include "kernels/cuda/gemm_plan.h"
#include "kernels/cuda/math_ops.h"
#include "kernels/cuda/math_util.cuh"
#include "kernels/cuda/permute.h"
#include "kernels/cuda/registry.h"
#include "rules/engine/shape_util.h"

namespace spmd::kernels::cuda {
namespace {

using cpu::internal::CheckArity;
using cpu::internal::ComputeDType;
using cpu::internal::InputField;

cudaDataType CudaTypeOf(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return CUDA_R_32F;
    case DType::kFloat64: return CUDA_R_64F;
    case DType::kBFloat16: return CUDA_R_16BF;
    case DType::kFloat16: return CUDA_R_16F;
    default: break;
  }
  ThrowUnsupported("dtype", "no cuBLAS type for " + std::string(ToString(dtype)));
}

// Runs `plan` with the product's operands op0 (its a) and op1 (its b), of one dtype, into
// c (that dtype, or float32 for 2-byte operands); on `stream`, `device` current. Without a
// call (k == 0, or no batch entry) c is all zeros.
void RunGemmPlan(const GemmPlan& plan, const Tensor& op0, const Tensor& op1, Tensor& c,
                 int device, cudaStream_t stream) {
  if (plan.calls.empty()) {
    if (c.nbytes() > 0) SPMD_CUDA_CHECK(cudaMemsetAsync(c.bytes(), 0, c.nbytes(), stream));
    return;
  }
  const DType ab = op0.dtype();
  const cudaDataType ab_type = CudaTypeOf(ab);
  const cudaDataType c_type = CudaTypeOf(c.dtype());
  const bool f64 = ab == DType::kFloat64;
  const cublasComputeType_t compute = f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
  const float one_f = 1.0f, zero_f = 0.0f;
  const double one_d = 1.0, zero_d = 0.0;
  const void* alpha = f64 ? static_cast<const void*>(&one_d) : static_cast<const void*>(&one_f);
  const void* beta = f64 ? static_cast<const void*>(&zero_d) : static_cast<const void*>(&zero_f);
  const int64_t ab_size = static_cast<int64_t>(ElementSize(ab));
  const int64_t c_size = static_cast<int64_t>(ElementSize(c.dtype()));
  cublasHandle_t handle = CublasHandle(device, stream);
  for (const GemmCall& call : plan.calls) {
    const Tensor& a = call.a_source == 0 ? op0 : op1;
    const Tensor& b = call.a_source == 0 ? op1 : op0;
    const auto* a_ptr = reinterpret_cast<const char*>(a.bytes()) + call.offset_a * ab_size;
    const auto* b_ptr = reinterpret_cast<const char*>(b.bytes()) + call.offset_b * ab_size;
    auto* c_ptr = reinterpret_cast<char*>(c.bytes()) + call.offset_c * c_size;
    SPMD_CUBLAS_CHECK(cublasGemmStridedBatchedEx_64(
        handle, call.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, call.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
        call.m, call.n, call.k, alpha, a_ptr, ab_type, call.lda, call.stride_a, b_ptr, ab_type,
        call.ldb, call.stride_b, beta, c_ptr, c_type, call.ldc, call.stride_c, call.batch_count,
        compute, CUBLAS_GEMM_DEFAULT));
  }
}

Tensor RunMatmul(const TensorArgs& inputs, const MatmulShapes& s) {
  const DType dtype = ComputeDType(inputs, {0, 1});
  CallContext ctx(inputs);
  Temporaries temps(ctx.stream);
  const Tensor& x = temps.As(inputs[0], dtype);
  const Tensor& y = temps.As(inputs[1], dtype);
  Tensor out = NewOutput(inputs[0], s.out_shape, dtype);
  RunGemmPlan(PlanProduct(MatmulProduct(s)), x, y, out, ctx.device.index, ctx.stream);
  return out;
}

Tensors Matmul(const TensorArgs& inputs, const Attrs& attrs) {
  CheckTwoByteMix(inputs);
  const MatmulShapes s = PlanKernelMatmul(plan::PlanMatmul(plan::ShapesOf(inputs), attrs));
  if (TwoByteWithIntegerValues(inputs, {0, 1})) return WidenTwoByte(inputs, attrs, Matmul);
  return TensorList(RunMatmul(inputs, s));
}

Tensors Bmm(const TensorArgs& inputs, const Attrs& attrs) {
  CheckTwoByteMix(inputs);
  const MatmulShapes s = PlanKernelMatmul(plan::PlanBmm(plan::ShapesOf(inputs)));
  if (TwoByteWithIntegerValues(inputs, {0, 1})) return WidenTwoByte(inputs, attrs, Bmm);
  return TensorList(RunMatmul(inputs, s));
}

Tensors MatmulGrad(const TensorArgs& inputs, const Attrs& attrs) {
  CheckTwoByteMix(inputs);
  const MatmulShapes s = PlanKernelMatmul(plan::PlanMatmulGrad(plan::ShapesOf(inputs), attrs));
  if (TwoByteWithIntegerValues(inputs, {0, 1, 2})) return WidenTwoByte(inputs, attrs, MatmulGrad);
  const DType dtype = ComputeDType(inputs, {0, 1, 2});
  CallContext ctx(inputs);
  Temporaries temps(ctx.stream);
  const Tensor& x = temps.As(inputs[0], dtype);
  const Tensor& y = temps.As(inputs[1], dtype);
  const Tensor& g = temps.As(inputs[2], dtype);
  // Per batch entry: x_grad += G . Y^T in x's layout, y_grad += X^T . G in y's. Where an
  // operand broadcasts over a batch dim, every entry's block goes to a scratch tensor
  // (float32 for the 2-byte types, as the CPU kernel accumulates) that is then summed.
  auto grad_of = [&](GradOf which) {
    const Tensor& operand = which == GradOf::kX ? inputs[0] : inputs[1];
    const Tensor& op0 = which == GradOf::kX ? g : x;
    const Tensor& op1 = which == GradOf::kX ? y : g;
    if (!GradNeedsSum(s, which)) {
      Tensor grad = NewChecked(inputs[0], operand.shape(), dtype);
      RunGemmPlan(PlanProduct(MatmulGradProduct(s, which, false)), op0, op1, grad,
                  ctx.device.index, ctx.stream);
      return grad;
    }
    const DType scratch_dtype = IsTwoByteFloat(dtype) ? DType::kFloat32 : dtype;
    Tensor scratch =
        NewChecked(inputs[0], GradScratchShape(s, which, operand.shape()), scratch_dtype);
    RunGemmPlan(PlanProduct(MatmulGradProduct(s, which, true)), op0, op1, scratch,
                ctx.device.index, ctx.stream);
    Tensor grad = SumOnDevice(scratch, GradSummedDims(s, which, operand.shape()), true);
    grad.Reshape(operand.shape());
    if (scratch_dtype != dtype) grad = ConvertOnDevice(grad, dtype);
    return grad;
  };
  Tensor x_grad = grad_of(GradOf::kX);
  Tensor y_grad = grad_of(GradOf::kY);
  return TensorList(std::move(x_grad), std::move(y_grad));
}

Tensors Einsum(const TensorArgs& inputs, const Attrs& attrs) {
  const std::string& equation = attrs.GetString("equation");
  cpu::internal::CheckArityAtLeast(inputs, 1);
  std::vector<Shape> shapes;
  for (const Tensor& t : inputs) shapes.push_back(t.shape());
  {
    // The CPU kernel's checks before the dtype's (PlanEinsum repeats them, then checks the
    // intermediates, which the CPU kernel does after the dtype).
    const shape::EinsumPlan planned = shape::PlanEinsum(equation, shapes);
    Shape out_shape;
    for (char c : planned.eq.output) out_shape.push_back(planned.size[static_cast<unsigned char>(c)]);
    cpu::internal::CheckOutputShape(out_shape);
  }
  const DType dtype = cpu::internal::ComputeDTypeAll(inputs);
  const EinsumPlan plan = PlanEinsum(equation, shapes);
  CallContext ctx(inputs);
  Temporaries temps(ctx.stream);
  std::vector<const Tensor*> terms;  // inputs (as dtype), then one per step
  std::vector<Tensor*> made;         // the steps' terms made on ctx.stream (may be handed out)
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = temps.As(inputs[i], dtype);
    if (t.shape() == plan.input_shapes[i]) {
      terms.push_back(&t);
    } else {  // broadcast size-1 dims dropped: the same data under a shorter shape
      Tensor view = t;
      view.Reshape(plan.input_shapes[i]);
      terms.push_back(&temps.Adopt(std::move(view)));
    }
    made.push_back(nullptr);
  }
  for (const EinsumStep& step : plan.steps) {
    Tensor* term = nullptr;
    switch (step.kind) {
      case EinsumStep::Kind::kSum:
        term = &temps.Adopt(SumOnDevice(*terms[step.src], step.reduced, false));
        break;
      case EinsumStep::Kind::kPermute:
        term = &temps.Adopt(PermuteOnDevice(*terms[step.src], step.perm));
        break;
      case EinsumStep::Kind::kContract: {
        const Tensor* a = terms[step.src];
        const Tensor* b = terms[step.src2];
        if (!step.perm.empty()) a = &temps.Adopt(PermuteOnDevice(*a, step.perm));
        if (!step.perm2.empty()) b = &temps.Adopt(PermuteOnDevice(*b, step.perm2));
        Tensor out = NewOutput(inputs[0], step.shape, dtype);
        RunGemmPlan(PlanProduct(step.product), *a, *b, out, ctx.device.index, ctx.stream);
        term = &temps.Adopt(std::move(out));
        break;
      }
    }
    terms.push_back(term);
    made.push_back(ToCuda(term->stream()) == ctx.stream ? term : nullptr);
  }
  if (made[plan.result] != nullptr) return TensorList(std::move(*made[plan.result]));
  const Tensor& result = *terms[plan.result];
  // The result is an input (converted or not) or was made on another stream: a copy on
  // inputs[0]'s stream.
  Tensor out = NewOutput(inputs[0], plan.out_shape, dtype);
  if (out.nbytes() > 0) {
    SPMD_CUDA_CHECK(cudaMemcpyAsync(out.bytes(), result.bytes(), out.nbytes(),
                                    cudaMemcpyDeviceToDevice, ctx.stream));
  }
  return TensorList(std::move(out));
}

}  // namespace

// The contraction ops' CUDA kernels, by op name (kernels/cuda/registry.h).
const CudaKernel ops::matmul{&Matmul, HalfInputs::kNative};
const CudaKernel ops::bmm{&Bmm, HalfInputs::kNative};
const CudaKernel ops::matmul_grad{&MatmulGrad, HalfInputs::kNative};
const CudaKernel ops::einsum{&Einsum, HalfInputs::kWidened};

}  // namespace spmd::kernels::cuda
