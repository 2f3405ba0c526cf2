// The CUDA kernel table (kernels/cuda/registry.h) and RunCudaKernel's checks that come
// before any device work: these run without a GPU.
#include "kernels/cuda/registry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "kernels/cuda/cuda.h"
#include "rules/error.h"
#include "rules/op_list.h"

namespace spmd::kernels::cuda {
namespace {

const std::vector<std::string>& AllOps() {
  static const std::vector<std::string> ops = {
#define SPMD_TEST_OP_NAME(name) #name,
      SPMD_FOR_EACH_OP(SPMD_TEST_OP_NAME)
#undef SPMD_TEST_OP_NAME
  };
  return ops;
}

// The ops of kernels/cpu/elementwise.cc: this branch's kernels (kernels/cuda/elementwise.cu).
const std::vector<std::string> kElementwise = {
    "relu",     "gelu",     "silu",     "exp",      "log",          "tanh",      "sigmoid",
    "sqrt",     "abs",      "scale",    "clip",     "cast",         "add",       "subtract",
    "multiply", "divide",   "maximum",  "minimum",  "greater_than", "less_than", "where",
    "gelu_grad", "pow",     "rsqrt",    "add_n"};

TEST(KernelTable, OpsWithoutCudaKernelNamesExactlyTheUnregisteredOps) {
  const std::vector<std::string> missing = OpsWithoutCudaKernel();
  // In op-list order, no repeats, each one a real op with no kernel; every other op has one.
  std::vector<std::string> want;
  for (const std::string& op : AllOps()) {
    if (FindCudaKernel(op) == nullptr) want.push_back(op);
  }
  EXPECT_EQ(missing, want);
  EXPECT_EQ(std::set<std::string>(missing.begin(), missing.end()).size(), missing.size());
  for (const std::string& op : kElementwise) {
    EXPECT_NE(FindCudaKernel(op), nullptr) << op;
    EXPECT_EQ(std::count(missing.begin(), missing.end(), op), 0) << op;
  }
  EXPECT_EQ(FindCudaKernel("no_such_op"), nullptr);
  // Every op has one (checked here, without a GPU, so a CPU-only CI names a new op that
  // lacks its CUDA kernel).
  std::string list;
  for (const std::string& op : missing) list += op + " ";
  EXPECT_TRUE(missing.empty()) << "ops without a CUDA kernel (" << missing.size() << " of "
                               << AllOps().size() << "): " << list;
}

TEST(KernelTable, ASecondKernelForOneOpIsRefused) {
  KernelTable table;
  RegisterElementwiseKernels(table);
  EXPECT_NE(table.Find("add"), nullptr);
  EXPECT_TRUE(table.Find("add")->takes_half);
  EXPECT_EQ(table.Find("matmul"), nullptr);
  EXPECT_THROW(RegisterElementwiseKernels(table), std::logic_error);
}

TEST(RunCudaKernel, UnknownAndMissingOpsAreTypedErrors) {
  const Tensor x(Shape{2}, DType::kFloat32);
  try {
    RunCudaKernel("no_such_op", TensorArgs(std::vector<const Tensor*>{&x}), Attrs{});
    FAIL() << "no error";
  } catch (const SpmdError& e) {
    EXPECT_EQ(e.type(), ErrorType::kUnknownOp);
    EXPECT_EQ(e.field(), "op");
  }
  const std::vector<std::string> missing = OpsWithoutCudaKernel();
  if (!missing.empty()) {
    try {
      RunCudaKernel(missing[0], TensorArgs(std::vector<const Tensor*>{&x}), Attrs{});
      FAIL() << "no error";
    } catch (const SpmdError& e) {
      EXPECT_EQ(e.type(), ErrorType::kUnsupported);
      EXPECT_EQ(e.field(), "op");
    }
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
