// The CPU kernels (kernels/cpu) against the float64 references (reference/): every op of
// AllOps(), on every example of its declaration, in float64 and in float32, plus random
// sizes (RapidCheck), the localized attrs, and error parity on broken requests.
//
// Nothing here is written per op except the hand-made shards of the localized-attr tests:
// which kind of computation an op is comes from its declared tolerance class.
//
// Inputs come from the op's value kinds (OpDecl::InputValueKinds): reals in (-2, 2),
// positives in (0.1, 2), non-zero reals with |v| >= 0.5, bools (a bool tensor), indices in
// [0, bound) (an int64 tensor); float inputs are float64 or float32 tensors as the run
// asks. The reference always runs in float64 on the same values (in a float32 run: on the
// values already rounded to float), so the only difference left is the kernel's own
// arithmetic.
//
// Verdicts:
// - The reference refuses (SpmdError): the kernel must refuse with the same error type and
//   field. Anything but an SpmdError from a kernel is a failure.
// - Outputs: same count and shapes; dtype as the reference's, except that float64 outputs
//   come in the run's dtype (float32 in, float32 out; cast outputs exactly attrs.dtype).
//   int64 and bool outputs must be equal.
// - float64 run: |kernel - ref| <= 1e-12 |ref| + 1e-12 (NaN matches NaN, inf the same inf).
// - float32 run: the bound of the op's tolerance class (declared on the op; below).
//
// float32 error model, one bound per tolerance class (rules/model/tolerance.h; the ops below are
// the ones declaring each class today; property_tests/tolerance.h has the other dtypes).
// u = 2^-24 (float's unit roundoff). K is the number of terms one output element
// depends on, from shapes and declared attrs only: the most of x's elements per element
// of any output, the length along an int `axis` attr, and for sums of products the
// reference run on all-ones inputs; at least 1, never fewer than the true count.
// M = max(1, max |float input|). Every bound also has an absolute floor of 1e-30.
//   exact         values are moved or compared, not computed: kernel == (float)ref.
//                 relu, abs, clip, cast, maximum, minimum, greater_than, less_than, where,
//                 max, min, any, all, argmax, lookup_table_v2, triu, every shape op.
//   pointwise     one formula per element: (168 |ref| + 17) u, about 1e-5 |ref| + 1e-6.
//                 libm's float functions are
//                 within a few ulp (< 4u ~ 2.4e-7 relative); the worst amplification is
//                 gelu's 1 + erf(x/sqrt2) (or 1 + tanh(..)) near x = -2, about 25x, so
//                 < 6e-6 relative; scale's s x + b loses at most 2u (|s x| + |b|) < 1e-6
//                 absolute for the declared attrs. gelu silu exp log tanh sigmoid sqrt
//                 scale add subtract multiply divide.
//   sum of products  |err| <= 2 (K + 2) u A, with A the reference run on |inputs| (the sum
//                 of |terms| per element: Higham's gamma_K bound for any summation order,
//                 plus the rounding of each product and of a final division).
//                 K: the reference run on all-ones inputs counts the terms (matmul bmm
//                 einsum matmul_grad sum cumsum squared_l2_norm); numel(x) / numel(out)
//                 counts them for mean mean_all prod (whose all-ones run gives 1).
//   relative      2 (K + 8 + 2M) u |ref|: softmax (each exp is relative-accurate to
//                 (2M + 2) u since |x - max| <= 2M; the sum of K positive terms adds K u;
//                 the division u) and p_norm (times max(1, 1/|p|) for the final root).
//                 K = the axis length (softmax), numel(x) / numel(out) (p_norm).
//   log domain    2 (K + 8 + 2M) u (|ref| + M + 1): logsumexp, log_softmax (x - m - log s:
//                 each of x, m, log s carries u of its size, log s also the sum's K u).
//   cross entropy softmax_out as "relative"; loss 2 (K + 8 + 2M) u (|ref| + 1 + K M L),
//                 L = max |log softmax_out| (a soft label's loss sums K terms l log p).
//   layer_norm    mean: 2 (K + 8) u (|ref| + M); variance: 2 (K + 8) u |ref| + 4 (K M u)^2
//                 (two-pass: the mean's error, <= (K + 1) u M, enters the variance only to
//                 second order);
//                 out: 2 (K + 8 + 2M) u (|ref| + B + inv S 3M), inv = 1/sqrt(var + eps) of
//                 the element's row (from the reference's variance), S = max |scale|,
//                 B = max |bias|: (x - mean) carries u |x - mean| + the mean's error, and
//                 inv multiplies it. K = the normalised size.
//   group_norm    layer_norm's bounds per (n, group): K = the group's size (its channels
//                 times the spatial positions), inv of the element's group; an absent (0-d)
//                 scale or bias counts as S = 1, B = 0. group_norm, instance_norm.
//   batch_norm    layer_norm's bounds per channel (K = N * spatial, inv the channel's
//                 saved_variance); mean_out and variance_out times |momentum| +
//                 |1 - momentum|; saved_variance moves by inv^3 / 2 of the variance's error.
//   rms_norm      2 (K + 8 + 2M) u |ref| (products and one sum of K squares).
//   softmax_grad  2 (K + 8) u (|ref| + M (M + K M^2)): out (g - sum(g out)), the sum of K
//                 products of size <= M^2. K = the axis length.
//   layer_norm_grad  per row of N elements: inv = 1/sqrt(variance + eps), xhat = (x - mean)
//                 inv, dxhat = g scale, D = mean |dxhat|, P = mean |dxhat xhat| (from the
//                 inputs, in float64). x_grad = inv (dxhat - mean(dxhat) - xhat mean(dxhat
//                 xhat)): 2 (N + 20) u inv (|dxhat| + D + |xhat| P) (xhat carries 5 u of
//                 itself, the two means (N + 8) u of D and P, the difference and the final
//                 product 4 u more; the terms cancel, so the bound follows their sizes, not
//                 |ref|). scale_grad, bias_grad: 2 (R + 20) u sum_rows |g xhat|, sum_rows |g|,
//                 R = the rows (R products, each 6 u).
//   rms_norm_grad as layer_norm_grad with xhat = x invvar, inv = invvar and D = 0 (no mean of
//                 dxhat is subtracted); scale_grad as above.
//
// bfloat16 / float16 (TwoByteFloatsMatchFloat32AndReference): the kernels compute in float32
// and round each float output once. On inputs that are exactly 2-byte values (generated as
// above, then rounded to the 2-byte type; the reference and the float32 run get the same
// values, so input rounding adds nothing), two checks:
//   - exact: the 2-byte run == the float32 run rounded to the 2-byte type, bit for bit (NaN
//     as NaN); int64 and bool outputs equal; cast's outputs equal the float32 run's; an
//     op with no floating input (one_hot) gives the float32 run's outputs unchanged.
//   - against the float64 reference, by CompareValues in the 2-byte dtype
//     (property_tests/tolerance.h): |kernel - ref| <= t + u (|ref| + t), with t the
//     float32 class bound and u the 2-byte unit roundoff (2^-8 bfloat16, 2^-11 float16)
//     of the final rounding; kExact ops equal ref rounded to the dtype; a reference
//     beyond the dtype's range comes out as the infinity of its sign.
//
// Replay: the examples' seeds are fixed; a RapidCheck failure prints the op, sizes,
// example and seed; RC_PARAMS="seed=..." replays it, SPMD_KERNEL_OPS=matmul,sum limits the
// ops.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "kernels/tensor.h"
#include "property_tests/tolerance.h"
#include "reference/reference.h"
#include "rules/model/error.h"
#include "rules/model/half.h"
#include "rules/model/attrs.h"
#include "rules/engine/phase.h"
#include "rules/engine/registry.h"

