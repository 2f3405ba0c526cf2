// The CUDA kernels (kernels/cuda) against the float64 references (reference/) and the CPU
// kernels (kernels/cpu), on the GPU (ctest label gpu). Without a usable GPU every test
// here skips with the reason (ctest reports them as skipped).
//
// What runs, per op (every op has a CUDA kernel: their table is generated from the op list,
// kernels/cuda/registry.h, so a missing one does not link):
// - every example of the op's declaration on three size palettes ({4,6,8}, {5,7,3}: odd,
//   {33,65,7,1}: past one block and with a size-1 letter), and random palettes of sizes
//   0-9 (RapidCheck: empty and odd sizes), in float64, float32, bfloat16 and float16 (the
//   float inputs; int64 ids and bool inputs as the value kinds say);
// - inputs as kernel_properties_test.cc makes them (the op's value kinds; 2-byte runs on
//   values exactly representable in the 2-byte type, so the reference sees the run's
//   values);
// - verdicts: when the reference refuses, the CUDA kernel must refuse with the same error
//   type and field (anything else, a CudaError included, fails); otherwise the outputs must
//   have the CPU kernel's count, shapes and dtypes, int64 / bool outputs must equal the CPU
//   kernel's, outputs of kExact ops must equal the CPU kernel's bit for bit, and every float
//   output must be within the op's tolerance of the float64 reference
//   (property_tests/tolerance.h: the class bound with the unit roundoff of the dtype's
//   compute precision, plus one rounding for 2-byte floats; float64 within 1e-10 relative:
//   GPU kernels may sum in another order and fuse multiply-adds).
// SPMD_KERNEL_OPS=a,b limits the ops; RC_PARAMS="seed=..." replays a random case.
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "kernels/cuda/cuda.h"
#include "kernels/cuda/registry.h"
#include "kernels/tensor.h"
#include "property_tests/gpu_test_util.h"
#include "property_tests/tolerance.h"
#include "reference/reference.h"
#include "rules/model/error.h"
#include "rules/model/half.h"
#include "rules/engine/registry.h"

