// Contractions: matmul, bmm, einsum, matmul_grad (docs/OPS.md "Contractions"),
// fused_gemm_epilogue (matmul's kernel, then the bias and the relu or gelu kernel) and
// fused_linear_param_grad_add (one GEMM into the accumulator, the bias rows summed).
//
// Everything goes through internal::Gemm (cache-blocked, packed, register-blocked), once
// per batch: transposes, 1-D operands and broadcast batch dims live only in the matrix
// views' strides and the per-batch offsets. einsum contracts its operands pairwise, left
// to right, each pair permuted into batched-matmul form [batch, free, contracted].
#include <algorithm>
#include <array>
#include <map>
#include <string>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/internal.h"
#include "kernels/cpu/permute.h"
#include "rules/ops/contraction_plan.h"
#include "rules/engine/shape_util.h"

namespace spmd::kernels::cpu {
namespace {

using internal::CheckArity;
using internal::ComputeDType;
using internal::DispatchFloat;
using internal::Gemm;
using internal::InputField;
using internal::MatrixView;
using internal::NewOutput;
using internal::ValuesAs;

// matmul's shapes and strides: plan::MatmulShapes (rules/ops/contraction_plan.h, checked
// and planned once for the reference and the kernels), with the CPU kernel's batch walk.
// Example: x [2, 1, 3, 4] (trans_x), y [5, 3, 6] -> out [2, 5, 4, 6], k = 3.
struct MatmulPlan : plan::MatmulShapes {
  // The shared plan, within the kernels' limit on the output's size.
  explicit MatmulPlan(const plan::MatmulShapes& s) : plan::MatmulShapes(s) {
    internal::CheckOutputShape(out_shape);
  }

  // The rows of all batch entries as one matrix, when y is the same matrix for every
  // entry and x's rows follow each other across entries (x not transposed, not
  // broadcast): x [B..., m, k] . y [k, n] is then one GEMM of (B... m) rows, as a linear
  // layer's [batch, sequence, width] input is. Returns that row count, or 0.
  int64_t FoldedRows() const {
    const int64_t entries = NumElements(batch);
    if (entries < 2 || x_stride_k != 1 || x_stride_m != k) return 0;
    if (NumElements(y_batch) != 1 || NumElements(x_batch) != entries) return 0;
    return entries * m;
  }

  // Calls fn(b, x_offset, y_offset) for every batch entry b (flat in `batch`).
  template <typename F>
  void ForEachBatch(F fn) const {
    const int64_t count = NumElements(batch);
    if (count == 0) return;
    const size_t r = batch.size();
    // Per batch dim: the step of x's and y's offsets (0 where that operand broadcasts).
    std::vector<int64_t> xs(r, 0), ys(r, 0);
    Strides(x_batch, x_matrix, r, xs);
    Strides(y_batch, y_matrix, r, ys);
    std::vector<int64_t> index(r, 0);
    int64_t xo = 0, yo = 0;
    for (int64_t b = 0; b < count; ++b) {
      fn(b, xo, yo);
      for (size_t d = r; d-- > 0;) {
        xo += xs[d];
        yo += ys[d];
        if (++index[d] < batch[d]) break;
        xo -= xs[d] * batch[d];
        yo -= ys[d] * batch[d];
        index[d] = 0;
      }
    }
  }

