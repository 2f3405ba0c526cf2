// Normalisation and losses: softmax, log_softmax, softmax_grad, layer_norm, rms_norm,
// lookup_table_v2, cross_entropy_with_softmax (docs/OPS.md "Normalisation and losses"),
// and the backward ops embedding_grad, cross_entropy_with_softmax_grad, layer_norm_grad,
// rms_norm_grad ("Backward ops").
//
// The softmax family works on [outer, len, inner]: with inner == 1 a row at a time, else
// rows of `inner` contiguous elements with per-column running max and sum. layer_norm and
// rms_norm work per row of the flattened [outer, n] (two passes: mean, then the sum of
// squared deviations; no E[x^2] - E[x]^2 cancellation).
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/internal.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/vector_math.h"
#include "rules/norm_plan.h"
#include "rules/softmax_pieces.h"

namespace spmd::kernels::cpu {
namespace {

using internal::AxisView;
using internal::CheckArity;
using internal::ComputeDType;
using internal::DispatchFloat;
using internal::InputField;
using internal::NewOutput;
using internal::ValuesAs;

// softmax of x along `view` into out (same layout).
template <typename T>
void SoftmaxAlong(const T* x, const AxisView& v, T* out) {
  if constexpr (std::is_same_v<T, float>) {
    if (v.inner == 1) {
      simd::SoftmaxRows(x, out, v.outer, v.len);
      return;
    }
  }
  if (v.inner == 1) {
    for (int64_t o = 0; o < v.outer; ++o) {
      const T* row = x + o * v.len;
      T* dst = out + o * v.len;
      T m = -std::numeric_limits<T>::infinity();
      for (int64_t a = 0; a < v.len; ++a) m = row[a] > m ? row[a] : m;
      for (int64_t a = 0; a < v.len; ++a) dst[a] = Exp(row[a] - m);  // vectorises
      T s = T(0);
      for (int64_t a = 0; a < v.len; ++a) s += dst[a];
      for (int64_t a = 0; a < v.len; ++a) dst[a] /= s;
    }
    return;
  }
  std::vector<T> m(static_cast<size_t>(v.inner)), s(static_cast<size_t>(v.inner));
  for (int64_t o = 0; o < v.outer; ++o) {
    const T* block = x + o * v.len * v.inner;
    T* dst = out + o * v.len * v.inner;
    std::fill(m.begin(), m.end(), -std::numeric_limits<T>::infinity());
    std::fill(s.begin(), s.end(), T(0));
    for (int64_t a = 0; a < v.len; ++a) {
      const T* row = block + a * v.inner;
      for (int64_t i = 0; i < v.inner; ++i) m[i] = row[i] > m[i] ? row[i] : m[i];
    }
    for (int64_t a = 0; a < v.len; ++a) {
      const T* row = block + a * v.inner;
      T* d = dst + a * v.inner;
      for (int64_t i = 0; i < v.inner; ++i) {
        d[i] = Exp(row[i] - m[i]);
        s[i] += d[i];
      }
    }
    for (int64_t a = 0; a < v.len; ++a) {
      T* d = dst + a * v.inner;
      for (int64_t i = 0; i < v.inner; ++i) d[i] /= s[i];
    }
  }
}

AxisView ViewFromAxisAttr(const Tensor& x, const Attrs& attrs) {
  const int64_t axis =
      internal::NormalizeAxisOrScalar(attrs.GetInt("axis"), x.rank(), "attrs.axis");
  return internal::ViewAlong(x.shape(), axis);
}

// Reads ids / labels of any dtype as int64: int64 and bool as they are; floats must be
// whole numbers of at most 9e15 in magnitude (as the references require). Errors name
// `field`.
class Ids {
 public:
  Ids(const Tensor& t, const std::string& field) {
    if (t.dtype() == DType::kInt64) {
      ptr_ = t.data<int64_t>();
      return;
    }
    const int64_t n = t.numel();
    storage_.resize(static_cast<size_t>(n));
    internal::VisitData(t, [&](const auto* src) {
      using V = std::remove_cv_t<std::remove_pointer_t<decltype(src)>>;
      for (int64_t i = 0; i < n; ++i) {
        if constexpr (std::is_floating_point_v<V>) {
          storage_[i] = plan::FloatId(static_cast<double>(src[i]), field);
        } else {
          storage_[i] = static_cast<int64_t>(src[i]);
        }
      }
    });
    ptr_ = storage_.data();
  }
  int64_t operator[](int64_t i) const { return ptr_[i]; }

