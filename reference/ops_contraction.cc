// Contractions: matmul, bmm, einsum, matmul_grad (docs/OPS.md "Contractions"),
// fused_gemm_epilogue and fused_linear_param_grad_add (docs/OPS.md "Paddle's other
// registered ops").
#include <array>
#include <map>
#include <string>
#include <vector>

#include "reference/reference.h"
#include "reference/util.h"
#include "rules/ops/contraction_plan.h"
#include "rules/engine/shape_util.h"

namespace spmd::reference::ops {
namespace {

using internal::CheckArity;
using internal::InputField;
using internal::ShapeToString;

// matmul as index math: every (batch, i, j, p) term out[b,i,j] += x[b,i,p] * y[b,p,j] is
// visited with the flat offsets of its three elements in x, y and out. Transposes, 1-D
// operands and batch broadcasting live only in the offsets, so matmul and matmul_grad
// share them.
//
// Example: x [2, 1, 3, 4] (trans_x), y [5, 3, 6] -> out [2, 5, 4, 6], k = 3.
struct MatmulPlan {
  Shape out_shape;
  Shape batch;  // the broadcast batch shape
  int64_t m = 1, n = 1, k = 1;
  // Per operand: its batch shape, batch strides, and strides of its two matrix dims.
  Shape x_batch, x_batch_strides, y_batch, y_batch_strides;
  int64_t x_stride_m = 0, x_stride_k = 0, y_stride_k = 0, y_stride_n = 0;

  // Calls fn(x_offset, y_offset, out_offset) for every term.
  template <typename F>
  void ForEachTerm(F fn) const {
    int64_t batch_count = NumElements(batch);
    for (int64_t b = 0; b < batch_count; ++b) {
      std::vector<int64_t> index = internal::Unravel(b, batch);
      int64_t xb = BatchOffset(index, x_batch, x_batch_strides);
      int64_t yb = BatchOffset(index, y_batch, y_batch_strides);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          int64_t o = (b * m + i) * n + j;
          for (int64_t p = 0; p < k; ++p) {
            fn(xb + i * x_stride_m + p * x_stride_k, yb + p * y_stride_k + j * y_stride_n, o);
          }
        }
      }
    }
  }

 private:
  static int64_t BatchOffset(const std::vector<int64_t>& index, const Shape& shape,
                             const Shape& strides) {
    size_t shift = index.size() - shape.size();
    int64_t offset = 0;
    for (size_t d = 0; d < shape.size(); ++d) {
      offset += (shape[d] == 1 ? 0 : index[d + shift]) * strides[d];
    }
    return offset;
  }
};

// The offsets of matmul's terms for the shapes that plan::PlanMatmulShapes checked and
// planned (rules/ops/contraction_plan.h): the reference walks x and y by their own row-major
// strides.
MatmulPlan OffsetsOf(const Tensor& x, const Tensor& y, const plan::MatmulShapes& s, bool trans_x,
                     bool trans_y) {
  int64_t rx = internal::Rank(x);
  int64_t ry = internal::Rank(y);
  MatmulPlan plan;
  plan.m = s.m;
  plan.n = s.n;
  plan.k = s.k;
  plan.batch = s.batch;
  plan.out_shape = s.out_shape;
  Shape xs = internal::Strides(x.shape);
  Shape ys = internal::Strides(y.shape);
  if (rx == 1) {  // [k]
    plan.x_stride_m = 0;
    plan.x_stride_k = 1;
  } else {
    plan.x_stride_m = xs[trans_x ? rx - 1 : rx - 2];
    plan.x_stride_k = xs[trans_x ? rx - 2 : rx - 1];
    plan.x_batch.assign(x.shape.begin(), x.shape.end() - 2);
    plan.x_batch_strides.assign(xs.begin(), xs.end() - 2);
  }
  if (ry == 1) {  // [k]
    plan.y_stride_k = 1;
    plan.y_stride_n = 0;
  } else {
    plan.y_stride_k = ys[trans_y ? ry - 1 : ry - 2];
    plan.y_stride_n = ys[trans_y ? ry - 2 : ry - 1];
    plan.y_batch.assign(y.shape.begin(), y.shape.end() - 2);
    plan.y_batch_strides.assign(ys.begin(), ys.end() - 2);
  }
  return plan;
}

