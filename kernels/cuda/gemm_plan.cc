#include "kernels/cuda/gemm_plan.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/internal.h"
#include "rules/model/error.h"
#include "rules/engine/shape_util.h"

namespace spmd::kernels::cuda {
namespace {

using cpu::internal::InputField;

// How cuBLAS sees an operand: column-major storage of the matrix itself (row_major false,
// leading dimension ld) or of its transpose (row_major true: a row-major matrix with row
// stride ld is its transpose in column-major).
struct BlasView {
  bool row_major = true;
  int64_t ld = 1;
};

BlasView ViewOf(const MatrixLayout& v, const char* what) {
  const int64_t r = v.rows;
  const int64_t c = v.cols;
  // A dim of size <= 1 never steps, so its stride is free.
  const bool unit_cs = v.cs == 1 || c <= 1;
  const bool unit_rs = v.rs == 1 || r <= 1;
  if (unit_cs && (r <= 1 || v.rs >= std::max<int64_t>(c, 1))) {
    return {true, r <= 1 ? std::max<int64_t>(c, 1) : v.rs};
  }
  if (unit_rs && (c <= 1 || v.cs >= std::max<int64_t>(r, 1))) {
    return {false, c <= 1 ? std::max<int64_t>(r, 1) : v.cs};
  }
  throw std::logic_error(std::string("gemm plan: operand ") + what + " (" + std::to_string(r) +
                         " x " + std::to_string(c) + ", strides " + std::to_string(v.rs) + ", " +
                         std::to_string(v.cs) + ") has no unit stride");
}

int64_t DimsFrom(const Shape& s, size_t from) {
  int64_t p = 1;
  for (size_t d = from; d < s.size(); ++d) p *= s[d];
  return p;
}

// Per dim of `batch` (right-aligned): the step of an operand whose own batch dims are `own`
// and whose entries hold `matrix` elements; 0 where it broadcasts (as the CPU kernel).
std::vector<int64_t> BatchSteps(const Shape& own, int64_t matrix, size_t rank) {
  std::vector<int64_t> steps(rank, 0);
  const size_t shift = rank - own.size();
  int64_t stride = matrix;
  for (size_t d = own.size(); d-- > 0;) {
    steps[d + shift] = own[d] == 1 ? 0 : stride;
    stride *= own[d];
  }
  return steps;
}

// The operand's own batch dims right-aligned to `rank` (1 where it has none).
Shape Aligned(const Shape& own, size_t rank) {
  Shape out(rank, 1);
  std::copy(own.begin(), own.end(), out.begin() + static_cast<std::ptrdiff_t>(rank - own.size()));
  return out;
}

}  // namespace

GemmPlan PlanProduct(const Product& p) {
  GemmPlan plan;
  if (p.m <= 0 || p.n <= 0) return plan;
  std::vector<BatchDim> dims;
  for (const BatchDim& d : p.batch) {
    if (d.size <= 0) return plan;  // no entries
    if (d.size == 1) continue;
    if (!dims.empty()) {
      BatchDim& prev = dims.back();
      if (prev.a == d.a * d.size && prev.b == d.b * d.size && prev.c == d.c * d.size) {
        prev = {prev.size * d.size, d.a, d.b, d.c};
        continue;
      }
    }
    dims.push_back(d);
  }
  if (p.k <= 0) {
    plan.zero_fill = true;
    return plan;
  }
  const BlasView av = ViewOf(p.a, "a");
  const BlasView bv = ViewOf(p.b, "b");
  const BlasView cv = ViewOf(p.c, "c");
  GemmCall base;
  base.k = p.k;
  base.ldc = cv.ld;
  if (cv.row_major) {
    // C^T (n x m, column-major) = B^T . A^T: cuBLAS's A is the product's b.
    base.m = p.n;
    base.n = p.m;
    base.a_source = 1;
    base.trans_a = !bv.row_major;
    base.lda = bv.ld;
    base.trans_b = !av.row_major;
    base.ldb = av.ld;
  } else {
    base.m = p.m;
    base.n = p.n;
    base.a_source = 0;
    base.trans_a = av.row_major;
    base.lda = av.ld;
    base.trans_b = bv.row_major;
    base.ldb = bv.ld;
  }
  // Steps of cuBLAS's A and B along a batch dim.
  auto step_a = [&](const BatchDim& d) { return base.a_source == 0 ? d.a : d.b; };
  auto step_b = [&](const BatchDim& d) { return base.a_source == 0 ? d.b : d.a; };
  if (dims.empty()) {
    GemmCall call = base;
    call.batch_count = 1;
    plan.calls.push_back(call);
    return plan;
  }
  size_t batched = 0;
  for (size_t d = 1; d < dims.size(); ++d) {
    if (dims[d].size >= dims[batched].size) batched = d;
  }
  const BatchDim& bd = dims[batched];
  std::vector<size_t> looped;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (d != batched) looped.push_back(d);
  }
  std::vector<int64_t> index(looped.size(), 0);
  int64_t oa = 0, ob = 0, oc = 0;
  while (true) {
    for (int64_t start = 0; start < bd.size; start += kMaxBatchPerCall) {
      GemmCall call = base;
      call.batch_count = std::min(kMaxBatchPerCall, bd.size - start);
      call.stride_a = step_a(bd);
      call.stride_b = step_b(bd);
      call.stride_c = bd.c;
      call.offset_a = oa + start * call.stride_a;
      call.offset_b = ob + start * call.stride_b;
      call.offset_c = oc + start * call.stride_c;
      plan.calls.push_back(call);
    }
    // Odometer over the looped dims, innermost last.
    size_t j = looped.size();
    while (j > 0) {
      --j;
      const BatchDim& d = dims[looped[j]];
      oa += step_a(d);
      ob += step_b(d);
      oc += d.c;
      if (++index[j] < d.size) break;
      oa -= step_a(d) * d.size;
      ob -= step_b(d) * d.size;
      oc -= d.c * d.size;
      index[j] = 0;
      if (j == 0) return plan;
    }
    if (looped.empty()) return plan;
  }
}