namespace spmd {
namespace {

namespace ref = reference;
using KTensor = kernels::Tensor;
using KTensors = kernels::Tensors;

using namespace gpu_test;  // NOLINT: the shared helpers of the GPU tests

std::string Describe(const std::string& op, const std::vector<Shape>& shapes, DType dtype,
                     uint64_t seed) {
  std::string s = op + " shapes [";
  for (size_t i = 0; i < shapes.size(); ++i) s += (i ? ", " : "") + kernels::ShapeToString(shapes[i]);
  return s + "] dtype " + std::string(ToString(dtype)) + " seed " + std::to_string(seed);
}

bool BitsEqual(const KTensor& a, const KTensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         (a.nbytes() == 0 || std::memcmp(a.bytes(), b.bytes(), a.nbytes()) == 0);
}

// One request in dtype `run`: "" when the CUDA kernel agrees; `compared` when it answered.
std::string CheckOnGpu(const OpDecl& op, const Example& example, DType run, uint64_t seed,
                       bool* compared) {
  Attrs attrs;
  try {
    attrs = op.NormalizeAttrs(example.attrs);
  } catch (const SpmdError&) {
    return "";  // kernel_properties_test reports examples that do not normalise
  }
  const std::string where = Describe(op.name, example.shapes, run, seed) + ": ";
  const ref::Tensors inputs = MakeInputs(op, example.shapes, attrs, run, seed);
  KTensors host_inputs;
  for (const ref::Tensor& t : inputs) {
    const bool floating = t.dtype == DType::kFloat64 || t.dtype == DType::kFloat32;
    host_inputs.push_back(ToKernel(t, floating ? run : t.dtype));
  }
  std::optional<ref::Tensors> expected;
  std::optional<SpmdError> ref_error;
  try {
    expected = ref::FindReference(op.name)(inputs, attrs);
  } catch (const SpmdError& e) {
    ref_error = e;
  }
  const kernels::Device gpu = kernels::Device::Cuda(0);
  KTensors device_inputs;
  for (const KTensor& t : host_inputs) device_inputs.push_back(kernels::cuda::ToDevice(t, gpu));
  std::optional<KTensors> got;
  std::optional<SpmdError> gpu_error;
  try {
    KTensors out = kernels::cuda::RunCudaKernel(op.name, device_inputs, attrs);
    got.emplace();
    for (const KTensor& t : out) got->push_back(kernels::cuda::ToHost(t));
  } catch (const SpmdError& e) {
    gpu_error = e;
  } catch (const std::exception& e) {
    return where + "the CUDA kernel threw a non-SpmdError: " + e.what();
  }
  if (ref_error) {
    if (!gpu_error) return where + "the reference refused (" + ref_error->what() + ") but the CUDA kernel answered";
    if (gpu_error->type() != ref_error->type() || gpu_error->field() != ref_error->field()) {
      return where + "the reference refused with " + std::string(ToString(ref_error->type())) + " (" +
             ref_error->what() + "), the CUDA kernel with " + std::string(ToString(gpu_error->type())) +
             " (" + gpu_error->what() + ")";
    }
    return "";
  }
  if (gpu_error) return where + "the CUDA kernel refused (" + gpu_error->what() + ") where the reference answered";
  KTensors cpu;
  try {
    cpu = kernels::RunCpuKernel(op.name, host_inputs, attrs);
  } catch (const SpmdError& e) {
    return where + "the CPU kernel refused (" + e.what() + ") where the reference answered";
  }
  if (got->size() != cpu.size() || expected->size() != cpu.size()) {
    return where + "the CUDA kernel gave " + std::to_string(got->size()) + " outputs, the CPU kernel " +
           std::to_string(cpu.size()) + ", the reference " + std::to_string(expected->size());
  }
  const bool exact = op.tolerance == ToleranceClass::kExact;
  std::optional<prop::Bounds> bounds;
  for (size_t o = 0; o < cpu.size(); ++o) {
    const KTensor& g = (*got)[o];
    const KTensor& c = cpu[o];
    const std::string out = "outputs[" + std::to_string(o) + "]";
    if (g.shape() != c.shape() || g.dtype() != c.dtype()) {
      return where + out + ": " + std::string(ToString(g.dtype())) + " " + kernels::ShapeToString(g.shape()) +
             ", the CPU kernel's " + std::string(ToString(c.dtype())) + " " + kernels::ShapeToString(c.shape());
    }
    const bool floating = IsFloating(g.dtype());
    if ((!floating || exact) && !BitsEqual(g, c)) {
      const std::vector<double> a = ValuesOf(g), b = ValuesOf(c);
      for (size_t i = 0; i < a.size(); ++i) {
        if (std::memcmp(&a[i], &b[i], sizeof(double)) != 0 && !(std::isnan(a[i]) && std::isnan(b[i]))) {
          std::ostringstream os;
          os.precision(17);
          os << where << out << " element " << i << ": CUDA " << a[i] << ", CPU " << b[i]
             << (exact ? " (an exact op)" : "");
          return os.str();
        }
      }
    }
    if (!floating) continue;
    const std::string error = prop::CompareValues(
        op, o, where + out, g.dtype(), ValuesOf(g), (*expected)[o].data, 1e-10, bounds,
        [&] { return prop::MakeBounds(op, inputs, attrs, *expected); });
    if (!error.empty()) return error;
  }
  if (compared) *compared = true;
  return "";
}

const DType kRuns[] = {DType::kFloat64, DType::kFloat32, DType::kBFloat16, DType::kFloat16};

class GpuKernelTest : public ::testing::TestWithParam<std::string> {
 protected:
  const OpDecl& Op() const { return *FindOp(GetParam()); }
};

std::string ParamName(const ::testing::TestParamInfo<std::string>& info) { return info.param; }

// ---- Every example, fixed palettes -----------------------------------------------------------

TEST_P(GpuKernelTest, ExamplesMatchReferenceAndCpu) {
  SPMD_REQUIRE_GPU();
  const OpDecl& op = Op();
  const std::vector<SizePalette> palettes = {SizePalette{{4, 6, 8}}, SizePalette{{5, 7, 3}},
                                             SizePalette{{33, 65, 7, 1}}};
  int compared = 0;
  std::vector<std::string> failures;
  for (const SizePalette& palette : palettes) {
    for (const Example& example : op.examples(palette)) {
      for (DType run : kRuns) {
        bool ran = false;
        std::string f = CheckOnGpu(op, example, run, 7, &ran);
        compared += ran;
        if (!f.empty()) failures.push_back(std::move(f));
      }
    }
  }
  for (size_t i = 0; i < failures.size() && i < 10; ++i) ADD_FAILURE() << failures[i];
  EXPECT_TRUE(failures.empty()) << failures.size() << " failures";
  EXPECT_GT(compared, 0) << "every example was refused";
  RecordProperty("compared_runs", compared);
}

// ---- Random sizes (RapidCheck) ---------------------------------------------------------------

TEST_P(GpuKernelTest, RandomSizesMatchReferenceAndCpu) {
  SPMD_REQUIRE_GPU();
  const OpDecl& op = Op();
  const bool ok = rc::check(op.name + ": CUDA kernel == reference at random sizes", [&] {
    const auto sizes = *rc::gen::container<std::vector<int64_t>>(4, rc::gen::inRange<int64_t>(0, 10));
    const std::vector<Example> examples = op.examples(SizePalette{sizes});
    RC_PRE(!examples.empty());
    const Example& example = examples[*rc::gen::inRange<size_t>(0, examples.size())];
    const DType run = *rc::gen::elementOf(std::vector<DType>(std::begin(kRuns), std::end(kRuns)));
    const uint64_t seed = *rc::gen::arbitrary<uint32_t>();
    const std::string failure = CheckOnGpu(op, example, run, seed, nullptr);
    if (!failure.empty()) RC_FAIL(failure);
  });
  EXPECT_TRUE(ok);
}

INSTANTIATE_TEST_SUITE_P(AllOps, GpuKernelTest, ::testing::ValuesIn(OpsUnderTest()), ParamName);

}  // namespace
}  // namespace spmd