 private:
  std::vector<int64_t> storage_;
  const int64_t* ptr_ = nullptr;
};

}  // namespace

Tensors softmax(const TensorArgs& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  const AxisView view = ViewFromAxisAttr(inputs[0], attrs);
  return DispatchFloat(ComputeDType(inputs, {0}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> x(inputs[0]);
    Tensor out = NewOutput(inputs[0].shape(), DTypeOf<T>::value);
    SoftmaxAlong(x.data(), view, out.data<T>());
    return TensorList(std::move(out));
  });
}

Tensors log_softmax(const TensorArgs& inputs, const Attrs& attrs) {
  CheckArity(inputs, 1);
  const AxisView v = ViewFromAxisAttr(inputs[0], attrs);
  return DispatchFloat(ComputeDType(inputs, {0}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> xv(inputs[0]);
    Tensor out = NewOutput(inputs[0].shape(), DTypeOf<T>::value);
    const T* x = xv.data();
    T* o = out.data<T>();
    std::vector<T> m(static_cast<size_t>(v.inner)), s(static_cast<size_t>(v.inner));
    for (int64_t r = 0; r < v.outer; ++r) {
      const T* block = x + r * v.len * v.inner;
      T* dst = o + r * v.len * v.inner;
      std::fill(m.begin(), m.end(), -std::numeric_limits<T>::infinity());
      std::fill(s.begin(), s.end(), T(0));
      for (int64_t a = 0; a < v.len; ++a) {
        const T* row = block + a * v.inner;
        for (int64_t i = 0; i < v.inner; ++i) m[i] = row[i] > m[i] ? row[i] : m[i];
      }
      for (int64_t a = 0; a < v.len; ++a) {
        const T* row = block + a * v.inner;
        for (int64_t i = 0; i < v.inner; ++i) s[i] += Exp(row[i] - m[i]);
      }
      for (int64_t i = 0; i < v.inner; ++i) s[i] = std::log(s[i]);
      for (int64_t a = 0; a < v.len; ++a) {
        const T* row = block + a * v.inner;
        T* d = dst + a * v.inner;
        for (int64_t i = 0; i < v.inner; ++i) d[i] = row[i] - m[i] - s[i];
      }
    }
    return TensorList(std::move(out));
  });
}

Tensors softmax_grad(const TensorArgs& inputs, const Attrs& attrs) {
  plan::PlanSoftmaxGrad(plan::ShapesOf(inputs));
  const Tensor& out_t = inputs[0];
  const Tensor& grad_t = inputs[1];
  const AxisView v = ViewFromAxisAttr(out_t, attrs);
  return DispatchFloat(ComputeDType(inputs, {0, 1}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> yv(out_t);
    ValuesAs<T> gv(grad_t);
    Tensor x_grad = NewOutput(out_t.shape(), DTypeOf<T>::value);
    const T* y = yv.data();
    const T* g = gv.data();
    T* o = x_grad.data<T>();
    if constexpr (std::is_same_v<T, float>) {
      if (v.inner == 1) {
        simd::SoftmaxGradRows(y, g, o, v.outer, v.len);
        return TensorList(std::move(x_grad));
      }
    }
    if (v.inner == 1) {
      // The last axis (attention's scores): one dot product per row, summed in 8
      // independent lanes so that the loop vectorises, then the row in one pass.
      for (int64_t r = 0; r < v.outer; ++r) {
        const T* yr = y + r * v.len;
        const T* gr = g + r * v.len;
        T* orow = o + r * v.len;
        T lanes[8] = {};
        int64_t a = 0;
        for (; a + 8 <= v.len; a += 8) {
          for (int l = 0; l < 8; ++l) lanes[l] += gr[a + l] * yr[a + l];
        }
        T dot_row = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
                    ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
        for (; a < v.len; ++a) dot_row += gr[a] * yr[a];
        for (int64_t b = 0; b < v.len; ++b) orow[b] = yr[b] * (gr[b] - dot_row);
      }
      return TensorList(std::move(x_grad));
    }
    std::vector<T> dot(static_cast<size_t>(v.inner));
    for (int64_t r = 0; r < v.outer; ++r) {
      const int64_t base = r * v.len * v.inner;
      std::fill(dot.begin(), dot.end(), T(0));
      for (int64_t a = 0; a < v.len; ++a) {
        const T* yr = y + base + a * v.inner;
        const T* gr = g + base + a * v.inner;
        for (int64_t i = 0; i < v.inner; ++i) dot[i] += gr[i] * yr[i];
      }
      for (int64_t a = 0; a < v.len; ++a) {
        const int64_t at = base + a * v.inner;
        for (int64_t i = 0; i < v.inner; ++i) o[at + i] = y[at + i] * (g[at + i] - dot[i]);
      }
    }
    return TensorList(std::move(x_grad));
  });
}

Tensors layer_norm(const TensorArgs& inputs, const Attrs& attrs) {
  const plan::NormSplit split = plan::PlanNorm(plan::ShapesOf(inputs), attrs, 2);
  const double epsilon = attrs.GetFloat("epsilon");
  return DispatchFloat(ComputeDType(inputs, {0, 1, 2}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> xv(inputs[0]);
    ValuesAs<T> sv(inputs[1]);
    ValuesAs<T> bv(inputs[2]);
    Tensor out = NewOutput(inputs[0].shape(), DTypeOf<T>::value);
    Tensor mean = NewOutput(split.stats_shape, DTypeOf<T>::value);
    Tensor variance = NewOutput(split.stats_shape, DTypeOf<T>::value);
    const T* scale = sv.data();
    const T* bias = bv.data();
    T* o = out.data<T>();
    T* mo = mean.data<T>();
    T* vo = variance.data<T>();
    const int64_t n = split.n;
    const T tn = static_cast<T>(static_cast<double>(n));
    const T eps = static_cast<T>(epsilon);
    if constexpr (std::is_same_v<T, float>) {
      simd::LayerNormRows(xv.data(), scale, bias, eps, split.outer, n, o, mo, vo);
      return TensorList(std::move(out), std::move(mean), std::move(variance));
    }
    for (int64_t r = 0; r < split.outer; ++r) {
      const T* row = xv.data() + r * n;
      T mu = T(0);
      for (int64_t j = 0; j < n; ++j) mu += row[j];
      mu /= tn;
      T var = T(0);
      for (int64_t j = 0; j < n; ++j) var += (row[j] - mu) * (row[j] - mu);
      var /= tn;
      const T inv = T(1) / std::sqrt(var + eps);
      T* dst = o + r * n;
      for (int64_t j = 0; j < n; ++j) dst[j] = (row[j] - mu) * inv * scale[j] + bias[j];
      mo[r] = mu;
      vo[r] = var;
    }
    return TensorList(std::move(out), std::move(mean), std::move(variance));
  });
}

Tensors rms_norm(const TensorArgs& inputs, const Attrs& attrs) {
  const plan::NormSplit split = plan::PlanNorm(plan::ShapesOf(inputs), attrs, 1);
  const double epsilon = attrs.GetFloat("epsilon");
  return DispatchFloat(ComputeDType(inputs, {0, 1}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> xv(inputs[0]);
    ValuesAs<T> sv(inputs[1]);
    Tensor out = NewOutput(inputs[0].shape(), DTypeOf<T>::value);
    Tensor invvar = NewOutput(split.stats_shape, DTypeOf<T>::value);
    const T* scale = sv.data();
    T* o = out.data<T>();
    T* io = invvar.data<T>();
    const int64_t n = split.n;
    const T tn = static_cast<T>(static_cast<double>(n));
    const T eps = static_cast<T>(epsilon);
    for (int64_t r = 0; r < split.outer; ++r) {
      const T* row = xv.data() + r * n;
      T sq = T(0);
      for (int64_t j = 0; j < n; ++j) sq += row[j] * row[j];
      const T inv = T(1) / std::sqrt(sq / tn + eps);
      T* dst = o + r * n;
      for (int64_t j = 0; j < n; ++j) dst[j] = row[j] * inv * scale[j];
      io[r] = inv;
    }
    return TensorList(std::move(out), std::move(invvar));
  });
}

namespace {

// The backward of layer_norm (kLayerNorm: stats = mean, variance) or rms_norm (stats =
// invvar, variance unused) through out, row by row: xhat = (x - mean) inv, dxhat = g scale,
// x_grad = inv (dxhat - mean(dxhat) - xhat mean(dxhat xhat)) (rms_norm: no mean(dxhat)
// term); scale_grad (and bias_grad, when given) add g xhat (g) row after row.
template <typename T, bool kLayerNorm>
void NormGradRows(const T* x, const T* scale, const T* stats, const T* variance, const T* g,
                  const plan::NormSplit& shape, T eps, T* x_grad, T* scale_grad,
                  T* bias_grad) {
  const int64_t n = shape.n;
  const T tn = static_cast<T>(static_cast<double>(n));
  std::vector<T> xhat(static_cast<size_t>(n)), dxhat(static_cast<size_t>(n));
  for (int64_t r = 0; r < shape.outer; ++r) {
    const T* xr = x + r * n;
    const T* gr = g + r * n;
    const T inv = kLayerNorm ? T(1) / std::sqrt(variance[r] + eps) : stats[r];
    const T mu = kLayerNorm ? stats[r] : T(0);
    T sum_dxhat = T(0), sum_dxhat_xhat = T(0);
    for (int64_t j = 0; j < n; ++j) {
      xhat[j] = (xr[j] - mu) * inv;
      dxhat[j] = gr[j] * scale[j];
      sum_dxhat += dxhat[j];
      sum_dxhat_xhat += dxhat[j] * xhat[j];
      scale_grad[j] += gr[j] * xhat[j];
      if constexpr (kLayerNorm) bias_grad[j] += gr[j];
    }
    const T mean_dxhat = kLayerNorm ? sum_dxhat / tn : T(0);
    const T mean_dxhat_xhat = sum_dxhat_xhat / tn;
    T* dst = x_grad + r * n;
    for (int64_t j = 0; j < n; ++j) dst[j] = (dxhat[j] - mean_dxhat - xhat[j] * mean_dxhat_xhat) * inv;
  }
}

// layer_norm_grad (kLayerNorm: x, scale, bias (not read), mean, variance, out_grad ->
// x_grad, scale_grad, bias_grad) and rms_norm_grad (x, scale, invvar, out_grad -> x_grad,
// scale_grad).
template <bool kLayerNorm>
Tensors NormGrad(const TensorArgs& inputs, const Attrs& attrs) {
  constexpr size_t kParams = kLayerNorm ? 2 : 1;
  const plan::NormSplit shape = plan::PlanNormGrad(plan::ShapesOf(inputs), attrs, kParams, kParams);
  const double epsilon = attrs.GetFloat("epsilon");
  constexpr size_t kStats = 1 + kParams;                   // mean or invvar
  constexpr size_t kVariance = kLayerNorm ? 4 : kStats;  // rms_norm_grad: not read
  return DispatchFloat(internal::ComputeDTypeAll(inputs), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> x(inputs[0]);
    ValuesAs<T> scale(inputs[1]);
    ValuesAs<T> stats(inputs[kStats]);
    ValuesAs<T> variance(inputs[kVariance]);
    ValuesAs<T> g(inputs[inputs.size() - 1]);
    Tensor x_grad = NewOutput(inputs[0].shape(), DTypeOf<T>::value);
    Tensor scale_grad = NewOutput({shape.n}, DTypeOf<T>::value, /*zero=*/true);
    Tensor bias_grad = kLayerNorm ? NewOutput({shape.n}, DTypeOf<T>::value, /*zero=*/true) : Tensor();
    if constexpr (kLayerNorm && std::is_same_v<T, float>) {
      simd::LayerNormGradRows(x.data(), scale.data(), stats.data(), variance.data(), g.data(),
                              static_cast<float>(epsilon), shape.outer, shape.n, x_grad.data<T>(),
                              scale_grad.data<T>(), bias_grad.data<T>());
    } else {
      NormGradRows<T, kLayerNorm>(x.data(), scale.data(), stats.data(), variance.data(), g.data(),
                                  shape, static_cast<T>(epsilon), x_grad.data<T>(),
                                  scale_grad.data<T>(), kLayerNorm ? bias_grad.data<T>() : nullptr);
    }
    if constexpr (kLayerNorm) {
      return TensorList(std::move(x_grad), std::move(scale_grad), std::move(bias_grad));
    } else {
      return TensorList(std::move(x_grad), std::move(scale_grad));
    }
  });
}

}  // namespace

