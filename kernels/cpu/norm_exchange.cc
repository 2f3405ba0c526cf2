// The exchange phases (OpDecl::exchange) of softmax, log_softmax, logsumexp, layer_norm,
// rms_norm, cumsum, layer_norm_grad, rms_norm_grad, cummax and cummin, whose reduced or scanned
// axis may stay sharded: the stats phase summarises every row of the local piece in the
// compute dtype and keeps the summary in float64 (rules/ops/norm_pieces.h; the scans' in
// int64 for an int64 or bool x, rules/ops/scan_pieces.h),
// Dispatch all-gathers it over the axis's mesh axes, and the finish phase gives the piece's
// outputs from the local inputs and the gathered float64 [pieces, rows..., k]. The same
// checks, in the same order, as the float64 phases in reference/ops_norm_exchange.cc.
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/internal.h"
#include "kernels/cpu/permute.h"
#include "rules/ops/norm_pieces.h"
#include "rules/ops/reduction_plan.h"
#include "rules/ops/scan_pieces.h"

namespace spmd::kernels::cpu {
namespace {

using internal::AxisView;
using internal::CheckArity;
using internal::ComputeDType;
using internal::DispatchFloat;
using internal::InputField;
using internal::NewOutput;
using internal::ValuesAs;

// Element (o, a, i) of the [outer, len, inner] view.
int64_t At(const AxisView& v, int64_t o, int64_t a, int64_t i) { return (o * v.len + a) * v.inner + i; }
// Where row (o, i) of a piece starts: 0 for an empty piece, whose data may be null (an offset
// from null is undefined even when nothing is read).
int64_t RowStart(const AxisView& v, int64_t o, int64_t i) { return v.len > 0 ? At(v, o, 0, i) : 0; }

using norm_pieces::SummaryShape;

// The gathered summaries (the last input, float64 unless `dtype` says otherwise): [pieces,
// rows..., k]. Returns the pieces.
int64_t GatheredPieces(const TensorArgs& inputs, int64_t rows, int64_t k, DType dtype = DType::kFloat64) {
  const size_t i = inputs.size() - 1;
  const Tensor& gathered = inputs[i];
  if (gathered.dtype() != dtype) {
    ThrowInvalid(InputField(i, "dtype"), "the gathered statistics must be " + std::string(ToString(dtype)) +
                                             ", got " + std::string(ToString(gathered.dtype())));
  }
  return norm_pieces::GatheredPieces(gathered.shape(), gathered.numel(), i, rows, k);
}

struct AxisPiece {
  int64_t axis = -1;  // -1 on a 0-d x
  AxisView view;
  int64_t rows() const { return view.outer * view.inner; }
};
// The piece's view along the axis that norm_pieces::PlanAxisPiece checked (-1: a 0-d x).
AxisPiece ViewPiece(const TensorArgs& inputs, int64_t axis) {
  return {axis, internal::ViewAlong(inputs[0].shape(), axis < 0 ? 0 : axis)};
}
AxisPiece CheckAxisPiece(const TensorArgs& inputs, const Attrs& attrs, size_t arity) {
  return ViewPiece(inputs, norm_pieces::PlanAxisPiece(plan::ShapesOf(inputs), attrs, arity));
}

Tensors SoftmaxStatsPhase(const TensorArgs& inputs, const Attrs& attrs) {
  const AxisPiece p = CheckAxisPiece(inputs, attrs, 1);
  return DispatchFloat(ComputeDType(inputs, {0}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> x(inputs[0]);
    Tensor stats = NewOutput(SummaryShape(inputs[0].shape(), p.axis, norm_pieces::kSoftmaxStats), DType::kFloat64);
    double* st = stats.data<double>();
    for (int64_t o = 0; o < p.view.outer; ++o) {
      for (int64_t i = 0; i < p.view.inner; ++i) {
        norm_pieces::SoftmaxStats(x.data() + RowStart(p.view, o, i), p.view.len, p.view.inner,
                                  st + (o * p.view.inner + i) * norm_pieces::kSoftmaxStats);
      }
    }
    return TensorList(std::move(stats));
  });
}

Tensors SoftmaxFinishPhase(const TensorArgs& inputs, const Attrs& attrs, bool log) {
  const AxisPiece p = CheckAxisPiece(inputs, attrs, 2);
  const int64_t k = norm_pieces::kSoftmaxStats;
  const int64_t pieces = GatheredPieces(inputs, p.rows(), k);
  return DispatchFloat(ComputeDType(inputs, {0}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> xv(inputs[0]);
    const T* x = xv.data();
    Tensor out = NewOutput(inputs[0].shape(), DTypeOf<T>::value);
    T* o = out.data<T>();
    const double* gathered = inputs[1].data<double>();
    for (int64_t r0 = 0; r0 < p.view.outer; ++r0) {
      for (int64_t i = 0; i < p.view.inner; ++i) {
        const int64_t r = r0 * p.view.inner + i;
        const norm_pieces::SoftmaxRow row = norm_pieces::CombineSoftmax(gathered + r * k, pieces, p.rows() * k);
        const T max = static_cast<T>(row.max);
        if (log) {
          const T shift = static_cast<T>(row.max + std::log(row.sum));
          for (int64_t a = 0; a < p.view.len; ++a) o[At(p.view, r0, a, i)] = x[At(p.view, r0, a, i)] - shift;
        } else {
          const T inv = static_cast<T>(1.0 / row.sum);
          for (int64_t a = 0; a < p.view.len; ++a) {
            o[At(p.view, r0, a, i)] = std::exp(x[At(p.view, r0, a, i)] - max) * inv;
          }
        }
      }
    }
    return TensorList(std::move(out));
  });
}

// softmax_grad on a piece: out and out_grad of one shape, viewed along attrs.axis.
AxisPiece CheckSoftmaxGradPiece(const TensorArgs& inputs, const Attrs& attrs, size_t arity) {
  return ViewPiece(inputs, norm_pieces::PlanSoftmaxGradPiece(plan::ShapesOf(inputs), attrs, arity));
}

// layer_norm (params 2, each maybe absent: 0-d) / rms_norm (1) on a piece
// (reference/ops_norm_exchange.cc, CheckNormPiece).
using norm_pieces::NormPiece;
NormPiece CheckNormPiece(const TensorArgs& inputs, const Attrs& attrs, size_t params, size_t arity) {
  CheckArity(inputs, arity);
  std::vector<Shape> shapes;
  for (const Tensor& t : inputs) shapes.push_back(t.shape());
  return norm_pieces::PlanNormPiece(shapes, attrs, params, params == 2);
}

// The floating inputs whose dtype layer_norm's phases compute in: x (and `more`) and the
// given parameters, in input order.
std::vector<size_t> LayerNormReads(bool has_scale, bool has_bias, std::vector<size_t> more = {}) {
  std::vector<size_t> read{0};
  if (has_scale) read.push_back(1);
  if (has_bias) read.push_back(2);
  read.insert(read.end(), more.begin(), more.end());
  return read;
}

// Every row's summary of the piece by `summarise(row, n, stats)`, [x.shape[:begin], k].
template <typename Summarise>
Tensors NormStatsPhase(const TensorArgs& inputs, const NormPiece& p, const std::vector<size_t>& floats, int64_t k,
                       Summarise summarise) {
  return DispatchFloat(internal::ComputeDTypeOver(inputs, floats), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> x(inputs[0]);
    Shape shape = p.stats_shape;
    shape.push_back(k);
    Tensor stats = NewOutput(shape, DType::kFloat64);
    double* st = stats.data<double>();
    for (int64_t r = 0; r < p.rows; ++r) summarise(x.data() + r * p.n, p.n, st + r * k);
    return TensorList(std::move(stats));
  });
}

struct CumsumPiece {
  AxisPiece axis;
  int64_t first = 0;
};
CumsumPiece CheckCumsumPiece(const TensorArgs& inputs, const Attrs& attrs, size_t arity) {
  const norm_pieces::CumsumPiecePlan p = norm_pieces::PlanCumsumPiece(plan::ShapesOf(inputs), attrs, arity);
  return {ViewPiece(inputs, p.axis), p.first};
}

}  // namespace

