// How the CUDA contractions call cuBLAS: plain C++ plans (no CUDA header), built from
// shapes and attrs only, so they are tested on the CPU (kernels/cuda/gemm_plan_test.cc:
// executing a plan with a naive column-major GEMM on the host gives what the CPU kernels
// give) and the device code only follows them.
//
// The chain: matmul's shapes -> plan::MatmulShapes (rules/ops/contraction_plan.h) ->
// a Product (row-major index math: C_e = A_e . B_e for every batch entry e, any unit-stride
// layout per operand, a stride per batch dim and operand, 0 where it broadcasts) ->
// PlanProduct -> GemmCalls (what cublasGemmStridedBatchedEx_64 takes: column-major,
// transposes folded in, the operands swapped for a row-major C). einsum's pairwise plan
// (PlanEinsum) ends in the same Products.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/tensor.h"
#include "rules/ops/contraction_plan.h"

namespace spmd::kernels::cuda {

// ---- Products and cuBLAS calls ------------------------------------------------------------

// A matrix operand of a product: element (i, j) at i * rs + j * cs elements from the batch
// entry's start. One of the strides must be 1 (or unused: a dim of size <= 1).
struct MatrixLayout {
  int64_t rows = 0, cols = 0;
  int64_t rs = 0, cs = 0;
};

// One batch dim of a product: its size and the step of each operand's entry start along it
// (elements; 0 where the operand broadcasts). C's steps must not be 0 where size > 1.
struct BatchDim {
  int64_t size = 1;
  int64_t a = 0, b = 0, c = 0;
};

// C_e (m x n) = A_e (m x k) . B_e (k x n) for every entry e of the batch dims (outermost
// first; none: one entry). Every C element is written once (beta = 0).
struct Product {
  int64_t m = 0, n = 0, k = 0;
  MatrixLayout a, b, c;
  std::vector<BatchDim> batch;
};

// One cuBLAS call, as cuBLAS sees it (column-major): for e in [0, batch_count),
//   C[offset_c + e stride_c] (m x n, ldc) = op_a(A[offset_a + e stride_a]) . op_b(B[...]),
// op = transpose when trans_*. cuBLAS's A is the product's operand `a_source` (0: the
// product's a, 1: its b), cuBLAS's B the other one. Offsets and strides count elements.
struct GemmCall {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 1, ldb = 1, ldc = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  int64_t batch_count = 0;
  int a_source = 0;
  int64_t offset_a = 0, offset_b = 0, offset_c = 0;
};

struct GemmPlan {
  std::vector<GemmCall> calls;
  // True when C is not empty but k == 0: C is all zeros and there is no call.
  bool zero_fill = false;
};

// The most batch entries one call takes (larger batches are split into several calls).
inline constexpr int64_t kMaxBatchPerCall = 65535;

// The calls computing `p`: size-1 batch dims dropped, neighbours merged where every operand
// steps through them as one dim, the largest remaining dim batched in each call (in chunks
// of kMaxBatchPerCall) and the others looped over (one call per index). Nothing when C is
// empty. Throws std::logic_error for a layout cuBLAS cannot take (no unit stride): the
// plans below never make one.
GemmPlan PlanProduct(const Product& p);

// ---- matmul, bmm, matmul_grad -------------------------------------------------------------

// matmul's shapes and index plan: plan::MatmulShapes (rules/ops/contraction_plan.h, the
// checks and strides written once for the reference and the CPU and CUDA kernels).
using plan::MatmulShapes;
// plan::PlanMatmulShapes with the kernels' limit on the output's size (CheckOutputShape).
MatmulShapes PlanKernelMatmul(const MatmulShapes& planned);

// out (out_shape, contiguous) = X_eff . Y_eff per batch entry; a = x, b = y.
Product MatmulProduct(const MatmulShapes& s);

// matmul_grad. dX_eff = G . Y_eff^T (a = out_grad, b = y), dY_eff = X_eff^T . G (a = x,
// b = out_grad), each written in its operand's own layout. When the operand broadcasts over
// a batch dim (several entries share one block), `summed` (below) says which dims of the
// per-entry gradient to sum: the product then writes every entry's block into a scratch
// tensor of shape GradScratchShape (batch + the operand's matrix dims), which is summed over
// those dims (keeping them as 1) and reshaped to the operand's shape.
enum class GradOf { kX, kY };
// True when operand `which` broadcasts over a batch dim of size other than 1 (0 included:
// its gradient is then a sum of nothing, zeros).
bool GradNeedsSum(const MatmulShapes& s, GradOf which);
// batch + the operand's own matrix dims ([k] for a 1-D x, [rows, cols] otherwise).
Shape GradScratchShape(const MatmulShapes& s, GradOf which, const Shape& operand_shape);
// Per dim of GradScratchShape: summed (a batch dim, not of size 1, the operand broadcasts
// over).
std::vector<bool> GradSummedDims(const MatmulShapes& s, GradOf which,
                                 const Shape& operand_shape);
// The product of the gradient of `which`: into the operand's layout (into_scratch false)
// or into the scratch tensor (true).
Product MatmulGradProduct(const MatmulShapes& s, GradOf which, bool into_scratch);

// ---- einsum -------------------------------------------------------------------------------

// einsum as the CPU kernel computes it, as data: operands contracted pairwise, left to
// right; letters no later operand or the output needs summed out of an operand first; each
// pair multiplied as [batch, free, contracted] x [batch, contracted, free] (permuting an
// operand only when its letters are in neither the row-major nor the transposed order);
// the result summed and permuted to the output's letters.
//
// Terms: 0 .. inputs-1 are the inputs, term inputs + j is made by step j. Example:
// "bij,bjk->bik" is one kContract step (no permutation: a row-major, b row-major).
struct EinsumStep {
  enum class Kind { kSum, kContract, kPermute };
  Kind kind = Kind::kSum;
  int src = 0;   // kSum, kPermute: the term; kContract: the left term
  int src2 = 0;  // kContract: the right term
  std::vector<bool> reduced;        // kSum: per dim of src, summed (the rest kept in order)
  std::vector<int64_t> perm, perm2;  // kPermute: perm; kContract: applied to src / src2
                                     // first (empty: used as they are)
  Product product;                   // kContract: on the (permuted) terms, a = src, b = src2
  std::string letters;               // the new term's letters
  Shape shape;                       // the new term's shape
};
struct EinsumPlan {
  std::vector<EinsumStep> steps;
  int result = 0;  // the term holding the output (an input when no step is needed)
  Shape out_shape;
  // Per input, the shape the steps read it as: its own, less the size-1 dims that
  // broadcast against another operand (rules/engine/shape_util.h PlanEinsum; the data are the
  // same, row-major, as the CPU kernel reads them).
  std::vector<Shape> input_shapes;
};
// Parses and checks as the CPU kernel does (rules/engine/shape_util.h: same errors, same order;
// Unsupported "outputs" when the output or an intermediate exceeds the kernels' limit).
// `shapes` has one entry per input (the caller checks there is at least one).
EinsumPlan PlanEinsum(const std::string& equation, const std::vector<Shape>& shapes);

}  // namespace spmd::kernels::cuda
