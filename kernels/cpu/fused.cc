// Fused ops and a grad op (docs/OPS.md "Paddle's other registered ops"):
// fused_rotary_position_embedding (each element's two products and their sum in double,
// rounded once to the output dtype) and bmm_grad (matmul_grad's GEMMs after bmm's shape
// checks).
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/internal.h"

namespace spmd::kernels::cpu {
namespace {

using internal::InputField;
using internal::NewOutput;

// The sequence length of sin / cos (input i): [seq, head_dim], or 4-D with the sequence
// [1, seq, 1, head_dim] (the references' checks, in their order).
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

}  // namespace

Tensors fused_rotary_position_embedding(const TensorArgs& inputs, const Attrs& attrs) {
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
  const int64_t table_seq[2] = {RopeTableSeq(inputs[n - 2], n - 2),
                                RopeTableSeq(inputs[n - 1], n - 1)};
  for (size_t i = 1; i < rotated; ++i) {
    const Shape& s = inputs[i].shape();
    if (s != q) {
      ThrowInvalid(InputField(i, "shape"), ShapeToString(s) + " does not fit q " + ShapeToString(q));
    }
  }
  for (size_t t = 0; t < 2; ++t) {
    const size_t i = n - 2 + t;
    if (table_seq[t] != q[seq_dim] || inputs[i].shape().back() != head_dim) {
      ThrowInvalid(InputField(i, "shape"), ShapeToString(inputs[i].shape()) + " does not fit seq " +
                                               std::to_string(q[seq_dim]) + ", head_dim " +
                                               std::to_string(head_dim));
    }
  }
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
  internal::CheckArity(inputs, 3);
  for (size_t i = 0; i < 3; ++i) {
    if (inputs[i].rank() != 3) {
      ThrowInvalid(InputField(i, "shape"), "bmm_grad needs rank 3, got " + ShapeToString(inputs[i].shape()));
    }
  }
  const Shape& x = inputs[0].shape();
  const Shape& y = inputs[1].shape();
  if (y[0] != x[0] || y[1] != x[2]) {
    ThrowInvalid(InputField(1, "shape"), ShapeToString(y) + " does not fit x " + ShapeToString(x) +
                                             " as [b, k, n]");
  }
  if (inputs[2].shape() != Shape{x[0], x[1], y[2]}) {
    ThrowInvalid(InputField(2, "shape"), "out_grad " + ShapeToString(inputs[2].shape()) +
                                             " != bmm output " + ShapeToString(Shape{x[0], x[1], y[2]}));
  }
  Attrs plain;
  plain.Set("trans_x", false);
  plain.Set("trans_y", false);
  return matmul_grad(inputs, plain);
}

}  // namespace spmd::kernels::cpu