Tensors layer_norm_grad(const TensorArgs& inputs, const Attrs& attrs) {
  return NormGrad<true>(inputs, attrs);
}

Tensors rms_norm_grad(const TensorArgs& inputs, const Attrs& attrs) {
  return NormGrad<false>(inputs, attrs);
}

namespace {

// lookup_table_v2 and c_embedding (plan::PlanLookupTable / PlanCEmbedding): out[t] =
// weight[id - start], zeros for the padding id and for ids outside this piece's rows.
Tensors GatherRows(const TensorArgs& inputs, const plan::EmbeddingPlan& p) {
  const Tensor& ids_t = inputs[p.ids_at];
  const std::string ids_field = InputField(p.ids_at, "data");
  const Ids ids(ids_t, ids_field);
  const int64_t hidden = p.hidden;
  return DispatchFloat(ComputeDType(inputs, {p.weight_at}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> wv(inputs[p.weight_at]);
    Tensor out = NewOutput(p.out_shape, DTypeOf<T>::value);
    T* o = out.data<T>();
    const T* w = wv.data();
    const int64_t count = ids_t.numel();
    for (int64_t t = 0; t < count; ++t) {
      const int64_t id = ids[t];
      if (id < 0 || (p.id_limit >= 0 && id >= p.id_limit)) plan::ThrowIdOutside(ids_field, "id", id, p.id_limit);
      T* dst = o + t * hidden;
      const bool padding = p.padding_idx >= 0 && id == p.padding_idx;
      const int64_t row = id - p.start;  // no overflow: 0 <= id, 0 <= start
      if (padding || row < 0 || row >= p.vocab) {  // zeros: padding, or another shard's row
        std::fill(dst, dst + hidden, T(0));
      } else if (hidden > 0) {
        std::memcpy(dst, w + row * hidden, static_cast<size_t>(hidden) * sizeof(T));
      }
    }
    return TensorList(std::move(out));
  });
}

}  // namespace

