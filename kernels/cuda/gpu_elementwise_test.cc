// The elementwise CUDA kernels against the CPU kernels on random requests: every op of
// kernels/cpu/elementwise.cc, every dtype (2-byte floats, int64 and bool value inputs,
// mixes), broadcast shapes, long arrays (the vector path and its tail), attrs, and broken
// requests (both must refuse with the same error type and field). The arithmetic ops must
// agree exactly; the transcendental ones within the math libraries' ulps. Skipped without a
// GPU.
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cuda/cuda.h"
#include "kernels/cuda/gpu_test_util.h"
#include "kernels/cuda/registry.h"

namespace spmd::kernels::cuda {
namespace {

using testing::Mismatch;
using testing::OnGpu;
using testing::SameOutcome;
using testing::Tolerance;
using testing::VisitDType;

const std::set<std::string> kTranscendental = {"gelu", "silu", "exp", "log", "tanh", "sigmoid", "gelu_grad"};

// Values for an input: multiples of 1/8 in [-8, 8] (all ops), plus wide magnitudes and
// specials where the op is exact (they must come out the same, NaN for NaN).
Tensor RandomInput(DType dtype, const Shape& shape, bool specials) {
  Tensor t = Tensor::Uninitialized(shape, dtype);
  const int64_t n = t.numel();
  VisitDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data<T>();
    for (int64_t i = 0; i < n; ++i) {
      double v = static_cast<double>(*rc::gen::inRange(-64, 65)) / 8.0;
      // Wide magnitudes only where the op is exact: the transcendental ones stay in [-8, 8],
      // where their tolerance is meaningful.
      if (specials && *rc::gen::inRange(0, 8) == 0) v = std::ldexp(v, *rc::gen::inRange(-30, 30));
      if (specials && *rc::gen::inRange(0, 16) == 0) {
        v = *rc::gen::element<double>(NAN, INFINITY, -INFINITY, 0.0, -0.0, 1e-40, 65504.0, 1e300);
      }
      if constexpr (std::is_same_v<T, bool>) {
        p[i] = v > 0;
      } else if constexpr (std::is_same_v<T, int64_t>) {
        p[i] = static_cast<int64_t>(std::isfinite(v) ? std::fmod(std::trunc(v), 1e6) : 3.0);
      } else {
        p[i] = CastElement<T>(v);
      }
    }
  });
  return t;
}

// A shape the output may have, and an input shape broadcasting to it (dims dropped from
// the front, some set to 1); now and then one that does not fit.
Shape RandomShape() {
  if (*rc::gen::inRange(0, 6) == 0) return {*rc::gen::inRange<int64_t>(500, 5000)};  // long: vector path
  const int rank = *rc::gen::inRange(0, 5);
  Shape s(rank);
  for (int64_t& d : s) d = *rc::gen::element<int64_t>(0, 1, 2, 3, 4, 5, 7);
  return s;
}

Shape BroadcastFrom(const Shape& out, bool broadcast) {
  if (!broadcast) return out;
  const size_t keep = *rc::gen::inRange<size_t>(0, out.size() + 1);
  Shape s(out.end() - static_cast<std::ptrdiff_t>(keep), out.end());
  for (int64_t& d : s) {
    if (*rc::gen::inRange(0, 3) == 0) d = 1;
  }
  if (!s.empty() && *rc::gen::inRange(0, 25) == 0) s.back() += 2;  // does not fit
  return s;
}

// The dtypes of an op's value inputs: one floating dtype for the request, each input that
// or int64 / bool; sometimes none floating; rarely a forbidden mix.
std::vector<DType> RandomDTypes(size_t n) {
  const DType floating =
      *rc::gen::element(DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16);
  std::vector<DType> out(n);
  const bool none_floating = *rc::gen::inRange(0, 8) == 0;
  for (DType& d : out) {
    const int k = *rc::gen::inRange(0, 8);
    d = k == 0 ? DType::kInt64 : k == 1 ? DType::kBool : floating;
    if (none_floating) d = *rc::gen::element(DType::kInt64, DType::kBool);
  }
  if (n > 1 && *rc::gen::inRange(0, 30) == 0) out[1] = *rc::gen::element(DType::kFloat32, DType::kFloat64, DType::kBFloat16);
  return out;
}

