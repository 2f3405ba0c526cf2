// Fused ops and a grad op (docs/OPS.md "Paddle's other registered ops"):
// fused_rotary_position_embedding (each element's two products and their sum in double,
// rounded once to the output dtype) and bmm_grad (matmul_grad's GEMMs after bmm's shape
// checks).
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/internal.h"
#include "rules/ops/contraction_plan.h"
#include "rules/ops/fused_plan.h"

namespace spmd::kernels::cpu {
using internal::NewOutput;

Tensors fused_rotary_position_embedding(const TensorArgs& inputs, const Attrs& attrs) {
  const plan::RopePlan p = plan::PlanRope(plan::ShapesOf(inputs), attrs);
  const size_t n = inputs.size();
  const size_t rotated = p.rotated;
  const int64_t head_dim = p.head_dim;
  const bool neox = p.neox;
  const int seq_dim = p.seq_dim;
  const DType dtype = internal::ComputeDTypeAll(inputs);
  return internal::DispatchFloat(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    internal::ValuesAs<T> sin(inputs[n - 2]);
    internal::ValuesAs<T> cos(inputs[n - 1]);
    const int64_t half = head_dim / 2;
    Tensors outs;
    for (size_t r = 0; r < rotated; ++r) {
      internal::ValuesAs<T> x(inputs[r]);
      const Shape& shape = inputs[r].shape();
      Tensor out = NewOutput(shape, DTypeOf<T>::value);
      T* o = out.data<T>();
      const int64_t heads_rows = NumElements(shape) / (head_dim == 0 ? 1 : head_dim);
      // Rows of head_dim elements in order; row r of the [d0, d1, heads] prefix has its
      // sequence index at prefix dim seq_dim.
      const int64_t heads = shape[2];
      const int64_t d1 = shape[1];
      for (int64_t row = 0; row < heads_rows && head_dim > 0; ++row) {
        const int64_t pos = row / heads;  // d0 * d1 + d1-index
        const int64_t s = seq_dim == 0 ? pos / d1 : pos % d1;
        const T* xr = x.data() + row * head_dim;
        const T* c = cos.data() + s * head_dim;
        const T* t = sin.data() + s * head_dim;
        T* out_row = o + row * head_dim;
        for (int64_t j = 0; j < head_dim; ++j) {
          int64_t partner = 0;
          double sign = 1.0;
          if (neox) {
            partner = j % 2 == 0 ? j + 1 : j - 1;
            sign = j % 2 == 0 ? -1.0 : 1.0;
          } else {
            partner = j < half ? j + half : j - half;
            sign = j < half ? -1.0 : 1.0;
          }
          const double v = static_cast<double>(c[j]) * static_cast<double>(xr[j]) +
                           sign * static_cast<double>(t[j]) * static_cast<double>(xr[partner]);
          out_row[j] = static_cast<T>(v);
        }
      }
      outs.push_back(std::move(out));
    }
    return outs;
  });
}

Tensors bmm_grad(const TensorArgs& inputs, const Attrs&) {
  (void)plan::PlanBmmGrad(plan::ShapesOf(inputs));
  Attrs plain;
  plain.Set("trans_x", false);
  plain.Set("trans_y", false);
  return matmul_grad(inputs, plain);
}

}  // namespace spmd::kernels::cpu