namespace spmd {
namespace {

namespace ref = reference;
using kernels::RunCpuKernel;
using KTensor = kernels::Tensor;
using KTensors = kernels::Tensors;


// ---- Ops under test --------------------------------------------------------------------------

std::vector<std::string> OpsUnderTest() {
  std::set<std::string> only;
  if (const char* env = std::getenv("SPMD_KERNEL_OPS")) {
    std::stringstream ss(env);
    std::string name;
    while (std::getline(ss, name, ',')) {
      if (!name.empty()) only.insert(name);
    }
  }
  std::vector<std::string> names;
  for (const OpDecl& op : AllOps()) {
    if (only.empty() || only.count(op.name)) names.push_back(op.name);
  }
  return names;
}

std::string ShapeString(const Shape& s) { return kernels::ShapeToString(s); }

std::string AttrsString(const Attrs& attrs) {
  std::string s = "{";
  for (const auto& [name, value] : attrs.values()) {
    if (s.size() > 1) s += ", ";
    s += name + ": ";
    std::visit(
        [&](const auto& v) {
          using V = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<V, bool>) {
            s += v ? "true" : "false";
          } else if constexpr (std::is_same_v<V, int64_t> || std::is_same_v<V, double>) {
            std::ostringstream os;
            os << v;
            s += os.str();
          } else if constexpr (std::is_same_v<V, std::string>) {
            s += "'" + v + "'";
          } else {
            std::ostringstream os;
            os << "[";
            for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
            os << "]";
            s += os.str();
          }
        },
        value);
  }
  return s + "}";
}

// ---- Tensors both ways ---------------------------------------------------------------------

// The kernel tensor holding a reference tensor's values in its dtype (float32 values are
// rounded to float; integral dtypes hold the integral values).
KTensor ToKernel(const ref::Tensor& t) {
  KTensor k(t.shape, t.dtype);
  const size_t n = t.data.size();
  switch (t.dtype) {
    case DType::kFloat64:
      std::copy(t.data.begin(), t.data.end(), k.data<double>());
      break;
    case DType::kFloat32:
      for (size_t i = 0; i < n; ++i) k.data<float>()[i] = static_cast<float>(t.data[i]);
      break;
    case DType::kInt64:
      for (size_t i = 0; i < n; ++i) k.data<int64_t>()[i] = static_cast<int64_t>(t.data[i]);
      break;
    case DType::kBool:
      for (size_t i = 0; i < n; ++i) k.data<bool>()[i] = t.data[i] != 0.0;
      break;
    case DType::kBFloat16:
      for (size_t i = 0; i < n; ++i) k.data<BFloat16>()[i] = BFloat16::FromBits(DoubleToBFloat16Bits(t.data[i]));
      break;
    case DType::kFloat16:
      for (size_t i = 0; i < n; ++i) k.data<Float16>()[i] = Float16::FromBits(DoubleToFloat16Bits(t.data[i]));
      break;
  }
  return k;
}

KTensors ToKernel(const ref::Tensors& ts) {
  KTensors out;
  for (const ref::Tensor& t : ts) out.push_back(ToKernel(t));
  return out;
}

std::vector<double> ValuesOf(const KTensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  switch (t.dtype()) {
    case DType::kFloat64:
      for (size_t i = 0; i < v.size(); ++i) v[i] = t.data<double>()[i];
      break;
    case DType::kFloat32:
      for (size_t i = 0; i < v.size(); ++i) v[i] = t.data<float>()[i];
      break;
    case DType::kInt64:
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(t.data<int64_t>()[i]);
      break;
    case DType::kBool:
      for (size_t i = 0; i < v.size(); ++i) v[i] = t.data<bool>()[i] ? 1.0 : 0.0;
      break;
    case DType::kBFloat16:
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(t.data<BFloat16>()[i]);
      break;
    case DType::kFloat16:
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(t.data<Float16>()[i]);
      break;
  }
  return v;
}

// ---- Inputs ----------------------------------------------------------------------------------

// The op's value kinds for these shapes, or none when the rule refuses them (the
// declaration's builders assume shapes the rule accepts, so they are asked only then).
std::vector<InputValues> KindsOf(const OpDecl& op, const std::vector<Shape>& shapes,
                                 const Attrs& attrs) {
  const bool arity = op.variadic_inputs ? !shapes.empty() : shapes.size() == op.inputs.size();
  if (!arity) return {};
  try {
    if (op.einsum) BuildEinsumSpec(op, shapes, attrs);
    return op.InputValueKinds(RuleContext{shapes, attrs});
  } catch (const SpmdError&) {
    return {};  // reals everywhere: the verdict is then error parity
  }
}

// Inputs of the op's value kinds, float ones in `float_dtype` (float32 values rounded).
ref::Tensors MakeInputs(const OpDecl& op, const std::vector<Shape>& shapes, const Attrs& attrs,
                        DType float_dtype, uint64_t seed) {
  const std::vector<InputValues> kinds = KindsOf(op, shapes, attrs);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  ref::Tensors inputs;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const InputValues kind = i < kinds.size() ? kinds[i] : InputValues{};
    ref::Tensor t;
    t.shape = shapes[i];
    t.dtype = float_dtype;
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    t.data.resize(static_cast<size_t>(n));
    for (double& v : t.data) {
      switch (kind.kind) {
        case ValueKind::kReal: v = -2.0 + 4.0 * unit(rng); break;
        case ValueKind::kPositive:
        case ValueKind::kBoxes: v = 0.1 + 1.9 * unit(rng); break;
        case ValueKind::kUnit: v = -0.9 + 1.8 * unit(rng); break;
        case ValueKind::kProbability: v = 0.05 + 0.9 * unit(rng); break;
        case ValueKind::kAboveOne: v = 1.1 + 1.9 * unit(rng); break;
        case ValueKind::kNonZero: v = (unit(rng) < 0.5 ? -1.0 : 1.0) * (0.5 + 1.5 * unit(rng)); break;
        case ValueKind::kBool: v = unit(rng) < 0.5 ? 0.0 : 1.0; break;
        case ValueKind::kNearOne:
          v = (unit(rng) < 0.5 ? -1.0 : 1.0) * std::exp((unit(rng) < 0.5 ? -1.0 : 1.0) * (0.01 + 0.05 * unit(rng)));
          break;
        case ValueKind::kIndex:
          v = kind.bound > 0 ? static_cast<double>(rng() % static_cast<uint64_t>(kind.bound)) : 0.0;
          break;
        case ValueKind::kCounts:
          v = kind.bound > 0 ? static_cast<double>(rng() % static_cast<uint64_t>(kind.bound + 1)) : 0.0;
          break;
        case ValueKind::kSmallInt:
          v = kind.bound > 0 ? static_cast<double>(static_cast<int64_t>(rng() % static_cast<uint64_t>(2 * kind.bound + 1)) -
                                                   kind.bound)
                             : 0.0;
          break;
      }
      v = prop::RoundToDType(v, t.dtype);  // the run's values, exactly
    }
    ArrangeInputValues(kind, t.shape, t.data);
    if (kind.kind == ValueKind::kBool) t.dtype = DType::kBool;
    if (IsIntegerKind(kind.kind)) t.dtype = DType::kInt64;
    inputs.push_back(std::move(t));
  }
  return inputs;
}

// ---- Running both ----------------------------------------------------------------------------

struct Outcome {
  std::optional<ref::Tensors> ref_outputs;
  std::optional<KTensors> kernel_outputs;
  std::optional<SpmdError> ref_error, kernel_error;
  std::string foreign;  // the kernel threw something that is not an SpmdError
};

Outcome RunBoth(const std::string& op, const ref::Tensors& inputs, const Attrs& attrs) {
  Outcome o;
  try {
    o.ref_outputs = ref::FindReference(op)(inputs, attrs);
  } catch (const SpmdError& e) {
    o.ref_error = e;
  }
  const KTensors k_inputs = ToKernel(inputs);
  try {
    o.kernel_outputs = RunCpuKernel(op, k_inputs, attrs);
  } catch (const SpmdError& e) {
    o.kernel_error = e;
  } catch (const std::exception& e) {
    o.foreign = std::string("the kernel threw a non-SpmdError: ") + e.what();
  } catch (...) {
    o.foreign = "the kernel threw a non-std::exception";
  }
  return o;
}

// ---- float32 tolerances ----------------------------------------------------------------------

using prop::Bounds;
using prop::MakeBounds;
using prop::Numel;

// ---- Verdicts --------------------------------------------------------------------------------

using prop::SameSpecial;

// Empty when the kernel's outputs match; else what differs.
std::string CompareOutputs(const std::string& op, const ref::Tensors& inputs, const Attrs& attrs,
                           const ref::Tensors& expected, const KTensors& got, DType run_dtype) {
  if (got.size() != expected.size()) {
    return "kernel gave " + std::to_string(got.size()) + " outputs, reference " +
           std::to_string(expected.size());
  }
  const OpDecl& decl = *FindOp(op);
  std::optional<Bounds> bounds;
  for (size_t o = 0; o < expected.size(); ++o) {
    const ref::Tensor& e = expected[o];
    const KTensor& g = got[o];
    const std::string where = "outputs[" + std::to_string(o) + "]";
    if (g.shape() != e.shape) {
      return where + " shape " + ShapeString(g.shape()) + ", reference " + ShapeString(e.shape);
    }
    const DType want = (e.dtype == DType::kFloat64 && op != "cast") ? run_dtype : e.dtype;
    if (g.dtype() != want) {
      return where + " dtype " + std::string(ToString(g.dtype())) + ", expected " +
             std::string(ToString(want));
    }
    const std::string error =
        CompareValues(decl, o, where, g.dtype(), ValuesOf(g), e.data, 1e-12, bounds,
                      [&] { return MakeBounds(decl, inputs, attrs, expected); });
    if (!error.empty()) return error;
  }
  return "";
}

// The verdict on one request: empty when the kernel agrees with the reference.
std::string Verdict(const std::string& op, const ref::Tensors& inputs, const Attrs& attrs,
                    DType run_dtype, bool* compared = nullptr) {
  const Outcome o = RunBoth(op, inputs, attrs);
  if (!o.foreign.empty()) return o.foreign;
  if (o.ref_error) {
    if (!o.kernel_error) {
      return std::string("the reference refused (") + o.ref_error->what() +
             ") but the kernel answered";
    }
    if (o.kernel_error->type() != o.ref_error->type() ||
        o.kernel_error->field() != o.ref_error->field()) {
      return std::string("the reference refused with ") +
             std::string(ToString(o.ref_error->type())) + " (" + o.ref_error->what() +
             "), the kernel with " + std::string(ToString(o.kernel_error->type())) + " (" +
             o.kernel_error->what() + ")";
    }
    return "";
  }
  if (o.kernel_error) {
    return std::string("the kernel refused (") + o.kernel_error->what() +
           ") where the reference answered";
  }
  if (compared) *compared = true;
  return CompareOutputs(op, inputs, attrs, *o.ref_outputs, *o.kernel_outputs, run_dtype);
}

std::string Describe(const std::string& op, const std::vector<Shape>& shapes, const Attrs& attrs,
                     DType dtype, uint64_t seed) {
  std::string s = op + " shapes [";
  for (size_t i = 0; i < shapes.size(); ++i) s += (i ? ", " : "") + ShapeString(shapes[i]);
  return s + "] attrs " + AttrsString(attrs) + " dtype " + std::string(ToString(dtype)) +
         " seed " + std::to_string(seed);
}

// Checks one example in both dtypes. Returns the failures; counts compared runs.
std::vector<std::string> CheckExample(const OpDecl& op, const Example& example, uint64_t seed,
                                      int* compared_runs) {
  std::vector<std::string> failures;
  Attrs attrs;
  try {
    attrs = op.NormalizeAttrs(example.attrs);
  } catch (const SpmdError& e) {
    failures.push_back(op.name + ": example attrs do not normalise: " + e.what());
    return failures;
  }
  for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
    const ref::Tensors inputs = MakeInputs(op, example.shapes, attrs, dtype, seed);
    bool compared = false;
    const std::string verdict = Verdict(op.name, inputs, attrs, dtype, &compared);
    if (compared && compared_runs) ++*compared_runs;
    if (!verdict.empty()) {
      failures.push_back(Describe(op.name, example.shapes, attrs, dtype, seed) + ": " + verdict);
    }
  }
  return failures;
}

const std::vector<SizePalette>& Palettes() {
  static const std::vector<SizePalette> kPalettes = {
      SizePalette{{4, 6, 8}}, SizePalette{{5, 7, 3}}, SizePalette{{1, 2, 3}}};
  return kPalettes;
}

class KernelTest : public ::testing::TestWithParam<std::string> {
 protected:
  const OpDecl& Op() const { return *FindOp(GetParam()); }
};

std::string ParamName(const ::testing::TestParamInfo<std::string>& info) { return info.param; }

// ---- Registry --------------------------------------------------------------------------------

TEST(KernelRegistry, EveryOpHasAKernelAndUnknownOpsAreTyped) {
  for (const OpDecl& op : AllOps()) EXPECT_TRUE(kernels::HasCpuKernel(op.name)) << op.name;
  EXPECT_FALSE(kernels::HasCpuKernel("no_such_op"));
  try {
    RunCpuKernel("no_such_op", {}, Attrs());
    ADD_FAILURE() << "no error for an unknown op";
  } catch (const SpmdError& e) {
    EXPECT_EQ(e.type(), ErrorType::kUnknownOp);
    EXPECT_EQ(e.field(), "op");
  }
}

TEST(KernelRegistry, MixedFloatInputsAreInvalid) {
  const Attrs attrs = FindOp("add")->NormalizeAttrs(Attrs());
  KTensors inputs{KTensor({2}, DType::kFloat32), KTensor({2}, DType::kFloat64)};
  try {
    RunCpuKernel("add", inputs, attrs);
    ADD_FAILURE() << "no error for float32 + float64";
  } catch (const SpmdError& e) {
    EXPECT_EQ(e.type(), ErrorType::kInvalidArgument);
    EXPECT_EQ(e.field(), "inputs[1].dtype");
  }
}