 private:
  static void Strides(const Shape& own, int64_t matrix, size_t r, std::vector<int64_t>& out) {
    const size_t shift = r - own.size();
    int64_t stride = matrix;
    for (size_t d = own.size(); d-- > 0;) {
      out[d + shift] = own[d] == 1 ? 0 : stride;
      stride *= own[d];
    }
  }
};


template <typename T>
Tensor RunMatmul(const Tensor& xt, const Tensor& yt, const MatmulPlan& plan) {
  ValuesAs<T> xv(xt);
  ValuesAs<T> yv(yt);
  // Each batch entry writes its own block of the output once: no zero fill needed.
  Tensor out = NewOutput(plan.out_shape, DTypeOf<T>::value);
  T* o = out.data<T>();
  const T* x = xv.data();
  const T* y = yv.data();
  const int64_t mn = plan.m * plan.n;
  // Folded only when each entry's GEMM is not small: OpenBLAS (0.3.21, SkylakeX) runs
  // GEMMs of up to about 100^3 multiply-adds through small-matrix kernels that write C
  // directly, while the folded one pays its zero fill of C and packing. Measured, one
  // thread: x [8, 64, 64] . y [64, 64] 25 us per entry, 37 us folded; y [64, 256] 150 us
  // per entry, 130 us folded. (matmul_grad folds always: equal or better, and y_grad needs
  // no zero fill then.)
  constexpr double kSmallGemm = 100.0 * 100.0 * 100.0;
  const double entry_work = static_cast<double>(plan.m) * static_cast<double>(plan.n) * static_cast<double>(plan.k);
  if (const int64_t rows = plan.FoldedRows(); rows > 0 && entry_work > kSmallGemm) {
    Gemm<T>(rows, plan.n, plan.k, MatrixView<T>{x, plan.k, 1},
            MatrixView<T>{y, plan.y_stride_k, plan.y_stride_n}, o, plan.n, 1, /*overwrite=*/true);
    return out;
  }
  plan.ForEachBatch([&](int64_t b, int64_t xo, int64_t yo) {
    Gemm<T>(plan.m, plan.n, plan.k, MatrixView<T>{x + xo, plan.x_stride_m, plan.x_stride_k},
            MatrixView<T>{y + yo, plan.y_stride_k, plan.y_stride_n}, o + b * mn, plan.n, 1,
            /*overwrite=*/true);
  });
  return out;
}

// ---- einsum ----

using shape::EinsumEquation;  // the parser is shared with the rule (rules/engine/shape_util.h)

// An intermediate einsum operand: row-major data whose dims are `letters`.
template <typename T>
struct Term {
  std::string letters;
  Shape shape;
  std::vector<T> data;
};

template <typename T>
Shape ShapeOf(const std::string& letters, const std::map<char, int64_t>& size) {
  Shape s;
  for (char c : letters) s.push_back(size.at(c));
  return s;
}

// Returns `t` with its dims reordered to `order` (a permutation of t.letters).
template <typename T>
Term<T> Reorder(Term<T> t, const std::string& order) {
  if (order == t.letters) return t;
  std::vector<int64_t> perm;
  Shape shape;
  for (char c : order) {
    const int64_t d = static_cast<int64_t>(t.letters.find(c));
    perm.push_back(d);
    shape.push_back(t.shape[d]);
  }
  Term<T> out{order, shape, internal::Permuted(t.data.data(), t.shape, perm)};
  return out;
}

// Sums `t` over every letter not in `keep`; the result's letters keep t's order.
template <typename T>
Term<T> SumOut(Term<T> t, const std::string& keep) {
  std::string kept, summed;
  for (char c : t.letters) (keep.find(c) != std::string::npos ? kept : summed) += c;
  if (summed.empty()) return t;
  Term<T> moved = Reorder(std::move(t), kept + summed);
  const int64_t len = NumElements(Shape(moved.shape.begin() + kept.size(), moved.shape.end()));
  Term<T> out;
  out.letters = kept;
  out.shape.assign(moved.shape.begin(), moved.shape.begin() + kept.size());
  const int64_t rows = NumElements(out.shape);
  out.data.assign(static_cast<size_t>(rows), T(0));
  for (int64_t r = 0; r < rows; ++r) {
    const T* p = moved.data.data() + r * len;
    T s = T(0);
    for (int64_t j = 0; j < len; ++j) s += p[j];
    out.data[r] = s;
  }
  return out;
}

// The product of a and b summed over the letters in both that `keep` lacks:
// a -> [batch, left, contracted], b -> [batch, contracted, right], one Gemm per batch.
template <typename T>
Term<T> Contract(Term<T> a, Term<T> b, const std::string& keep,
                 const std::map<char, int64_t>& size) {
  std::string batch, left, right, contracted;
  for (char c : a.letters) {
    const bool in_b = b.letters.find(c) != std::string::npos;
    const bool kept = keep.find(c) != std::string::npos;
    if (in_b) {
      (kept ? batch : contracted) += c;
    } else {
      left += c;
    }
  }
  for (char c : b.letters) {
    if (a.letters.find(c) == std::string::npos) right += c;
  }
  auto prod = [&](const std::string& letters) {
    int64_t p = 1;
    for (char c : letters) p *= size.at(c);
    return p;
  };
  Term<T> out;
  out.letters = batch + left + right;
  out.shape = ShapeOf<T>(out.letters, size);
  internal::CheckOutputShape(out.shape);  // before the products below: they cannot overflow
  const int64_t nb = prod(batch), m = prod(left), n = prod(right), k = prod(contracted);
  a = Reorder(std::move(a), batch + left + contracted);
  b = Reorder(std::move(b), batch + contracted + right);
  out.data.assign(static_cast<size_t>(NumElements(out.shape)), T(0));
  for (int64_t i = 0; i < nb; ++i) {
    Gemm<T>(m, n, k, MatrixView<T>{a.data.data() + i * m * k, k, 1},
            MatrixView<T>{b.data.data() + i * k * n, n, 1}, out.data.data() + i * m * n, n, 1);
  }
  return out;
}

// `spec` holds each operand's letters without its broadcast dims (size 1, so the data is
// unchanged); `size` every letter's size.
template <typename T>
Tensor RunEinsum(const TensorArgs& inputs, const EinsumEquation& spec,
                 const std::map<char, int64_t>& size) {
  const size_t count = inputs.size();
  const std::vector<std::string> needed_after = plan::EinsumLettersNeededAfter(spec);
  auto load = [&](size_t i) {
    ValuesAs<T> v(inputs[i]);
    Term<T> t;
    t.letters = spec.operands[i];
    // The shape of the kept letters: a dropped broadcast dim (size 1) leaves the data as it
    // is but must leave the shape too, or the letters and the dims no longer line up.
    t.shape = ShapeOf<T>(t.letters, size);
    t.data.assign(v.data(), v.data() + inputs[i].numel());
    return t;
  };
  // Each operand first drops the letters no one else needs (summed out on their own).
  auto own_keep = [&](size_t i) {
    std::string keep = needed_after[i];
    for (size_t j = 0; j < i; ++j) keep += spec.operands[j];
    return keep;
  };
  Term<T> acc = SumOut(load(0), own_keep(0));
  for (size_t i = 1; i < count; ++i) {
    Term<T> next = SumOut(load(i), own_keep(i) + acc.letters);
    acc = SumOut(std::move(acc), needed_after[i] + next.letters);
    acc = Contract(std::move(acc), std::move(next), needed_after[i], size);
  }
  acc = Reorder(SumOut(std::move(acc), spec.output), spec.output);
  Tensor out = NewOutput(ShapeOf<T>(spec.output, size), DTypeOf<T>::value);
  std::copy(acc.data.begin(), acc.data.end(), out.data<T>());
  return out;
}

}  // namespace

Tensors matmul(const TensorArgs& inputs, const Attrs& attrs) {
  const MatmulPlan plan(plan::PlanMatmul(plan::ShapesOf(inputs), attrs));
  return DispatchFloat(ComputeDType(inputs, {0, 1}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return TensorList(RunMatmul<T>(inputs[0], inputs[1], plan));
  });
}

Tensors bmm(const TensorArgs& inputs, const Attrs&) {
  const MatmulPlan plan(plan::PlanBmm(plan::ShapesOf(inputs)));
  const Tensor& x = inputs[0];
  const Tensor& y = inputs[1];
  return DispatchFloat(ComputeDType(inputs, {0, 1}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return TensorList(RunMatmul<T>(x, y, plan));
  });
}

Tensors einsum(const TensorArgs& inputs, const Attrs& attrs) {
  const std::string& equation = attrs.GetString("equation");
  internal::CheckArityAtLeast(inputs, 1);
  // The plan (shared validation: `...` spelled out, sizes equal or 1 per letter).
  std::vector<Shape> shapes;
  for (size_t i = 0; i < inputs.size(); ++i) shapes.push_back(inputs[i].shape());
  const shape::EinsumPlan plan = shape::PlanEinsum(equation, shapes);
  std::map<char, int64_t> size;
  for (int c = 0; c < static_cast<int>(plan.size.size()); ++c) {
    if (plan.size[c] >= 0) size[static_cast<char>(c)] = plan.size[c];
  }
  // A broadcast dim has size 1: dropping its letter leaves the operand's data as it is.
  EinsumEquation spec;
  spec.output = plan.eq.output;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::string kept;
    for (size_t d = 0; d < plan.eq.operands[i].size(); ++d) {
      if (!plan.broadcast[i][d]) kept.push_back(plan.eq.operands[i][d]);
    }
    spec.operands.push_back(kept);
  }