Tensors softmax_stats(const TensorArgs& inputs, const Attrs& attrs) { return SoftmaxStatsPhase(inputs, attrs); }
Tensors softmax_finish(const TensorArgs& inputs, const Attrs& attrs) { return SoftmaxFinishPhase(inputs, attrs, false); }
Tensors log_softmax_stats(const TensorArgs& inputs, const Attrs& attrs) { return SoftmaxStatsPhase(inputs, attrs); }
Tensors log_softmax_finish(const TensorArgs& inputs, const Attrs& attrs) {
  return SoftmaxFinishPhase(inputs, attrs, true);
}

Tensors softmax_grad_stats(const TensorArgs& inputs, const Attrs& attrs) {
  const AxisPiece p = CheckSoftmaxGradPiece(inputs, attrs, 2);
  return DispatchFloat(ComputeDType(inputs, {0, 1}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> y(inputs[0]);
    ValuesAs<T> g(inputs[1]);
    Tensor stats = NewOutput(SummaryShape(inputs[0].shape(), p.axis, norm_pieces::kDotStats), DType::kFloat64);
    double* st = stats.data<double>();
    for (int64_t o = 0; o < p.view.outer; ++o) {
      for (int64_t i = 0; i < p.view.inner; ++i) {
        const int64_t at = RowStart(p.view, o, i);
        norm_pieces::DotStats(y.data() + at, g.data() + at, p.view.len, p.view.inner,
                              st + (o * p.view.inner + i) * norm_pieces::kDotStats);
      }
    }
    return TensorList(std::move(stats));
  });
}