TEST(KernelTensor, ShapesDtypesAndBuffers) {
  KTensor t({2, 3}, DType::kFloat32);
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.nbytes(), 24u);
  EXPECT_EQ(t.data<float>()[5], 0.0f);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.bytes()) % 64, 0u);
  EXPECT_THROW(t.data<double>(), SpmdError);
  t.Reshape({3, 2});
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
  EXPECT_THROW(t.Reshape({4}), SpmdError);
  EXPECT_THROW(KTensor({-1}, DType::kFloat64), SpmdError);
  EXPECT_THROW(KTensor({int64_t{1} << 40, int64_t{1} << 40}, DType::kFloat64), SpmdError);
  KTensor empty({0, int64_t{1} << 40}, DType::kBool);
  EXPECT_EQ(empty.numel(), 0);
  KTensor copy = KTensor::FromVector<int64_t>({3}, {1, 2, 3});
  KTensor other = copy;
  other.data<int64_t>()[0] = 7;
  EXPECT_EQ(copy.data<int64_t>()[0], 1);
  EXPECT_FALSE(copy == other);
  EXPECT_EQ(KTensor().numel(), 1);
  EXPECT_EQ(kernels::ElementSize(DType::kBool), 1u);
}

// ---- Every example, fixed palettes -----------------------------------------------------------

TEST_P(KernelTest, ExamplesMatchReference) {
  const OpDecl& op = Op();
  int compared = 0, examples = 0;
  std::vector<std::string> failures;
  for (const SizePalette& palette : Palettes()) {
    for (const Example& example : op.examples(palette)) {
      ++examples;
      for (uint64_t seed : {1u, 2u}) {
        for (std::string& f : CheckExample(op, example, seed, &compared)) {
          failures.push_back(std::move(f));
        }
      }
    }
  }
  for (size_t i = 0; i < failures.size() && i < 10; ++i) ADD_FAILURE() << failures[i];
  EXPECT_TRUE(failures.empty()) << failures.size() << " failures";
  EXPECT_GT(compared, 0) << "every example was refused by the reference";
  RecordProperty("examples", examples);
  RecordProperty("compared_runs", compared);
}

// ---- Random sizes (RapidCheck) ---------------------------------------------------------------

TEST_P(KernelTest, RandomSizesMatchReference) {
  const OpDecl& op = Op();
  const bool ok = rc::check(op.name + ": kernel == reference at random letter sizes", [&] {
    const auto sizes = *rc::gen::container<std::vector<int64_t>>(4, rc::gen::inRange<int64_t>(0, 10));
    const std::vector<Example> examples = op.examples(SizePalette{sizes});
    RC_PRE(!examples.empty());
    const size_t index = *rc::gen::inRange<size_t>(0, examples.size());
    const uint64_t seed = *rc::gen::arbitrary<uint32_t>();
    const std::vector<std::string> failures = CheckExample(op, examples[index], seed, nullptr);
    if (!failures.empty()) RC_FAIL(failures.front());
  });
  EXPECT_TRUE(ok);
}

// ---- Error parity on broken requests ---------------------------------------------------------

// Variants of a valid request that may be refused: each attr set to odd values of its kind,
// an input dropped or added, a dim dropped or grown, an index value out of range.
struct Variant {
  std::string what;
  std::vector<Shape> shapes;
  Attrs attrs;
  std::function<void(ref::Tensors&)> poke;  // optional change to the values
};

std::vector<Variant> Variants(const OpDecl& op, const Example& example, const Attrs& attrs) {
  std::vector<Variant> out;
  auto add = [&](std::string what, std::vector<Shape> shapes, Attrs a) {
    out.push_back({std::move(what), std::move(shapes), std::move(a), nullptr});
  };
  for (const AttrSpec& spec : op.attrs) {
    std::vector<AttrValue> values;
    switch (spec.kind) {
      case AttrKind::kBool:
        values = {true, false};
        break;
      case AttrKind::kInt:
        values = {int64_t{-99}, int64_t{-3}, int64_t{-1}, int64_t{0}, int64_t{1}, int64_t{2},
                  int64_t{99}};
        break;
      case AttrKind::kFloat:
        values = {0.0, -1.0, 1.0, 2.0};
        break;
      case AttrKind::kString:
        values = {std::string("bogus"), std::string(""), std::string("float32"),
                  std::string("ij,jk"), std::string("ij->j...")};
        break;
      case AttrKind::kInts:
        values = {std::vector<int64_t>{}, std::vector<int64_t>{99}, std::vector<int64_t>{-99},
                  std::vector<int64_t>{0, 0}, std::vector<int64_t>{1, -1},
                  std::vector<int64_t>{0}, std::vector<int64_t>{-1, 2, 3}};
        break;
      case AttrKind::kFloats:
        values = {std::vector<double>{}, std::vector<double>{1.0}};
        break;
    }
    for (const AttrValue& v : values) add("attrs." + spec.name, example.shapes, attrs.With(spec.name, v));
  }
  if (!example.shapes.empty()) {
    std::vector<Shape> fewer(example.shapes.begin(), example.shapes.end() - 1);
    add("one input fewer", fewer, attrs);
    std::vector<Shape> more = example.shapes;
    more.push_back(example.shapes.back());
    add("one input more", more, attrs);
    for (size_t i = 0; i < example.shapes.size(); ++i) {
      if (!example.shapes[i].empty()) {
        std::vector<Shape> dropped = example.shapes;
        dropped[i].pop_back();
        add("inputs[" + std::to_string(i) + "] last dim dropped", dropped, attrs);
        std::vector<Shape> grown = example.shapes;
        grown[i].back() += 1;
        add("inputs[" + std::to_string(i) + "] last dim grown", grown, attrs);
      }
      std::vector<Shape> scalar = example.shapes;
      scalar[i] = {};
      add("inputs[" + std::to_string(i) + "] 0-d", scalar, attrs);
    }
  }
  // Index values out of range (ids, labels).
  const std::vector<InputValues> kinds = KindsOf(op, example.shapes, attrs);
  for (size_t i = 0; i < kinds.size(); ++i) {
    if (kinds[i].kind != ValueKind::kIndex) continue;
    for (double bad : {static_cast<double>(kinds[i].bound), -1.0, 0.5}) {
      Variant v{"inputs[" + std::to_string(i) + "] holds " + std::to_string(bad), example.shapes,
                attrs, nullptr};
      v.poke = [i, bad](ref::Tensors& inputs) {
        if (!inputs[i].data.empty()) {
          inputs[i].data.back() = bad;
          if (bad != std::trunc(bad)) inputs[i].dtype = DType::kFloat64;
        }
      };
      out.push_back(std::move(v));
    }
  }
  return out;
}

TEST_P(KernelTest, BrokenRequestsRefusedAlike) {
  const OpDecl& op = Op();
  int variants = 0;
  std::vector<std::string> failures;
  for (const Example& example : op.examples(Palettes()[0])) {
    const Attrs attrs = op.NormalizeAttrs(example.attrs);
    for (const Variant& v : Variants(op, example, attrs)) {
      ref::Tensors inputs = MakeInputs(op, v.shapes, v.attrs, DType::kFloat64, 7);
      if (v.poke) v.poke(inputs);
      ++variants;
      const std::string verdict = Verdict(op.name, inputs, v.attrs, DType::kFloat64);
      if (!verdict.empty()) {
        failures.push_back(v.what + ": " + Describe(op.name, v.shapes, v.attrs, DType::kFloat64, 7) +
                           ": " + verdict);
      }
    }
  }
  for (size_t i = 0; i < failures.size() && i < 10; ++i) ADD_FAILURE() << failures[i];
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << variants << " variants differ";
}

// ---- Localized attrs -------------------------------------------------------------------------

// Every op with a localizer, on every example, localized for a one-rank shard (the whole
// tensor: offsets 0, local shapes = global): the kernel must agree with the reference on the
// localized attrs too.
std::vector<std::string> OpsWithLocalizers() {
  std::vector<std::string> names;
  for (const std::string& name : OpsUnderTest()) {
    if (FindOp(name)->localize) names.push_back(name);
  }
  return names;
}

class KernelLocalizerTest : public KernelTest {};

TEST_P(KernelLocalizerTest, LocalizedOnWholeTensorMatchesReference) {
  const OpDecl& op = Op();
  std::vector<std::string> failures;
  int compared = 0;
  for (const SizePalette& palette : Palettes()) {
    for (const Example& example : op.examples(palette)) {
      const Attrs attrs = op.NormalizeAttrs(example.attrs);
      for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
        const ref::Tensors inputs = MakeInputs(op, example.shapes, attrs, dtype, 3);
        ref::Tensors global;
        try {
          global = ref::FindReference(op.name)(inputs, attrs);
        } catch (const SpmdError&) {
          continue;
        }
        std::vector<Shape> out_shapes, offsets;
        for (const ref::Tensor& t : global) out_shapes.push_back(t.shape);
        for (const Shape& s : example.shapes) offsets.push_back(Shape(s.size(), 0));
        const LocalContext context{attrs, example.shapes, example.shapes, offsets, out_shapes,
                                   out_shapes};
        const Attrs local = op.localize(context);
        bool ran = false;
        const std::string verdict = Verdict(op.name, inputs, local, dtype, &ran);
        compared += ran ? 1 : 0;
        if (!verdict.empty()) {
          failures.push_back(Describe(op.name, example.shapes, local, dtype, 3) + ": " + verdict);
        }
      }
    }
  }
  for (size_t i = 0; i < failures.size() && i < 10; ++i) ADD_FAILURE() << failures[i];
  EXPECT_TRUE(failures.empty());
  EXPECT_GT(compared, 0);
}

// Runs the kernel and the reference on one request and expects them to agree; returns the
// kernel's outputs (float64).
KTensors AgreeAndRun(const std::string& op, const ref::Tensors& inputs, const Attrs& attrs) {
  const std::string verdict = Verdict(op, inputs, attrs, DType::kFloat64);
  EXPECT_EQ(verdict, "") << Describe(op, {}, attrs, DType::kFloat64, 0);
  try {
    return RunCpuKernel(op, ToKernel(inputs), attrs);
  } catch (const SpmdError& e) {
    ADD_FAILURE() << op << ": " << e.what();
    return {};
  }
}

ref::Tensor Real(Shape shape, uint64_t seed) {
  ref::Tensor t;
  t.shape = std::move(shape);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(-2.0, 2.0);
  t.data.resize(static_cast<size_t>(Numel(t.shape)));
  for (double& v : t.data) v = unit(rng);
  return t;
}

// Rows [begin, end) of dim `axis` of t.
ref::Tensor Rows(const ref::Tensor& t, size_t axis, int64_t begin, int64_t end) {
  ref::Tensor out;
  out.shape = t.shape;
  out.shape[axis] = end - begin;
  out.dtype = t.dtype;
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < axis; ++d) outer *= t.shape[d];
  for (size_t d = axis + 1; d < t.shape.size(); ++d) inner *= t.shape[d];
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t a = begin; a < end; ++a) {
      for (int64_t i = 0; i < inner; ++i) {
        out.data.push_back(t.data[static_cast<size_t>((o * t.shape[axis] + a) * inner + i)]);
      }
    }
  }
  return out;
}

Attrs Localize(const OpDecl& op, const Attrs& attrs, const std::vector<Shape>& global_in,
               const std::vector<Shape>& local_in, const std::vector<Shape>& offsets,
               const std::vector<Shape>& global_out, const std::vector<Shape>& local_out) {
  const LocalContext context{attrs, global_in, local_in, offsets, global_out, local_out};
  return op.localize(context);
}