  Shape out_shape;
  for (char c : spec.output) out_shape.push_back(size[c]);
  internal::CheckOutputShape(out_shape);
  return DispatchFloat(internal::ComputeDTypeAll(inputs), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return TensorList(RunEinsum<T>(inputs, spec, size));
  });
}

Tensors matmul_grad(const TensorArgs& inputs, const Attrs& attrs) {
  const MatmulPlan plan(plan::PlanMatmulGrad(plan::ShapesOf(inputs), attrs));
  const Tensor& xt = inputs[0];
  const Tensor& yt = inputs[1];
  const Tensor& gt = inputs[2];
  // Per batch entry: x_grad_b (m x k, x's strides) += G_b . Y_b^T and
  // y_grad_b (k x n, y's strides) += X_b^T . G_b. A broadcast batch dim maps several
  // entries onto one x (or y) block, whose gradient sums them.
  return DispatchFloat(ComputeDType(inputs, {0, 1, 2}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> xv(xt);
    ValuesAs<T> yv(yt);
    ValuesAs<T> gv(gt);
    // A gradient block that one batch entry alone maps to is written once (overwrite, no
    // zero fill); one that a broadcast batch dim maps several entries to sums them.
    const int64_t entries = NumElements(plan.batch);
    const int64_t folded = plan.FoldedRows();  // one GEMM each, y_grad written once
    const bool x_once = NumElements(plan.x_batch) == entries;
    const bool y_once = NumElements(plan.y_batch) == entries || folded > 0;
    Tensor x_grad = NewOutput(xt.shape(), DTypeOf<T>::value, /*zero=*/!x_once);
    Tensor y_grad = NewOutput(yt.shape(), DTypeOf<T>::value, /*zero=*/!y_once);
    T* xg = x_grad.data<T>();
    T* yg = y_grad.data<T>();
    const T* x = xv.data();
    const T* y = yv.data();
    const T* g = gv.data();
    const int64_t m = plan.m, n = plan.n, k = plan.k;
    if (folded > 0) {
      // x_grad [rows, k] = G . Y^T; y_grad [k, n] = X^T . G, summing over every row.
      Gemm<T>(folded, k, n, MatrixView<T>{g, n, 1},
              MatrixView<T>{y, plan.y_stride_n, plan.y_stride_k}, xg, k, 1, /*overwrite=*/true);
      Gemm<T>(k, n, folded, MatrixView<T>{x, 1, k}, MatrixView<T>{g, n, 1}, yg, plan.y_stride_k,
              plan.y_stride_n, /*overwrite=*/true);
      return TensorList(std::move(x_grad), std::move(y_grad));
    }
    plan.ForEachBatch([&](int64_t b, int64_t xo, int64_t yo) {
      const T* gb = g + b * m * n;
      Gemm<T>(m, k, n, MatrixView<T>{gb, n, 1},
              MatrixView<T>{y + yo, plan.y_stride_n, plan.y_stride_k}, xg + xo, plan.x_stride_m,
              plan.x_stride_k, x_once);
      Gemm<T>(k, n, m, MatrixView<T>{x + xo, plan.x_stride_k, plan.x_stride_m},
              MatrixView<T>{gb, n, 1}, yg + yo, plan.y_stride_k, plan.y_stride_n, y_once);
    });
    return TensorList(std::move(x_grad), std::move(y_grad));
  });
}