Tensors softmax_grad_finish(const TensorArgs& inputs, const Attrs& attrs) {
  const AxisPiece p = CheckSoftmaxGradPiece(inputs, attrs, 3);
  const int64_t k = norm_pieces::kDotStats;
  const int64_t pieces = GatheredPieces(inputs, p.rows(), k);
  return DispatchFloat(ComputeDType(inputs, {0, 1}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> yv(inputs[0]);
    ValuesAs<T> gv(inputs[1]);
    const T* y = yv.data();
    const T* g = gv.data();
    Tensor x_grad = NewOutput(inputs[0].shape(), DTypeOf<T>::value);
    T* d = x_grad.data<T>();
    const double* gathered = inputs[2].data<double>();
    for (int64_t o = 0; o < p.view.outer; ++o) {
      for (int64_t i = 0; i < p.view.inner; ++i) {
        const int64_t r = o * p.view.inner + i;
        const T dot = static_cast<T>(norm_pieces::CombineDot(gathered + r * k, pieces, p.rows() * k));
        for (int64_t a = 0; a < p.view.len; ++a) {
          const int64_t at = At(p.view, o, a, i);
          d[at] = y[at] * (g[at] - dot);
        }
      }
    }
    return TensorList(std::move(x_grad));
  });
}

Tensors layer_norm_stats(const TensorArgs& inputs, const Attrs& attrs) {
  const NormPiece p = CheckNormPiece(inputs, attrs, 2, 3);
  return NormStatsPhase(inputs, p, LayerNormReads(p.has_scale, p.has_bias), norm_pieces::kMomentStats,
                        [](const auto* row, int64_t n, double* st) { norm_pieces::MomentStats(row, n, st); });
}