MatmulShapes PlanKernelMatmul(const MatmulShapes& planned) {
  cpu::internal::CheckOutputShape(planned.out_shape);
  return planned;
}

Product MatmulProduct(const MatmulShapes& s) {
  Product p;
  p.m = s.m;
  p.n = s.n;
  p.k = s.k;
  p.a = {s.m, s.k, s.x_stride_m, s.x_stride_k};
  p.b = {s.k, s.n, s.y_stride_k, s.y_stride_n};
  p.c = {s.m, s.n, s.n, 1};
  const size_t r = s.batch.size();
  const std::vector<int64_t> xa = BatchSteps(s.x_batch, s.x_matrix, r);
  const std::vector<int64_t> ya = BatchSteps(s.y_batch, s.y_matrix, r);
  for (size_t d = 0; d < r; ++d) {
    p.batch.push_back({s.batch[d], xa[d], ya[d], s.m * s.n * DimsFrom(s.batch, d + 1)});
  }
  return p;
}

bool GradNeedsSum(const MatmulShapes& s, GradOf which) {
  const Shape own = Aligned(which == GradOf::kX ? s.x_batch : s.y_batch, s.batch.size());
  for (size_t d = 0; d < s.batch.size(); ++d) {
    if (s.batch[d] != 1 && own[d] == 1) return true;
  }
  return false;
}

Shape GradScratchShape(const MatmulShapes& s, GradOf which, const Shape& operand_shape) {
  Shape out = s.batch;
  const size_t own_matrix_dims = operand_shape.size() == 1 ? 1 : 2;
  (void)which;
  out.insert(out.end(), operand_shape.end() - static_cast<std::ptrdiff_t>(own_matrix_dims),
             operand_shape.end());
  return out;
}