// ---- einsum ----

using shape::EinsumEquation;  // the parser is shared with the rule (rules/engine/shape_util.h)

}  // namespace

Tensors matmul(const Tensors& inputs, const Attrs& attrs) {
  const plan::MatmulShapes shapes = plan::PlanMatmul(plan::ShapesOf(inputs), attrs);
  const Tensor& x = inputs[0];
  const Tensor& y = inputs[1];
  MatmulPlan plan = OffsetsOf(x, y, shapes, attrs.GetBool("trans_x"), attrs.GetBool("trans_y"));
  Tensor out = internal::Zeros(plan.out_shape);
  plan.ForEachTerm(
      [&](int64_t xo, int64_t yo, int64_t oo) { out.data[oo] += x.data[xo] * y.data[yo]; });
  return {out};
}

Tensors bmm(const Tensors& inputs, const Attrs&) {
  (void)plan::PlanBmm(plan::ShapesOf(inputs));
  Attrs plain;
  plain.Set("trans_x", false);
  plain.Set("trans_y", false);
  return matmul(inputs, plain);
}

// numpy's einsum: every assignment of every letter (`...` planned into letters of its
// own), the product of the operands' elements at it added to the output's; an operand dim
// that broadcasts (size 1, the letter larger elsewhere) always reads index 0.
Tensors einsum(const Tensors& inputs, const Attrs& attrs) {
  const std::string& equation = attrs.GetString("equation");
  internal::CheckArityAtLeast(inputs, 1);
  std::vector<Shape> shapes;
  for (size_t i = 0; i < inputs.size(); ++i) shapes.push_back(inputs[i].shape);
  const shape::EinsumPlan plan = shape::PlanEinsum(equation, shapes);
  const EinsumEquation& spec = plan.eq;
  std::map<char, int64_t> size;
  for (int c = 0; c < static_cast<int>(plan.size.size()); ++c) {
    if (plan.size[c] >= 0) size[static_cast<char>(c)] = plan.size[c];
  }

  // Loop over every assignment of every letter (output letters first, then summed ones).
  std::string letters = spec.output;
  for (const auto& [c, n] : size) {
    if (spec.output.find(c) == std::string::npos) letters += c;
  }
  Shape loop_shape;
  for (char c : letters) loop_shape.push_back(size[c]);
  Shape out_shape;
  for (char c : spec.output) out_shape.push_back(size[c]);
  Tensor out = internal::Zeros(out_shape);

  // For each operand (and the output), the stride of each loop letter in it (0 where the
  // operand lacks the letter or broadcasts it).
  auto strides_of = [&](const std::string& term, const Shape& shape, const std::vector<bool>& bcast) {
    Shape own = internal::Strides(shape);
    Shape per_letter(letters.size(), 0);
    for (size_t l = 0; l < letters.size(); ++l) {
      size_t d = term.find(letters[l]);
      if (d != std::string::npos && !bcast[d]) per_letter[l] = own[d];
    }
    return per_letter;
  };
  std::vector<Shape> operand_strides;
  for (size_t i = 0; i < inputs.size(); ++i) {
    operand_strides.push_back(strides_of(spec.operands[i], inputs[i].shape, plan.broadcast[i]));
  }
  Shape out_strides = strides_of(spec.output, out_shape, std::vector<bool>(out_shape.size(), false));

  for (int64_t flat = 0; flat < NumElements(loop_shape); ++flat) {
    std::vector<int64_t> index = internal::Unravel(flat, loop_shape);
    double term = 1.0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      term *= inputs[i].data[internal::Dot(index, operand_strides[i])];
    }
    out.data[internal::Dot(index, out_strides)] += term;
  }
  return {out};
}