Tensors lookup_table_v2(const TensorArgs& inputs, const Attrs& attrs) {
  return GatherRows(inputs, plan::PlanLookupTable(plan::ShapesOf(inputs), attrs));
}

Tensors c_embedding(const TensorArgs& inputs, const Attrs& attrs) {
  return GatherRows(inputs, plan::PlanCEmbedding(plan::ShapesOf(inputs), attrs));
}

// ---- c_softmax_with_cross_entropy: a piece's statistics, then the piece's outputs -------------

namespace {

// inputs[0] is [..., C] and each of `rows_of` is [..., 1]. Returns the rows.
int64_t CheckClassRows(const TensorArgs& inputs, std::initializer_list<size_t> rows_of) {
  if (inputs[0].rank() == 0) ThrowInvalid(InputField(0, "shape"), "needs a class dim, got []");
  Shape row_shape = inputs[0].shape();
  row_shape.back() = 1;
  for (size_t i : rows_of) {
    if (inputs[i].shape() != row_shape) {
      ThrowInvalid(InputField(i, "shape"), "must have shape " + ShapeToString(row_shape) + ", got " +
                                               ShapeToString(inputs[i].shape()));
    }
  }
  return inputs[1].numel();
}

// The checks of c_softmax_with_cross_entropy and its phases (as the reference's): the
// attrs, logits [..., C], label [..., 1]. Returns the rows.
int64_t CheckCSoftmax(const TensorArgs& inputs, const Attrs& attrs, size_t arity) {
  softmax_pieces::CheckPaddleCommAttrs(attrs);
  CheckArity(inputs, arity);
  return CheckClassRows(inputs, {1});
}

// Every row's four numbers (softmax_pieces::PieceStats) of the piece starting at `start`,
// computed in T and kept in float64 whatever the logits' dtype, so that no rounding to a
// 2-byte float happens between the pieces (RunCpuKernel rounds float32 outputs only).
template <typename T>
Tensor PieceStatistics(const Tensor& logits, const Ids& ids, int64_t rows, int64_t start,
                       int64_t ignore_index) {
  ValuesAs<T> x(logits);
  const int64_t len = logits.shape().back();
  Shape stats_shape = logits.shape();
  stats_shape.back() = softmax_pieces::kStats;
  Tensor stats = NewOutput(stats_shape, DType::kFloat64);
  double* st = stats.data<double>();
  for (int64_t o = 0; o < rows; ++o) {
    T row[softmax_pieces::kStats];
    softmax_pieces::PieceStats(x.data() + o * len, len, int64_t{1}, ids[o], start,
                               ids[o] == ignore_index, row);
    for (int64_t k = 0; k < softmax_pieces::kStats; ++k) st[o * softmax_pieces::kStats + k] = row[k];
  }
  return stats;
}

// The piece's softmax and every row's loss from `pieces` gathered statistics.
template <typename T>
Tensors FinishPiece(const Tensor& logits, const Ids& ids, int64_t rows, const double* gathered,
                    int64_t pieces, int64_t ignore_index, const std::string& label_field) {
  ValuesAs<T> x(logits);
  const int64_t len = logits.shape().back();
  Tensor softmax = NewOutput(logits.shape(), DTypeOf<T>::value);
  Shape loss_shape = logits.shape();
  loss_shape.back() = 1;
  Tensor loss = NewOutput(loss_shape, DTypeOf<T>::value);
  T* p = softmax.data<T>();
  T* l = loss.data<T>();
  for (int64_t o = 0; o < rows; ++o) {
    const bool ignored = ids[o] == ignore_index;
    const auto row = softmax_pieces::Combine(gathered + o * softmax_pieces::kStats, pieces,
                                             rows * softmax_pieces::kStats);
    if (!ignored && row.holders != 1) {
      ThrowInvalid(label_field, "label " + std::to_string(ids[o]) + " is outside the class axis");
    }
    const T max = static_cast<T>(row.max);
    const T inv = static_cast<T>(1.0 / row.sum);
    for (int64_t j = 0; j < len; ++j) p[o * len + j] = std::exp(x.data()[o * len + j] - max) * inv;
    l[o] = static_cast<T>(softmax_pieces::Loss(row, ignored));
  }
  return TensorList(std::move(softmax), std::move(loss));
}

}  // namespace

