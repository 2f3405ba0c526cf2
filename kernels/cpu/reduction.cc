// Reductions, argmax and cumsum (docs/OPS.md "Reductions").
//
// A reduction runs on x seen as [outer, len, inner]: when the reduced dims form one block
// (after dropping size-1 dims and merging neighbours) that is x itself; otherwise x is
// first permuted so that the reduced dims come last (one copy), giving [kept, reduced, 1].
// Rows (inner == 1) are folded with several accumulators; with inner > 1 whole rows of
// inner elements are folded at once (contiguous, vectorisable). Sums accumulate in the
// compute dtype (float32 in float).
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/internal.h"
#include "kernels/cpu/permute.h"
#include "rules/ops/reduction_plan.h"

namespace spmd::kernels::cpu {
namespace {

using internal::AxisView;
using internal::CheckArity;
using internal::ComputeDType;
using internal::DispatchFloat;
using internal::InputField;
using internal::NewOutput;
using internal::ValuesAs;

using plan::ReduceShape;

// x's values laid out for the reduction: data seen as [outer, len, inner], with
// outer * inner output elements in output order and len (= plan.count) terms each.
template <typename V>
struct Arranged {
  std::unique_ptr<V[]> storage;
  const V* data = nullptr;
  AxisView view;
};

template <typename V>
Arranged<V> Arrange(const V* x, const Shape& shape, const ReduceShape& plan) {
  Arranged<V> a;
  const int64_t out_count = NumElements(plan.out_shape);
  if (NumElements(shape) == 0) {  // nothing to read: every output is the identity
    a.view = {out_count, plan.count == 0 ? 0 : 1, 1};
    if (out_count == 0) a.view = {0, 0, 1};
    a.data = x;
    return a;
  }
  // Non-size-1 dims, neighbours with the same flag merged.
  std::vector<int64_t> sizes;
  std::vector<bool> flags;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!sizes.empty() && flags.back() == plan.reduced[d]) {
      sizes.back() *= shape[d];
    } else {
      sizes.push_back(shape[d]);
      flags.push_back(plan.reduced[d]);
    }
  }
  int groups = 0;
  for (bool f : flags) groups += f ? 1 : 0;
  a.data = x;
  if (groups == 0) {
    a.view = {out_count, 1, 1};
    return a;
  }
  if (groups == 1) {
    size_t g = 0;
    while (!flags[g]) ++g;
    a.view.outer = 1;
    for (size_t i = 0; i < g; ++i) a.view.outer *= sizes[i];
    a.view.len = sizes[g];
    a.view.inner = 1;
    for (size_t i = g + 1; i < sizes.size(); ++i) a.view.inner *= sizes[i];
    return a;
  }
  std::vector<int64_t> perm;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (!plan.reduced[d]) perm.push_back(static_cast<int64_t>(d));
  }
  for (size_t d = 0; d < shape.size(); ++d) {
    if (plan.reduced[d]) perm.push_back(static_cast<int64_t>(d));
  }
  a.storage.reset(new V[static_cast<size_t>(NumElements(shape))]);
  internal::PermuteBytes(reinterpret_cast<std::byte*>(a.storage.get()),
                         reinterpret_cast<const std::byte*>(x), shape, perm, sizeof(V));
  a.data = a.storage.get();
  a.view = {out_count, plan.count, 1};
  return a;
}

// out[o, i] = fold of combine over a of x[o, a, i], from init.
template <typename V, typename Acc, typename Combine>
void Fold(const V* x, const AxisView& v, Acc init, Combine combine, Acc* out) {
  if (v.inner == 1) {
    for (int64_t o = 0; o < v.outer; ++o) {
      const V* row = x + o * v.len;
      Acc acc = init;
      for (int64_t a = 0; a < v.len; ++a) acc = combine(acc, row[a]);
      out[o] = acc;
    }
    return;
  }
  for (int64_t o = 0; o < v.outer; ++o) {
    Acc* dst = out + o * v.inner;
    for (int64_t i = 0; i < v.inner; ++i) dst[i] = init;
    for (int64_t a = 0; a < v.len; ++a) {
      const V* row = x + (o * v.len + a) * v.inner;
      for (int64_t i = 0; i < v.inner; ++i) dst[i] = combine(dst[i], row[i]);
    }
  }
}