void ExpectNear(const KTensor& got, const ref::Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape) << what;
  const std::vector<double> v = ValuesOf(got);
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT_NEAR(v[i], want.data[i], 1e-12 * (1 + std::fabs(want.data[i]))) << what << " [" << i << "]";
  }
}

// mean over a sharded reduced dim: each shard divides by the global count (local.count), so the
// shards' outputs sum to the global mean (D7).
TEST(KernelLocalized, MeanShardsSumToGlobalMean) {
  const OpDecl& op = *FindOp("mean");
  for (bool keep : {false, true}) {
    const Attrs attrs = op.NormalizeAttrs(Attrs().With("axis", std::vector<int64_t>{1}).With("keep_dim", keep));
    const ref::Tensor x = Real({4, 6, 3}, 11);
    const ref::Tensors global = ref::FindReference("mean")({x}, attrs);
    std::vector<double> total(global[0].data.size(), 0.0);
    for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, 4}, {4, 6}, {6, 6}}) {
      const ref::Tensor shard = Rows(x, 1, begin, end);
      const Attrs local = Localize(op, attrs, {x.shape}, {shard.shape}, {{0, begin, 0}},
                                   {global[0].shape}, {global[0].shape});
      ASSERT_EQ(local.local().count.value_or(-1), 6);
      const KTensors out = AgreeAndRun("mean", {shard}, local);
      ASSERT_EQ(out.size(), 1u);
      const std::vector<double> v = ValuesOf(out[0]);
      for (size_t i = 0; i < v.size(); ++i) total[i] += v[i];
    }
    for (size_t i = 0; i < total.size(); ++i) EXPECT_NEAR(total[i], global[0].data[i], 1e-12);
  }
}

TEST(KernelLocalized, MeanAllShardsSumToGlobalMean) {
  const OpDecl& op = *FindOp("mean_all");
  const Attrs attrs = op.NormalizeAttrs(Attrs());
  const ref::Tensor x = Real({5, 3}, 12);
  const ref::Tensors global = ref::FindReference("mean_all")({x}, attrs);
  double total = 0;
  for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, 2}, {2, 5}}) {
    const ref::Tensor shard = Rows(x, 0, begin, end);
    const Attrs local =
        Localize(op, attrs, {x.shape}, {shard.shape}, {{begin, 0}}, {Shape{}}, {Shape{}});
    const KTensors out = AgreeAndRun("mean_all", {shard}, local);
    ASSERT_EQ(out.size(), 1u);
    total += ValuesOf(out[0])[0];
  }
  EXPECT_NEAR(total, global[0].data[0], 1e-12);
  // An empty shard with a global count gives 0, not an error.
  const ref::Tensor empty = Rows(x, 0, 0, 0);
  const KTensors out = AgreeAndRun("mean_all", {empty}, attrs.WithLocal({.count = 15}));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(ValuesOf(out[0])[0], 0.0);
}

// lookup_table_v2 with the vocabulary sharded: each shard reads its own rows and zeros
// elsewhere (local.vocab_start), so the shards' outputs sum to the global lookup.
TEST(KernelLocalized, LookupVocabShardsSumToGlobalLookup) {
  const OpDecl& op = *FindOp("lookup_table_v2");
  const Attrs attrs = op.NormalizeAttrs(Attrs());
  const ref::Tensor weight = Real({7, 4}, 13);
  ref::Tensor ids;
  ids.shape = {2, 5};
  ids.dtype = DType::kInt64;
  for (int i = 0; i < 10; ++i) ids.data.push_back((i * 3) % 7);
  const ref::Tensors global = ref::FindReference("lookup_table_v2")({ids, weight}, attrs);
  std::vector<double> total(global[0].data.size(), 0.0);
  for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, 3}, {3, 7}, {7, 7}}) {
    const ref::Tensor shard = Rows(weight, 0, begin, end);
    const Attrs local = Localize(op, attrs, {ids.shape, weight.shape}, {ids.shape, shard.shape},
                                 {{0, 0}, {begin, 0}}, {global[0].shape}, {global[0].shape});
    ASSERT_EQ(local.local().vocab_start.value_or(-1), begin);
    const KTensors out = AgreeAndRun("lookup_table_v2", {ids, shard}, local);
    ASSERT_EQ(out.size(), 1u);
    const std::vector<double> v = ValuesOf(out[0]);
    for (size_t i = 0; i < v.size(); ++i) total[i] += v[i];
  }
  for (size_t i = 0; i < total.size(); ++i) EXPECT_EQ(total[i], global[0].data[i]);
  // A negative start is refused alike.
  EXPECT_EQ(Verdict("lookup_table_v2", {ids, weight}, attrs.WithLocal({.vocab_start = -1}),
                    DType::kFloat64),
            "");
}

// reshape with local.exact: the localized target is literal, so a 0 is an empty shard's dim.
TEST(KernelLocalized, ReshapeExactTakesZeroLiterally) {
  const OpDecl& op = *FindOp("reshape");
  const Attrs attrs = op.NormalizeAttrs(Attrs().With("shape", std::vector<int64_t>{6, -1}));
  ref::Tensor shard = Real({6, 0}, 14);
  const Attrs local = Localize(op, attrs, {{6, 8}}, {shard.shape}, {{0, 8}}, {{6, 8}}, {{0, 6}});
  ASSERT_TRUE(local.local().exact.value_or(false));
  const KTensors out = AgreeAndRun("reshape", {shard}, local);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].shape(), (Shape{0, 6}));
  // Without local.exact the 0 copies x's dim 0 (6): [6, 6] does not hold 0 elements.
  EXPECT_EQ(Verdict("reshape", {shard}, attrs.With("shape", std::vector<int64_t>{0, 6}),
                    DType::kFloat64),
            "");
  // A non-empty shard: [2, 8] -> [2, 2, 4].
  ref::Tensor rows = Real({2, 8}, 15);
  const KTensors split = AgreeAndRun(
      "reshape", {rows}, attrs.With("shape", std::vector<int64_t>{2, 2, 4}).WithLocal({.exact = true}));
  ASSERT_EQ(split.size(), 1u);
  ExpectNear(split[0], ref::Tensor{{2, 2, 4}, rows.data, DType::kFloat64}, "reshape");
}

// squeeze with local.exact: exactly the dims the localizer names go, even where a shard has a
// size-1 dim that the global tensor does not.
TEST(KernelLocalized, SqueezeExactRemovesOnlyNamedDims) {
  const OpDecl& op = *FindOp("squeeze");
  const Attrs attrs = op.NormalizeAttrs(Attrs());
  ref::Tensor shard = Real({1, 3, 1}, 16);  // global [4, 3, 1]: dim 0 is sharded 4 ways
  const Attrs local = Localize(op, attrs, {{4, 3, 1}}, {shard.shape}, {{2, 0, 0}}, {{4, 3}}, {{1, 3}});
  const KTensors out = AgreeAndRun("squeeze", {shard}, local);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].shape(), (Shape{1, 3}));
  // An empty list with local.exact removes nothing; a listed dim that is not 1 is refused alike.
  const KTensors none = AgreeAndRun("squeeze", {shard},
                                    attrs.With("axis", std::vector<int64_t>{}).WithLocal({.exact = true}));
  ASSERT_EQ(none.size(), 1u);
  EXPECT_EQ(none[0].shape(), shard.shape);
  EXPECT_EQ(Verdict("squeeze", {shard},
                    attrs.With("axis", std::vector<int64_t>{1}).WithLocal({.exact = true}),
                    DType::kFloat64),
            "");
}

// expand / expand_as with local.exact: the localized target is the shard's output shape.
TEST(KernelLocalized, ExpandToTheShardsShape) {
  for (const char* name : {"expand", "expand_as"}) {
    const OpDecl& op = *FindOp(name);
    const bool as = std::string(name) == "expand_as";
    const Attrs attrs = op.NormalizeAttrs(
        as ? Attrs() : Attrs().With("shape", std::vector<int64_t>{4, 5}));
    const ref::Tensor x = Real({1, 5}, 17);
    ref::Tensors inputs{x};
    std::vector<Shape> global_in{x.shape}, local_in{x.shape}, offsets{{0, 0}};
    if (as) {
      inputs.push_back(Real({4, 5}, 18));
      global_in.push_back({4, 5});
      local_in.push_back({4, 5});
      offsets.push_back({0, 0});
    }
    for (const Shape& local_out : {Shape{2, 5}, Shape{0, 5}}) {
      const Attrs local = Localize(op, attrs, global_in, local_in, offsets, {{4, 5}}, {local_out});
      const KTensors out = AgreeAndRun(name, inputs, local);
      ASSERT_EQ(out.size(), 1u) << name;
      EXPECT_EQ(out[0].shape(), local_out) << name;
    }
  }
}

// triu on a block: the localizer shifts the diagonal by the block's offsets, so each block
// of the output is triu of the block.
TEST(KernelLocalized, TriuBlocksMatchTheGlobalResult) {
  const OpDecl& op = *FindOp("triu");
  for (int64_t diagonal : {-2, 0, 1, 3}) {
    const Attrs attrs = op.NormalizeAttrs(Attrs().With("diagonal", diagonal));
    const ref::Tensor x = Real({2, 5, 7}, 19);
    const KTensors global = AgreeAndRun("triu", {x}, attrs);
    ASSERT_EQ(global.size(), 1u);
    const ref::Tensor global_ref{global[0].shape(), ValuesOf(global[0]), DType::kFloat64};
    for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, 2}, {2, 5}}) {
      for (auto [c0, c1] : {std::pair<int64_t, int64_t>{0, 3}, {3, 7}}) {
        const ref::Tensor block = Rows(Rows(x, 1, r0, r1), 2, c0, c1);
        const Attrs local = Localize(op, attrs, {x.shape}, {block.shape}, {{0, r0, c0}},
                                     {x.shape}, {block.shape});
        const KTensors out = AgreeAndRun("triu", {block}, local);
        ASSERT_EQ(out.size(), 1u);
        ExpectNear(out[0], Rows(Rows(global_ref, 1, r0, r1), 2, c0, c1),
                   "triu diagonal " + std::to_string(diagonal));
      }
    }
  }
}

// ---- Dtypes ----------------------------------------------------------------------------------

// Shape ops take every dtype (they move bytes); int64 and bool inputs of value ops are
// converted to the compute dtype.
TEST(KernelDtypes, ShapeOpsKeepEveryDtype) {
  const Attrs attrs = FindOp("transpose")->NormalizeAttrs(Attrs().With("perm", std::vector<int64_t>{1, 0}));
  for (DType dtype : {DType::kFloat64, DType::kFloat32, DType::kInt64, DType::kBool,
                      DType::kBFloat16, DType::kFloat16}) {
    ref::Tensor x;
    x.shape = {3, 4};
    x.dtype = dtype;
    for (int i = 0; i < 12; ++i) x.data.push_back(dtype == DType::kBool ? i % 2 : i);
    EXPECT_EQ(Verdict("transpose", {x}, attrs, DType::kFloat64), "") << ToString(dtype);
  }
}