// The op on one device: the class axis is whole, so its one piece's statistics finish it.
Tensors c_softmax_with_cross_entropy(const TensorArgs& inputs, const Attrs& attrs) {
  const int64_t rows = CheckCSoftmax(inputs, attrs, 2);
  const int64_t ignore_index = attrs.GetInt("ignore_index");
  const std::string label_field = InputField(1, "data");
  const Ids ids(inputs[1], label_field);
  const int64_t classes = inputs[0].shape().back();
  for (int64_t o = 0; o < rows; ++o) {
    const int64_t id = ids[o];
    if (id != ignore_index && (id < 0 || id >= classes)) {
      ThrowInvalid(label_field, "label " + std::to_string(id) + " outside [0, " + std::to_string(classes) + ")");
    }
  }
  return DispatchFloat(ComputeDType(inputs, {0}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Tensor stats = PieceStatistics<T>(inputs[0], ids, rows, 0, ignore_index);
    return FinishPiece<T>(inputs[0], ids, rows, stats.data<double>(), 1, ignore_index, label_field);
  });
}

// Phase 1 (c_softmax_with_cross_entropy@stats): the piece [__vocab_start, + C)'s statistics.
Tensors c_softmax_with_cross_entropy_stats(const TensorArgs& inputs, const Attrs& attrs) {
  const int64_t rows = CheckCSoftmax(inputs, attrs, 2);
  const int64_t start = attrs.Has(kLocalVocabStart) ? attrs.GetInt(kLocalVocabStart) : 0;
  if (start < 0) ThrowInvalid(std::string("attrs.") + kLocalVocabStart, "negative class offset");
  const Ids ids(inputs[1], InputField(1, "data"));
  return DispatchFloat(ComputeDType(inputs, {0}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return TensorList(PieceStatistics<T>(inputs[0], ids, rows, start, attrs.GetInt("ignore_index")));
  });
}