Tensors layer_norm_finish(const TensorArgs& inputs, const Attrs& attrs) {
  const NormPiece p = CheckNormPiece(inputs, attrs, 2, 4);
  const double epsilon = attrs.GetFloat("epsilon");
  const int64_t k = norm_pieces::kMomentStats;
  const int64_t pieces = GatheredPieces(inputs, p.rows, k);
  return DispatchFloat(internal::ComputeDTypeOver(inputs, LayerNormReads(p.has_scale, p.has_bias)), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> xv(inputs[0]);
    ValuesAs<T> sv(inputs[1]);
    ValuesAs<T> bv(inputs[2]);
    Tensor out = NewOutput(inputs[0].shape(), DTypeOf<T>::value);
    Tensor mean = NewOutput(p.stats_shape, DTypeOf<T>::value);
    Tensor variance = NewOutput(p.stats_shape, DTypeOf<T>::value);
    // An absent scale is 1, an absent bias 0: the piece's n ones or zeros.
    std::vector<T> ones(p.has_scale ? 0 : static_cast<size_t>(p.n), T(1));
    std::vector<T> zeros(p.has_bias ? 0 : static_cast<size_t>(p.n), T(0));
    const T* scale = p.has_scale ? sv.data() + p.first : ones.data();
    const T* bias = p.has_bias ? bv.data() + p.first : zeros.data();
    const double* gathered = inputs[3].data<double>();
    for (int64_t r = 0; r < p.rows; ++r) {
      const norm_pieces::Moments m = norm_pieces::CombineMoments(gathered + r * k, pieces, p.rows * k);
      const double var = m.m2 / m.count;
      const T mu = static_cast<T>(m.mean);
      const T inv = static_cast<T>(1.0 / std::sqrt(var + epsilon));
      const T* row = xv.data() + r * p.n;
      T* dst = out.data<T>() + r * p.n;
      for (int64_t j = 0; j < p.n; ++j) dst[j] = (row[j] - mu) * inv * scale[j] + bias[j];
      mean.data<T>()[r] = mu;
      variance.data<T>()[r] = static_cast<T>(var);
    }
    return TensorList(std::move(out), std::move(mean), std::move(variance));
  });
}

Tensors rms_norm_stats(const TensorArgs& inputs, const Attrs& attrs) {
  const NormPiece p = CheckNormPiece(inputs, attrs, 1, 2);
  return NormStatsPhase(inputs, p, std::vector<size_t>{0, 1}, norm_pieces::kSquareStats,
                        [](const auto* row, int64_t n, double* st) { norm_pieces::SquareStats(row, n, st); });
}

Tensors rms_norm_finish(const TensorArgs& inputs, const Attrs& attrs) {
  const NormPiece p = CheckNormPiece(inputs, attrs, 1, 3);
  const double epsilon = attrs.GetFloat("epsilon");
  const int64_t k = norm_pieces::kSquareStats;
  const int64_t pieces = GatheredPieces(inputs, p.rows, k);
  return DispatchFloat(ComputeDType(inputs, {0, 1}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> xv(inputs[0]);
    ValuesAs<T> sv(inputs[1]);
    Tensor out = NewOutput(inputs[0].shape(), DTypeOf<T>::value);
    Tensor invvar = NewOutput(p.stats_shape, DTypeOf<T>::value);
    const T* scale = sv.data() + p.first;
    const double* gathered = inputs[2].data<double>();
    for (int64_t r = 0; r < p.rows; ++r) {
      const norm_pieces::Squares s = norm_pieces::CombineSquares(gathered + r * k, pieces, p.rows * k);
      const T inv = static_cast<T>(1.0 / std::sqrt(s.sum / s.count + epsilon));
      const T* row = xv.data() + r * p.n;
      T* dst = out.data<T>() + r * p.n;
      for (int64_t j = 0; j < p.n; ++j) dst[j] = row[j] * inv * scale[j];
      invvar.data<T>()[r] = inv;
    }
    return TensorList(std::move(out), std::move(invvar));
  });
}

