// The CUDA kernels of the contraction, reduction and norm families against the CPU kernels
// (kernels/cpu), on a GPU: the same inputs through RunCpuKernel and RunCudaKernel must give
// the same SpmdError (type and field) or outputs of the same dtypes and shapes whose values
// agree within the bounds below. Without a GPU every test skips, with the reason.
//
// Cases are drawn at random (seeded; each failure names its case): ranks 0-4, empty and
// size-1 dims, odd sizes, rows long enough for the block and split paths, every attr, and
// the dtypes float32, float64, bfloat16, float16 (plus int64 / bool where the op takes them).
//
// Bounds (u: the unit roundoff of the compute type, 2^-53 for float64, 2^-24 for float32 and
// the 2-byte types; both sides err, so each is twice a one-sided bound; K the number of
// terms per output, M = max(1, max |float input|)):
//   exact            max, min, argmax, any, all, lookup_table_v2: equal (bit for bit).
//   sum of products  4 (K + 2) u A, A = the CPU kernel on |inputs| in float64 (the sum of
//                    |terms|): matmul, bmm, matmul_grad, einsum, sum, mean, mean_all,
//                    squared_l2_norm, cumsum, embedding_grad.
//   relative         4 (K + 8 + 2M) u |ref|: prod, softmax, rms_norm, p_norm (times
//                    max(1, 1/|p|)).
//   log domain       4 (K + 8 + 2M) u (|ref| + M + 1): logsumexp, log_softmax.
//   cross entropy    softmax_out relative; loss 4 (K + 8 + 2M) u (|ref| + 1 + K M L),
//                    L = max |log softmax_out|; its grad 16 u (|ref| + M^2) (one formula
//                    per element, which the GPU may contract into an fma).
//   layer_norm       out 4 (K + 8 + 2M) u (|ref| + B + 3 inv S M); mean 4 (K + 8) u (|ref| +
//                    M); variance 4 (K + 8) u |ref| + 8 (K M u)^2 (B, S: max |bias|,
//                    |scale|; inv = 1/sqrt(variance + epsilon) of the row).
//   softmax_grad     4 (K + 8) u (|ref| + M (M + K M^2)).
// bfloat16 / float16: both sides compute in float32 and round once: the float32 bound t plus
// 2 u2 (|ref| + t) and the type's smallest subnormal (u2 = 2^-8, 2^-11); exact ops stay
// exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "kernels/cuda/cuda.h"
#include "kernels/cuda/registry.h"
#include "rules/model/error.h"
#include "rules/model/half.h"
#include "rules/model/attrs.h"
#include "rules/engine/registry.h"

namespace spmd::kernels::cuda {
namespace {

using Values = std::vector<double>;

class MathGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (DeviceCount(&why) == 0) GTEST_SKIP() << "no CUDA device: " << why;
    EnableCuda();
  }
};

// ---- Tensors ------------------------------------------------------------------------------

Values AsDoubles(const Tensor& t) {
  Values v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (t.dtype()) {
      case DType::kFloat64: v[i] = t.data<double>()[i]; break;
      case DType::kFloat32: v[i] = t.data<float>()[i]; break;
      case DType::kInt64: v[i] = static_cast<double>(t.data<int64_t>()[i]); break;
      case DType::kBool: v[i] = t.data<bool>()[i] ? 1.0 : 0.0; break;
      case DType::kBFloat16: v[i] = static_cast<float>(t.data<BFloat16>()[i]); break;
      case DType::kFloat16: v[i] = static_cast<float>(t.data<Float16>()[i]); break;
    }
  }
  return v;
}

// `values` stored as `dtype` (rounded once to it; int64 rounds to nearest, bool is v > 0).
Tensor Store(const Shape& shape, DType dtype, const Values& values) {
  switch (dtype) {
    case DType::kFloat64: return Tensor::FromVector(shape, values);
    case DType::kFloat32: {
      std::vector<float> v(values.begin(), values.end());
      return Tensor::FromVector(shape, v);
    }
    case DType::kInt64: {
      std::vector<int64_t> v;
      for (double x : values) v.push_back(std::llround(x));
      return Tensor::FromVector(shape, v);
    }
    case DType::kBool: {
      std::vector<bool> b;
      for (double x : values) b.push_back(x > 0);
      Tensor t = Tensor::Uninitialized(shape, DType::kBool);
      for (size_t i = 0; i < b.size(); ++i) t.data<bool>()[i] = b[i];
      return t;
    }
    case DType::kBFloat16: {
      std::vector<BFloat16> v;
      for (double x : values) v.push_back(BFloat16(static_cast<float>(x)));
      return Tensor::FromVector(shape, v);
    }
    case DType::kFloat16: {
      std::vector<Float16> v;
      for (double x : values) v.push_back(Float16(static_cast<float>(x)));
      return Tensor::FromVector(shape, v);
    }
  }
  return Tensor();
}

// Uniform values in [lo, hi) as `dtype`.
Tensor Random(const Shape& shape, DType dtype, std::mt19937_64& rng, double lo = -2,
              double hi = 2) {
  std::uniform_real_distribution<double> d(lo, hi);
  Values v(static_cast<size_t>(NumElements(shape)));
  for (double& x : v) x = d(rng);
  return Store(shape, dtype, v);
}

// The tensor's values in float64, |v| with `abs`.
Tensor F64(const Tensor& t, bool abs) {
  Values v = AsDoubles(t);
  if (abs) {
    for (double& x : v) x = std::fabs(x);
  }
  return Tensor::FromVector(t.shape(), v);
}