Tensors matmul_grad(const Tensors& inputs, const Attrs& attrs) {
  const plan::MatmulShapes shapes = plan::PlanMatmulGrad(plan::ShapesOf(inputs), attrs);
  const Tensor& x = inputs[0];
  const Tensor& y = inputs[1];
  const Tensor& out_grad = inputs[2];
  MatmulPlan plan = OffsetsOf(x, y, shapes, attrs.GetBool("trans_x"), attrs.GetBool("trans_y"));
  // d(sum(out * out_grad)) / dx: each term x*y*g contributes y*g to x and x*g to y; a
  // broadcast batch dim maps several terms to one element, which sums them back.
  Tensor x_grad = internal::Zeros(x.shape);
  Tensor y_grad = internal::Zeros(y.shape);
  plan.ForEachTerm([&](int64_t xo, int64_t yo, int64_t oo) {
    x_grad.data[xo] += out_grad.data[oo] * y.data[yo];
    y_grad.data[yo] += out_grad.data[oo] * x.data[xo];
  });
  return {x_grad, y_grad};
}

// out = act(h), h = matmul(x, y) + bias (bias along out's last dim); act the relu or the
// gelu reference (gelu's tanh form, as Paddle's fused kernel); reserve_space = h for relu
// and gelu, 0-d (unset) for none.
Tensors fused_gemm_epilogue(const Tensors& inputs, const Attrs& attrs) {
  const plan::FusedGemmEpiloguePlan p = plan::PlanFusedGemmEpilogue(plan::ShapesOf(inputs), attrs);
  Attrs mm;
  mm.Set("trans_x", attrs.GetBool("trans_x"));
  mm.Set("trans_y", attrs.GetBool("trans_y"));
  Tensor h = matmul({inputs[0], inputs[1]}, mm)[0];
  const std::vector<double>& bias = inputs[2].data;
  for (size_t i = 0; i < h.data.size(); ++i) h.data[i] += bias[i % bias.size()];
  switch (p.activation) {
    case plan::Epilogue::kNone: return {h, internal::Zeros({})};
    case plan::Epilogue::kRelu: return {relu({h}, {})[0], h};
    case plan::Epilogue::kGelu: {
      Attrs tanh_form;
      tanh_form.Set("approximate", true);
      return {gelu({h}, tanh_form)[0], h};
    }
  }
  return {};
}

// out = matmul(x, weight) + bias (trans_y the transpose_weight), bias along out's last dim.
Tensors linear_v2(const Tensors& inputs, const Attrs& attrs) {
  (void)plan::PlanLinearV2(plan::ShapesOf(inputs), attrs);
  Attrs mm;
  mm.Set("trans_x", false);
  mm.Set("trans_y", attrs.GetBool("transpose_weight"));
  Tensor out = matmul({inputs[0], inputs[1]}, mm)[0];
  const std::vector<double>& bias = inputs[2].data;
  for (size_t i = 0; i < out.data.size(); ++i) out.data[i] += bias[i % bias.size()];
  return {out};
}

// dweight_out = dweight (0 when absent) + sum over the rows r of x[r, :]^T dout[r, :];
// dbias_out = dbias (0 when absent) + sum over r of dout[r, :] with has_bias, else 0-d
// (unset). x and dout are read as rows of k and n values over their leading dims.
Tensors fused_linear_param_grad_add(const Tensors& inputs, const Attrs& attrs) {
  const plan::LinearParamGradPlan p = plan::PlanFusedLinearParamGradAdd(plan::ShapesOf(inputs), attrs);
  const std::vector<double>& x = inputs[0].data;
  const std::vector<double>& dout = inputs[1].data;
  Tensor dweight = internal::Zeros(p.dweight_out);
  if (p.has_dweight) dweight.data = inputs[2].data;
  for (int64_t r = 0; r < p.rows; ++r) {
    for (int64_t i = 0; i < p.k; ++i) {
      for (int64_t j = 0; j < p.n; ++j) dweight.data[i * p.n + j] += x[r * p.k + i] * dout[r * p.n + j];
    }
  }
  Tensor dbias = internal::Zeros(p.dbias_out);
  if (p.has_bias) {
    if (p.has_dbias) dbias.data = inputs[3].data;
    for (int64_t r = 0; r < p.rows; ++r) {
      for (int64_t j = 0; j < p.n; ++j) dbias.data[j] += dout[r * p.n + j];
    }
  }
  return {dweight, dbias};
}

}  // namespace spmd::reference::ops