// out[o, i] = sum over a of f(x[o, a, i]); rows use four accumulators.
template <typename T, typename F>
void SumOf(const T* x, const AxisView& v, F f, T* out) {
  if (v.inner == 1) {
    for (int64_t o = 0; o < v.outer; ++o) {
      const T* row = x + o * v.len;
      T s0 = T(0), s1 = T(0), s2 = T(0), s3 = T(0);
      int64_t a = 0;
      for (; a + 4 <= v.len; a += 4) {
        s0 += f(row[a]);
        s1 += f(row[a + 1]);
        s2 += f(row[a + 2]);
        s3 += f(row[a + 3]);
      }
      for (; a < v.len; ++a) s0 += f(row[a]);
      out[o] = (s0 + s1) + (s2 + s3);
    }
    return;
  }
  Fold(x, v, T(0), [&](T acc, T value) { return acc + f(value); }, out);
}

// Runs a float reduction: x as T, arranged, reduced by `body(arranged, out)`, in a new
// output of the plan's shape and dtype T.
template <typename T, typename Body>
Tensor FloatReduction(const Tensor& xt, const ReduceShape& plan, Body body) {
  ValuesAs<T> xv(xt);
  Arranged<T> a = Arrange(xv.data(), xt.shape(), plan);
  Tensor out = NewOutput(plan.out_shape, DTypeOf<T>::value);
  body(a, out.data<T>());
  return out;
}

template <typename Body>
Tensors FloatReduce(const TensorArgs& inputs, const ReduceShape& plan, Body body) {
  return DispatchFloat(ComputeDType(inputs, {0}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return TensorList(FloatReduction<T>(inputs[0], plan, [&](const Arranged<T>& a, T* out) {
      body(tag, a, out);
    }));
  });
}

template <typename Combine>
Tensors Logical(const TensorArgs& inputs, const Attrs& attrs, bool init, Combine combine) {
  const ReduceShape plan = plan::PlanReduce(plan::ShapesOf(inputs), attrs, "keep_dim");
  ValuesAs<bool> xv(inputs[0]);
  Arranged<bool> a = Arrange(xv.data(), inputs[0].shape(), plan);
  Tensor out = NewOutput(plan.out_shape, DType::kBool);
  Fold(a.data, a.view, init, combine, out.data<bool>());
  return TensorList(std::move(out));
}

}  // namespace

Tensors sum(const TensorArgs& inputs, const Attrs& attrs) {
  const ReduceShape plan = plan::PlanReduce(plan::ShapesOf(inputs), attrs, "keep_dim");
  return FloatReduce(inputs, plan, [](auto tag, const auto& a, auto* out) {
    using T = typename decltype(tag)::type;
    SumOf(a.data, a.view, [](T v) { return v; }, out);
  });
}

Tensors mean(const TensorArgs& inputs, const Attrs& attrs) {
  const plan::MeanPlan mean = plan::PlanMean(plan::ShapesOf(inputs), attrs);
  const ReduceShape& plan = mean.reduce;
  const int64_t divisor = mean.divisor;
  return FloatReduce(inputs, plan, [&](auto tag, const auto& a, auto* out) {
    using T = typename decltype(tag)::type;
    SumOf(a.data, a.view, [](T v) { return v; }, out);
    const T d = static_cast<T>(static_cast<double>(divisor));
    const int64_t n = a.view.outer * a.view.inner;
    for (int64_t i = 0; i < n; ++i) out[i] /= d;
  });
}

Tensors max(const TensorArgs& inputs, const Attrs& attrs) {
  const ReduceShape plan = plan::PlanReduce(plan::ShapesOf(inputs), attrs, "keep_dim");
  return FloatReduce(inputs, plan, [](auto tag, const auto& a, auto* out) {
    using T = typename decltype(tag)::type;
    Fold(a.data, a.view, -std::numeric_limits<T>::infinity(),
         [](T acc, T v) { return v > acc ? v : acc; }, out);
  });
}

Tensors min(const TensorArgs& inputs, const Attrs& attrs) {
  const ReduceShape plan = plan::PlanReduce(plan::ShapesOf(inputs), attrs, "keep_dim");
  return FloatReduce(inputs, plan, [](auto tag, const auto& a, auto* out) {
    using T = typename decltype(tag)::type;
    Fold(a.data, a.view, std::numeric_limits<T>::infinity(),
         [](T acc, T v) { return v < acc ? v : acc; }, out);
  });
}

