// The plans of the contractions (rules/ops/contraction.cc) and of bmm_grad
// (rules/ops/fused.cc): matmul, bmm, matmul_grad, bmm_grad, fused_gemm_epilogue and
// fused_linear_param_grad_add's attr reads, typed validation and shapes, with matmul's
// index plan (each operand's matrix strides and batch dims), written once for the
// references (reference/ops_contraction.cc, ops_fused.cc), the CPU kernels
// (kernels/cpu/contraction.cc, fused.cc) and the CUDA kernels (kernels/cuda/contraction.cu,
// fused.cu, gemm_plan.cc). Header-only; no value arithmetic. The kernels add their own limit
// on the output's size (kernels/cpu/internal.h).
//
// Example: x [2, 1, 3, 4] (trans_x), y [5, 3, 6] -> out [2, 5, 4, 6], m 4, k 3, n 6.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "rules/model/attrs.h"
#include "rules/model/error.h"
#include "rules/engine/op_plan.h"
#include "rules/engine/shape_util.h"

namespace spmd::plan {

// X_eff (m x k) element (i, p) at i * x_stride_m + p * x_stride_k in one batch entry of x
// (x_matrix elements); Y_eff (k x n) likewise; batch the broadcast of x_batch and y_batch.
struct MatmulShapes {
  Shape out_shape;
  Shape batch;             // the broadcast batch shape
  Shape x_batch, y_batch;  // each operand's own batch dims
  int64_t m = 1, n = 1, k = 1;
  int64_t x_stride_m = 0, x_stride_k = 0, y_stride_k = 0, y_stride_n = 0;
  int64_t x_matrix = 1, y_matrix = 1;
};

// matmul's shapes: rank >= 1 (InvalidArgument inputs[i].shape), the contracted dims equal
// (inputs[1].shape), the batch dims broadcast (shape::BroadcastShapes).
inline MatmulShapes PlanMatmulShapes(const Shape& xs, const Shape& ys, bool trans_x, bool trans_y) {
  const auto rx = static_cast<int64_t>(xs.size());
  const auto ry = static_cast<int64_t>(ys.size());
  if (rx == 0) ThrowInvalid(shape::InputField(0, "shape"), "matmul needs rank >= 1, got []");
  if (ry == 0) ThrowInvalid(shape::InputField(1, "shape"), "matmul needs rank >= 1, got []");
  MatmulShapes s;
  int64_t kx = 0, ky = 0;
  if (rx == 1) {
    s.m = 1;
    kx = xs[0];
    s.x_stride_m = 0;
    s.x_stride_k = 1;
    s.x_matrix = kx;
  } else {
    const int64_t rows = xs[rx - 2], cols = xs[rx - 1];
    s.m = trans_x ? cols : rows;
    kx = trans_x ? rows : cols;
    s.x_stride_m = trans_x ? 1 : cols;
    s.x_stride_k = trans_x ? cols : 1;
    s.x_matrix = rows * cols;
    s.x_batch.assign(xs.begin(), xs.end() - 2);
  }
  if (ry == 1) {
    s.n = 1;
    ky = ys[0];
    s.y_stride_k = 1;
    s.y_stride_n = 0;
    s.y_matrix = ky;
  } else {
    const int64_t rows = ys[ry - 2], cols = ys[ry - 1];
    s.n = trans_y ? rows : cols;
    ky = trans_y ? cols : rows;
    s.y_stride_k = trans_y ? 1 : cols;
    s.y_stride_n = trans_y ? cols : 1;
    s.y_matrix = rows * cols;
    s.y_batch.assign(ys.begin(), ys.end() - 2);
  }
  if (kx != ky) {
    ThrowInvalid(shape::InputField(1, "shape"), "contracted dim " + std::to_string(ky) + " of " +
                                                    shape::ShapeString(ys) + " != " + std::to_string(kx) +
                                                    " of x " + shape::ShapeString(xs));
  }
  s.k = kx;
  s.batch = shape::BroadcastShapes({s.x_batch, s.y_batch});
  s.out_shape = s.batch;
  if (rx >= 2) s.out_shape.push_back(s.m);
  if (ry >= 2) s.out_shape.push_back(s.n);
  return s;
}

// matmul (x, y; trans_x, trans_y).
inline MatmulShapes PlanMatmul(const Shapes& shapes, const Attrs& attrs) {
  const bool trans_x = attrs.GetBool("trans_x");
  const bool trans_y = attrs.GetBool("trans_y");
  CheckArity(shapes, 2);
  return PlanMatmulShapes(shapes[0], shapes[1], trans_x, trans_y);
}

// matmul_grad (x, y, out_grad; trans_x, trans_y): out_grad has matmul's output shape.
inline MatmulShapes PlanMatmulGrad(const Shapes& shapes, const Attrs& attrs) {
  const bool trans_x = attrs.GetBool("trans_x");
  const bool trans_y = attrs.GetBool("trans_y");
  CheckArity(shapes, 3);
  MatmulShapes s = PlanMatmulShapes(shapes[0], shapes[1], trans_x, trans_y);
  if (shapes[2] != s.out_shape) {
    ThrowInvalid(shape::InputField(2, "shape"), "out_grad " + shape::ShapeString(shapes[2]) +
                                                    " != matmul output " + shape::ShapeString(s.out_shape));
  }
  return s;
}

// bmm (x [b, m, k], y [b, k, n]) -> [b, m, n].
inline MatmulShapes PlanBmm(const Shapes& shapes) {
  CheckArity(shapes, 2);
  const Shape& x = shapes[0];
  const Shape& y = shapes[1];
  if (x.size() != 3) ThrowInvalid(shape::InputField(0, "shape"), "bmm needs [b, m, k], got " + shape::ShapeString(x));
  if (y.size() != 3) ThrowInvalid(shape::InputField(1, "shape"), "bmm needs [b, k, n], got " + shape::ShapeString(y));
  if (x[0] != y[0] || x[2] != y[1]) {
    ThrowInvalid(shape::InputField(1, "shape"),
                 shape::ShapeString(y) + " does not fit x " + shape::ShapeString(x) + " as [b, k, n]");
  }
  return PlanMatmulShapes(x, y, false, false);
}

// bmm_grad (x [b, m, k], y [b, k, n], out_grad [b, m, n]) -> x_grad, y_grad: matmul_grad's
// without transposes.
inline MatmulShapes PlanBmmGrad(const Shapes& shapes) {
  CheckArity(shapes, 3);
  for (size_t i = 0; i < 3; ++i) {
    if (shapes[i].size() != 3) {
      ThrowInvalid(shape::InputField(i, "shape"), "bmm_grad needs rank 3, got " + shape::ShapeString(shapes[i]));
    }
  }
  const Shape& x = shapes[0];
  const Shape& y = shapes[1];
  if (y[0] != x[0] || y[1] != x[2]) {
    ThrowInvalid(shape::InputField(1, "shape"),
                 shape::ShapeString(y) + " does not fit x " + shape::ShapeString(x) + " as [b, k, n]");
  }
  const Shape out{x[0], x[1], y[2]};
  if (shapes[2] != out) {
    ThrowInvalid(shape::InputField(2, "shape"),
                 "out_grad " + shape::ShapeString(shapes[2]) + " != bmm output " + shape::ShapeString(out));
  }
  return PlanMatmulShapes(x, y, false, false);
}

// fused_gemm_epilogue's activation, applied to matmul(x, y) + bias.
enum class Epilogue { kNone, kRelu, kGelu };

// fused_gemm_epilogue (x [..., m, k] (trans_x: [..., k, m]), y [k, n] (trans_y: [n, k]),
// bias [n]; trans_x, trans_y, activation) -> out, reserve_space: matmul's shapes within
// Paddle's limits (x rank >= 2, y rank 2, bias [n]), activation "none", "relu" or "gelu"
// (InvalidArgument attrs.activation). reserve_space (Paddle's second output) is the
// pre-activation, out's shape, for relu and gelu, and unset (0-d) for none.
//
// Example: x [2, 3, 4], y [4, 5], bias [5] -> out [2, 3, 5], m 3, k 4, n 5.
struct FusedGemmEpiloguePlan {
  MatmulShapes mm;
  Epilogue activation = Epilogue::kNone;
  Shape reserve_shape;  // out's shape, or [] (unset) for "none"
};

inline FusedGemmEpiloguePlan PlanFusedGemmEpilogue(const Shapes& shapes, const Attrs& attrs) {
  const bool trans_x = attrs.GetBool("trans_x");
  const bool trans_y = attrs.GetBool("trans_y");
  const std::string activation = attrs.GetString("activation");
  FusedGemmEpiloguePlan p;
  if (activation == "relu") {
    p.activation = Epilogue::kRelu;
  } else if (activation == "gelu") {
    p.activation = Epilogue::kGelu;
  } else if (activation != "none") {
    ThrowInvalid("attrs.activation", "\"" + activation + "\" is not none, relu or gelu");
  }
  CheckArity(shapes, 3);
  if (shapes[0].size() < 2) {
    ThrowInvalid(shape::InputField(0, "shape"), "x must have rank >= 2, got " + shape::ShapeString(shapes[0]));
  }
  if (shapes[1].size() != 2) {
    ThrowInvalid(shape::InputField(1, "shape"), "y must have rank 2, got " + shape::ShapeString(shapes[1]));
  }
  p.mm = PlanMatmulShapes(shapes[0], shapes[1], trans_x, trans_y);
  CheckShapeIs(shapes, 2, {p.mm.n}, "bias");
  if (p.activation != Epilogue::kNone) p.reserve_shape = p.mm.out_shape;
  return p;
}

// linear_v2 (x [..., k] (rank >= 1), weight [k, n] (transpose_weight: [n, k]), bias [n];
// transpose_weight) -> out = matmul(x, weight) + bias, out [..., n]: Paddle's linear layer,
// fused_gemm_epilogue without an activation (its plan's shapes; x may be a vector here, as
// in Paddle's kernel). A 0-d bias is refused (inputs[2].shape; Paddle broadcasts it).
//
// Example: x [2, 3, 4], weight [4, 5], bias [5] -> out [2, 3, 5].
inline FusedGemmEpiloguePlan PlanLinearV2(const Shapes& shapes, const Attrs& attrs) {
  const bool transpose_weight = attrs.GetBool("transpose_weight");
  CheckArity(shapes, 3);
  if (shapes[0].empty()) ThrowInvalid(shape::InputField(0, "shape"), "x must have rank >= 1, got []");
  if (shapes[1].size() != 2) {
    ThrowInvalid(shape::InputField(1, "shape"), "weight must have rank 2, got " + shape::ShapeString(shapes[1]));
  }
  FusedGemmEpiloguePlan p;
  p.mm = PlanMatmulShapes(shapes[0], shapes[1], false, transpose_weight);
  CheckShapeIs(shapes, 2, {p.mm.n}, "bias");
  return p;
}

// fused_linear_param_grad_add (x [..., k], dout [..., n], dweight [k, n], dbias [n];
// multi_precision, has_bias) -> dweight_out [k, n], dbias_out [n]: a linear layer's
// parameter gradients added into the accumulators, dweight_out = dweight + x_flat^T .
// dout_flat and dbias_out = dbias + dout summed over its leading dims (x and dout flattened
// to `rows` rows over all leading dims). Always four inputs (Paddle's order): a 0-d dweight
// or dbias is absent (Paddle's empty optional; neither can be 0-d when given), adding
// nothing. x and dout have one rank >= 1 and the same leading dims (InvalidArgument
// inputs[1].shape); a given dweight is [k, n] (inputs[2].shape), a given dbias [n], only
// with has_bias (inputs[3].shape). dbias_out is unset (0-d) without has_bias.
// multi_precision is read and changes nothing here (docs/DECISIONS.md).
//
// Example: x [2, 3, 4], dout [2, 3, 5], dweight [] (absent), dbias [5] -> dweight_out
// [4, 5], dbias_out [5], rows 6, k 4, n 5.
struct LinearParamGradPlan {
  int64_t rows = 1, k = 0, n = 0;
  bool has_dweight = false, has_dbias = false, has_bias = true;
  Shape dweight_out, dbias_out;  // dbias_out [] (unset) without has_bias
};

inline LinearParamGradPlan PlanFusedLinearParamGradAdd(const Shapes& shapes, const Attrs& attrs) {
  (void)attrs.GetBool("multi_precision");
  LinearParamGradPlan p;
  p.has_bias = attrs.GetBool("has_bias");
  CheckArity(shapes, 4);
  const Shape& x = shapes[0];
  const Shape& dout = shapes[1];
  if (x.empty()) ThrowInvalid(shape::InputField(0, "shape"), "x must have rank >= 1, got []");
  if (dout.size() != x.size() || !std::equal(x.begin(), x.end() - 1, dout.begin())) {
    ThrowInvalid(shape::InputField(1, "shape"), "dout " + shape::ShapeString(dout) +
                                                    " must have x's rank and leading dims, x " +
                                                    shape::ShapeString(x));
  }
  p.k = x.back();
  p.n = dout.back();
  for (size_t d = 0; d + 1 < x.size(); ++d) p.rows *= x[d];
  p.dweight_out = {p.k, p.n};
  p.has_dweight = !shapes[2].empty();
  if (p.has_dweight) CheckShapeIs(shapes, 2, p.dweight_out, "dweight");
  p.has_dbias = !shapes[3].empty();
  if (p.has_dbias && !p.has_bias) {
    ThrowInvalid(shape::InputField(3, "shape"), "dbias is given but has_bias is false");
  }
  if (p.has_dbias) CheckShapeIs(shapes, 3, {p.n}, "dbias");
  if (p.has_bias) p.dbias_out = {p.n};
  return p;
}

// einsum contracted pairwise, left to right (the CPU kernel and the CUDA plan): the letters
// still needed after operand i, the output's and those of the operands after i. A letter
// in none of them is summed out of the running term once operand i is in.
inline std::vector<std::string> EinsumLettersNeededAfter(const shape::EinsumEquation& eq) {
  std::vector<std::string> needed_after(eq.operands.size());
  std::string needed = eq.output;
  for (size_t i = eq.operands.size(); i-- > 0;) {
    needed_after[i] = needed;
    needed += eq.operands[i];
  }
  return needed_after;
}

}  // namespace spmd::plan