// Phase 2 (c_softmax_with_cross_entropy@finish): logits, label, the gathered float64
// [P, ..., 4].
Tensors c_softmax_with_cross_entropy_finish(const TensorArgs& inputs, const Attrs& attrs) {
  const int64_t rows = CheckCSoftmax(inputs, attrs, 3);
  const Tensor& gathered = inputs[2];
  if (gathered.dtype() != DType::kFloat64) {
    ThrowInvalid(InputField(2, "dtype"), "the gathered statistics must be float64, got " +
                                             std::string(ToString(gathered.dtype())));
  }
  const int64_t pieces = gathered.rank() == 0 ? 0 : gathered.shape()[0];
  if (pieces < 1 || gathered.numel() != pieces * rows * softmax_pieces::kStats) {
    ThrowInvalid(InputField(2, "shape"), "the gathered statistics must be [pieces, rows, 4], got " +
                                             ShapeToString(gathered.shape()));
  }
  const std::string label_field = InputField(1, "data");
  const Ids ids(inputs[1], label_field);
  return DispatchFloat(ComputeDType(inputs, {0}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return FinishPiece<T>(inputs[0], ids, rows, gathered.data<double>(), pieces,
                          attrs.GetInt("ignore_index"), label_field);
  });
}

// (softmax - onehot(label)) * loss_grad along the last dim, 0 on ignored rows; on a piece
// (localized __vocab_start, __global_shape) the one-hot lands where the piece holds the label.
Tensors c_softmax_with_cross_entropy_grad(const TensorArgs& inputs, const Attrs& attrs) {
  softmax_pieces::CheckPaddleCommAttrs(attrs);
  CheckArity(inputs, 3);
  const int64_t rows = CheckClassRows(inputs, {1, 2});
  const int64_t len = inputs[0].shape().back();
  const int64_t start = attrs.Has(kLocalVocabStart) ? attrs.GetInt(kLocalVocabStart) : 0;
  const int64_t classes = attrs.Has(kLocalGlobalShape) ? attrs.GetInts(kLocalGlobalShape).back() : len;
  const int64_t ignore_index = attrs.GetInt("ignore_index");
  const std::string label_field = InputField(1, "data");
  const Ids ids(inputs[1], label_field);
  for (int64_t o = 0; o < rows; ++o) {
    if (ids[o] != ignore_index && (ids[o] < 0 || ids[o] >= classes)) {
      ThrowInvalid(label_field,
                   "label " + std::to_string(ids[o]) + " outside [0, " + std::to_string(classes) + ")");
    }
  }
  return DispatchFloat(ComputeDType(inputs, {0, 2}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> p(inputs[0]);
    ValuesAs<T> g(inputs[2]);
    Tensor grad = NewOutput(inputs[0].shape(), DTypeOf<T>::value);
    T* d = grad.data<T>();
    for (int64_t o = 0; o < rows; ++o) {
      const bool ignored = ids[o] == ignore_index;
      for (int64_t j = 0; j < len; ++j) {
        const T onehot = start + j == ids[o] ? T(1) : T(0);
        d[o * len + j] = ignored ? T(0) : (p[o * len + j] - onehot) * g[o];
      }
    }
    return TensorList(std::move(grad));
  });
}