Tensors prod(const TensorArgs& inputs, const Attrs& attrs) {
  const ReduceShape plan = plan::PlanReduce(plan::ShapesOf(inputs), attrs, "keep_dim");
  return FloatReduce(inputs, plan, [](auto tag, const auto& a, auto* out) {
    using T = typename decltype(tag)::type;
    Fold(a.data, a.view, T(1), [](T acc, T v) { return acc * v; }, out);
  });
}

Tensors any(const TensorArgs& inputs, const Attrs& attrs) {
  return Logical(inputs, attrs, false, [](bool acc, bool v) { return acc || v; });
}

Tensors all(const TensorArgs& inputs, const Attrs& attrs) {
  return Logical(inputs, attrs, true, [](bool acc, bool v) { return acc && v; });
}

Tensors squared_l2_norm(const TensorArgs& inputs, const Attrs& attrs) {
  const ReduceShape plan = plan::PlanSquaredL2Norm(plan::ShapesOf(inputs), attrs);
  return FloatReduce(inputs, plan, [](auto tag, const auto& a, auto* out) {
    using T = typename decltype(tag)::type;
    SumOf(a.data, a.view, [](T v) { return v * v; }, out);
  });
}

Tensors mean_all(const TensorArgs& inputs, const Attrs& attrs) {
  const plan::MeanPlan mean = plan::PlanMeanAll(plan::ShapesOf(inputs), attrs);
  const ReduceShape& plan = mean.reduce;
  const int64_t divisor = mean.divisor;
  return FloatReduce(inputs, plan, [&](auto tag, const auto& a, auto* out) {
    using T = typename decltype(tag)::type;
    SumOf(a.data, a.view, [](T v) { return v; }, out);
    out[0] /= static_cast<T>(static_cast<double>(divisor));
  });
}

