// Fused ops and a grad op (docs/OPS.md "Paddle's other registered ops"):
// fused_rotary_position_embedding, bmm_grad. Plain loops from the definitions.
#include <string>
#include <utility>
#include <vector>

#include "reference/reference.h"
#include "reference/util.h"

namespace spmd::reference::ops {
namespace {

using internal::InputField;
using internal::ShapeToString;

// sin / cos (input i): [seq, head_dim], or [1, seq, 1, head_dim] (whatever time_major
// says). Returns its sequence length.
int64_t RopeTableSeq(const Tensor& table, size_t i) {
  constexpr int seq_dim = 1;
  const std::string field = InputField(i, "shape");
  if (table.shape.size() == 2) return table.shape[0];
  if (table.shape.size() != 4) ThrowInvalid(field, "sin and cos must be [seq, head_dim] or 4-D");
  for (int d = 0; d < 3; ++d) {
    if (d != seq_dim && table.shape[d] != 1) {
      ThrowInvalid(field, "sin and cos must be 1 on every dim but the sequence and head dims");
    }
  }
  return table.shape[seq_dim];
}

}  // namespace

// Per rotated tensor x (q, k, v) at sequence position s, with c = cos[s], t = sin[s]:
// use_neox_rotary_style (Paddle's "every two"), for each pair (2i, 2i + 1):
//   out[2i] = c[2i] x[2i] - t[2i] x[2i+1],  out[2i+1] = t[2i+1] x[2i] + c[2i+1] x[2i+1];
// otherwise (rotate half, h = head_dim / 2), for i < h:
//   out[i] = c[i] x[i] - t[i] x[i+h],        out[i+h] = c[i+h] x[i+h] + t[i+h] x[i].
Tensors fused_rotary_position_embedding(const Tensors& inputs, const Attrs& attrs) {
  const size_t n = inputs.size();
  if (n < 3 || n > 5) {
    ThrowInvalid("inputs", "expected q, [k, [v,]] sin, cos: 3 to 5 inputs, got " + std::to_string(n));
  }
  internal::CheckArityAtLeast(inputs, 3);
  const bool neox = attrs.GetBool("use_neox_rotary_style");
  const bool time_major = attrs.GetBool("time_major");
  const size_t rotated = n - 2;
  for (size_t i = 0; i < rotated; ++i) {
    if (inputs[i].shape.size() != 4) ThrowInvalid(InputField(i, "shape"), "q, k and v must be 4-D");
  }
  const Shape& q = inputs[0].shape;
  const int64_t head_dim = q[3];
  if (head_dim % 2 != 0) {
    ThrowInvalid(InputField(0, "shape"), "head_dim " + std::to_string(head_dim) + " must be even");
  }
  const int seq_dim = time_major ? 0 : 1;
  const Tensor& sin = inputs[n - 2];
  const Tensor& cos = inputs[n - 1];
  const int64_t sin_seq = RopeTableSeq(sin, n - 2);
  const int64_t cos_seq = RopeTableSeq(cos, n - 1);
  for (size_t i = 1; i < rotated; ++i) {
    const Shape& s = inputs[i].shape;
    if (s != q) {
      ThrowInvalid(InputField(i, "shape"), ShapeToString(s) + " does not fit q " + ShapeToString(q));
    }
  }
  for (size_t i : {n - 2, n - 1}) {
    const int64_t seq = i == n - 2 ? sin_seq : cos_seq;
    if (seq != q[seq_dim] || inputs[i].shape.back() != head_dim) {
      ThrowInvalid(InputField(i, "shape"), ShapeToString(inputs[i].shape) + " does not fit seq " +
                                               std::to_string(q[seq_dim]) + ", head_dim " +
                                               std::to_string(head_dim));
    }
  }
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
  internal::CheckArity(inputs, 3);
  for (size_t i = 0; i < 3; ++i) {
    if (inputs[i].shape.size() != 3) {
      ThrowInvalid(InputField(i, "shape"), "bmm_grad needs rank 3, got " + ShapeToString(inputs[i].shape));
    }
  }
  const Tensor& x = inputs[0];
  const Tensor& y = inputs[1];
  const Tensor& g = inputs[2];
  const int64_t b = x.shape[0], m = x.shape[1], k = x.shape[2];
  if (y.shape[0] != b || y.shape[1] != k) {
    ThrowInvalid(InputField(1, "shape"), ShapeToString(y.shape) + " does not fit x " +
                                             ShapeToString(x.shape) + " as [b, k, n]");
  }
  const int64_t n = y.shape[2];
  if (g.shape != Shape{b, m, n}) {
    ThrowInvalid(InputField(2, "shape"), "out_grad " + ShapeToString(g.shape) + " != bmm output " +
                                             ShapeToString(Shape{b, m, n}));
  }
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