Tensors cross_entropy_with_softmax(const TensorArgs& inputs, const Attrs& attrs) {
  const plan::CrossEntropyPlan ce = plan::PlanCrossEntropy(plan::ShapesOf(inputs), attrs);
  const bool soft_label = ce.soft_label;
  const bool use_softmax = ce.use_softmax;
  const int64_t ignore_index = ce.ignore_index;
  const Tensor& logits = inputs[0];
  const Tensor& label = inputs[1];
  const AxisView v = internal::ViewAlong(logits.shape(), ce.axis);
  const Shape& loss_shape = ce.loss_shape;
  const DType dtype = soft_label ? ComputeDType(inputs, {0, 1}) : ComputeDType(inputs, {0});
  return DispatchFloat(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> xv(logits);
    Tensor softmax_out = NewOutput(logits.shape(), DTypeOf<T>::value);
    T* p = softmax_out.data<T>();
    if (use_softmax) {
      SoftmaxAlong(xv.data(), v, p);
    } else if (logits.numel() > 0) {
      std::memcpy(p, xv.data(), static_cast<size_t>(logits.numel()) * sizeof(T));
    }
    Tensor loss = NewOutput(loss_shape, DTypeOf<T>::value, /*zero=*/true);
    T* lo = loss.data<T>();
    if (soft_label) {
      ValuesAs<T> lv(label);
      const T* l = lv.data();
      for (int64_t o = 0; o < v.outer; ++o) {
        T* dst = lo + o * v.inner;
        for (int64_t a = 0; a < v.len; ++a) {
          const int64_t at = (o * v.len + a) * v.inner;
          for (int64_t i = 0; i < v.inner; ++i) dst[i] += l[at + i] * std::log(p[at + i]);
        }
        for (int64_t i = 0; i < v.inner; ++i) dst[i] = -dst[i];
      }
      return TensorList(std::move(softmax_out), std::move(loss));
    }
    const std::string label_field = InputField(1, "data");
    const Ids ids(label, label_field);
    for (int64_t o = 0; o < v.outer; ++o) {
      for (int64_t i = 0; i < v.inner; ++i) {
        const int64_t at = o * v.inner + i;
        const int64_t id = ids[at];
        if (id == ignore_index) continue;  // loss stays 0
        if (id < 0 || id >= v.len) {
          plan::ThrowIdOutside(label_field, "label", id, v.len);
        }
        lo[at] = -std::log(p[(o * v.len + id) * v.inner + i]);
      }
    }
    return TensorList(std::move(softmax_out), std::move(loss));
  });
}

