// The CUDA kernel table (kernels/cuda/registry.h) and RunCudaKernel's checks that come
// before any device work: these run without a GPU.
#include "kernels/cuda/registry.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/cuda/cuda.h"
#include "rules/model/error.h"
#include "rules/ops/exchange_ops.h"
#include "rules/engine/op_list.h"
#include "rules/engine/phase.h"

namespace spmd::kernels::cuda {
namespace {

// The table is generated from the op list (a missing kernel does not link); these check
// that the lookup by name finds each one under its op's name, and nothing else.
TEST(CudaKernelTable, FindsEveryOpAndPhaseByItsName) {
#define SPMD_TEST_FIND(name) EXPECT_EQ(FindCudaKernel(#name), ops::name.fn) << #name;
  SPMD_FOR_EACH_OP(SPMD_TEST_FIND)
#undef SPMD_TEST_FIND
#define SPMD_TEST_FIND_PHASES(name)                                                                \
  EXPECT_EQ(FindCudaKernel(KernelRef(#name, Phase::kStats)), ops::name##_stats.fn) << #name " stats";  \
  EXPECT_EQ(FindCudaKernel(KernelRef(#name, Phase::kFinish)), ops::name##_finish.fn) << #name " finish"; \
  EXPECT_NE(ops::name##_stats.fn, ops::name.fn) << #name;
  SPMD_FOR_EACH_EXCHANGE_OP(SPMD_TEST_FIND_PHASES)
#undef SPMD_TEST_FIND_PHASES
  EXPECT_EQ(FindCudaKernel("no_such_op"), nullptr);
  EXPECT_EQ(FindCudaKernel(KernelRef("matmul", Phase::kStats)), nullptr);  // matmul has no exchange
  EXPECT_EQ(FindCudaKernel("Scatter"), nullptr);       // one name per op: the op's
}

TEST(CudaKernelTable, EveryKernelIsAFunction) {
#define SPMD_TEST_FN(name) EXPECT_NE(ops::name.fn, nullptr) << #name;
  SPMD_FOR_EACH_OP(SPMD_TEST_FN)
#undef SPMD_TEST_FN
}

TEST(RunCudaKernel, UnknownOpsAreTypedErrors) {
  const Tensor x(Shape{2}, DType::kFloat32);
  try {
    RunCudaKernel("no_such_op", TensorArgs(std::vector<const Tensor*>{&x}), Attrs{});
    FAIL() << "no error";
  } catch (const SpmdError& e) {
    EXPECT_EQ(e.type(), ErrorType::kUnknownOp);
    EXPECT_EQ(e.field(), "op");
  }
}

TEST(RunCudaKernel, APhaseOfAnOpWithoutAnExchangeIsATypedError) {
  const Tensor x(Shape{2}, DType::kFloat32);
  try {
    RunCudaKernel(KernelRef("matmul", Phase::kFinish), TensorArgs(std::vector<const Tensor*>{&x}), Attrs{});
    FAIL() << "no error";
  } catch (const SpmdError& e) {
    EXPECT_EQ(e.type(), ErrorType::kUnknownOp);
    EXPECT_EQ(e.field(), "op");
    EXPECT_NE(std::string(e.what()).find("finish phase"), std::string::npos) << e.what();
  }
}

TEST(RunCudaKernel, HostInputsAreRefusedNamingTheInput) {
  const Tensor x(Shape{2}, DType::kFloat32);
  try {
    RunCudaKernel("add", TensorArgs(std::vector<const Tensor*>{&x, &x}), Attrs{});
    FAIL() << "no error";
  } catch (const SpmdError& e) {
    EXPECT_EQ(e.type(), ErrorType::kInvalidArgument);
    EXPECT_EQ(e.field(), "inputs[0].device");
  }
}

TEST(EnableCuda, WithoutADeviceIsUnsupportedWithTheReason) {
  std::string why;
  if (DeviceCount(&why) > 0) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_FALSE(why.empty());
  try {
    EnableCuda();
    FAIL() << "no error";
  } catch (const SpmdError& e) {
    EXPECT_EQ(e.type(), ErrorType::kUnsupported);
    EXPECT_EQ(e.field(), "device");
  }
  try {
    ToDevice(Tensor(Shape{2}, DType::kFloat32), Device::Cuda(0));
    FAIL() << "no error";
  } catch (const SpmdError& e) {
    EXPECT_EQ(e.field(), "device");
  }
}

}  // namespace
}  // namespace spmd::kernels::cuda