Tensors logsumexp(const TensorArgs& inputs, const Attrs& attrs) {
  const ReduceShape plan = plan::PlanReduce(plan::ShapesOf(inputs), attrs, "keepdim");
  // log(sum(exp(x))) = m + log(sum(exp(x - m))) with m the max; an empty set gives -inf.
  return FloatReduce(inputs, plan, [](auto tag, const auto& a, auto* out) {
    using T = typename decltype(tag)::type;
    const AxisView& v = a.view;
    Fold(a.data, v, -std::numeric_limits<T>::infinity(),
         [](T acc, T x) { return x > acc ? x : acc; }, out);
    const int64_t n = v.outer * v.inner;
    std::vector<T> s(static_cast<size_t>(n), T(0));
    for (int64_t o = 0; o < v.outer; ++o) {
      const T* m = out + o * v.inner;
      T* so = s.data() + o * v.inner;
      for (int64_t k = 0; k < v.len; ++k) {
        const T* row = a.data + (o * v.len + k) * v.inner;
        for (int64_t i = 0; i < v.inner; ++i) {
          if (std::isfinite(m[i])) so[i] += std::exp(row[i] - m[i]);
        }
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      if (std::isfinite(out[i])) out[i] += std::log(s[i]);
    }
  });
}

Tensors p_norm(const TensorArgs& inputs, const Attrs& attrs) {
  const plan::PNormPlan p = plan::PlanPNorm(plan::ShapesOf(inputs), attrs);
  const ReduceShape& plan = p.reduce;
  const double porder = p.porder;
  return FloatReduce(inputs, plan, [&](auto tag, const auto& a, auto* out) {
    using T = typename decltype(tag)::type;
    const int64_t n = a.view.outer * a.view.inner;
    if (porder == 2.0) {
      SumOf(a.data, a.view, [](T v) { return v * v; }, out);
      for (int64_t i = 0; i < n; ++i) out[i] = std::sqrt(out[i]);
    } else if (porder == 1.0) {
      SumOf(a.data, a.view, [](T v) { return std::fabs(v); }, out);
    } else {
      const T p = static_cast<T>(porder);
      const T inv = static_cast<T>(1.0 / porder);
      SumOf(a.data, a.view, [p](T v) { return std::pow(std::fabs(v), p); }, out);
      for (int64_t i = 0; i < n; ++i) out[i] = std::pow(out[i], inv);
    }
  });
}

Tensors frobenius_norm(const TensorArgs& inputs, const Attrs& attrs) {
  const ReduceShape plan = plan::PlanReduce(plan::ShapesOf(inputs), attrs, "keep_dim");
  return FloatReduce(inputs, plan, [](auto tag, const auto& a, auto* out) {
    using T = typename decltype(tag)::type;
    SumOf(a.data, a.view, [](T v) { return v * v; }, out);
    const int64_t n = a.view.outer * a.view.inner;
    for (int64_t i = 0; i < n; ++i) out[i] = std::sqrt(out[i]);
  });
}

Tensors argmax(const TensorArgs& inputs, const Attrs& attrs) {
  const plan::ArgmaxPlan p = plan::PlanArgmax(plan::ShapesOf(inputs), attrs);
  const Tensor& x = inputs[0];
  const Shape& out_shape = p.out_shape;
  AxisView view;
  if (p.flatten) {
    view.len = x.numel();
  } else if (p.axis >= 0) {
    view = internal::ViewAlong(x.shape(), p.axis);
  }
  Tensor out = NewOutput(out_shape, DType::kInt64);
  int64_t* o = out.data<int64_t>();
  // Compared in x's own dtype; ties keep the first index.
  internal::VisitData(x, [&](const auto* data) {
    using V = std::remove_cv_t<std::remove_pointer_t<decltype(data)>>;
    if (view.inner == 1) {
      for (int64_t r = 0; r < view.outer; ++r) {
        const V* row = data + r * view.len;
        int64_t best = 0;
        V best_value = row[0];
        for (int64_t a = 1; a < view.len; ++a) {
          if (row[a] > best_value) {
            best = a;
            best_value = row[a];
          }
        }
        o[r] = best;
      }
      return;
    }
    std::unique_ptr<V[]> best_value(new V[static_cast<size_t>(view.inner)]);
    for (int64_t r = 0; r < view.outer; ++r) {
      int64_t* best = o + r * view.inner;
      const V* first = data + r * view.len * view.inner;
      for (int64_t i = 0; i < view.inner; ++i) {
        best[i] = 0;
        best_value[i] = first[i];
      }
      for (int64_t a = 1; a < view.len; ++a) {
        const V* row = first + a * view.inner;
        for (int64_t i = 0; i < view.inner; ++i) {
          if (row[i] > best_value[i]) {
            best[i] = a;
            best_value[i] = row[i];
          }
        }
      }
    }
  });
  return TensorList(std::move(out));
}

Tensors cumsum(const TensorArgs& inputs, const Attrs& attrs) {
  const plan::CumsumPlan c = plan::PlanCumsum(plan::ShapesOf(inputs), attrs);
  const bool exclusive = c.exclusive;
  const bool reverse = c.reverse;
  const Tensor& x = inputs[0];
  const Shape& out_shape = c.out_shape;
  AxisView view;
  if (c.flatten) {
    view.len = x.numel();
  } else if (c.axis >= 0) {
    view = internal::ViewAlong(x.shape(), c.axis);
  }
  return DispatchFloat(ComputeDType(inputs, {0}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> xv(x);
    Tensor out = NewOutput(out_shape, DTypeOf<T>::value);
    T* o = out.data<T>();
    const T* p = xv.data();
    const int64_t len = view.len, inner = view.inner;
    std::vector<T> running(static_cast<size_t>(inner));
    for (int64_t r = 0; r < view.outer; ++r) {
      const T* src = p + r * len * inner;
      T* dst = o + r * len * inner;
      std::fill(running.begin(), running.end(), T(0));
      for (int64_t step = 0; step < len; ++step) {
        const int64_t a = reverse ? len - 1 - step : step;
        const T* in_row = src + a * inner;
        T* out_row = dst + a * inner;
        if (exclusive) {
          for (int64_t i = 0; i < inner; ++i) {
            out_row[i] = running[i];
            running[i] += in_row[i];
          }
        } else {
          for (int64_t i = 0; i < inner; ++i) {
            running[i] += in_row[i];
            out_row[i] = running[i];
          }
        }
      }
    }
    return TensorList(std::move(out));
  });
}

}  // namespace spmd::kernels::cpu