// cummax / cummin with NaN (the numeric goldens hold no NaN): the first NaN stays, with its
// index, in the reference and in the CPU kernel (float64 and float32), written apart.
TEST(KernelNaN, CumExtremesKeepTheFirstNaN) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> x = {1.0, nan, 5.0, nan, 2.0, 2.0, -1.0, 3.0};
  for (const char* name : {"cummax", "cummin"}) {
    const Attrs attrs = FindOp(name)->NormalizeAttrs(Attrs());
    ref::Tensor rx;
    rx.shape = {2, 4};
    rx.data = x;
    const ref::Tensors want = ref::FindReference(name)(ref::Tensors{rx}, attrs);
    const std::vector<double> values = {1.0, nan, nan, nan};  // row 0; row 1 has no NaN
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(std::isnan(want[0].data[i]), std::isnan(values[i])) << name << " element " << i;
      EXPECT_EQ(want[1].data[i], i == 0 ? 0.0 : 1.0) << name << " index " << i;
    }
    for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
      const KTensor kx = dtype == DType::kFloat64 ? KTensor::FromVector({2, 4}, x)
                                                  : KTensor::FromVector({2, 4}, std::vector<float>(x.begin(), x.end()));
      const KTensors got = RunCpuKernel(name, {kx}, attrs);
      for (int i = 0; i < 8; ++i) {
        const double v = dtype == DType::kFloat64 ? got[0].data<double>()[i] : got[0].data<float>()[i];
        EXPECT_EQ(std::isnan(v), std::isnan(want[0].data[i])) << name << " " << ToString(dtype) << " element " << i;
        if (!std::isnan(v)) {
          EXPECT_EQ(v, want[0].data[i]) << name << " element " << i;
        }
        EXPECT_EQ(static_cast<double>(got[1].data<int64_t>()[i]), want[1].data[i]) << name << " index " << i;
      }
    }
  }
}

// unique and nonzero with NaN and signed zeros (the numeric goldens hold no NaN): NaNs are
// one value sorted last, -0 and 0 one value with the first met kept, NaN is nonzero; the
// reference's answer written out, then the CPU kernel's (float64 and float32) against it.
TEST(KernelNaN, UniqueAndNonzeroOnNaNAndSignedZeros) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> x = {nan, 0.0, 2.0, -0.0, nan, -1.0, 2.0, 0.0};
  ref::Tensor rx;
  rx.shape = {2, 4};
  rx.data = x;
  const Attrs every = FindOp("unique")->NormalizeAttrs(
      Attrs().With("return_index", true).With("return_inverse", true).With("return_counts", true));
  const ref::Tensors want = ref::FindReference("unique")(ref::Tensors{rx}, every);
  ASSERT_EQ(want.size(), 4u);
  ASSERT_EQ(want[0].shape, (Shape{4}));
  EXPECT_EQ(want[0].data[0], -1.0);
  EXPECT_EQ(want[0].data[1], 0.0);
  EXPECT_FALSE(std::signbit(want[0].data[1]));  // x[1] = +0 is met before x[3] = -0
  EXPECT_EQ(want[0].data[2], 2.0);
  EXPECT_TRUE(std::isnan(want[0].data[3]));
  EXPECT_EQ(want[1].data, (std::vector<double>{5, 1, 2, 0}));
  EXPECT_EQ(want[2].data, (std::vector<double>{3, 1, 2, 1, 3, 0, 2, 1}));
  EXPECT_EQ(want[3].data, (std::vector<double>{1, 3, 2, 2}));
  const ref::Tensors want_nz = ref::FindReference("nonzero")(ref::Tensors{rx}, Attrs());
  EXPECT_EQ(want_nz[0].shape, (Shape{5, 2}));
  EXPECT_EQ(want_nz[0].data, (std::vector<double>{0, 0, 0, 2, 1, 0, 1, 1, 1, 2}));
  for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
    SCOPED_TRACE(ToString(dtype));
    const KTensor kx = dtype == DType::kFloat64 ? KTensor::FromVector({2, 4}, x)
                                                : KTensor::FromVector({2, 4}, std::vector<float>(x.begin(), x.end()));
    const KTensors got = RunCpuKernel("unique", {kx}, every);
    ASSERT_EQ(got.size(), 4u);
    ASSERT_EQ(got[0].shape(), (Shape{4}));
    for (int k = 0; k < 4; ++k) {
      const double v = dtype == DType::kFloat64 ? got[0].data<double>()[k] : got[0].data<float>()[k];
      EXPECT_EQ(std::isnan(v), std::isnan(want[0].data[k])) << k;
      if (!std::isnan(v)) {
        EXPECT_EQ(v, want[0].data[k]) << k;
        EXPECT_EQ(std::signbit(v), std::signbit(want[0].data[k])) << k;
      }
    }
    for (size_t o = 1; o < 4; ++o) {
      ASSERT_EQ(got[o].shape(), want[o].shape) << o;
      for (int64_t i = 0; i < got[o].numel(); ++i) {
        EXPECT_EQ(static_cast<double>(got[o].data<int64_t>()[i]), want[o].data[static_cast<size_t>(i)]) << o << " " << i;
      }
    }
    const KTensors nz = RunCpuKernel("nonzero", {kx}, Attrs());
    ASSERT_EQ(nz[0].shape(), want_nz[0].shape);
    for (int64_t i = 0; i < nz[0].numel(); ++i) {
      EXPECT_EQ(static_cast<double>(nz[0].data<int64_t>()[i]), want_nz[0].data[static_cast<size_t>(i)]) << i;
    }
  }
}

// unique along an axis with NaN and signed zeros: rows are one slice when every element is
// one value (NaNs one value, -0 and 0 one value), sorted by their first differing element
// with NaN last; the reference's answer written out, then the CPU kernel's (float64 and
// float32, axis 0 and its negative spelling, and the transposed x along axis 1) against it.
TEST(KernelNaN, UniqueAlongAnAxisOnNaNAndSignedZeros) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // Rows: [nan 1] [-0 2] [nan 1] [0 2] [0 nan] [0 1].
  const std::vector<double> x = {nan, 1.0, -0.0, 2.0, nan, 1.0, 0.0, 2.0, 0.0, nan, 0.0, 1.0};
  ref::Tensor rx;
  rx.shape = {6, 2};
  rx.data = x;
  const auto along = [](int64_t axis) {
    return FindOp("unique")->NormalizeAttrs(Attrs()
                                                .With("return_index", true)
                                                .With("return_inverse", true)
                                                .With("return_counts", true)
                                                .With("axis", std::vector<int64_t>{axis}));
  };
  const ref::Tensors want = ref::FindReference("unique")(ref::Tensors{rx}, along(0));
  ASSERT_EQ(want.size(), 4u);
  ASSERT_EQ(want[0].shape, (Shape{4, 2}));
  EXPECT_EQ(want[0].data[0], 0.0);
  EXPECT_EQ(want[0].data[1], 1.0);
  EXPECT_TRUE(std::signbit(want[0].data[2]));  // row 1 (-0) is met before row 3 (+0)
  EXPECT_EQ(want[0].data[3], 2.0);
  EXPECT_TRUE(std::isnan(want[0].data[5]));
  EXPECT_TRUE(std::isnan(want[0].data[6]));
  EXPECT_EQ(want[1].data, (std::vector<double>{5, 1, 4, 0}));
  EXPECT_EQ(want[2].data, (std::vector<double>{3, 1, 3, 1, 2, 0}));
  EXPECT_EQ(want[3].data, (std::vector<double>{1, 2, 1, 2}));
  // x transposed: [2, 6], its columns the rows above; out is want[0] transposed.
  std::vector<double> xt(12);
  for (int r = 0; r < 6; ++r) {
    for (int c = 0; c < 2; ++c) xt[static_cast<size_t>(c * 6 + r)] = x[static_cast<size_t>(r * 2 + c)];
  }
  std::vector<double> out_t(8);
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 2; ++c) out_t[static_cast<size_t>(c * 4 + r)] = want[0].data[static_cast<size_t>(r * 2 + c)];
  }
  struct Form {
    Shape shape, out_shape;
    const std::vector<double>* data;
    const std::vector<double>* out;
    int64_t axis;
  };
  for (const Form& form : {Form{{6, 2}, {4, 2}, &x, &want[0].data, 0}, Form{{6, 2}, {4, 2}, &x, &want[0].data, -2},
                           Form{{2, 6}, {2, 4}, &xt, &out_t, 1}}) {
    for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
      SCOPED_TRACE(std::string(ToString(dtype)) + " axis " + std::to_string(form.axis));
      const std::vector<double>& d = *form.data;
      const KTensor kx = dtype == DType::kFloat64 ? KTensor::FromVector(form.shape, d)
                                                  : KTensor::FromVector(form.shape, std::vector<float>(d.begin(), d.end()));
      const KTensors got = RunCpuKernel("unique", {kx}, along(form.axis));
      ASSERT_EQ(got.size(), 4u);
      ASSERT_EQ(got[0].shape(), form.out_shape);
      for (size_t k = 0; k < form.out->size(); ++k) {
        const double v = dtype == DType::kFloat64 ? got[0].data<double>()[k] : got[0].data<float>()[k];
        const double w = (*form.out)[k];
        EXPECT_EQ(std::isnan(v), std::isnan(w)) << k;
        if (!std::isnan(v)) {
          EXPECT_EQ(v, w) << k;
          EXPECT_EQ(std::signbit(v), std::signbit(w)) << k;
        }
      }
      for (size_t o = 1; o < 4; ++o) {
        ASSERT_EQ(got[o].shape(), want[o].shape) << o;
        for (int64_t i = 0; i < got[o].numel(); ++i) {
          EXPECT_EQ(static_cast<double>(got[o].data<int64_t>()[i]), want[o].data[static_cast<size_t>(i)]) << o << " " << i;
        }
      }
    }
  }
}