namespace {

// Adds bias [n] to every row of h's last dim, in place (fused_gemm_epilogue, linear_v2).
void AddBiasRows(Tensor& h, const Tensor& bias_tensor) {
  DispatchFloat(h.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> bias(bias_tensor);
    T* o = h.data<T>();
    const int64_t n = bias_tensor.numel();
    const int64_t rows = n == 0 ? 0 : h.numel() / n;
    for (int64_t r = 0; r < rows; ++r, o += n) {
      for (int64_t j = 0; j < n; ++j) o[j] += bias[j];
    }
  });
}

}  // namespace

// h = matmul(x, y) (the matmul kernel: one GEMM per batch, or one folded GEMM), bias added
// along h's last dim in place, then the relu or gelu kernel on h (gelu's tanh form, as
// Paddle's fused kernel); reserve_space = h for relu and gelu, a 0-d zero for none.
Tensors fused_gemm_epilogue(const TensorArgs& inputs, const Attrs& attrs) {
  const plan::FusedGemmEpiloguePlan p = plan::PlanFusedGemmEpilogue(plan::ShapesOf(inputs), attrs);
  (void)internal::ComputeDTypeAll(inputs);  // x, y and bias of one float dtype
  Attrs mm;
  mm.Set("trans_x", attrs.GetBool("trans_x"));
  mm.Set("trans_y", attrs.GetBool("trans_y"));
  Tensor h = std::move(matmul(TensorArgs(std::vector<const Tensor*>{&inputs[0], &inputs[1]}), mm)[0]);
  AddBiasRows(h, inputs[2]);
  const TensorArgs pre(std::vector<const Tensor*>{&h});
  switch (p.activation) {
    case plan::Epilogue::kNone: {
      Tensor unset = NewOutput({}, h.dtype(), /*zero=*/true);
      return TensorList(std::move(h), std::move(unset));
    }
    case plan::Epilogue::kRelu: {
      Tensor out = std::move(relu(pre, Attrs{})[0]);
      return TensorList(std::move(out), std::move(h));
    }
    case plan::Epilogue::kGelu: {
      Attrs tanh_form;
      tanh_form.Set("approximate", true);
      Tensor out = std::move(gelu(pre, tanh_form)[0]);
      return TensorList(std::move(out), std::move(h));
    }
  }
  return {};
}