std::vector<bool> GradSummedDims(const MatmulShapes& s, GradOf which,
                                 const Shape& operand_shape) {
  const Shape own = Aligned(which == GradOf::kX ? s.x_batch : s.y_batch, s.batch.size());
  std::vector<bool> summed;
  for (size_t d = 0; d < s.batch.size(); ++d) summed.push_back(s.batch[d] != 1 && own[d] == 1);
  const size_t own_matrix_dims = operand_shape.size() == 1 ? 1 : 2;
  summed.insert(summed.end(), own_matrix_dims, false);
  return summed;
}

Product MatmulGradProduct(const MatmulShapes& s, GradOf which, bool into_scratch) {
  Product p;
  const size_t r = s.batch.size();
  const std::vector<int64_t> xa = BatchSteps(s.x_batch, s.x_matrix, r);
  const std::vector<int64_t> ya = BatchSteps(s.y_batch, s.y_matrix, r);
  const MatrixLayout g = {s.m, s.n, s.n, 1};
  if (which == GradOf::kX) {
    // dX_eff (m x k) = G (m x n) . Y_eff^T (n x k).
    p.m = s.m;
    p.n = s.k;
    p.k = s.n;
    p.a = g;
    p.b = {s.n, s.k, s.y_stride_n, s.y_stride_k};
    p.c = {s.m, s.k, s.x_stride_m, s.x_stride_k};
  } else {
    // dY_eff (k x n) = X_eff^T (k x m) . G (m x n).
    p.m = s.k;
    p.n = s.n;
    p.k = s.m;
    p.a = {s.k, s.m, s.x_stride_k, s.x_stride_m};
    p.b = g;
    p.c = {s.k, s.n, s.y_stride_k, s.y_stride_n};
  }
  const int64_t matrix = which == GradOf::kX ? s.x_matrix : s.y_matrix;
  for (size_t d = 0; d < r; ++d) {
    const int64_t g_step = s.m * s.n * DimsFrom(s.batch, d + 1);
    const int64_t c_step =
        into_scratch ? matrix * DimsFrom(s.batch, d + 1) : (which == GradOf::kX ? xa[d] : ya[d]);
    if (which == GradOf::kX) {
      p.batch.push_back({s.batch[d], g_step, ya[d], c_step});
    } else {
      p.batch.push_back({s.batch[d], xa[d], g_step, c_step});
    }
  }
  return p;
}

// ---- einsum -------------------------------------------------------------------------------