// cummax / cummin with the scanned axis cut into pieces (some empty), each piece's exchange
// phases run (the reference's and the CPU kernel's) on values with ties and NaN (or int64
// values), the pieces' summaries gathered in a shuffled order: every piece's outputs are the
// whole scan's columns (values NaN-equal, indices exactly). It fails when a piece folds the
// pieces before it out of position order (ties), lets a later NaN replace the first, or
// reports a local index.
TEST(KernelExchange, CumExtremePiecesGiveTheWholeScan) {
  const bool ok = rc::check("cummax / cummin pieces == the whole scan", [] {
    const std::string name = *rc::gen::element<std::string>("cummax", "cummin");
    const DType dtype = *rc::gen::element(DType::kFloat64, DType::kFloat32, DType::kInt64);
    const int64_t rows = *rc::gen::inRange<int64_t>(1, 4);
    const int64_t len = *rc::gen::inRange<int64_t>(0, 11);
    const double nan = std::numeric_limits<double>::quiet_NaN();
    std::vector<double> x(static_cast<size_t>(rows * len));
    for (double& v : x) {
      v = dtype == DType::kInt64 ? static_cast<double>(*rc::gen::inRange(-2, 3))
                                 : *rc::gen::element(-1.0, 0.0, 2.0, 2.0, 0.5, nan);
    }
    const int pieces = *rc::gen::inRange(1, 6);
    std::vector<int64_t> cuts{0, len};
    for (int p = 1; p < pieces; ++p) cuts.push_back(*rc::gen::inRange<int64_t>(0, len + 1));
    std::sort(cuts.begin(), cuts.end());
    std::vector<int> order(static_cast<size_t>(pieces));
    for (int p = 0; p < pieces; ++p) order[static_cast<size_t>(p)] = p;
    const std::vector<int> keys = *rc::gen::container<std::vector<int>>(order.size(), rc::gen::arbitrary<int>());
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return keys[a] < keys[b]; });

    Attrs given;
    given.Set("axis", int64_t{1});
    const Attrs attrs = FindOp(name)->NormalizeAttrs(given);
    auto columns = [&](int64_t from, int64_t to) {
      ref::Tensor t;
      t.shape = {rows, to - from};
      t.dtype = dtype == DType::kInt64 ? DType::kInt64 : DType::kFloat64;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = from; c < to; ++c) t.data.push_back(x[static_cast<size_t>(r * len + c)]);
      }
      return t;
    };
    auto as_kernel = [&](const ref::Tensor& t) {
      if (dtype == DType::kInt64) return KTensor::FromVector(t.shape, std::vector<int64_t>(t.data.begin(), t.data.end()));
      if (dtype == DType::kFloat32) return KTensor::FromVector(t.shape, std::vector<float>(t.data.begin(), t.data.end()));
      return KTensor::FromVector(t.shape, t.data);
    };
    auto kernel_values = [](const KTensor& t) {
      std::vector<double> v(static_cast<size_t>(t.numel()));
      for (int64_t i = 0; i < t.numel(); ++i) {
        v[static_cast<size_t>(i)] = t.dtype() == DType::kInt64   ? static_cast<double>(t.data<int64_t>()[i])
                                    : t.dtype() == DType::kFloat32 ? t.data<float>()[i]
                                                                   : t.data<double>()[i];
      }
      return v;
    };
    const ref::Tensors want = ref::FindReference(name)(ref::Tensors{columns(0, len)}, attrs);

    std::vector<ref::Tensor> ref_stats(static_cast<size_t>(pieces));
    std::vector<KTensor> kernel_stats;
    for (int p = 0; p < pieces; ++p) {
      const Attrs local = attrs.WithLocal({.offset = std::vector<int64_t>{0, cuts[p]}});
      const ref::Tensor piece = columns(cuts[p], cuts[p + 1]);
      ref_stats[static_cast<size_t>(p)] = ref::FindReference(KernelRef(name, Phase::kStats))({piece}, local)[0];
      const KTensor kernel_piece = as_kernel(piece);
      kernel_stats.push_back(RunCpuKernel(KernelRef(name, Phase::kStats), {kernel_piece}, local)[0]);
    }
    RC_ASSERT(kernel_stats[0].dtype() == (dtype == DType::kInt64 ? DType::kInt64 : DType::kFloat64));
    // The shuffled gather order and its reverse: of two pieces before a third, each comes
    // first in one of them.
    std::vector<int> reversed(order.rbegin(), order.rend());
    for (const std::vector<int>& gather_order : {order, reversed}) {
      ref::Tensor ref_gathered;
      ref_gathered.shape = {pieces, rows, 4};
      ref_gathered.dtype = ref_stats[0].dtype;
      std::vector<double> kernel_gathered;
      for (int p : gather_order) {
        const std::vector<double>& s = ref_stats[static_cast<size_t>(p)].data;
        ref_gathered.data.insert(ref_gathered.data.end(), s.begin(), s.end());
        const std::vector<double> k = kernel_values(kernel_stats[static_cast<size_t>(p)]);
        kernel_gathered.insert(kernel_gathered.end(), k.begin(), k.end());
      }
      const KTensor kernel_gathered_tensor =
          kernel_stats[0].dtype() == DType::kInt64
              ? KTensor::FromVector({pieces, rows, 4}, std::vector<int64_t>(kernel_gathered.begin(), kernel_gathered.end()))
              : KTensor::FromVector({pieces, rows, 4}, kernel_gathered);

      for (int p = 0; p < pieces; ++p) {
        const Attrs local = attrs.WithLocal({.offset = std::vector<int64_t>{0, cuts[p]}});
        const ref::Tensor piece = columns(cuts[p], cuts[p + 1]);
        const ref::Tensors ref_out = ref::FindReference(KernelRef(name, Phase::kFinish))({piece, ref_gathered}, local);
        const KTensor kernel_piece = as_kernel(piece);
        const KTensors kernel_out =
            RunCpuKernel(KernelRef(name, Phase::kFinish), {kernel_piece, kernel_gathered_tensor}, local);
        const std::vector<double> kernel_values_out = kernel_values(kernel_out[0]);
        const std::vector<double> kernel_indices = kernel_values(kernel_out[1]);
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t c = cuts[p]; c < cuts[p + 1]; ++c) {
            const size_t whole = static_cast<size_t>(r * len + c);
            const size_t local_at = static_cast<size_t>(r * (cuts[p + 1] - cuts[p]) + c - cuts[p]);
            const double v = want[0].data[whole];
            for (const double got : {ref_out[0].data[local_at], kernel_values_out[local_at]}) {
              RC_ASSERT(std::isnan(got) == std::isnan(v));
              if (!std::isnan(v)) RC_ASSERT(got == v);
            }
            RC_ASSERT(ref_out[1].data[local_at] == want[1].data[whole]);
            RC_ASSERT(kernel_indices[local_at] == want[1].data[whole]);
          }
        }
      }
    }
  });
  EXPECT_TRUE(ok);
}

// moe_gate_dispatch's top-k on equal and NaN scores (the generated values are distinct and
// finite): NaN first, equal scores to the lower expert, in the reference and in the CPU
// kernel (float64 and float32), written apart. Token 0 ties 0.25 on experts 1 and 3 once
// expert 3's bias is added (after expert 2's 0.5); token 1 has a NaN score on expert 3 and
// ties 0.5 on experts 0 and 2; token 2 ties 0.5 on experts 1 and 3 (bias added), before 0.
TEST(KernelTies, MoeGateDispatchTiesAndNaNAsTheReference) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Attrs attrs = FindOp("moe_gate_dispatch")
                          ->NormalizeAttrs(Attrs().With("k", int64_t{3}).With("capacity", int64_t{2}));
  for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
    ref::Tensor x = Real({3, 2}, 23), gate, bias;
    x.dtype = dtype;
    if (dtype == DType::kFloat32) {
      for (double& v : x.data) v = static_cast<float>(v);
    }
    gate.shape = {3, 4};
    gate.dtype = dtype;
    gate.data = {0.0, 0.25, 0.5, 0.0, 0.5, 0.125, 0.5, nan, 0.25, 0.5, 0.125, 0.25};
    bias.shape = {4};
    bias.dtype = dtype;
    bias.data = {0.0, 0.0, 0.0, 0.25};
    const ref::Tensors want = ref::FindReference("moe_gate_dispatch")(ref::Tensors{x, gate, bias}, attrs);
    const std::vector<double> ids = {2, 1, 3, 3, 0, 2, 1, 3, 0};
    EXPECT_EQ(want[4].data, ids) << ToString(dtype);
    EXPECT_EQ(Verdict("moe_gate_dispatch", {x, gate, bias}, attrs, dtype), "") << ToString(dtype);
  }
}

TEST(KernelDtypes, IntegralInputsComputeInFloat64) {
  ref::Tensor x;
  x.shape = {2, 3};
  x.dtype = DType::kInt64;
  x.data = {1, -2, 3, 4, 0, 6};
  for (const char* op : {"sum", "relu", "cumsum", "exp", "softmax"}) {
    const Attrs attrs = FindOp(op)->NormalizeAttrs(Attrs());
    EXPECT_EQ(Verdict(op, {x}, attrs, DType::kFloat64), "") << op;
  }
  ref::Tensor flags = x;
  flags.dtype = DType::kBool;
  flags.data = {1, 0, 1, 1, 0, 0};
  for (const char* op : {"any", "all", "sum", "argmax"}) {
    const Attrs attrs = FindOp(op)->NormalizeAttrs(Attrs());
    EXPECT_EQ(Verdict(op, {flags}, attrs, DType::kFloat64), "") << op;
  }
  const Attrs to_float = FindOp("cast")->NormalizeAttrs(Attrs().With("dtype", std::string("float32")));
  EXPECT_EQ(Verdict("cast", {x}, to_float, DType::kFloat32), "");
  // The ops that count zeros and repeats take int64 and bool x as they are (repeats in both).
  ref::Tensor repeats = x;
  repeats.data = {3, 0, -2, 3, 0, 3};
  const Attrs every = FindOp("unique")->NormalizeAttrs(
      Attrs().With("return_index", true).With("return_inverse", true).With("return_counts", true));
  for (const ref::Tensor& t : {repeats, flags}) {
    EXPECT_EQ(Verdict("nonzero", {t}, Attrs(), DType::kFloat64), "") << ToString(t.dtype);
    EXPECT_EQ(Verdict("unique", {t}, every, DType::kFloat64), "") << ToString(t.dtype);
  }
}

// ---- bfloat16 and float16 --------------------------------------------------------------------

struct TwoByteFormat {
  DType dtype;
  double (*round)(double);  // to the nearest value of the type (the kernels' conversion)
};

double RoundBFloat16(double v) { return BFloat16BitsToFloat(DoubleToBFloat16Bits(v)); }
double RoundFloat16(double v) { return Float16BitsToFloat(DoubleToFloat16Bits(v)); }

const TwoByteFormat kTwoByteFormats[] = {
    {DType::kBFloat16, RoundBFloat16},
    {DType::kFloat16, RoundFloat16},
};

// `t` with its float32 tensors turned into `dtype` (their values are exactly representable).
KTensors AsTwoByte(const KTensors& ts, DType dtype) {
  KTensors out;
  for (const KTensor& t : ts) {
    if (t.dtype() != DType::kFloat32) {
      out.push_back(t);
      continue;
    }
    ref::Tensor r{t.shape(), ValuesOf(t), dtype};
    out.push_back(ToKernel(r));
  }
  return out;
}