// linear_v2: fused_gemm_epilogue's kernel without an activation (trans_y the
// transpose_weight), its out alone.
Tensors linear_v2(const TensorArgs& inputs, const Attrs& attrs) {
  (void)plan::PlanLinearV2(plan::ShapesOf(inputs), attrs);
  (void)internal::ComputeDTypeAll(inputs);  // x, weight and bias of one float dtype
  Attrs mm;
  mm.Set("trans_x", false);
  mm.Set("trans_y", attrs.GetBool("transpose_weight"));
  Tensor out = std::move(matmul(TensorArgs(std::vector<const Tensor*>{&inputs[0], &inputs[1]}), mm)[0]);
  AddBiasRows(out, inputs[2]);
  return TensorList(std::move(out));
}

// dweight_out = dweight + X^T . G, one GEMM over every row (X [rows, k], G [rows, n] as they
// lie), written over a copy of dweight (or overwriting, when absent); dbias_out = dbias +
// G's rows summed in order, or 0-d without has_bias. Absent (0-d) inputs are not read and
// their dtype not counted.
Tensors fused_linear_param_grad_add(const TensorArgs& inputs, const Attrs& attrs) {
  const plan::LinearParamGradPlan p = plan::PlanFusedLinearParamGradAdd(plan::ShapesOf(inputs), attrs);
  std::vector<size_t> read = {0, 1};
  if (p.has_dweight) read.push_back(2);
  if (p.has_dbias) read.push_back(3);
  internal::CheckOutputShape(p.dweight_out);
  return DispatchFloat(internal::ComputeDTypeOver(inputs, read), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> xv(inputs[0]);
    ValuesAs<T> gv(inputs[1]);
    Tensor dweight = NewOutput(p.dweight_out, DTypeOf<T>::value);
    T* dw = dweight.data<T>();
    if (p.has_dweight) {
      ValuesAs<T> w(inputs[2]);
      std::copy(w.data(), w.data() + dweight.numel(), dw);
    }
    Gemm<T>(p.k, p.n, p.rows, MatrixView<T>{xv.data(), 1, p.k}, MatrixView<T>{gv.data(), p.n, 1}, dw, p.n, 1,
            /*overwrite=*/!p.has_dweight);
    Tensor dbias = NewOutput(p.dbias_out, DTypeOf<T>::value, /*zero=*/true);
    if (p.has_bias) {
      T* db = dbias.data<T>();
      if (p.has_dbias) {
        ValuesAs<T> b(inputs[3]);
        std::copy(b.data(), b.data() + p.n, db);
      }
      const T* g = gv.data();
      for (int64_t r = 0; r < p.rows; ++r, g += p.n) {
        for (int64_t j = 0; j < p.n; ++j) db[j] += g[j];
      }
    }
    return TensorList(std::move(dweight), std::move(dbias));
  });
}

}  // namespace spmd::kernels::cpu