EinsumPlan PlanEinsum(const std::string& equation, const std::vector<Shape>& shapes) {
  // Letters for the ellipsis dims, sizes per letter; a size-1 dim broadcasting against
  // another operand is dropped from its operand (its data stay as they are), as the CPU
  // kernel does.
  const shape::EinsumPlan planned = shape::PlanEinsum(equation, shapes);
  shape::EinsumEquation spec;
  spec.output = planned.eq.output;
  std::vector<Shape> input_shapes;
  for (size_t i = 0; i < shapes.size(); ++i) {
    std::string kept;
    Shape kept_shape;
    for (size_t d = 0; d < planned.eq.operands[i].size(); ++d) {
      if (planned.broadcast[i][d]) continue;
      kept.push_back(planned.eq.operands[i][d]);
      kept_shape.push_back(shapes[i][d]);
    }
    spec.operands.push_back(kept);
    input_shapes.push_back(kept_shape);
  }
  const std::vector<int64_t>& letter_sizes = planned.size;
  auto size_of = [&](char c) { return letter_sizes[static_cast<unsigned char>(c)]; };
  auto shape_of = [&](const std::string& letters) {
    Shape s;
    for (char c : letters) s.push_back(size_of(c));
    return s;
  };
  auto prod = [&](const std::string& letters) {
    int64_t p = 1;
    for (char c : letters) p *= size_of(c);
    return p;
  };
  EinsumPlan plan;
  plan.input_shapes = std::move(input_shapes);
  plan.out_shape = shape_of(spec.output);
  cpu::internal::CheckOutputShape(plan.out_shape);

  std::vector<std::string> letters(spec.operands.begin(), spec.operands.end());
  auto add_step = [&](EinsumStep step) {
    letters.push_back(step.letters);
    plan.steps.push_back(std::move(step));
    return static_cast<int>(letters.size()) - 1;
  };
  auto has = [](const std::string& s, char c) { return s.find(c) != std::string::npos; };
  // The term summed over every letter `keep` lacks (the CPU kernel's SumOut).
  auto sum_out = [&](int t, const std::string& keep) {
    EinsumStep step;
    step.kind = EinsumStep::Kind::kSum;
    step.src = t;
    bool any = false;
    for (char c : letters[t]) {
      const bool summed = !has(keep, c);
      step.reduced.push_back(summed);
      if (summed) {
        any = true;
      } else {
        step.letters += c;
      }
    }
    if (!any) return t;
    step.shape = shape_of(step.letters);
    return add_step(std::move(step));
  };
  // The CPU kernel's Contract: a -> [batch, left, contracted], b -> [batch, contracted, right].
  auto contract = [&](int ta, int tb, const std::string& keep) {
    const std::string a = letters[ta];
    const std::string b = letters[tb];
    std::string batch, left, right, contracted;
    for (char c : a) {
      if (has(b, c)) {
        (has(keep, c) ? batch : contracted) += c;
      } else {
        left += c;
      }
    }
    for (char c : b) {
      if (!has(a, c)) right += c;
    }
    EinsumStep step;
    step.kind = EinsumStep::Kind::kContract;
    step.src = ta;
    step.src2 = tb;
    step.letters = batch + left + right;
    step.shape = shape_of(step.letters);
    cpu::internal::CheckOutputShape(step.shape);  // before the products: they cannot overflow
    const int64_t nb = prod(batch), m = prod(left), n = prod(right), k = prod(contracted);
    auto perm_to = [](const std::string& from, const std::string& to) {
      std::vector<int64_t> perm;
      for (char c : to) perm.push_back(static_cast<int64_t>(from.find(c)));
      return perm;
    };
    Product& p = step.product;
    p.m = m;
    p.n = n;
    p.k = k;
    if (a == batch + left + contracted) {
      p.a = {m, k, k, 1};
    } else if (a == batch + contracted + left) {
      p.a = {m, k, 1, m};
    } else {
      step.perm = perm_to(a, batch + left + contracted);
      p.a = {m, k, k, 1};
    }
    if (b == batch + contracted + right) {
      p.b = {k, n, n, 1};
    } else if (b == batch + right + contracted) {
      p.b = {k, n, 1, k};
    } else {
      step.perm2 = perm_to(b, batch + contracted + right);
      p.b = {k, n, n, 1};
    }
    p.c = {m, n, n, 1};
    p.batch = {BatchDim{nb, m * k, k * n, m * n}};
    return add_step(std::move(step));
  };

  const size_t count = shapes.size();
  const std::vector<std::string> needed_after = plan::EinsumLettersNeededAfter(spec);
  auto own_keep = [&](size_t i) {
    std::string keep = needed_after[i];
    for (size_t j = 0; j < i; ++j) keep += spec.operands[j];
    return keep;
  };
  int acc = sum_out(0, own_keep(0));
  for (size_t i = 1; i < count; ++i) {
    const int next = sum_out(static_cast<int>(i), own_keep(i) + letters[acc]);
    acc = sum_out(acc, needed_after[i] + letters[next]);
    acc = contract(acc, next, needed_after[i]);
  }
  acc = sum_out(acc, spec.output);
  if (letters[acc] != spec.output) {
    EinsumStep step;
    step.kind = EinsumStep::Kind::kPermute;
    step.src = acc;
    for (char c : spec.output) step.perm.push_back(static_cast<int64_t>(letters[acc].find(c)));
    step.letters = spec.output;
    step.shape = plan.out_shape;
    acc = add_step(std::move(step));
  }
  plan.result = acc;
  return plan;
}

}  // namespace spmd::kernels::cuda