namespace {

// weight_grad [V, H] with out_grad's rows added at id - start for every id (embedding_grad
// and c_embedding_grad: plan::PlanEmbeddingGrad / PlanCEmbeddingGrad). Ids outside this
// piece's rows are another piece's; the padding id adds nothing.
Tensors ScatterAddRows(const TensorArgs& inputs, const plan::EmbeddingPlan& p, DType dtype) {
  const Tensor& ids_t = inputs[p.ids_at];
  const std::string ids_field = InputField(p.ids_at, "data");
  const Ids ids(ids_t, ids_field);
  const int64_t hidden = p.hidden;
  return DispatchFloat(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> gv(inputs[2]);
    Tensor weight_grad = NewOutput(p.out_shape, DTypeOf<T>::value, /*zero=*/true);
    T* w = weight_grad.data<T>();
    const T* g = gv.data();
    const int64_t count = ids_t.numel();
    for (int64_t t = 0; t < count; ++t) {
      const int64_t id = ids[t];
      if (id < 0 || (p.id_limit >= 0 && id >= p.id_limit)) plan::ThrowIdOutside(ids_field, "id", id, p.id_limit);
      const int64_t row = id - p.start;  // no overflow: 0 <= id, 0 <= start
      if ((p.padding_idx >= 0 && id == p.padding_idx) || row < 0 || row >= p.vocab) continue;
      T* dst = w + row * hidden;
      const T* src = g + t * hidden;
      for (int64_t h = 0; h < hidden; ++h) dst[h] += src[h];
    }
    return TensorList(std::move(weight_grad));
  });
}

}  // namespace

Tensors embedding_grad(const TensorArgs& inputs, const Attrs& attrs) {
  return ScatterAddRows(inputs, plan::PlanEmbeddingGrad(plan::ShapesOf(inputs), attrs), ComputeDType(inputs, {1, 2}));
}

// c_embedding_grad: the rows of this piece, [start_index, start_index + V), gather out_grad.
Tensors c_embedding_grad(const TensorArgs& inputs, const Attrs& attrs) {
  return ScatterAddRows(inputs, plan::PlanCEmbeddingGrad(plan::ShapesOf(inputs), attrs), ComputeDType(inputs, {0, 2}));
}

Tensors cross_entropy_with_softmax_grad(const TensorArgs& inputs, const Attrs& attrs) {
  const plan::CrossEntropyPlan ce = plan::PlanCrossEntropyGrad(plan::ShapesOf(inputs), attrs);
  const bool soft_label = ce.soft_label;
  const bool use_softmax = ce.use_softmax;
  const int64_t ignore_index = ce.ignore_index;
  const Tensor& label = inputs[0];
  const Tensor& softmax = inputs[1];
  const Tensor& loss_grad = inputs[2];
  const AxisView v = internal::ViewAlong(softmax.shape(), ce.axis);
  const DType dtype = soft_label ? ComputeDType(inputs, {0, 1, 2}) : ComputeDType(inputs, {1, 2});
  return DispatchFloat(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> pv(softmax);
    ValuesAs<T> gv(loss_grad);
    Tensor input_grad = NewOutput(softmax.shape(), DTypeOf<T>::value, /*zero=*/true);
    T* o = input_grad.data<T>();
    const T* p = pv.data();
    const T* g = gv.data();
    if (soft_label) {
      ValuesAs<T> lv(label);
      const T* l = lv.data();
      for (int64_t r = 0; r < v.outer; ++r) {
        for (int64_t a = 0; a < v.len; ++a) {
          const int64_t at = (r * v.len + a) * v.inner;
          const T* gr = g + r * v.inner;
          for (int64_t i = 0; i < v.inner; ++i) {
            o[at + i] = use_softmax ? (p[at + i] - l[at + i]) * gr[i] : -(l[at + i] * gr[i]) / p[at + i];
          }
        }
      }
      return TensorList(std::move(input_grad));
    }
    const std::string label_field = InputField(0, "data");
    const Ids ids(label, label_field);
    for (int64_t r = 0; r < v.outer; ++r) {
      for (int64_t i = 0; i < v.inner; ++i) {
        const int64_t row = r * v.inner + i;
        const int64_t id = ids[row];
        if (id == ignore_index) continue;  // the row stays 0
        if (id < 0 || id >= v.len) {
          plan::ThrowIdOutside(label_field, "label", id, v.len);
        }
        const T gr = g[row];
        const int64_t at_label = (r * v.len + id) * v.inner + i;
        if (!use_softmax) {
          o[at_label] = -gr / p[at_label];
          continue;
        }
        for (int64_t a = 0; a < v.len; ++a) {
          const int64_t at = (r * v.len + a) * v.inner + i;
          o[at] = p[at] * gr;
        }
        o[at_label] = (p[at_label] - T(1)) * gr;
      }
    }
    return TensorList(std::move(input_grad));
  });
}

}  // namespace spmd::kernels::cpu