// Checks one example on 2-byte inputs as the header says. Returns the failures.
std::vector<std::string> CheckTwoByte(const OpDecl& op, const Example& example, uint64_t seed,
                                      const TwoByteFormat& f, int* compared_runs) {
  Attrs attrs;
  try {
    attrs = op.NormalizeAttrs(example.attrs);
  } catch (const SpmdError&) {
    return {};  // CheckExample reports it
  }
  ref::Tensors inputs = MakeInputs(op, example.shapes, attrs, DType::kFloat32, seed);
  for (ref::Tensor& t : inputs) {
    if (t.dtype == DType::kFloat32) {
      for (double& v : t.data) v = f.round(v);
    }
  }
  const std::string where = Describe(op.name, example.shapes, attrs, f.dtype, seed) + ": ";
  const KTensors k32_inputs = ToKernel(inputs);
  const KTensors narrow_inputs = AsTwoByte(k32_inputs, f.dtype);
  std::optional<KTensors> k32, narrow;
  std::optional<SpmdError> e32, narrow_error;
  try {
    k32 = RunCpuKernel(op.name, k32_inputs, attrs);
  } catch (const SpmdError& e) {
    e32 = e;
  }
  try {
    narrow = RunCpuKernel(op.name, narrow_inputs, attrs);
  } catch (const SpmdError& e) {
    narrow_error = e;
  } catch (const std::exception& e) {
    return {where + "the kernel threw a non-SpmdError: " + e.what()};
  }
  if (e32 || narrow_error) {
    if (!e32 || !narrow_error || e32->type() != narrow_error->type() ||
        e32->field() != narrow_error->field()) {
      return {where + "the float32 and 2-byte runs disagree on refusing: " +
              (e32 ? e32->what() : std::string("(answered)")) + " vs " +
              (narrow_error ? narrow_error->what() : std::string("(answered)"))};
    }
    return {};
  }
  std::optional<ref::Tensors> expected;
  try {
    expected = ref::FindReference(op.name)(inputs, attrs);
  } catch (const SpmdError& e) {
    return {where + "the reference refused what the float32 kernel answered: " + e.what()};
  }
  if (narrow->size() != k32->size() || expected->size() != k32->size()) {
    return {where + "output counts differ"};
  }
  std::optional<Bounds> bounds;
  // With no 2-byte input (one_hot reads only ids) the run is the float32 run: its float32
  // outputs stay float32 and must equal it.
  bool any_narrow = false;
  for (const KTensor& t : narrow_inputs) any_narrow = any_narrow || t.dtype() == f.dtype;
  for (size_t o = 0; o < k32->size(); ++o) {
    const KTensor& a = (*k32)[o];
    const KTensor& b = (*narrow)[o];
    const std::string out = "outputs[" + std::to_string(o) + "]";
    const bool rounded = any_narrow && a.dtype() == DType::kFloat32 && op.name != "cast";
    if (b.shape() != a.shape() || b.dtype() != (rounded ? f.dtype : a.dtype())) {
      return {where + out + ": shape or dtype " + std::string(ToString(b.dtype())) + " " +
              ShapeString(b.shape()) + ", float32 run " + std::string(ToString(a.dtype())) + " " +
              ShapeString(a.shape())};
    }
    const std::vector<double> va = ValuesOf(a), vb = ValuesOf(b);
    for (size_t i = 0; i < va.size(); ++i) {
      const double want = rounded ? f.round(va[i]) : va[i];
      const bool same = std::isnan(want) ? std::isnan(vb[i])
                                         : vb[i] == want && std::signbit(vb[i]) == std::signbit(want);
      if (!same) {
        std::ostringstream os;
        os.precision(9);
        os << where << out << " element " << i << ": " << vb[i] << ", the float32 run rounded "
           << want;
        return {os.str()};
      }
    }
    if (!rounded) continue;
    const std::string error =
        CompareValues(op, o, where + out, f.dtype, vb, (*expected)[o].data, 1e-12, bounds,
                      [&] { return MakeBounds(op, inputs, attrs, *expected); });
    if (!error.empty()) return {error};
  }
  if (compared_runs) ++*compared_runs;
  return {};
}

TEST_P(KernelTest, TwoByteFloatsMatchFloat32AndReference) {
  const OpDecl& op = Op();
  int compared = 0;
  std::vector<std::string> failures;
  for (const SizePalette& palette : Palettes()) {
    for (const Example& example : op.examples(palette)) {
      for (const TwoByteFormat& f : kTwoByteFormats) {
        for (std::string& e : CheckTwoByte(op, example, 3, f, &compared)) failures.push_back(std::move(e));
      }
    }
  }
  for (size_t i = 0; i < failures.size() && i < 10; ++i) ADD_FAILURE() << failures[i];
  EXPECT_TRUE(failures.empty()) << failures.size() << " failures";
  EXPECT_GT(compared, 0) << "no example ran in 2-byte floats";
}

TEST(KernelTwoByte, MixingATwoByteFloatWithAnotherFloatIsInvalid) {
  const KTensor x = AsTwoByte({KTensor({2}, DType::kFloat32)}, DType::kBFloat16)[0];
  for (DType other : {DType::kFloat32, DType::kFloat64, DType::kFloat16}) {
    const KTensor y({2}, other);
    try {
      RunCpuKernel("add", {x, y}, FindOp("add")->NormalizeAttrs({}));
      ADD_FAILURE() << "bfloat16 + " << ToString(other) << " ran";
    } catch (const SpmdError& e) {
      EXPECT_EQ(e.type(), ErrorType::kInvalidArgument);
      EXPECT_EQ(e.field(), "inputs[1].dtype");
    }
  }
}

TEST(KernelTwoByte, CastToATwoByteFloatRoundsOnceFromDouble) {
  const double v = 1.0 + 0x1p-8 + 0x1p-40;  // above the bfloat16 tie: rounds up
  const KTensor x = KTensor::FromVector<double>({1}, {v});
  const KTensor b = RunCpuKernel("cast", {x}, FindOp("cast")->NormalizeAttrs(Attrs().With("dtype", std::string("bfloat16"))))[0];
  ASSERT_EQ(b.dtype(), DType::kBFloat16);
  EXPECT_EQ(b.data<BFloat16>()[0].bits, 0x3f81);
  const KTensor h = RunCpuKernel("cast", {x}, FindOp("cast")->NormalizeAttrs(Attrs().With("dtype", std::string("float16"))))[0];
  ASSERT_EQ(h.dtype(), DType::kFloat16);
  EXPECT_EQ(h.data<Float16>()[0].bits, 0x3c04);  // 1 + 2^-8 is a float16 value
  // Against the reference's own rounding, on values across both types' ranges: normals,
  // subnormals, ties, overflow.
  ref::Tensor many;
  many.shape = {0};
  std::mt19937_64 rng(9);
  for (int i = 0; i < 4000; ++i) {
    const double m = 1.0 + static_cast<double>(rng() % 4096) / 4096.0;
    many.data.push_back((rng() % 2 ? -1 : 1) * std::ldexp(m, static_cast<int>(rng() % 300) - 150));
  }
  for (double tie : {1.0 + 0x1p-8, 1.0 + 0x1p-11, 65520.0, 0x1p-25, 0x1p-134, 0x1.ffp127}) many.data.push_back(tie);
  many.shape = {static_cast<int64_t>(many.data.size())};
  for (const char* name : {"bfloat16", "float16"}) {
    const Attrs a = FindOp("cast")->NormalizeAttrs(Attrs().With("dtype", std::string(name)));
    EXPECT_EQ(Verdict("cast", {many}, a, DType::kFloat64), "") << name;
  }
}

// ---- A larger matmul (several cache blocks, edge panels) ------------------------------------

TEST(KernelMatmul, BlockedGemmMatchesReferenceOnLargerShapes) {
  const OpDecl& op = *FindOp("matmul");
  struct Shapes {
    Shape x, y;
    bool tx, ty;
  };
  for (const Shapes& s : {Shapes{{131, 300}, {300, 67}, false, false},
                          Shapes{{2, 300, 33}, {2, 45, 300}, true, true},
                          Shapes{{3, 1, 9, 260}, {4, 260, 2050}, false, false}}) {
    const Attrs attrs = op.NormalizeAttrs(Attrs().With("trans_x", s.tx).With("trans_y", s.ty));
    for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
      const ref::Tensors inputs = MakeInputs(op, {s.x, s.y}, attrs, dtype, 21);
      EXPECT_EQ(Verdict("matmul", inputs, attrs, dtype), "")
          << Describe("matmul", {s.x, s.y}, attrs, dtype, 21);
    }
  }
}

// ---- Hand-made layouts the declared examples do not reach ----------------------------------

struct Extra {
  const char* op;
  std::vector<Shape> shapes;
  Attrs attrs;
};

Attrs A(std::initializer_list<std::pair<std::string, AttrValue>> values) {
  Attrs attrs;
  for (const auto& [name, value] : values) attrs.Set(name, value);
  return attrs;
}

using Ints = std::vector<int64_t>;