Tensors cumsum_stats(const TensorArgs& inputs, const Attrs& attrs) {
  const CumsumPiece p = CheckCumsumPiece(inputs, attrs, 1);
  const AxisView& v = p.axis.view;
  return DispatchFloat(ComputeDType(inputs, {0}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> x(inputs[0]);
    Tensor stats = NewOutput(SummaryShape(inputs[0].shape(), p.axis.axis, norm_pieces::kPrefixStats), DType::kFloat64);
    double* st = stats.data<double>();
    for (int64_t o = 0; o < v.outer; ++o) {
      for (int64_t i = 0; i < v.inner; ++i) {
        norm_pieces::PrefixStats(x.data() + RowStart(v, o, i), v.len, v.inner, p.first,
                                 st + (o * v.inner + i) * norm_pieces::kPrefixStats);
      }
    }
    return TensorList(std::move(stats));
  });
}

Tensors cumsum_finish(const TensorArgs& inputs, const Attrs& attrs) {
  const CumsumPiece p = CheckCumsumPiece(inputs, attrs, 2);
  const bool exclusive = attrs.GetBool("exclusive");
  const bool reverse = attrs.GetBool("reverse");
  const AxisView& v = p.axis.view;
  const int64_t k = norm_pieces::kPrefixStats;
  const int64_t pieces = GatheredPieces(inputs, p.axis.rows(), k);
  return DispatchFloat(ComputeDType(inputs, {0}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> xv(inputs[0]);
    const T* x = xv.data();
    Tensor out = NewOutput(inputs[0].shape(), DTypeOf<T>::value);
    T* o = out.data<T>();
    const double* gathered = inputs[1].data<double>();
    for (int64_t r0 = 0; r0 < v.outer; ++r0) {
      for (int64_t i = 0; i < v.inner; ++i) {
        const int64_t r = r0 * v.inner + i;
        T running = static_cast<T>(
            norm_pieces::PrefixBefore(gathered + r * k, pieces, p.axis.rows() * k, p.first, reverse));
        for (int64_t step = 0; step < v.len; ++step) {
          const int64_t at = At(v, r0, reverse ? v.len - 1 - step : step, i);
          if (exclusive) {
            o[at] = running;
            running += x[at];
          } else {
            running += x[at];
            o[at] = running;
          }
        }
      }
    }
    return TensorList(std::move(out));
  });
}

// logsumexp's stats: x permuted so that the reduced dims come last (x itself when they
// already do), then per output element the piece's {max, sum of exp(x - max)} over its
// reduced elements, [out_shape..., 2].
Tensors logsumexp_stats(const TensorArgs& inputs, const Attrs& attrs) {
  const plan::ReduceShape reduce = norm_pieces::PlanLogsumexpPiece(plan::ShapesOf(inputs), attrs, 1);
  const Shape& shape = inputs[0].shape();
  std::vector<int64_t> perm;
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t d = 0; d < shape.size(); ++d) {
      if (reduce.reduced[d] == (pass == 1)) perm.push_back(static_cast<int64_t>(d));
    }
  }
  const int64_t rows = NumElements(reduce.out_shape);
  const int64_t len = reduce.count;
  return DispatchFloat(ComputeDType(inputs, {0}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> x(inputs[0]);
    const std::vector<T> arranged = internal::Permuted(x.data(), shape, perm);
    Shape stats_shape = reduce.out_shape;
    stats_shape.push_back(norm_pieces::kSoftmaxStats);
    Tensor stats = NewOutput(stats_shape, DType::kFloat64);
    double* st = stats.data<double>();
    for (int64_t r = 0; r < rows; ++r) {
      norm_pieces::SoftmaxStats(arranged.data() + (len > 0 ? r * len : 0), len, 1,
                                st + r * norm_pieces::kSoftmaxStats);
    }
    return TensorList(std::move(stats));
  });
}

