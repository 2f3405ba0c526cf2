// Fused ops and a grad op (docs/OPS.md "Paddle's other registered ops"):
// fused_rotary_position_embedding, bmm_grad. Plain loops from the definitions.
#include <string>
#include <utility>
#include <vector>

#include "reference/reference.h"
#include "reference/util.h"
#include "rules/ops/contraction_plan.h"
#include "rules/ops/fused_plan.h"

namespace spmd::reference::ops {
namespace {

using internal::InputField;
using internal::ShapeToString;

}  // namespace

// Per rotated tensor x (q, k, v) at sequence position s, with c = cos[s], t = sin[s]:
// use_neox_rotary_style (Paddle's "every two"), for each pair (2i, 2i + 1):
//   out[2i] = c[2i] x[2i] - t[2i] x[2i+1],  out[2i+1] = t[2i+1] x[2i] + c[2i+1] x[2i+1];
// otherwise (rotate half, h = head_dim / 2), for i < h:
//   out[i] = c[i] x[i] - t[i] x[i+h],        out[i+h] = c[i+h] x[i+h] + t[i+h] x[i].
Tensors fused_rotary_position_embedding(const Tensors& inputs, const Attrs& attrs) {
  const plan::RopePlan p = plan::PlanRope(plan::ShapesOf(inputs), attrs);
  const size_t n = inputs.size();
  const size_t rotated = p.rotated;
  const int64_t head_dim = p.head_dim;
  const bool neox = p.neox;
  const bool time_major = p.time_major;
  const Shape& q = inputs[0].shape;
  const Tensor& sin = inputs[n - 2];
  const Tensor& cos = inputs[n - 1];
  const int64_t half = head_dim / 2;
  // A 4-D [d0, d1, d2, head_dim] tensor is rows of head_dim elements; row r = (i0, i1, i2)
  // sits at sequence position i0 = r / (d1 d2) (time major) or i1 = (r / d2) mod d1.
  Tensors outs;
  for (size_t i = 0; i < rotated; ++i) {
    const Tensor& x = inputs[i];
    Tensor out = internal::Zeros(x.shape, x.dtype);
    const int64_t rows = head_dim > 0 ? NumElements(x.shape) / head_dim : 0;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t s = time_major ? r / (q[1] * q[2]) : (r / q[2]) % q[1];
      const double* xr = x.data.data() + r * head_dim;  // this head of x
      const double* cr = cos.data.data() + s * head_dim;  // the tables' row s
      const double* tr = sin.data.data() + s * head_dim;
      double* yr = out.data.data() + r * head_dim;
      for (int64_t j = 0; j < head_dim; ++j) {
        double partner = 0.0, sign = 1.0;
        if (neox) {
          partner = xr[j % 2 == 0 ? j + 1 : j - 1];
          sign = j % 2 == 0 ? -1.0 : 1.0;
        } else {
          partner = xr[j < half ? j + half : j - half];
          sign = j < half ? -1.0 : 1.0;
        }
        yr[j] = cr[j] * xr[j] + sign * tr[j] * partner;
      }
    }
    outs.push_back(std::move(out));
  }
  return outs;
}

// x_grad = out_grad . y^T, y_grad = x^T . out_grad, per batch.
Tensors bmm_grad(const Tensors& inputs, const Attrs&) {
  const plan::MatmulShapes s = plan::PlanBmmGrad(plan::ShapesOf(inputs));
  const Tensor& x = inputs[0];
  const Tensor& y = inputs[1];
  const Tensor& g = inputs[2];
  const int64_t b = s.batch[0], m = s.m, k = s.k, n = s.n;
  Tensor x_grad = internal::Zeros(x.shape);
  Tensor y_grad = internal::Zeros(y.shape);
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        const double gv = g.data[(bi * m + i) * n + j];
        for (int64_t l = 0; l < k; ++l) {
          x_grad.data[(bi * m + i) * k + l] += gv * y.data[(bi * k + l) * n + j];
          y_grad.data[(bi * k + l) * n + j] += gv * x.data[(bi * m + i) * k + l];
        }
      }
    }
  }
  return {x_grad, y_grad};
}

}  // namespace spmd::reference::ops