struct Request {
  std::string op;
  Tensors inputs;
  Attrs attrs;
};

Request RandomRequest(const std::string& op) {
  Request r;
  r.op = op;
  const bool exact = kTranscendental.count(op) == 0 && op != "pow";
  static const std::set<std::string> kUnary = {"relu", "gelu", "silu", "exp",   "log",  "tanh",  "sigmoid",
                                               "sqrt", "abs",  "scale", "clip", "cast", "pow", "rsqrt"};
  static const std::set<std::string> kBinary = {"add",     "subtract", "multiply",     "divide",
                                                "maximum", "minimum",  "greater_than", "less_than"};
  const Shape out = RandomShape();
  if (kUnary.count(op) != 0) {
    r.inputs.push_back(RandomInput(RandomDTypes(1)[0], out, exact));
  } else if (kBinary.count(op) != 0) {
    const std::vector<DType> d = RandomDTypes(2);
    const bool broadcast = *rc::gen::arbitrary<bool>();
    r.inputs.push_back(RandomInput(d[0], BroadcastFrom(out, broadcast), exact));
    r.inputs.push_back(RandomInput(d[1], BroadcastFrom(out, broadcast), exact));
    if (*rc::gen::arbitrary<bool>()) std::swap(r.inputs[0], r.inputs[1]);
  } else if (op == "where") {
    const std::vector<DType> d = RandomDTypes(2);
    const DType cond = *rc::gen::element(DType::kBool, DType::kBool, DType::kInt64, d[0], DType::kFloat64);
    const bool broadcast = *rc::gen::arbitrary<bool>();
    r.inputs.push_back(RandomInput(cond, BroadcastFrom(out, broadcast), true));
    r.inputs.push_back(RandomInput(d[0], BroadcastFrom(out, broadcast), true));
    r.inputs.push_back(RandomInput(d[1], BroadcastFrom(out, broadcast), true));
  } else if (op == "gelu_grad") {
    const std::vector<DType> d = RandomDTypes(2);
    r.inputs.push_back(RandomInput(d[0], out, false));
    const bool other_shape = *rc::gen::inRange(0, 20) == 0;
    r.inputs.push_back(RandomInput(d[1], other_shape ? Shape{3} : out, false));
  } else if (op == "add_n") {
    const size_t n = *rc::gen::inRange<size_t>(0, 5);  // 0: refused
    const std::vector<DType> d = RandomDTypes(n);
    for (size_t i = 0; i < n; ++i) r.inputs.push_back(RandomInput(d[i], out, true));
  }
  if (*rc::gen::inRange(0, 40) == 0 && !r.inputs.empty()) r.inputs.pop_back();  // wrong arity
  if (op == "gelu" || op == "gelu_grad") r.attrs.Set("approximate", *rc::gen::arbitrary<bool>());
  if (op == "scale") {
    r.attrs.Set("scale", *rc::gen::element(2.0, -0.5, 0.1, 1e39));
    r.attrs.Set("bias", *rc::gen::element(0.0, 1.0, -3.25, 0.3));
    r.attrs.Set("bias_after_scale", *rc::gen::arbitrary<bool>());
  }
  if (op == "clip") {
    const double lo = *rc::gen::element(-1.0, -2.5, 0.0, 3.0, -1e39);
    r.attrs.Set("min", lo);
    r.attrs.Set("max", lo + *rc::gen::element(0.0, 1.0, 4.5, -1.0));  // -1: min > max, refused
  }
  if (op == "pow") r.attrs.Set("y", *rc::gen::element(1.0, 2.0, 0.5, 3.0, -1.5, 0.3));
  if (op == "cast") {
    r.attrs.Set("dtype", *rc::gen::element<std::string>("float64", "float32", "int64", "bool", "bfloat16",
                                                         "float16", "int8"));
  }
  return r;
}

