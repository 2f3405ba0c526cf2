// Reference of dropout, bernoulli and poisson (docs/OPS.md): element e of the global tensor
// is kept iff counter_rng::Uniform(seed, global linear index of e) >= p (bernoulli: is 1 iff
// the draw is below x; poisson: the count that the draw inverts). Plain loops: each
// element's global index is rebuilt from its local multi-index, the shard's offset and the
// global strides.
#include <cstdint>
#include <vector>

#include "reference/reference.h"
#include "reference/util.h"
#include "rules/ops/counter_rng.h"
#include "rules/ops/dropout_attrs.h"
#include "rules/ops/shape_plan.h"

namespace spmd::reference::ops {

Tensors dropout(const Tensors& inputs, const Attrs& attrs) {
  internal::CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  const dropout::DropoutAttrs a = dropout::ReadDropoutAttrs(attrs);
  const dropout::DropoutLayout layout = dropout::ReadDropoutLayout(attrs, x.shape);
  const Shape global_strides = internal::Strides(layout.global_shape);
  Tensor out = internal::Zeros(x.shape);
  Tensor mask = internal::Zeros(x.shape, DType::kBool);
  for (int64_t k = 0; k < NumElements(x.shape); ++k) {
    const std::vector<int64_t> index = internal::Unravel(k, x.shape);
    int64_t global = 0;
    for (size_t d = 0; d < index.size(); ++d) global += (layout.offset[d] + index[d]) * global_strides[d];
    const double v = x.data[k];
    if (a.is_test) {
      mask.data[k] = 1.0;
      out.data[k] = a.upscale ? v : v * (1.0 - a.p);
    } else if (counter_rng::Uniform(a.seed, global) >= a.p) {
      mask.data[k] = 1.0;
      out.data[k] = a.upscale ? v / (1.0 - a.p) : v;  // p < 1 here: Uniform is below 1
    }
  }
  return {out, mask};
}

namespace {

// x -> out in x's dtype, element e = draw(x[e], counter_rng::Uniform(seed, global linear
// index of e)); every x checked first (`check`, naming inputs[0].data).
template <typename Check, typename Draw>
Tensors DrawEach(const Tensors& inputs, const Attrs& attrs, Check check, Draw draw) {
  internal::CheckArity(inputs, 1);
  const Tensor& x = inputs[0];
  const int64_t seed = attrs.GetInt("seed");
  const dropout::DropoutLayout layout = dropout::ReadDropoutLayout(attrs, x.shape);
  for (double v : x.data) check(v);
  const Shape global_strides = internal::Strides(layout.global_shape);
  Tensor out = internal::Zeros(x.shape, x.dtype);
  for (int64_t k = 0; k < NumElements(x.shape); ++k) {
    const std::vector<int64_t> index = internal::Unravel(k, x.shape);
    int64_t global = 0;
    for (size_t d = 0; d < index.size(); ++d) global += (layout.offset[d] + index[d]) * global_strides[d];
    out.data[k] = draw(x.data[k], counter_rng::Uniform(seed, global));
  }
  return {out};
}

}  // namespace

// bernoulli: 1 iff the element's draw is below x[e], else 0; x in [0, 1].
Tensors bernoulli(const Tensors& inputs, const Attrs& attrs) {
  return DrawEach(inputs, attrs, dropout::CheckProbability, [](double p, double u) { return u < p ? 1.0 : 0.0; });
}

// poisson: counter_rng::PoissonCount(x[e], the element's draw); x in [0, 700].
Tensors poisson(const Tensors& inputs, const Attrs& attrs) {
  return DrawEach(inputs, attrs, dropout::CheckPoissonRate, counter_rng::PoissonCount);
}

// dropout(x) + y, and Paddle's seed_offset: the int64 pair [seed, 0] (the generator is
// keyed by the seed and the global index; no offset advances).
Tensors fused_dropout_add(const Tensors& inputs, const Attrs& attrs) {
  internal::CheckArity(inputs, 2);
  shape_plan::CheckSameShape(inputs[0].shape, inputs[1].shape);
  Tensor out = dropout({inputs[0]}, attrs)[0];
  for (size_t k = 0; k < out.data.size(); ++k) out.data[k] += inputs[1].data[k];
  Tensor seed_offset = internal::Zeros({2}, DType::kInt64);
  seed_offset.data[0] = static_cast<double>(attrs.GetInt("seed"));
  return {out, seed_offset};
}

}  // namespace spmd::reference::ops