double MaxAbs(const Tensors& ts) {
  double m = 1.0;
  for (const Tensor& t : ts) {
    if (!IsFloating(t.dtype())) continue;
    for (double v : AsDoubles(t)) {
      if (std::isfinite(v)) m = std::max(m, std::fabs(v));
    }
  }
  return m;
}

Attrs Normalized(const std::string& op, const Attrs& given) {
  return FindOp(op)->NormalizeAttrs(given);
}

// ---- Running and comparing ------------------------------------------------------------------

struct Outcome {
  Tensors cpu, gpu;  // on the host
  bool ok = false;   // both ran (else both refused alike, or a failure was recorded)
};

std::string ErrorOf(const SpmdError& e) {
  return std::string(ToString(e.type())) + " " + e.field();
}

Outcome RunBoth(const std::string& op, const Tensors& inputs, const Attrs& attrs) {
  Outcome r;
  std::string cpu_error, gpu_error;
  try {
    r.cpu = RunCpuKernel(op, TensorArgs(inputs), attrs);
  } catch (const SpmdError& e) {
    cpu_error = ErrorOf(e);
  }
  Tensors device;
  for (const Tensor& t : inputs) device.push_back(ToDevice(t, Device::Cuda(0)));
  try {
    const Tensors out = RunCudaKernel(op, TensorArgs(device), attrs);
    for (const Tensor& t : out) r.gpu.push_back(ToHost(t));
  } catch (const SpmdError& e) {
    gpu_error = ErrorOf(e);
  }
  EXPECT_EQ(gpu_error, cpu_error) << op << ": the CUDA kernel and the CPU kernel disagree";
  r.ok = cpu_error.empty() && gpu_error.empty();
  return r;
}

// The float32 / float64 bound of output `o`'s element i (reference value ref).
using BoundFn = std::function<double(size_t o, int64_t i, double ref)>;

double HalfUnit(DType d) {
  return d == DType::kBFloat16 ? 0x1p-8 : d == DType::kFloat16 ? 0x1p-11 : 0.0;
}
double HalfFloor(DType d) {
  return d == DType::kBFloat16 ? 1e-38 : d == DType::kFloat16 ? 0x1p-24 : 0.0;
}
// The unit roundoff of the arithmetic for `dtype`'s values (int64 / bool: float64).
double UnitOf(DType d) {
  return d == DType::kFloat32 || IsTwoByteFloat(d) ? 0x1p-24 : 0x1p-53;
}

// Same dtypes and shapes; int64 / bool equal; floats within `bound` (NaN matches NaN, an
// infinity the same infinity); `exact`: floats bit for bit equal as values.
void ExpectMatch(const Outcome& r, const BoundFn& bound, bool exact, const std::string& what) {
  ASSERT_EQ(r.cpu.size(), r.gpu.size()) << what;
  for (size_t o = 0; o < r.cpu.size(); ++o) {
    const Tensor& c = r.cpu[o];
    const Tensor& g = r.gpu[o];
    ASSERT_EQ(c.dtype(), g.dtype()) << what << " output " << o;
    ASSERT_EQ(c.shape(), g.shape()) << what << " output " << o;
    const Values a = AsDoubles(c), b = AsDoubles(g);
    int failures = 0;
    for (size_t i = 0; i < a.size() && failures < 5; ++i) {
      bool good;
      double limit = 0;
      if (std::isnan(a[i])) {
        good = std::isnan(b[i]);
      } else if (std::isinf(a[i]) || exact || !IsFloating(c.dtype())) {
        good = a[i] == b[i];
      } else {
        const double t = bound(o, static_cast<int64_t>(i), a[i]);
        const double uh = HalfUnit(c.dtype());
        limit = t + 2 * uh * (std::fabs(a[i]) + t) + HalfFloor(c.dtype()) + 1e-300;
        good = std::fabs(a[i] - b[i]) <= limit;
      }
      if (!good) {
        ++failures;
        ADD_FAILURE() << what << " output " << o << " element " << i << ": cpu " << a[i]
                      << ", cuda " << b[i] << " (bound " << limit << ")";
      }
    }
  }
}

const DType kFloatDTypes[] = {DType::kFloat32, DType::kFloat64, DType::kBFloat16,
                              DType::kFloat16};

std::string Label(const std::string& op, int c, DType d, const std::vector<Shape>& shapes) {
  std::string s = op + " case " + std::to_string(c) + " " + std::string(ToString(d));
  for (const Shape& sh : shapes) s += " " + ShapeToString(sh);
  return s;
}

// A per-element "sum of products" bound: 4 (K + 2) u A_i with A the CPU kernel run on the
// inputs' absolute values in float64 (input `ids`, when >= 0, passed as it is).
BoundFn SumOfProducts(const std::string& op, const Tensors& inputs, const Attrs& attrs, double k,
                      double u, int ids = -1) {
  Tensors abs_inputs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    abs_inputs.push_back(static_cast<int>(i) == ids ? inputs[i] : F64(inputs[i], true));
  }
  const Tensors a = RunCpuKernel(op, TensorArgs(abs_inputs), attrs);
  std::vector<Values> av;
  for (const Tensor& t : a) av.push_back(AsDoubles(t));
  return [av, k, u](size_t o, int64_t i, double) { return 4 * (k + 2) * u * av[o][i] + 1e-300; };
}