Tensors logsumexp_finish(const TensorArgs& inputs, const Attrs& attrs) {
  const plan::ReduceShape reduce = norm_pieces::PlanLogsumexpPiece(plan::ShapesOf(inputs), attrs, 2);
  const int64_t rows = NumElements(reduce.out_shape);
  const int64_t k = norm_pieces::kSoftmaxStats;
  const int64_t pieces = GatheredPieces(inputs, rows, k);
  return DispatchFloat(ComputeDType(inputs, {0}), [&](auto tag) {
    using T = typename decltype(tag)::type;
    Tensor out = NewOutput(reduce.out_shape, DTypeOf<T>::value);
    T* o = out.data<T>();
    const double* gathered = inputs[1].data<double>();
    for (int64_t r = 0; r < rows; ++r) {
      o[r] = static_cast<T>(norm_pieces::LogsumexpOf(norm_pieces::CombineSoftmax(gathered + r * k, pieces, rows * k)));
    }
    return TensorList(std::move(out));
  });
}

// ---- layer_norm_grad / rms_norm_grad: the piece's row sums, then its x_grad and its slice of
// the parameters' gradients (the scale is the piece's slice: the rule ties the parameters'
// factor to the exchanged dim).

namespace {

template <bool kCentered>
struct NormGradInputs {
  static constexpr size_t kOwn = kCentered ? 6 : 4;
  static constexpr size_t kStat = kCentered ? 3 : 2;  // mean, or invvar
};

template <bool kCentered>
norm_pieces::NormGradPiece CheckNormGradPiece(const TensorArgs& inputs, const Attrs& attrs, size_t arity) {
  return norm_pieces::PlanNormGradPiece(plan::ShapesOf(inputs), attrs, kCentered ? 2 : 1, arity);
}

// Row o's mean and inv, in T.
template <typename T, bool kCentered>
void RowMoments(const T* stat, const T* variance, int64_t o, T epsilon, T& mean, T& inv) {
  mean = kCentered ? stat[o] : T(0);
  inv = kCentered ? T(1) / std::sqrt(variance[o] + epsilon) : stat[o];
}

// The compute dtype of the op's own inputs (layer_norm_grad: an absent parameter's not read).
template <bool kCentered>
DType NormGradDType(const TensorArgs& inputs, const norm_pieces::NormGradPiece& p) {
  if (!kCentered) return ComputeDType(inputs, {0, 1, 2, 3});
  return internal::ComputeDTypeOver(inputs, LayerNormReads(p.split.has_scale, p.split.has_bias, {3, 4, 5}));
}

template <bool kCentered>
Tensors NormGradStats(const TensorArgs& inputs, const Attrs& attrs) {
  using In = NormGradInputs<kCentered>;
  const norm_pieces::NormGradPiece p = CheckNormGradPiece<kCentered>(inputs, attrs, In::kOwn);
  const int64_t n = p.split.n;
  const DType dtype = NormGradDType<kCentered>(inputs, p);
  return DispatchFloat(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> x(inputs[0]), scale(inputs[1]), stat(inputs[In::kStat]), variance(inputs[kCentered ? 4 : 2]),
        g(inputs[In::kOwn - 1]);
    const T epsilon = static_cast<T>(attrs.GetFloat("epsilon"));
    Shape shape = p.split.stats_shape;
    shape.push_back(norm_pieces::kGradStats);
    Tensor stats = NewOutput(shape, DType::kFloat64);
    for (int64_t o = 0; o < p.split.outer; ++o) {
      T mean, inv;
      RowMoments<T, kCentered>(stat.data(), variance.data(), o, epsilon, mean, inv);
      norm_pieces::GradRowStats(x.data() + o * n, p.split.has_scale ? scale.data() : nullptr, g.data() + o * n, mean,
                                inv, n,
                                stats.data<double>() + o * norm_pieces::kGradStats);
    }
    return TensorList(std::move(stats));
  });
}

