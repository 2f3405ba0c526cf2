// dropout's, bernoulli's and poisson's CPU kernels: the draws of rules/ops/counter_rng.h at each
// element's GLOBAL linear index, so a shard (with the localized local.offset and
// local.global_shape) draws the numbers of the same elements of the global tensor.
#include <cstdint>
#include <vector>

#include "kernels/cpu/internal.h"
#include "rules/ops/counter_rng.h"
#include "rules/ops/dropout_attrs.h"
#include "rules/ops/shape_plan.h"

namespace spmd::kernels::cpu {
namespace {

// Calls f(i, global) for each local element i (row-major) of a block of `shape` at
// layout.offset in a tensor of layout.global_shape, `global` its linear index there. It
// walks rows of the last dim: a row's global indices are consecutive from its first one.
template <typename F>
void ForEachGlobalIndex(const Shape& shape, const dropout::DropoutLayout& layout, F f) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  if (n == 0) return;
  const int rank = static_cast<int>(shape.size());
  std::vector<int64_t> global_strides(shape.size(), 1);
  for (int d = rank - 2; d >= 0; --d) global_strides[d] = global_strides[d + 1] * layout.global_shape[d + 1];
  const int64_t cols = rank == 0 ? 1 : shape.back();
  const int64_t col0 = rank == 0 ? 0 : layout.offset.back();
  std::vector<int64_t> row(rank > 0 ? rank - 1 : 0, 0);  // the local multi-index of the row
  for (int64_t start = 0; start < n; start += cols) {
    int64_t base = col0;
    for (size_t d = 0; d < row.size(); ++d) base += (layout.offset[d] + row[d]) * global_strides[d];
    for (int64_t j = 0; j < cols; ++j) f(start + j, base + j);
    for (int d = static_cast<int>(row.size()) - 1; d >= 0; --d) {  // next row (odometer)
      if (++row[d] < shape[d]) break;
      row[d] = 0;
    }
  }
}

}  // namespace

Tensors dropout(const TensorArgs& inputs, const Attrs& attrs) {
  internal::CheckArity(inputs, 1);
  const Tensor& xt = inputs[0];
  const dropout::DropoutAttrs a = dropout::ReadDropoutAttrs(attrs);
  const dropout::DropoutLayout layout = dropout::ReadDropoutLayout(attrs, xt.shape());
  return internal::DispatchFloat(internal::ComputeDType(inputs, {0}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    internal::ValuesAs<T> xv(xt);
    Tensor out = internal::NewOutput(xt.shape(), DTypeOf<T>::value);
    Tensor mask = internal::NewOutput(xt.shape(), DType::kBool);
    const T* x = xv.data();
    T* o = out.data<T>();
    bool* m = mask.data<bool>();
    const int64_t n = out.numel();
    if (n == 0) return Tensors{std::move(out), std::move(mask)};
    if (a.is_test) {
      const double factor = a.upscale ? 1.0 : 1.0 - a.p;
      for (int64_t i = 0; i < n; ++i) {
        o[i] = a.upscale ? x[i] : static_cast<T>(static_cast<double>(x[i]) * factor);
        m[i] = true;
      }
      return Tensors{std::move(out), std::move(mask)};
    }
    const double keep_divisor = 1.0 - a.p;
    ForEachGlobalIndex(xt.shape(), layout, [&](int64_t i, int64_t global) {
      const bool keep = counter_rng::Uniform(a.seed, global) >= a.p;
      const double v = static_cast<double>(x[i]);
      m[i] = keep;
      o[i] = keep ? static_cast<T>(a.upscale ? v / keep_divisor : v) : T(0);
    });
    return Tensors{std::move(out), std::move(mask)};
  });
}

namespace {

// x -> out in x's float dtype, out[i] = draw(x[i], the element's counter_rng::Uniform):
// every x is checked first (`check`, naming inputs[0].data).
template <typename Check, typename Draw>
Tensors DrawEach(const TensorArgs& inputs, const Attrs& attrs, Check check, Draw draw) {
  internal::CheckArity(inputs, 1);
  const Tensor& xt = inputs[0];
  const int64_t seed = attrs.GetInt("seed");
  const dropout::DropoutLayout layout = dropout::ReadDropoutLayout(attrs, xt.shape());
  return internal::DispatchFloat(internal::ComputeDType(inputs, {0}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    internal::ValuesAs<T> xv(xt);
    const T* x = xv.data();
    for (int64_t i = 0; i < xt.numel(); ++i) check(static_cast<double>(x[i]));
    Tensor out = internal::NewOutput(xt.shape(), DTypeOf<T>::value);
    T* o = out.data<T>();
    ForEachGlobalIndex(xt.shape(), layout, [&](int64_t i, int64_t global) {
      o[i] = static_cast<T>(draw(static_cast<double>(x[i]), counter_rng::Uniform(seed, global)));
    });
    return Tensors{std::move(out)};
  });
}

}  // namespace

// bernoulli: 1 where the element's draw is below its probability x (in [0, 1]).
Tensors bernoulli(const TensorArgs& inputs, const Attrs& attrs) {
  return DrawEach(inputs, attrs, dropout::CheckProbability, [](double p, double u) { return u < p ? 1.0 : 0.0; });
}

// poisson: each element's count from its rate and draw (rates in [0, 700]).
Tensors poisson(const TensorArgs& inputs, const Attrs& attrs) {
  return DrawEach(inputs, attrs, dropout::CheckPoissonRate, counter_rng::PoissonCount);
}

// dropout(x) + y: dropout's kernel on x, then y added in the compute dtype.
Tensors fused_dropout_add(const TensorArgs& inputs, const Attrs& attrs) {
  internal::CheckArity(inputs, 2);
  shape_plan::CheckSameShape(inputs[0].shape(), inputs[1].shape());
  Tensors out = dropout(TensorArgs(std::vector<const Tensor*>{&inputs[0]}), attrs);
  const DType dtype = internal::ComputeDType(inputs, {0, 1});
  return internal::DispatchFloat(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    internal::ValuesAs<T> dropped(out[0]);
    internal::ValuesAs<T> y(inputs[1]);
    Tensor sum = internal::NewOutput(inputs[0].shape(), DTypeOf<T>::value);
    T* o = sum.data<T>();
    for (int64_t i = 0; i < sum.numel(); ++i) o[i] = dropped[i] + y[i];
    // Paddle's seed_offset: [seed, 0] (the generator is keyed by the global index).
    Tensor seed_offset = internal::NewOutput({2}, DType::kInt64);
    seed_offset.data<int64_t>()[0] = attrs.GetInt("seed");
    seed_offset.data<int64_t>()[1] = 0;
    return Tensors{std::move(sum), std::move(seed_offset)};
  });
}

}  // namespace spmd::kernels::cpu