int Pick(std::mt19937_64& rng, int lo, int hi) {
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

// A dim: mostly 1-7, sometimes 0, sometimes larger (odd sizes).
int64_t RandomDim(std::mt19937_64& rng) {
  const int r = Pick(rng, 0, 19);
  if (r == 0) return 0;
  if (r == 1) return Pick(rng, 30, 70);
  return Pick(rng, 1, 7);
}

// ---- Contractions ---------------------------------------------------------------------------

TEST_F(MathGpu, MatmulBmmAndMatmulGradMatchTheCpuKernels) {
  std::mt19937_64 rng(11);
  for (int c = 0; c < 160; ++c) {
    const DType dtype = kFloatDTypes[c % 4];
    const bool tx = Pick(rng, 0, 1), ty = Pick(rng, 0, 1);
    const int64_t m = RandomDim(rng), n = RandomDim(rng), k = Pick(rng, 0, 9) == 0 ? 300 : RandomDim(rng);
    Shape batch;
    for (int d = Pick(rng, 0, 2); d > 0; --d) batch.push_back(Pick(rng, 0, 8) == 0 ? 0 : Pick(rng, 1, 3));
    auto own = [&] {
      Shape s(batch.begin() + Pick(rng, 0, static_cast<int>(batch.size())), batch.end());
      for (int64_t& d : s) {
        if (Pick(rng, 0, 2) == 0) d = 1;
      }
      return s;
    };
    const bool x1d = Pick(rng, 0, 5) == 0, y1d = Pick(rng, 0, 5) == 0;
    Shape xs = x1d ? Shape{k} : own();
    if (!x1d) {
      xs.push_back(tx ? k : m);
      xs.push_back(tx ? m : k);
    }
    Shape ys = y1d ? Shape{k} : own();
    if (!y1d) {
      ys.push_back(ty ? n : k);
      ys.push_back(ty ? k : n);
    }
    if (Pick(rng, 0, 15) == 0) ys.back() += 1;  // usually a bad shape
    const Tensor x = Random(xs, dtype, rng);
    // Some float32 cases multiply by an int64 operand (converted, as the CPU kernel does).
    const Tensor y = (dtype == DType::kFloat32 && Pick(rng, 0, 5) == 0)
                         ? Random(ys, DType::kInt64, rng, -3, 3)
                         : Random(ys, dtype, rng);
    Attrs given;
    given.Set("trans_x", tx);
    given.Set("trans_y", ty);
    const Attrs attrs = Normalized("matmul", given);
    const std::string what = Label("matmul", c, dtype, {xs, ys}) + (tx ? " tx" : "") + (ty ? " ty" : "");
    const Outcome r = RunBoth("matmul", {x, y}, attrs);
    if (!r.ok) continue;
    const double u = UnitOf(dtype);
    ExpectMatch(r, SumOfProducts("matmul", {x, y}, attrs, static_cast<double>(k), u), false, what);
    // matmul_grad on the same operands.
    const Tensor g = Random(r.cpu[0].shape(), dtype, rng);
    const Outcome rg = RunBoth("matmul_grad", {x, y, g}, attrs);
    if (!rg.ok) continue;
    const double terms = static_cast<double>(std::max<int64_t>({m, n, k, 1})) *
                         static_cast<double>(std::max<int64_t>(NumElements(batch), 1));
    ExpectMatch(rg, SumOfProducts("matmul_grad", {x, y, g}, attrs, terms, u), false,
                what + " (matmul_grad)");
  }
  // bmm, and refusals: a contracted dim that does not fit, rank 0, float32 beside float64.
  for (int c = 0; c < 24; ++c) {
    const DType dtype = kFloatDTypes[c % 4];
    const int64_t b = RandomDim(rng), m = RandomDim(rng), k = RandomDim(rng), n = RandomDim(rng);
    const Tensor x = Random({b, m, k}, dtype, rng), y = Random({b, k, n}, dtype, rng);
    const Attrs attrs = Normalized("bmm", {});
    const Outcome r = RunBoth("bmm", {x, y}, attrs);
    ASSERT_TRUE(r.ok);
    ExpectMatch(r, SumOfProducts("bmm", {x, y}, attrs, static_cast<double>(k), UnitOf(dtype)),
                false, Label("bmm", c, dtype, {x.shape(), y.shape()}));
  }
  const Attrs plain = Normalized("matmul", {});
  EXPECT_FALSE(RunBoth("matmul", {Random({2, 3}, DType::kFloat32, rng), Random({4, 2}, DType::kFloat32, rng)}, plain).ok);
  EXPECT_FALSE(RunBoth("matmul", {Random({}, DType::kFloat32, rng), Random({2}, DType::kFloat32, rng)}, plain).ok);
  EXPECT_FALSE(RunBoth("matmul", {Random({2, 3}, DType::kFloat32, rng), Random({3, 2}, DType::kFloat64, rng)}, plain).ok);
  EXPECT_FALSE(RunBoth("matmul", {Random({2, 3}, DType::kBFloat16, rng), Random({3, 2}, DType::kFloat32, rng)}, plain).ok);
}

TEST_F(MathGpu, EinsumMatchesTheCpuKernel) {
  std::mt19937_64 rng(12);
  const DType dtypes[] = {DType::kFloat32, DType::kFloat64, DType::kBFloat16};
  for (int c = 0; c < 120; ++c) {
    const DType dtype = dtypes[c % 3];
    int64_t size[5];
    for (int64_t& s : size) s = Pick(rng, 0, 11) == 0 ? 0 : Pick(rng, 1, 9);
    const int count = Pick(rng, 1, 3);
    std::string equation, used;
    Tensors inputs;
    std::vector<Shape> shapes;
    for (int i = 0; i < count; ++i) {
      std::string letters = "abcde";
      std::shuffle(letters.begin(), letters.end(), rng);
      letters.resize(static_cast<size_t>(Pick(rng, 0, 4)));
      equation += (i ? "," : "") + letters;
      Shape s;
      for (char l : letters) {
        s.push_back(size[l - 'a']);
        if (used.find(l) == std::string::npos) used += l;
      }
      shapes.push_back(s);
      inputs.push_back(Random(s, dtype, rng));
    }
    std::string out = used;
    std::shuffle(out.begin(), out.end(), rng);
    out.resize(static_cast<size_t>(Pick(rng, 0, static_cast<int>(out.size()))));
    equation += "->" + out;
    Attrs given;
    given.Set("equation", equation);
    const Attrs attrs = Normalized("einsum", given);
    const Outcome r = RunBoth("einsum", inputs, attrs);
    if (!r.ok) continue;
    double all = 1;
    for (char l : used) all *= static_cast<double>(std::max<int64_t>(size[l - 'a'], 1));
    const double terms = all / std::max<double>(1.0, static_cast<double>(r.cpu[0].numel()));
    ExpectMatch(r, SumOfProducts("einsum", inputs, attrs, terms * count, UnitOf(dtype)), false,
                Label("einsum " + equation, c, dtype, shapes));
  }
}

// ---- Reductions -----------------------------------------------------------------------------

struct ReduceCase {
  Shape shape;
  std::vector<int64_t> axis;
  bool keep = false, all = false;
};

ReduceCase RandomReduce(std::mt19937_64& rng, int c) {
  ReduceCase rc;
  // Every 10th case is one of the long layouts (split rows, split columns, block rows).
  static const Shape kLong[] = {{3, 100000}, {100000, 3}, {2, 5000, 3}, {1, 70000}, {257, 1031}};
  if (c % 10 == 9) {
    rc.shape = kLong[(c / 10) % 5];
    rc.axis = {rc.shape.size() == 3 ? 1 : ((c / 50) % 2 == 0 ? 1 : 0)};
    return rc;
  }
  for (int d = Pick(rng, 0, 4); d > 0; --d) rc.shape.push_back(RandomDim(rng));
  const int rank = static_cast<int>(rc.shape.size());
  for (int d = 0; d < std::max(rank, 1); ++d) {
    if (Pick(rng, 0, 1) == 0) rc.axis.push_back(Pick(rng, 0, 1) ? d : d - std::max(rank, 1));
  }
  std::shuffle(rc.axis.begin(), rc.axis.end(), rng);
  if (Pick(rng, 0, 19) == 0) rc.axis.push_back(rank + 1);  // refused alike
  rc.keep = Pick(rng, 0, 1);
  rc.all = Pick(rng, 0, 7) == 0;
  return rc;
}

int64_t TermsOf(const ReduceCase& rc, const Tensor& out) {
  return std::max<int64_t>(1, NumElements(rc.shape) / std::max<int64_t>(1, out.numel()));
}

TEST_F(MathGpu, ReductionsMatchTheCpuKernels) {
  std::mt19937_64 rng(13);
  const char* ops[] = {"sum", "mean", "max", "min", "prod", "any", "all", "squared_l2_norm",
                       "logsumexp", "mean_all"};
  const DType dtypes[] = {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16,
                          DType::kInt64, DType::kBool};
  int compared = 0;
  for (int c = 0; c < 400; ++c) {
    const std::string op = ops[c % 10];
    DType dtype = dtypes[(c / 10) % 6];
    if (dtype == DType::kBool && op != "any" && op != "all" && op != "max") dtype = DType::kFloat32;
    const ReduceCase rc = RandomReduce(rng, c);
    // prod of many terms: values near 1 so that it stays finite.
    const bool is_prod = op == "prod";
    Tensor x = is_prod ? Random(rc.shape, dtype, rng, 0.9, 1.1) : Random(rc.shape, dtype, rng, -3, 3);
    if (is_prod && NumElements(rc.shape) > 2000) x = Random({7, 5}, dtype, rng, 0.5, 1.5);
    Attrs given;
    if (op == "logsumexp") {
      given.Set("axis", rc.axis);
      given.Set("keepdim", rc.keep);
      given.Set("reduce_all", rc.all);
    } else if (op == "squared_l2_norm") {
      given.Set("axis", rc.axis);
      given.Set("keep_dim", rc.keep);
    } else if (op != "mean_all") {
      given.Set("axis", rc.axis);
      given.Set("keep_dim", rc.keep);
      given.Set("reduce_all", rc.all);
    }
    Attrs attrs = Normalized(op, given);
    if ((op == "mean" || op == "mean_all") && Pick(rng, 0, 4) == 0) {
      attrs.mutable_local().count = int64_t{Pick(rng, 1, 50)};  // a shard's global count
    }
    const std::string what = Label(op, c, dtype, {x.shape()});
    const Outcome r = RunBoth(op, {x}, attrs);
    if (!r.ok) continue;
    ++compared;
    const double u = UnitOf(dtype);
    const double k = static_cast<double>(TermsOf(rc, r.cpu[0]));
    const double big_m = MaxAbs({x});
    if (op == "max" || op == "min" || op == "any" || op == "all") {
      ExpectMatch(r, nullptr, true, what);
    } else if (op == "prod") {
      ExpectMatch(r, [&](size_t, int64_t, double ref) { return 4 * (k + 2) * u * std::fabs(ref); },
                  false, what);
    } else if (op == "logsumexp") {
      ExpectMatch(r, [&](size_t, int64_t, double ref) {
        return 4 * (k + 8 + 2 * big_m) * u * (std::fabs(ref) + big_m + 1);
      }, false, what);
    } else {
      ExpectMatch(r, SumOfProducts(op, {x}, attrs, k + 1, u), false, what);
    }
  }
  EXPECT_GT(compared, 200);
}

TEST_F(MathGpu, ArgmaxPNormAndCumsumMatchTheCpuKernels) {
  std::mt19937_64 rng(14);
  const DType dtypes[] = {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16,
                          DType::kInt64, DType::kBool};
  for (int c = 0; c < 240; ++c) {
    const DType dtype = dtypes[c % 6];
    ReduceCase rc = RandomReduce(rng, c);
    const int rank = static_cast<int>(rc.shape.size());
    const int64_t axis = Pick(rng, -std::max(rank, 1), std::max(rank, 1) - 1);
    // Integer-valued data has ties; a few NaNs test argmax's rule (a NaN at index 0 wins,
    // others are skipped).
    Tensor x = Random(rc.shape, dtype, rng, -3, 3);
    if (dtype == DType::kFloat32 && x.numel() > 0 && c % 12 == 0) {
      float* p = x.data<float>();
      p[0] = std::numeric_limits<float>::quiet_NaN();
      p[x.numel() / 2] = std::numeric_limits<float>::quiet_NaN();
    }
    {
      Attrs given;
      given.Set("axis", axis);
      given.Set("keepdims", static_cast<bool>(Pick(rng, 0, 1)));
      given.Set("flatten", Pick(rng, 0, 4) == 0);
      if (Pick(rng, 0, 30) == 0) given.Set("dtype", std::string("int32"));  // refused alike
      const Outcome r = RunBoth("argmax", {x}, Normalized("argmax", given));
      if (r.ok) ExpectMatch(r, nullptr, true, Label("argmax", c, dtype, {x.shape()}));
    }
    if (dtype == DType::kBool) continue;
    {
      const double porders[] = {2.0, 1.0, 3.0, 0.5};
      const double p = porders[c % 4];
      Attrs given;
      given.Set("porder", p);
      given.Set("axis", axis);
      given.Set("keepdim", static_cast<bool>(Pick(rng, 0, 1)));
      given.Set("asvector", Pick(rng, 0, 3) == 0);
      const Attrs attrs = Normalized("p_norm", given);
      const Tensor xf = (dtype == DType::kFloat32 && x.numel() > 0 && c % 12 == 0)
                            ? Random(rc.shape, dtype, rng) : x;
      const Outcome r = RunBoth("p_norm", {xf}, attrs);
      if (r.ok) {
        const double k = static_cast<double>(std::max<int64_t>(1, xf.numel() / std::max<int64_t>(1, r.cpu[0].numel())));
        const double big_m = MaxAbs({xf});
        const double u = UnitOf(dtype);
        ExpectMatch(r, [&](size_t, int64_t, double ref) {
          return 4 * (k + 8 + 2 * big_m) * u * std::fabs(ref) * std::max(1.0, 1.0 / p);
        }, false, Label("p_norm", c, dtype, {x.shape()}));
      }
    }
    {
      Attrs given;
      given.Set("axis", axis);
      given.Set("flatten", Pick(rng, 0, 5) == 0);
      given.Set("exclusive", static_cast<bool>(Pick(rng, 0, 1)));
      given.Set("reverse", static_cast<bool>(Pick(rng, 0, 1)));
      const Attrs attrs = Normalized("cumsum", given);
      const Tensor xf = (dtype == DType::kFloat32 && x.numel() > 0 && c % 12 == 0)
                            ? Random(rc.shape, dtype, rng) : x;
      const Outcome r = RunBoth("cumsum", {xf}, attrs);
      if (r.ok) {
        const double k = static_cast<double>(std::max<int64_t>(1, xf.numel()));
        ExpectMatch(r, SumOfProducts("cumsum", {xf}, attrs, k, UnitOf(dtype)), false,
                    Label("cumsum", c, dtype, {x.shape()}));
      }
    }
  }
  // argmax over an empty dim is refused alike.
  Attrs given;
  given.Set("axis", int64_t{1});
  EXPECT_FALSE(RunBoth("argmax", {Random({3, 0}, DType::kFloat32, rng)}, Normalized("argmax", given)).ok);
}

TEST_F(MathGpu, SpecialValuesFollowTheCpuKernelsRules) {
  // NaN and infinities through max/min (NaN ignored), argmax, any/all, logsumexp and the
  // softmax family, row by row (rows of 1, 40 and 700 elements: warp and block paths).
  std::mt19937_64 rng(15);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (int64_t len : {1, 40, 700}) {
    const int64_t rows = 8;
    Values v(static_cast<size_t>(rows * len));
    std::uniform_real_distribution<double> d(-2, 2);
    for (double& x : v) x = d(rng);
    // Row 0: a NaN; row 1: +inf; row 2: every element -inf; row 3: -inf and finite;
    // row 4: every element NaN; row 5: NaN first; row 6: +inf and -inf.
    v[0 * len + len / 2] = nan;
    v[1 * len + len - 1] = inf;
    for (int64_t a = 0; a < len; ++a) v[2 * len + a] = -inf;
    v[3 * len] = -inf;
    for (int64_t a = 0; a < len; ++a) v[4 * len + a] = nan;
    v[5 * len] = nan;
    v[6 * len] = inf;
    v[6 * len + len - 1] = -inf;
    for (DType dtype : kFloatDTypes) {
      const Tensor x = Store({rows, len}, dtype, v);
      const std::string what = "special values, len " + std::to_string(len) + " " +
                               std::string(ToString(dtype));
      for (const char* op : {"max", "min", "any", "all"}) {
        Attrs given;
        given.Set("axis", std::vector<int64_t>{1});
        const Outcome r = RunBoth(op, {x}, Normalized(op, given));
        if (r.ok) ExpectMatch(r, nullptr, true, what + " " + op);
      }
      {
        const Outcome r = RunBoth("argmax", {x}, Normalized("argmax", {}));
        if (r.ok) ExpectMatch(r, nullptr, true, what + " argmax");
      }
      const double u = UnitOf(dtype);
      const double k = static_cast<double>(len);
      const double big_m = 2;
      auto log_bound = [&](size_t, int64_t, double ref) {
        return 4 * (k + 8 + 2 * big_m) * u * (std::fabs(ref) + big_m + 1);
      };
      auto rel_bound = [&](size_t, int64_t, double ref) {
        return 4 * (k + 8 + 2 * big_m) * u * std::fabs(ref);
      };
      {
        Attrs given;
        given.Set("axis", std::vector<int64_t>{1});
        const Outcome r = RunBoth("logsumexp", {x}, Normalized("logsumexp", given));
        if (r.ok) ExpectMatch(r, log_bound, false, what + " logsumexp");
      }
      {
        const Outcome r = RunBoth("softmax", {x}, Normalized("softmax", {}));
        if (r.ok) ExpectMatch(r, rel_bound, false, what + " softmax");
      }
      {
        const Outcome r = RunBoth("log_softmax", {x}, Normalized("log_softmax", {}));
        if (r.ok) ExpectMatch(r, log_bound, false, what + " log_softmax");
      }
    }
  }
}

// ---- Norms and losses -----------------------------------------------------------------------

// A random shape of rank 1-4 whose `axis` dim is `len` (rows of the softmax family).
Shape ShapeWithAxis(std::mt19937_64& rng, int rank, int axis, int64_t len) {
  Shape s;
  for (int d = 0; d < rank; ++d) s.push_back(d == axis ? len : std::min<int64_t>(RandomDim(rng), 9));
  return s;
}

int64_t RowLength(std::mt19937_64& rng) {
  const int r = Pick(rng, 0, 9);
  if (r == 0) return 0;
  if (r == 1) return Pick(rng, 257, 1500);  // a block per row
  if (r == 2) return 5003;
  return Pick(rng, 1, 70);  // a warp per row
}

TEST_F(MathGpu, SoftmaxFamilyMatchesTheCpuKernels) {
  std::mt19937_64 rng(16);
  for (int c = 0; c < 160; ++c) {
    const DType dtype = kFloatDTypes[c % 4];
    const int rank = Pick(rng, 1, 4);
    const int axis = c % 3 == 0 ? Pick(rng, 0, rank - 1) : rank - 1;  // mostly the last axis
    const int64_t len = RowLength(rng);
    const Shape shape = ShapeWithAxis(rng, rank, axis, len);
    if (NumElements(shape) > 400000) continue;
    const Tensor x = Random(shape, dtype, rng, -4, 4);
    Attrs given;
    given.Set("axis", int64_t{Pick(rng, 0, 1) ? axis : axis - rank});
    const double u = UnitOf(dtype);
    const double k = static_cast<double>(std::max<int64_t>(len, 1));
    const double big_m = MaxAbs({x});
    const std::string what = Label("", c, dtype, {shape}) + " axis " + std::to_string(axis);
    {
      const Outcome r = RunBoth("softmax", {x}, Normalized("softmax", given));
      if (r.ok) {
        ExpectMatch(r, [&](size_t, int64_t, double ref) {
          return 4 * (k + 8 + 2 * big_m) * u * std::fabs(ref);
        }, false, "softmax" + what);
        // softmax_grad on the softmax's output.
        const Tensor g = Random(shape, dtype, rng);
        const Tensor y = Store(shape, dtype, AsDoubles(r.cpu[0]));
        const Outcome rg = RunBoth("softmax_grad", {y, g}, Normalized("softmax_grad", given));
        const double mg = MaxAbs({y, g});
        if (rg.ok) {
          ExpectMatch(rg, [&](size_t, int64_t, double ref) {
            return 4 * (k + 8) * u * (std::fabs(ref) + mg * (mg + k * mg * mg));
          }, false, "softmax_grad" + what);
        }
      }
    }
    {
      const Outcome r = RunBoth("log_softmax", {x}, Normalized("log_softmax", given));
      if (r.ok) {
        ExpectMatch(r, [&](size_t, int64_t, double ref) {
          return 4 * (k + 8 + 2 * big_m) * u * (std::fabs(ref) + big_m + 1);
        }, false, "log_softmax" + what);
      }
    }
  }
}

TEST_F(MathGpu, LayerNormAndRmsNormMatchTheCpuKernels) {
  std::mt19937_64 rng(17);
  for (int c = 0; c < 120; ++c) {
    const DType dtype = kFloatDTypes[c % 4];
    const int rank = Pick(rng, 1, 4);
    Shape shape;
    for (int d = 0; d < rank; ++d) shape.push_back(std::min<int64_t>(RandomDim(rng), 12));
    if (c % 7 == 0) shape = {3, 4099};  // a block per row
    const int begin = Pick(rng, 0, static_cast<int>(shape.size()) - 1);
    int64_t n = 1;
    for (size_t d = static_cast<size_t>(begin); d < shape.size(); ++d) n *= shape[d];
    const Tensor x = Random(shape, dtype, rng);
    const Tensor scale = Random({c % 11 == 0 ? n + 1 : n}, dtype, rng);  // sometimes refused
    const Tensor bias = Random({n}, dtype, rng);
    Attrs given;
    given.Set("begin_norm_axis", int64_t{Pick(rng, 0, 1) ? begin : begin - rank});
    const double u = UnitOf(dtype);
    const double k = static_cast<double>(std::max<int64_t>(n, 1));
    const double big_m = MaxAbs({x});
    const double s_max = MaxAbs({scale}), b_max = MaxAbs({bias});
    const std::string what = Label("", c, dtype, {shape}) + " begin " + std::to_string(begin);
    const Attrs ln_attrs = Normalized("layer_norm", given);
    const Outcome r = RunBoth("layer_norm", {x, scale, bias}, ln_attrs);
    if (r.ok) {
      const Values variance = AsDoubles(r.cpu[2]);
      const double eps = ln_attrs.GetFloat("epsilon");
      ExpectMatch(r, [&](size_t o, int64_t i, double ref) {
        if (o == 0) {
          const double inv = 1.0 / std::sqrt(std::max(variance[static_cast<size_t>(i / n)], 0.0) + eps);
          return 4 * (k + 8 + 2 * big_m) * u * (std::fabs(ref) + b_max + 3 * inv * s_max * big_m);
        }
        if (o == 1) return 4 * (k + 8) * u * (std::fabs(ref) + big_m);
        return 4 * (k + 8) * u * std::fabs(ref) + 8 * (k * big_m * u) * (k * big_m * u);
      }, false, "layer_norm" + what);
    }
    const Outcome rr = RunBoth("rms_norm", {x, scale}, Normalized("rms_norm", given));
    if (rr.ok) {
      ExpectMatch(rr, [&](size_t, int64_t, double ref) {
        return 4 * (k + 8 + 2 * big_m) * u * std::fabs(ref);
      }, false, "rms_norm" + what);
    }
  }
}

// Ids in [lo, hi) of `dtype` (int64, or a float / bool dtype holding whole numbers).
Tensor RandomIds(const Shape& shape, DType dtype, std::mt19937_64& rng, int64_t lo, int64_t hi) {
  Values v(static_cast<size_t>(NumElements(shape)));
  for (double& x : v) x = static_cast<double>(std::uniform_int_distribution<int64_t>(lo, hi - 1)(rng));
  return Store(shape, dtype, v);
}

TEST_F(MathGpu, LookupTableAndEmbeddingGradMatchTheCpuKernels) {
  std::mt19937_64 rng(18);
  const DType id_dtypes[] = {DType::kInt64, DType::kInt64, DType::kFloat32, DType::kFloat64};
  for (int c = 0; c < 100; ++c) {
    const DType dtype = kFloatDTypes[c % 4];
    const DType id_dtype = id_dtypes[(c / 4) % 4];
    const int64_t vocab = Pick(rng, 0, 9) == 0 ? 0 : Pick(rng, 1, 40);
    const int64_t hidden = Pick(rng, 0, 9) == 0 ? 0 : Pick(rng, 1, 70);
    Shape id_shape;
    for (int d = Pick(rng, 0, 3); d > 0; --d) id_shape.push_back(std::min<int64_t>(RandomDim(rng), 9));
    // Sharded (a weight shard holding rows [start, start + vocab)): ids up to start + 2 vocab.
    const bool sharded = c % 3 == 0;
    const int64_t start = sharded ? Pick(rng, 0, 20) : 0;
    const int64_t hi = sharded ? start + 2 * vocab + 1 : std::max<int64_t>(vocab, 1);
    Tensor ids = RandomIds(id_shape, id_dtype == DType::kFloat32 && hi > 200 ? DType::kInt64 : id_dtype,
                           rng, 0, hi);
    const Tensor weight = Random({vocab, hidden}, dtype, rng);
    Attrs given;
    const int64_t padding = Pick(rng, 0, 2) == 0 ? Pick(rng, 0, std::max<int>(static_cast<int>(vocab) - 1, 0)) : -1;
    given.Set("padding_idx", padding);
    Attrs attrs = Normalized("lookup_table_v2", given);
    if (sharded) attrs.mutable_local().vocab_start = start;
    const std::string what = Label("lookup_table_v2", c, dtype, {id_shape, weight.shape()});
    const Outcome r = RunBoth("lookup_table_v2", {ids, weight}, attrs);
    if (r.ok) ExpectMatch(r, nullptr, true, what);
    // embedding_grad with the same ids.
    Shape g_shape = id_shape;
    g_shape.push_back(hidden);
    const Tensor g = Random(g_shape, dtype, rng);
    Attrs grad_attrs = Normalized("embedding_grad", given);
    if (sharded) grad_attrs.mutable_local().vocab_start = start;
    const Outcome rg = RunBoth("embedding_grad", {ids, weight, g}, grad_attrs);
    if (rg.ok) {
      const double k = static_cast<double>(std::max<int64_t>(1, NumElements(id_shape)));
      ExpectMatch(rg, SumOfProducts("embedding_grad", {ids, weight, g}, grad_attrs, k, UnitOf(dtype), 0),
                  false, "embedding_grad" + what);
    }
  }
  // Bad ids are refused alike (InvalidArgument inputs[0].data): out of range, negative, not
  // whole, NaN, beyond 9e15; and a sharded table still refuses negative ids.
  const Tensor weight = Random({5, 3}, DType::kFloat32, rng);
  const Attrs attrs = Normalized("lookup_table_v2", {});
  const Attrs grad_attrs = Normalized("embedding_grad", {});
  for (const Values& bad : {Values{1, 5}, Values{-1, 0}, Values{2.5, 1}, Values{0, std::nan("")},
                            Values{1e16, 0}}) {
    for (DType d : {DType::kInt64, DType::kFloat32, DType::kFloat64}) {
      if (d == DType::kInt64 && (bad[0] != std::trunc(bad[0]) || std::isnan(bad[1]) || bad[0] > 1e15)) continue;
      const Tensor ids = Store({2}, d, bad);
      EXPECT_FALSE(RunBoth("lookup_table_v2", {ids, weight}, attrs).ok);
      EXPECT_FALSE(RunBoth("embedding_grad", {ids, weight, Random({2, 3}, DType::kFloat32, rng)},
                           grad_attrs).ok);
    }
  }
}

TEST_F(MathGpu, CrossEntropyAndItsGradMatchTheCpuKernels) {
  std::mt19937_64 rng(19);
  for (int c = 0; c < 160; ++c) {
    const DType dtype = kFloatDTypes[c % 4];
    const bool soft = c % 5 == 4;
    const bool use_softmax = c % 7 != 6;
    const int rank = Pick(rng, 1, 3);
    const int axis = c % 3 == 0 ? Pick(rng, 0, rank - 1) : rank - 1;
    int64_t classes = RowLength(rng);
    if (classes == 0) classes = 1;
    const Shape shape = ShapeWithAxis(rng, rank, axis, classes);
    if (NumElements(shape) > 400000) continue;
    // Without the softmax the "logits" are probabilities already (positive).
    const Tensor logits = use_softmax ? Random(shape, dtype, rng, -4, 4) : Random(shape, dtype, rng, 0.05, 1);
    Shape loss_shape = shape;
    loss_shape[axis] = 1;
    const int64_t ignore = -100;
    Tensor label;
    if (soft) {
      label = Random(shape, dtype, rng, 0, 1);
    } else {
      Values ids(static_cast<size_t>(NumElements(loss_shape)));
      for (double& v : ids) {
        v = Pick(rng, 0, 9) == 0 ? static_cast<double>(ignore)
                                 : static_cast<double>(Pick(rng, 0, static_cast<int>(classes) - 1));
      }
      if (c % 23 == 0 && !ids.empty()) ids[0] = static_cast<double>(classes);  // refused alike
      label = Store(loss_shape, c % 2 == 0 ? DType::kInt64 : DType::kFloat64, ids);
      if (dtype != DType::kFloat32 && dtype != DType::kFloat64 && label.dtype() == DType::kFloat64) {
        label = Store(loss_shape, DType::kInt64, ids);  // a float64 label beside 2-byte logits is refused
      }
    }
    Attrs given;
    given.Set("soft_label", soft);
    given.Set("use_softmax", use_softmax);
    given.Set("ignore_index", ignore);
    given.Set("axis", int64_t{axis});
    const Attrs attrs = Normalized("cross_entropy_with_softmax", given);
    const std::string what = Label("cross_entropy", c, dtype, {shape}) + (soft ? " soft" : " hard") +
                             (use_softmax ? "" : " no-softmax");
    const Outcome r = RunBoth("cross_entropy_with_softmax", {logits, label}, attrs);
    if (!r.ok) continue;
    const double u = UnitOf(dtype);
    const double k = static_cast<double>(classes);
    const double big_m = MaxAbs({logits});
    double big_l = 0;
    for (double p : AsDoubles(r.cpu[0])) {
      if (p > 0 && std::isfinite(std::log(p))) big_l = std::max(big_l, std::fabs(std::log(p)));
    }
    ExpectMatch(r, [&](size_t o, int64_t, double ref) {
      if (o == 0) return 4 * (k + 8 + 2 * big_m) * u * std::fabs(ref);
      return 4 * (k + 8 + 2 * big_m) * u * (std::fabs(ref) + 1 + k * big_m * big_l);
    }, false, what);
    // The grad from the forward's softmax_out.
    const Tensor probs = Store(shape, dtype, AsDoubles(r.cpu[0]));
    const Tensor loss_grad = Random(loss_shape, dtype, rng);
    const Attrs grad_attrs = Normalized("cross_entropy_with_softmax_grad", given);
    const Outcome rg =
        RunBoth("cross_entropy_with_softmax_grad", {label, probs, loss_grad}, grad_attrs);
    if (rg.ok) {
      double mg = MaxAbs({label, probs, loss_grad});
      for (double p : AsDoubles(probs)) {
        if (p > 0) mg = std::max(mg, 1.0 / p);  // -g / p without the softmax
      }
      ExpectMatch(rg, [&](size_t, int64_t, double ref) { return 16 * u * (std::fabs(ref) + mg * mg); },
                  false, what + " (grad)");
    }
  }
}

}  // namespace
}  // namespace spmd::kernels::cuda