template <bool kCentered>
Tensors NormGradFinish(const TensorArgs& inputs, const Attrs& attrs) {
  using In = NormGradInputs<kCentered>;
  const norm_pieces::NormGradPiece p = CheckNormGradPiece<kCentered>(inputs, attrs, In::kOwn + 1);
  const int64_t n = p.split.n;
  const int64_t rows = p.split.outer;
  const int64_t k = norm_pieces::kGradStats;
  const int64_t pieces = GatheredPieces(inputs, rows, k);
  const DType dtype = NormGradDType<kCentered>(inputs, p);
  return DispatchFloat(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    ValuesAs<T> x(inputs[0]), scale(inputs[1]), stat(inputs[In::kStat]), variance(inputs[kCentered ? 4 : 2]),
        g(inputs[In::kOwn - 1]);
    const T epsilon = static_cast<T>(attrs.GetFloat("epsilon"));
    Tensor x_grad = NewOutput(inputs[0].shape(), DTypeOf<T>::value);
    Tensor scale_grad = NewOutput({n}, DTypeOf<T>::value, /*zero=*/true);
    Tensor bias_grad = NewOutput({kCentered ? n : 0}, DTypeOf<T>::value, /*zero=*/true);
    T* dx = x_grad.data<T>();
    T* ds = scale_grad.data<T>();
    T* db = bias_grad.data<T>();
    const double* gathered = inputs[In::kOwn].template data<double>();
    for (int64_t o = 0; o < rows; ++o) {
      const norm_pieces::GradMeans m = norm_pieces::CombineGrad(gathered + o * k, pieces, rows * k, p.global_n, kCentered);
      const T mean_dxhat = static_cast<T>(m.dxhat);
      const T mean_dxhat_xhat = static_cast<T>(m.dxhat_xhat);
      T mean, inv;
      RowMoments<T, kCentered>(stat.data(), variance.data(), o, epsilon, mean, inv);
      for (int64_t j = 0; j < n; ++j) {
        const T gv = g.data()[o * n + j];
        const T xhat = (x.data()[o * n + j] - mean) * inv;
        const T dxhat = p.split.has_scale ? gv * scale.data()[j] : gv;
        dx[o * n + j] = (dxhat - mean_dxhat - xhat * mean_dxhat_xhat) * inv;
        ds[j] += gv * xhat;
        if constexpr (kCentered) db[j] += gv;
      }
    }
    if constexpr (kCentered) {
      // An absent parameter's gradient: a 0-d zero (layer_norm_grad's, plan::NormSplit).
      if (!p.split.has_scale) scale_grad = NewOutput(p.split.ParamGradShape(false), DTypeOf<T>::value, true);
      if (!p.split.has_bias) bias_grad = NewOutput(p.split.ParamGradShape(false), DTypeOf<T>::value, true);
      return TensorList(std::move(x_grad), std::move(scale_grad), std::move(bias_grad));
    } else {
      return TensorList(std::move(x_grad), std::move(scale_grad));
    }
  });
}

}  // namespace

Tensors layer_norm_grad_stats(const TensorArgs& inputs, const Attrs& attrs) { return NormGradStats<true>(inputs, attrs); }
Tensors layer_norm_grad_finish(const TensorArgs& inputs, const Attrs& attrs) {
  return NormGradFinish<true>(inputs, attrs);
}
Tensors rms_norm_grad_stats(const TensorArgs& inputs, const Attrs& attrs) { return NormGradStats<false>(inputs, attrs); }
Tensors rms_norm_grad_finish(const TensorArgs& inputs, const Attrs& attrs) {
  return NormGradFinish<false>(inputs, attrs);
}

