// The checks of kernels/backend_checks.h as every backend built here meets them: the same
// bad request to the CPU backend and to the sim backend is refused with the same error type
// naming the same field, before either touches its device. (The CUDA backend calls the same
// header; its own tests run the requests on a GPU.)
#include "kernels/backend_checks.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/sim/sim.h"
#include "rules/model/half.h"

namespace spmd::kernels {
namespace {

// One backend with tensors on its own device and on another one.
struct Side {
  std::string name;
  Backend* backend;
  Device own;
  std::function<Tensor(const Tensor&)> to_own;    // a host tensor onto `own`
  std::function<Tensor(const Tensor&)> to_other;  // a host tensor onto a device of another backend
};

std::vector<Side> Sides() {
  const auto host = [](const Tensor& t) { return t; };
  const auto sim0 = [](const Tensor& t) { return sim::ToDevice(t, Device::Sim(0)); };
  return {{"cpu", &BackendFor(Device::Host()), Device::Host(), host, sim0},
          {"sim", &sim::EnableSim(), Device::Sim(0), sim0, host}};
}

Tensor F32(int64_t n) { return Tensor::FromVector<float>({n}, std::vector<float>(n, 1.0f)); }
Tensor Bf16(int64_t n) { return Tensor::FromVector<BFloat16>({n}, std::vector<BFloat16>(n, BFloat16(1.0f))); }

struct Request {
  std::string what;
  ErrorType type;
  std::string field;
  std::function<void(const Side&)> call;
};

std::vector<Request> Requests() {
  auto run = [](const Side& s, const std::vector<Tensor>& ts) {
    std::vector<const Tensor*> args;
    for (const Tensor& t : ts) args.push_back(&t);
    (void)s.backend->RunKernel("add", TensorArgs(std::move(args)), Attrs());
  };
  return {
      {"an allocator of a CUDA device", ErrorType::kInvalidArgument, "device",
       [](const Side& s) { (void)s.backend->AllocatorFor(Device::Cuda(0)); }},
      {"an allocator of the other backend's device", ErrorType::kInvalidArgument, "device",
       [](const Side& s) {
         (void)s.backend->AllocatorFor(s.own.is_host() ? Device::Sim(0) : Device::Host());
       }},
      {"inputs[1] on another device", ErrorType::kInvalidArgument, "inputs[1].device",
       [run](const Side& s) { run(s, {s.to_own(F32(2)), s.to_other(F32(2))}); }},
      {"inputs[0] on another device", ErrorType::kInvalidArgument, "inputs[0].device",
       [run](const Side& s) { run(s, {s.to_other(F32(2)), s.to_own(F32(2))}); }},
      {"bfloat16 beside float32", ErrorType::kInvalidArgument, "inputs[1].dtype",
       [run](const Side& s) { run(s, {s.to_own(Bf16(2)), s.to_own(F32(2))}); }},
      {"float32 beside bfloat16", ErrorType::kInvalidArgument, "inputs[0].dtype",
       [run](const Side& s) { run(s, {s.to_own(F32(2)), s.to_own(Bf16(2))}); }},
      {"a null host source", ErrorType::kInvalidArgument, "host_src",
       [](const Side& s) {
         Tensor t = s.to_own(F32(2));
         s.backend->CopyFromHost(t.bytes(), nullptr, t.nbytes(), t.stream());
       }},
      {"a null host destination", ErrorType::kInvalidArgument, "host_dst",
       [](const Side& s) {
         Tensor t = s.to_own(F32(2));
         s.backend->CopyToHost(nullptr, t.bytes(), t.nbytes(), t.stream());
       }},
      {"scaling bool", ErrorType::kUnsupported, "dtype",
       [](const Side& s) {
         Tensor t = s.to_own(Tensor({2}, DType::kBool));
         s.backend->Scale(t.bytes(), 2, DType::kBool, 2, false, t.stream());
       }},
      {"sum of bool", ErrorType::kUnsupported, "op",
       [](const Side& s) {
         Tensor t = s.to_own(Tensor({2}, DType::kBool));
         s.backend->Reduce(t.bytes(), t.bytes(), 2, DType::kBool, ReduceOp::kSum, t.stream());
       }},
      {"avg of bool", ErrorType::kUnsupported, "op",
       [](const Side& s) {
         Tensor t = s.to_own(Tensor({2}, DType::kBool));
         s.backend->Reduce(t.bytes(), t.bytes(), 2, DType::kBool, ReduceOp::kAvg, t.stream());
       }},
  };
}

TEST(BackendChecks, EveryBackendRefusesTheSameRequestsNamingTheSameField) {
  for (const Side& side : Sides()) {
    for (const Request& r : Requests()) {
      SCOPED_TRACE(side.name + ": " + r.what);
      try {
        r.call(side);
        ADD_FAILURE() << "accepted";
      } catch (const SpmdError& e) {
        EXPECT_EQ(e.type(), r.type) << e.what();
        EXPECT_EQ(e.field(), r.field) << e.what();
      }
    }
  }
}

// What the refusals leave allowed, on both backends: bool reduces by max / min / any / all /
// prod, a zero-byte host copy takes a null pointer, the 2-byte dtypes run beside integers.
TEST(BackendChecks, WhatTheChecksAllowRuns) {
  for (const Side& side : Sides()) {
    SCOPED_TRACE(side.name);
    Tensor t = side.to_own(Tensor({2}, DType::kBool));
    for (ReduceOp op : {ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAny, ReduceOp::kAll, ReduceOp::kProd}) {
      EXPECT_NO_THROW(side.backend->Reduce(t.bytes(), t.bytes(), 2, DType::kBool, op, t.stream()));
    }
    EXPECT_NO_THROW(side.backend->CopyFromHost(t.bytes(), nullptr, 0, t.stream()));
    EXPECT_NO_THROW(side.backend->CopyToHost(nullptr, t.bytes(), 0, t.stream()));
    const Tensor a = side.to_own(Bf16(2));
    const Tensor b = side.to_own(Tensor::FromVector<int64_t>({2}, {1, 2}));
    std::vector<const Tensor*> args = {&a, &b};
    EXPECT_NO_THROW((void)side.backend->RunKernel("add", TensorArgs(args), Attrs()));
    side.backend->Synchronize(t.stream());
  }
}

TEST(BackendChecks, DeviceIndexNamesTheDevicesThereAre) {
  using checks::CheckDeviceIndex;
  EXPECT_NO_THROW(CheckDeviceIndex(Device::Sim(7), DeviceKind::kSim, 8, "device"));
  for (Device d : {Device::Sim(8), Device::Sim(-1), Device::Cuda(0), Device::Host()}) {
    try {
      CheckDeviceIndex(d, DeviceKind::kSim, 8, "device");
      ADD_FAILURE() << ToString(d) << " accepted";
    } catch (const SpmdError& e) {
      EXPECT_EQ(e.field(), "device");
      EXPECT_NE(std::string(e.what()).find("8 visible"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace spmd::kernels
