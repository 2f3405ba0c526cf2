// The Tensor's device, stream and allocator: host tensors as before, and a tensor on another
// device (a fake "cuda:1" allocator handing out host memory) refusing typed host access
// with a typed error instead of reading device memory.
#include "kernels/tensor.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <vector>

#include "kernels/backend.h"
#include "rules/model/error.h"

namespace spmd::kernels {
namespace {

// Hands out host memory as if it were device memory of cuda:1, and counts.
class FakeDeviceAllocator final : public Allocator {
 public:
  Device device() const override { return Device::Cuda(1); }
  void* Allocate(size_t nbytes, Stream stream) override {
    ++allocations;
    last_stream = stream;
    return HostAllocator().Allocate(nbytes, stream);
  }
  void Deallocate(void* p, size_t nbytes, Stream stream) noexcept override {
    if (p != nullptr) ++deallocations;
    last_stream = stream;
    HostAllocator().Deallocate(p, nbytes, stream);
  }
  int allocations = 0;
  int deallocations = 0;
  Stream last_stream;
};

template <class Fn>
void ExpectError(Fn fn, ErrorType type, const std::string& field) {
  try {
    fn();
    ADD_FAILURE() << "no error, expected field " << field;
  } catch (const SpmdError& e) {
    EXPECT_EQ(e.type(), type) << e.what();
    EXPECT_EQ(e.field(), field) << e.what();
  }
}

TEST(Tensor, HostTensorsAreAlignedOnTheHostOnTheNullStream) {
  for (int64_t n : {1, 3, 17, 1000}) {
    const Tensor t({n}, DType::kFloat32);
    EXPECT_EQ(t.device(), Device::Host());
    EXPECT_EQ(t.stream(), Stream{});
    EXPECT_EQ(&t.allocator(), &HostAllocator());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.bytes()) % kTensorAlignment, 0u);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(t.data<float>()[i], 0.0f);
  }
  EXPECT_EQ(Tensor({0}, DType::kFloat64).bytes(), nullptr);
}

TEST(Tensor, CopiesAreDeepAndMovesCarryTheBuffer) {
  Tensor a = Tensor::FromVector<int64_t>({2}, {4, 5});
  Tensor b = a;
  b.data<int64_t>()[0] = 9;
  EXPECT_EQ(a.data<int64_t>()[0], 4);
  const std::byte* buffer = b.bytes();
  Tensor c = std::move(b);
  EXPECT_EQ(c.bytes(), buffer);
  a = std::move(c);
  EXPECT_EQ(a.bytes(), buffer);
  EXPECT_EQ(a.data<int64_t>()[0], 9);
}

TEST(Tensor, ADeviceTensorRecordsItsDeviceStreamAndAllocator) {
  FakeDeviceAllocator device;
  int stream_tag = 0;
  const Stream stream{&stream_tag};
  {
    Tensor t = Tensor::Uninitialized({2, 3}, DType::kFloat32, device, stream);
    EXPECT_EQ(t.device(), Device::Cuda(1));
    EXPECT_EQ(t.stream(), stream);
    EXPECT_EQ(&t.allocator(), &device);
    EXPECT_EQ(device.last_stream, stream);
    EXPECT_NE(t.bytes(), nullptr);  // raw bytes are fine: a Backend or Communicator takes them
    Tensor moved = std::move(t);
    EXPECT_EQ(moved.device(), Device::Cuda(1));
  }
  EXPECT_EQ(device.allocations, 1);
  EXPECT_EQ(device.deallocations, 1);  // freed once, on its stream
  EXPECT_EQ(device.last_stream, stream);
}

TEST(Tensor, TypedHostAccessToADeviceTensorIsATypedError) {
  FakeDeviceAllocator device;
  Tensor t = Tensor::Uninitialized({4}, DType::kFloat32, device, Stream{});
  const Tensor& ct = t;
  ExpectError([&] { t.data<float>(); }, ErrorType::kInvalidArgument, "device");
  ExpectError([&] { ct.data<float>(); }, ErrorType::kInvalidArgument, "device");
  ExpectError([&] { (void)(t == t); }, ErrorType::kInvalidArgument, "device");
  // Copying needs the device's backend; this build has none for CUDA.
  ExpectError([&] { Tensor copy = t; }, ErrorType::kUnsupported, "device");
  ExpectError([&] { BackendFor(Device::Cuda(0)); }, ErrorType::kUnsupported, "device");
}

TEST(Tensor, TheCpuBackendRefusesDeviceInputs) {
  FakeDeviceAllocator device;
  Tensor t = Tensor::Uninitialized({4}, DType::kFloat32, device, Stream{});
  const Tensor host({4}, DType::kFloat32);
  std::vector<const Tensor*> inputs = {&host, &t};
  ExpectError([&] { BackendFor(Device::Host()).RunKernel("add", TensorArgs(inputs), {}); },
              ErrorType::kInvalidArgument, "inputs[1].device");
  ExpectError([&] { BackendFor(Device::Host()).AllocatorFor(Device::Cuda(0)); },
              ErrorType::kInvalidArgument, "device");
}

}  // namespace
}  // namespace spmd::kernels