namespace {

// cummax / cummin on a piece: the op's checks, the view along its axis and the piece's first
// position (plan::PlanCumExtremePiece).
struct CumExtremePiece {
  AxisPiece axis;
  int64_t first = 0;
};
CumExtremePiece CheckCumExtremePiece(const TensorArgs& inputs, const Attrs& attrs, const char* name, size_t arity) {
  const plan::CumExtremePiece p = plan::PlanCumExtremePiece(plan::ShapesOf(inputs), attrs, name, arity);
  return {ViewPiece(inputs, p.op.axis), p.first};
}

// The scans run in x's own dtype; an int64 or bool x's summaries are int64, so that every
// value travels exactly, a float x's float64.
DType ExtremeSummaryDType(DType x) { return x == DType::kInt64 || x == DType::kBool ? DType::kInt64 : DType::kFloat64; }

// Runs fn on the summary tensor's data as its element type (const for a const tensor).
template <typename TensorType, typename F>
void WithSummaries(TensorType& stats, F&& fn) {
  if (stats.dtype() == DType::kInt64) {
    fn(stats.template data<int64_t>());
  } else {
    fn(stats.template data<double>());
  }
}

template <typename Beyond>
Tensors CumExtremeStats(const TensorArgs& inputs, const Attrs& attrs, const char* name, Beyond beyond) {
  const CumExtremePiece p = CheckCumExtremePiece(inputs, attrs, name, 1);
  const AxisView& v = p.axis.view;
  const Tensor& x = inputs[0];
  const int64_t k = scan_pieces::kExtremeStats;
  Tensor stats = NewOutput(SummaryShape(x.shape(), p.axis.axis, k), ExtremeSummaryDType(x.dtype()));
  internal::VisitData(x, [&](const auto* data) {
    WithSummaries(stats, [&](auto* st) {
      for (int64_t o = 0; o < v.outer; ++o) {
        for (int64_t i = 0; i < v.inner; ++i) {
          scan_pieces::ExtremeStats(data + RowStart(v, o, i), v.len, v.inner, p.first, beyond,
                                    st + (o * v.inner + i) * k);
        }
      }
    });
  });
  return TensorList(std::move(stats));
}

template <typename Beyond>
Tensors CumExtremeFinish(const TensorArgs& inputs, const Attrs& attrs, const char* name, Beyond beyond) {
  const CumExtremePiece p = CheckCumExtremePiece(inputs, attrs, name, 2);
  const AxisView& v = p.axis.view;
  const Tensor& x = inputs[0];
  const int64_t k = scan_pieces::kExtremeStats;
  const int64_t pieces = GatheredPieces(inputs, p.axis.rows(), k, ExtremeSummaryDType(x.dtype()));
  Tensor out = NewOutput(x.shape(), x.dtype());
  Tensor indices = NewOutput(x.shape(), DType::kInt64);
  int64_t* idx = indices.data<int64_t>();
  internal::VisitData(x, [&](const auto* data) {
    using V = std::remove_cv_t<std::remove_pointer_t<decltype(data)>>;
    V* o = out.data<V>();
    WithSummaries(inputs[1], [&](const auto* gathered) {
      for (int64_t r0 = 0; r0 < v.outer; ++r0) {
        for (int64_t i = 0; i < v.inner; ++i) {
          const int64_t r = r0 * v.inner + i;
          auto run = scan_pieces::ExtremeBefore<V>(gathered + r * k, pieces, p.axis.rows() * k, p.first, beyond);
          for (int64_t a = 0; a < v.len; ++a) {
            const int64_t at = At(v, r0, a, i);
            scan_pieces::Step(run, data[at], p.first + a, beyond);
            o[at] = run.best;
            idx[at] = run.at;
          }
        }
      }
    });
  });
  return TensorList(std::move(out), std::move(indices));
}

}  // namespace

Tensors cummax_stats(const TensorArgs& inputs, const Attrs& attrs) {
  return CumExtremeStats(inputs, attrs, "cummax", scan_pieces::AtLeast{});
}
Tensors cummax_finish(const TensorArgs& inputs, const Attrs& attrs) {
  return CumExtremeFinish(inputs, attrs, "cummax", scan_pieces::AtLeast{});
}
Tensors cummin_stats(const TensorArgs& inputs, const Attrs& attrs) {
  return CumExtremeStats(inputs, attrs, "cummin", scan_pieces::AtMost{});
}
Tensors cummin_finish(const TensorArgs& inputs, const Attrs& attrs) {
  return CumExtremeFinish(inputs, attrs, "cummin", scan_pieces::AtMost{});
}

}  // namespace spmd::kernels::cpu