Tolerance ToleranceFor(const std::string& op, const Attrs& attrs, DType out) {
  const bool exact =
      kTranscendental.count(op) == 0 &&
      !(op == "pow" && attrs.GetFloat("y") != 1.0 && attrs.GetFloat("y") != 2.0 && attrs.GetFloat("y") != 0.5);
  if (exact) return Tolerance{};
  switch (out) {
    case DType::kFloat64: return {false, 1e-13, 1e-14};
    case DType::kBFloat16: return {false, 1.6e-2, 3e-5};
    case DType::kFloat16: return {false, 2e-3, 3e-5};
    default: return {false, 3e-5, 3e-5};
  }
}

void CheckOp(const std::string& op) {
  const Request r = RandomRequest(op);
  Tensors dev;
  for (const Tensor& t : r.inputs) dev.push_back(OnGpu(t));
  const std::string diff = SameOutcome(
      [&] { return RunCpuKernel(r.op, r.inputs, r.attrs); },
      [&] {
        Tensors out = BackendFor(Device::Cuda(0)).RunKernel(r.op, dev, r.attrs);
        for (const Tensor& t : out) RC_ASSERT(t.device() == Device::Cuda(0));
        return out;
      },
      [&](const Tensors& want, const Tensors& got) -> std::string {
        if (want.size() != got.size()) return "output count";
        for (size_t o = 0; o < want.size(); ++o) {
          const std::string m = Mismatch(want[o], ToHost(got[o]), ToleranceFor(r.op, r.attrs, want[o].dtype()));
          if (!m.empty()) return "output " + std::to_string(o) + ": " + m;
        }
        return "";
      });
  std::string shapes;
  for (const Tensor& t : r.inputs) shapes += std::string(ToString(t.dtype())) + ShapeToString(t.shape()) + " ";
  if (!diff.empty()) RC_FAIL(op + " on " + shapes + ": " + diff);
}

class CudaElementwise : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaElementwise, MatchesTheCpuKernel) {
  SPMD_REQUIRE_GPU();
  const std::string op = GetParam();
  EXPECT_TRUE(rc::check("cuda " + op + " == cpu " + op, [&] { CheckOp(op); }));
}

INSTANTIATE_TEST_SUITE_P(Ops, CudaElementwise,
                         ::testing::Values("relu", "gelu", "silu", "exp", "log", "tanh", "sigmoid", "sqrt", "abs",
                                           "scale", "clip", "cast", "add", "subtract", "multiply", "divide",
                                           "maximum", "minimum", "greater_than", "less_than", "where",
                                           "gelu_grad", "pow", "rsqrt", "add_n"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

TEST(CudaElementwiseStreams, OutputsFollowTheFirstInputsStream) {
  SPMD_REQUIRE_GPU();
  const Stream s = NewStream(Device::Cuda(0));
  const Tensor x = Tensor::FromVector<float>({2, 2}, {1, -2, 3, -4});
  const Tensor y = Tensor::FromVector<float>({2}, {10, 20});
  const Tensor dx = ToDevice(x, Device::Cuda(0), s), dy = ToDevice(y, Device::Cuda(0), s);
  const Tensors out = RunCudaKernel("add", TensorArgs(std::vector<const Tensor*>{&dx, &dy}), Attrs{});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].stream(), s);
  EXPECT_TRUE(ToHost(out[0]) == Tensor::FromVector<float>({2, 2}, {11, 18, 13, 16}));
}

TEST(CudaElementwiseErrors, InputsOnTwoDevicesOrTheHostAreRefused) {
  SPMD_REQUIRE_GPU();
  const Tensor host = Tensor::FromVector<float>({2}, {1, 2});
  const Tensor dev = OnGpu(host);
  try {
    RunCudaKernel("add", TensorArgs(std::vector<const Tensor*>{&dev, &host}), Attrs{});
    FAIL();
  } catch (const SpmdError& e) {
    EXPECT_EQ(e.field(), "inputs[1].device");
  }
}

}  // namespace
}  // namespace spmd::kernels::cuda