std::vector<Extra> Extras() {
  std::vector<Extra> extras = {
      // matmul / matmul_grad: 1-D operands, broadcast batch dims on either side, transposes.
      {"matmul", {{5}, {5}}, {}},
      {"matmul", {{5}, {3, 5, 4}}, {}},
      {"matmul", {{3, 4, 5}, {5}}, {}},
      {"matmul", {{2, 1, 3, 5}, {4, 5, 6}}, A({{"trans_y", false}})},
      {"matmul", {{2, 1, 5, 3}, {1, 4, 6, 5}}, A({{"trans_x", true}, {"trans_y", true}})},
      {"matmul_grad", {{2, 1, 3, 5}, {4, 5, 6}, {2, 4, 3, 6}}, {}},
      {"matmul_grad", {{3, 5}, {2, 6, 5}, {2, 3, 6}}, A({{"trans_y", true}})},
      {"matmul_grad", {{2, 5, 3}, {5}, {2, 3}}, A({{"trans_x", true}})},
      {"matmul_grad", {{5}, {2, 5, 4}, {2, 4}}, {}},
      {"matmul_grad", {{5}, {5}, {}}, {}},
      // A y shared by every batch entry: the batch folded into one GEMM's rows (forward
      // only above 100^3 multiply-adds per entry, kernels/cpu/contraction.cc), y transposed
      // or not, batch dims of 1 on y.
      {"matmul", {{2, 40, 110}, {110, 250}}, {}},
      {"matmul", {{2, 1, 40, 110}, {1, 250, 110}}, A({{"trans_y", true}})},
      {"matmul_grad", {{2, 3, 7, 5}, {5, 6}, {2, 3, 7, 6}}, {}},
      {"matmul_grad", {{3, 7, 5}, {1, 6, 5}, {3, 7, 6}}, A({{"trans_y", true}})},
      // einsum: outer products, three and four operands, letters shared by all, sums of a
      // single operand, 0-d operands, upper case.
      {"einsum", {{3}, {4}}, A({{"equation", std::string("i,j->ij")}})},
      {"einsum", {{3, 4}, {3, 4}, {3, 4}}, A({{"equation", std::string("ij,ij,ij->i")}})},
      {"einsum", {{2, 3}, {3, 4}, {4, 5}, {5, 2}}, A({{"equation", std::string("ab,bc,cd,da->")}})},
      {"einsum", {{2, 3, 4}, {4, 3, 5}}, A({{"equation", std::string("bij,jik->kb")}})},
      {"einsum", {{2, 3, 4}}, A({{"equation", std::string("ijk->")}})},
      {"einsum", {{2, 3, 4}}, A({{"equation", std::string("ijk->kj")}})},
      {"einsum", {{}, {3}}, A({{"equation", std::string(",i->i")}})},
      {"einsum", {{2, 3}, {3, 2}}, A({{"equation", std::string("Ab,bA")}})},
      {"einsum", {{2, 3, 4}, {4, 5}, {5}}, A({{"equation", std::string("abc,cd,d->ab")}})},
      {"einsum", {{2, 0}, {0, 3}}, A({{"equation", std::string("ij,jk->ik")}})},
      // reductions over several separate dims of a rank-4 x (the permuted path).
      {"sum", {{3, 4, 5, 6}}, A({{"axis", Ints{0, 2}}})},
      {"sum", {{3, 4, 5, 6}}, A({{"axis", Ints{1, 3}}, {"keep_dim", true}})},
      {"mean", {{3, 4, 5, 6}}, A({{"axis", Ints{3, 0}}})},
      {"max", {{3, 4, 5, 6}}, A({{"axis", Ints{0, 1, 3}}})},
      {"min", {{3, 1, 5, 6}}, A({{"axis", Ints{1, 2}}})},
      {"prod", {{3, 4, 5, 2}}, A({{"axis", Ints{0, 2}}, {"keep_dim", true}})},
      {"any", {{3, 4, 5, 6}}, A({{"axis", Ints{1, 3}}})},
      {"all", {{3, 4, 5, 6}}, A({{"axis", Ints{0, 3}}})},
      {"logsumexp", {{3, 4, 5, 6}}, A({{"axis", Ints{0, 2}}})},
      {"squared_l2_norm", {{3, 4, 5, 6}}, A({{"axis", Ints{2, 0}}})},
      {"sum", {{3, 0, 5}}, A({{"axis", Ints{1}}})},
      {"max", {{3, 0, 5}}, A({{"axis", Ints{1}}})},
      {"sum", {{}}, A({{"axis", Ints{0}}, {"keep_dim", true}})},
      {"p_norm", {{3, 4, 5}}, A({{"axis", int64_t{0}}, {"porder", 1.0}})},
      {"p_norm", {{3, 4, 5}}, A({{"axis", int64_t{1}}, {"porder", -2.0}})},
      {"p_norm", {{3, 4, 5}}, A({{"axis", int64_t{2}}, {"porder", 0.5}, {"keepdim", true}})},
      {"argmax", {{3, 4, 5}}, A({{"axis", int64_t{0}}})},
      {"argmax", {{3, 4, 5}}, A({{"flatten", true}, {"keepdims", true}})},
      {"cumsum", {{3, 4, 5}}, A({{"axis", int64_t{1}}, {"exclusive", true}})},
      {"cumsum", {{3, 4, 5}}, A({{"axis", int64_t{-1}}, {"reverse", true}})},
      {"cumsum", {{3, 4, 5}}, A({{"flatten", true}, {"reverse", true}, {"exclusive", true}})},
      // softmax family along a middle axis (inner > 1), and on 0-d x.
      {"softmax", {{3, 4, 5}}, A({{"axis", int64_t{1}}})},
      {"log_softmax", {{3, 4, 5}}, A({{"axis", int64_t{0}}})},
      {"softmax", {{}}, {}},
      {"softmax_grad", {{3, 4, 5}, {3, 4, 5}}, A({{"axis", int64_t{-1}}})},
      {"cross_entropy_with_softmax", {{3, 4, 5}, {3, 1, 5}}, A({{"axis", int64_t{1}}})},
      {"cross_entropy_with_softmax", {{3, 4, 5}, {3, 4, 5}},
       A({{"axis", int64_t{1}}, {"soft_label", true}, {"use_softmax", false}})},
      {"layer_norm", {{3, 4, 5}, {60}, {60}}, A({{"begin_norm_axis", int64_t{0}}})},
      {"rms_norm", {{3, 4, 5}, {5}}, A({{"begin_norm_axis", int64_t{-1}}})},
      {"layer_norm_grad", {{3, 4, 5}, {60}, {60}, {}, {}, {3, 4, 5}}, A({{"begin_norm_axis", int64_t{0}}})},
      {"rms_norm_grad", {{3, 4, 5}, {5}, {3, 4}, {3, 4, 5}}, A({{"begin_norm_axis", int64_t{-1}}})},
      {"layer_norm_grad", {{0, 4}, {4}, {4}, {0}, {0}, {0, 4}}, {}},
      {"lookup_table_v2", {{}, {5, 3}}, {}},
      {"lookup_table_v2", {{2, 3}, {5, 3}}, A({{"padding_idx", int64_t{2}}})},
      // broadcasting: both sides broadcast, leading dims added, size-1 inner dims.
      {"add", {{3, 1, 5}, {4, 1}}, {}},
      {"multiply", {{1, 4, 1}, {3, 1, 5}}, {}},
      {"divide", {{2, 3, 4, 5}, {3, 1, 5}}, {}},
      {"maximum", {{}, {3, 4}}, {}},
      {"less_than", {{3, 4}, {}}, {}},
      {"where", {{3, 1, 5}, {4, 1}, {1}}, {}},
      {"where", {{5}, {3, 1, 5}, {3, 4, 1}}, {}},
      // shape ops: rank-4 permutations (tiled and row paths), slices, tiles, splits.
      {"transpose", {{3, 4, 5, 6}}, A({{"perm", Ints{3, 1, 2, 0}}})},
      {"transpose", {{3, 4, 5, 6}}, A({{"perm", Ints{0, 1, 3, 2}}})},
      {"transpose", {{3, 40, 50}}, A({{"perm", Ints{2, 0, 1}}})},
      {"transpose", {{2, 1, 3, 1}}, A({{"perm", Ints{3, 2, 1, 0}}})},
      {"transpose", {{}}, A({{"perm", Ints{}}})},
      {"slice", {{3, 4, 5, 6}}, A({{"axes", Ints{1, 3}}, {"starts", Ints{1, -4}}, {"ends", Ints{3, 100}}})},
      {"slice", {{3, 4, 5, 6}}, A({{"axes", Ints{0}}, {"starts", Ints{-100}}, {"ends", Ints{2}}})},
      {"slice", {{3, 4, 5}}, A({{"axes", Ints{2}}, {"starts", Ints{4}}, {"ends", Ints{2}}})},
      {"tile", {{2, 3}}, A({{"repeat_times", Ints{2, 1, 3}}})},
      {"tile", {{2, 3, 4}}, A({{"repeat_times", Ints{3, 2}}})},
      {"tile", {{}}, A({{"repeat_times", Ints{}}})},
      {"tile", {{2, 3}}, A({{"repeat_times", Ints{0, 2}}})},
      {"split", {{3, 7, 2}}, A({{"sections", Ints{2, 0, -1, 1}}, {"axis", int64_t{1}}})},
      {"split_with_num", {{6, 4}}, A({{"num", int64_t{3}}})},
      {"unbind", {{3, 4, 2}}, A({{"axis", int64_t{-1}}})},
      {"concat", {{2, 3}, {2, 0}, {2, 5}}, A({{"axis", int64_t{1}}})},
      {"stack", {{2, 3}, {2, 3}, {2, 3}}, A({{"axis", int64_t{1}}})},
      {"stack", {{}, {}}, {}},
      {"expand", {{3, 1}}, A({{"shape", Ints{2, -1, 4}}})},
      {"expand", {{3, 1}}, A({{"shape", Ints{0, 3, 0}}})},
      {"expand_as", {{1, 3}, {2, 4, 3}}, {}},
      {"reshape", {{2, 3, 4}}, A({{"shape", Ints{0, -1}}})},
      {"reshape", {{2, 0, 4}}, A({{"shape", Ints{4, 0, 2}}})},
      {"flatten", {{2, 3, 4, 5}}, A({{"start_axis", int64_t{1}}, {"stop_axis", int64_t{2}}})},
      {"flatten", {{}}, {}},
      {"squeeze", {{1, 3, 1}}, A({{"axis", Ints{0, -1, 0}}})},
      {"unsqueeze", {{}}, A({{"axis", Ints{0, -1}}})},
      {"triu", {{3, 4}}, A({{"diagonal", int64_t{-99}}})},
      {"triu", {{3, 4}}, A({{"diagonal", int64_t{99}}})},
      {"triu", {{2, 0, 3}}, {}},
      {"cast", {{3, 4}}, A({{"dtype", std::string("float64")}})},
      {"clip", {{3, 4}}, A({{"min", 0.25}})},
      {"scale", {{3, 4}}, A({{"scale", 3.0}, {"bias", -1.0}, {"bias_after_scale", false}})},
      // Cases the sweep's examples leave out (each example there multiplies the layouts).
      {"conv2d", {{2, 3, 5, 4}, {4, 3, 3, 2}},
       A({{"padding_algorithm", std::string("SAME")}, {"strides", Ints{2, 3}}})},
      {"conv2d", {{1, 4, 4, 4}, {4, 1, 3, 3}}, A({{"groups", int64_t{4}}, {"paddings", Ints{1, 1}}})},
      {"conv3d", {{1, 2, 4, 3, 5}, {2, 2, 2, 3, 2}},
       A({{"padding_algorithm", std::string("SAME")}, {"strides", Ints{2, 1, 3}}})},
      {"conv2d_transpose", {{2, 3, 3, 2}, {3, 1, 3, 3}},
       A({{"groups", int64_t{3}}, {"strides", Ints{2, 2}}, {"output_size", Ints{7, 5}}})},
      {"einsum", {{2, 1, 3, 4}, {5, 4, 2}}, A({{"equation", std::string("...ij,...jk->...ik")}})},
      {"einsum", {{2, 3}, {1, 4}, {4}}, A({{"equation", std::string("ij,jk,k->i")}})},
      {"flash_attention", {{2, 5, 4, 3}, {2, 6, 2, 3}, {2, 6, 2, 2}}, A({{"causal", true}})},
      {"flash_attention", {{1, 3, 2, 4}, {1, 3, 1, 4}, {1, 3, 1, 4}, {2}, {1, 2, 1, 3}},
       A({{"return_softmax", true}})},
      {"flash_attn_grad",
       {{2, 5, 4, 3}, {2, 6, 2, 3}, {2, 6, 2, 2}, {2, 5, 4, 2}, {2, 4, 5}, {}, {}, {2, 5, 4, 2}},
       A({{"causal", true}})},
      {"flash_attn_grad",
       {{1, 3, 2, 4}, {1, 3, 1, 4}, {1, 3, 1, 4}, {1, 3, 2, 4}, {1, 2, 3}, {2}, {1, 2, 1, 3}, {1, 3, 2, 4}},
       {}},
  };
  return extras;
}

TEST(KernelExtras, HandMadeLayoutsMatchReference) {
  int compared = 0;
  for (const Extra& e : Extras()) {
    const OpDecl* op = FindOp(e.op);
    ASSERT_NE(op, nullptr) << e.op;
    for (uint64_t seed : {1u, 2u, 3u}) {
      int before = compared;
      for (const std::string& failure : CheckExample(*op, Example{e.shapes, e.attrs}, seed, &compared)) {
        ADD_FAILURE() << failure;
      }
      EXPECT_GT(compared, before) << "the reference refused " << e.op << " "
                                  << Describe(e.op, e.shapes, e.attrs, DType::kFloat64, seed);
    }
  }
  RecordProperty("compared_runs", compared);
}

INSTANTIATE_TEST_SUITE_P(AllOps, KernelTest, ::testing::ValuesIn(OpsUnderTest()), ParamName);
INSTANTIATE_TEST_SUITE_P(Localized, KernelLocalizerTest, ::testing::ValuesIn(OpsWithLocalizers()),
                         ParamName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(KernelLocalizerTest);

}  // namespace
}  // namespace spmd
