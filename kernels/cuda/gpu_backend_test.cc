// The CUDA backend against the CPU backend on random inputs: Copy (overlapping ranges
// included), CopyBox, Fill, Scale, Reduce, ToTruth; the pool allocator; device tensors;
// ConvertOnDevice and PermuteOnDevice. Skipped without a GPU.
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cuda/cuda.h"
#include "kernels/cuda/gpu_test_util.h"
#include "kernels/cuda/permute.h"
#include "rules/model/error.h"

namespace spmd::kernels::cuda {
namespace {

using testing::Mismatch;
using testing::OnGpu;
using testing::Tolerance;
using testing::VisitDType;

constexpr DType kAll[] = {DType::kFloat64, DType::kFloat32, DType::kInt64,
                          DType::kBool,    DType::kBFloat16, DType::kFloat16};

Backend& Gpu() { return BackendFor(Device::Cuda(0)); }

// `count` random elements of `dtype` (any bits for the floats, so NaNs and infinities
// come up; 0 / 1 for bool; small or any int64).
Tensor RandomHost(DType dtype, int64_t count) {
  Tensor t = Tensor::Uninitialized({count}, dtype);
  VisitDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data<T>();
    for (int64_t i = 0; i < count; ++i) {
      if constexpr (std::is_same_v<T, bool>) {
        p[i] = *rc::gen::arbitrary<bool>();
      } else if constexpr (std::is_same_v<T, int64_t>) {
        p[i] = *rc::gen::oneOf(rc::gen::inRange<int64_t>(-9, 10), rc::gen::arbitrary<int64_t>());
      } else if constexpr (std::is_same_v<T, BFloat16> || std::is_same_v<T, Float16>) {
        p[i] = T::FromBits(*rc::gen::oneOf(rc::gen::arbitrary<uint16_t>(),
                                           rc::gen::element<uint16_t>(0, 0x8000, 0x3f80, 0x3c00)));
      } else {
        p[i] = static_cast<T>(*rc::gen::oneOf(rc::gen::inRange(-50, 50), rc::gen::element(0, 1, -1))) / T(4) +
               (*rc::gen::inRange(0, 20) == 0 ? T(NAN) : T(0));
      }
    }
  });
  return t;
}

void Sync() { Gpu().Synchronize(Stream{}); }

SPMD_GPU_PROP(CudaBackend, CopyIsMemmoveEvenWhenRangesOverlap) {
  const int64_t n = *rc::gen::inRange<int64_t>(1, 5000);
  const Tensor host = RandomHost(DType::kFloat32, n);
  Tensor dev = OnGpu(host);
  const int64_t bytes = n * 4;
  const int64_t from = *rc::gen::inRange<int64_t>(0, bytes);
  const int64_t to = *rc::gen::inRange<int64_t>(0, bytes);
  const int64_t len = *rc::gen::inRange<int64_t>(0, bytes - std::max(from, to) + 1);
  Tensor want = host;
  std::memmove(want.bytes() + to, want.bytes() + from, static_cast<size_t>(len));
  Gpu().Copy(dev.bytes() + to, dev.bytes() + from, static_cast<size_t>(len), Stream{});
  const Tensor got = ToHost(dev);
  RC_ASSERT(std::memcmp(got.bytes(), want.bytes(), static_cast<size_t>(bytes)) == 0);
}

SPMD_GPU_PROP(CudaBackend, CopyBoxMatchesTheCpuBackend) {
  const int rank = *rc::gen::inRange(0, 6);
  const DType dtype = *rc::gen::elementOf(std::vector<DType>(std::begin(kAll), std::end(kAll)));
  const size_t e = static_cast<size_t>(ElementSize(dtype));
  Shape src_shape(rank), dst_shape(rank), extent(rank), src_at(rank), dst_at(rank);
  for (int d = 0; d < rank; ++d) {
    extent[d] = *rc::gen::inRange<int64_t>(0, 6);
    src_at[d] = *rc::gen::inRange<int64_t>(0, 3);
    dst_at[d] = *rc::gen::inRange<int64_t>(0, 3);
    src_shape[d] = src_at[d] + extent[d] + *rc::gen::element<int64_t>(0, 0, 1, 2);
    dst_shape[d] = dst_at[d] + extent[d] + *rc::gen::element<int64_t>(0, 0, 1, 3);
    if (*rc::gen::inRange(0, 2) == 0) {
      src_at[d] = dst_at[d] = 0;
      src_shape[d] = dst_shape[d] = extent[d];
    }
  }
  Tensor src = RandomHost(dtype, NumElements(src_shape));
  src.Reshape(src_shape);
  Tensor want = RandomHost(dtype, NumElements(dst_shape));
  want.Reshape(dst_shape);
  Tensor dev_src = OnGpu(src), dev_dst = OnGpu(want);
  CpuBackend().CopyBox(src.bytes(), src_shape, src_at, want.bytes(), dst_shape, dst_at, extent, e, Stream{});
  Gpu().CopyBox(dev_src.bytes(), src_shape, src_at, dev_dst.bytes(), dst_shape, dst_at, extent, e, Stream{});
  const Tensor got = ToHost(dev_dst);
  RC_ASSERT(want.nbytes() == 0 || std::memcmp(got.bytes(), want.bytes(), want.nbytes()) == 0);
}

TEST(CudaBackend, CopyBoxOfManyDimsLoopsOnTheHost) {
  SPMD_REQUIRE_GPU();
  // 12 dims that cannot merge: more than one launch takes.
  const Shape src_shape(12, 3), extent(12, 2), at(12, 1);
  Tensor src = Tensor::Uninitialized(src_shape, DType::kFloat32);
  for (int64_t i = 0; i < src.numel(); ++i) src.data<float>()[i] = static_cast<float>(i);
  Tensor want(extent, DType::kFloat32);
  CpuBackend().CopyBox(src.bytes(), src_shape, at, want.bytes(), extent, Shape(12, 0), extent, 4, Stream{});
  Tensor dev_src = OnGpu(src), dev_dst = OnGpu(Tensor(extent, DType::kFloat32));
  Gpu().CopyBox(dev_src.bytes(), src_shape, at, dev_dst.bytes(), extent, Shape(12, 0), extent, 4, Stream{});
  EXPECT_TRUE(ToHost(dev_dst) == want);
}

TEST(CudaBackend, FillMatchesTheCpuBackend) {
  SPMD_REQUIRE_GPU();
  for (DType d : kAll) {
    for (double value : {0.0, 1.0, -1.0, 0.5, -0.0}) {
      for (int64_t n : {1, 7, 1000, 4099}) {
        Tensor want = Tensor::Uninitialized({n}, d);
        CpuBackend().Fill(want.bytes(), n, d, value, Stream{});
        Tensor dev = OnGpu(Tensor(Shape{n + 3}, d));  // the 3 past the end stay 0
        Gpu().Fill(dev.bytes(), n, d, value, Stream{});
        const Tensor got = ToHost(dev);
        EXPECT_EQ(std::memcmp(got.bytes(), want.bytes(), want.nbytes()), 0) << ToString(d) << " " << value;
        for (size_t b = want.nbytes(); b < got.nbytes(); ++b) EXPECT_EQ(got.bytes()[b], std::byte{0});
      }
    }
  }
}

SPMD_GPU_PROP(CudaBackend, ScaleMatchesTheCpuBackend) {
  const DType dtype = *rc::gen::element(DType::kFloat64, DType::kFloat32, DType::kInt64, DType::kBFloat16,
                                        DType::kFloat16);
  const int64_t count = *rc::gen::inRange<int64_t>(0, 3000);
  const int64_t n = *rc::gen::inRange<int64_t>(1, 9);
  const bool divide = *rc::gen::arbitrary<bool>();
  Tensor want = RandomHost(dtype, count);
  Tensor dev = OnGpu(want);
  CpuBackend().Scale(want.bytes(), count, dtype, n, divide, Stream{});
  Gpu().Scale(dev.bytes(), count, dtype, n, divide, Stream{});
  const Tensor got = ToHost(dev);
  RC_ASSERT(Mismatch(want, got, Tolerance{}) == "");
}

SPMD_GPU_PROP(CudaBackend, ReduceMatchesTheCpuBackend) {
  const DType dtype = *rc::gen::elementOf(std::vector<DType>(std::begin(kAll), std::end(kAll)));
  const ReduceOp op = *rc::gen::element(ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kProd, ReduceOp::kMax,
                                        ReduceOp::kMin, ReduceOp::kAny, ReduceOp::kAll);
  const int64_t count = *rc::gen::inRange<int64_t>(0, 3000);
  const bool alias = *rc::gen::inRange(0, 4) == 0;
  Tensor acc = RandomHost(dtype, count), in = RandomHost(dtype, count);
  if (op == ReduceOp::kAny || op == ReduceOp::kAll) {  // inputs as ToTruth leaves them
    CpuBackend().ToTruth(acc.bytes(), acc.bytes(), count, dtype, Stream{});
    CpuBackend().ToTruth(in.bytes(), in.bytes(), count, dtype, Stream{});
  }
  Tensor dev_acc = OnGpu(acc), dev_in = OnGpu(in);
  bool cpu_threw = false, gpu_threw = false;
  try {
    CpuBackend().Reduce(acc.bytes(), alias ? acc.bytes() : in.bytes(), count, dtype, op, Stream{});
  } catch (const SpmdError& e) {
    cpu_threw = true;
    RC_ASSERT(e.field() == "op");
  }
  try {
    Gpu().Reduce(dev_acc.bytes(), alias ? dev_acc.bytes() : dev_in.bytes(), count, dtype, op, Stream{});
  } catch (const SpmdError& e) {
    gpu_threw = true;
    RC_ASSERT(e.field() == "op");
    RC_ASSERT(e.type() == ErrorType::kUnsupported);
  }
  RC_ASSERT(cpu_threw == gpu_threw);
  const Tensor got = ToHost(dev_acc);
  RC_ASSERT(Mismatch(acc, got, Tolerance{}) == "");
}

SPMD_GPU_PROP(CudaBackend, ToTruthMatchesTheCpuBackend) {
  const DType dtype = *rc::gen::elementOf(std::vector<DType>(std::begin(kAll), std::end(kAll)));
  const int64_t count = *rc::gen::inRange<int64_t>(0, 3000);
  const bool in_place = *rc::gen::arbitrary<bool>();
  const Tensor x = RandomHost(dtype, count);
  Tensor want = Tensor::Uninitialized({count}, dtype);
  CpuBackend().ToTruth(x.bytes(), want.bytes(), count, dtype, Stream{});
  Tensor dev_x = OnGpu(x);
  Tensor dev_out = in_place ? Tensor() : OnGpu(Tensor(Shape{count}, dtype));
  Tensor& target = in_place ? dev_x : dev_out;
  Gpu().ToTruth(dev_x.bytes(), target.bytes(), count, dtype, Stream{});
  const Tensor got = ToHost(target);
  RC_ASSERT(std::memcmp(got.bytes(), want.bytes(), want.nbytes()) == 0);
}

TEST(CudaBackend, BadBuffersAndDtypesAreTypedErrors) {
  SPMD_REQUIRE_GPU();
  Tensor host(Shape{4}, DType::kFloat32);
  Tensor dev = OnGpu(host);
  EXPECT_THROW(Gpu().Fill(host.bytes(), 4, DType::kFloat32, 1.0, Stream{}), SpmdError);
  try {
    Gpu().Scale(dev.bytes(), 4, DType::kBool, 2, false, Stream{});
    FAIL();
  } catch (const SpmdError& e) {
    EXPECT_EQ(e.field(), "dtype");
  }
  try {
    Gpu().AllocatorFor(Device::Host());
    FAIL();
  } catch (const SpmdError& e) {
    EXPECT_EQ(e.field(), "device");
  }
  EXPECT_EQ(Gpu().kind(), DeviceKind::kCuda);
}

TEST(CudaAllocator, PoolBlocksAreAlignedAndCounted) {
  SPMD_REQUIRE_GPU();
  Allocator& pool = Gpu().AllocatorFor(Device::Cuda(0));
  EXPECT_EQ(pool.device(), Device::Cuda(0));
  EXPECT_EQ(pool.Allocate(0, Stream{}), nullptr);
  const PoolUsage before = MemoryUsage(Device::Cuda(0));
  std::vector<void*> blocks;
  for (size_t n : {1, 63, 64, 65, 1000, 1 << 20}) {
    void* p = pool.Allocate(n, Stream{});
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kTensorAlignment, 0u) << n;
    blocks.push_back(p);
  }
  const PoolUsage during = MemoryUsage(Device::Cuda(0));
  const int64_t sizes = 256 + 256 + 256 + 256 + 1024 + (1 << 20);
  EXPECT_EQ(during.bytes_in_use - before.bytes_in_use, sizes);
  EXPECT_EQ(during.live_blocks - before.live_blocks, 6);
  EXPECT_GE(during.peak_bytes, during.bytes_in_use);
  size_t k = 0;
  for (size_t n : {1, 63, 64, 65, 1000, 1 << 20}) pool.Deallocate(blocks[k++], n, Stream{});
  const PoolUsage after = MemoryUsage(Device::Cuda(0));
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  EXPECT_EQ(after.live_blocks, before.live_blocks);
  Sync();
  // Freed memory stays in the pool: the same size again is served (and counted) again.
  void* again = pool.Allocate(1 << 20, Stream{});
  EXPECT_NE(again, nullptr);
  pool.Deallocate(again, 1 << 20, Stream{});
  ReleaseCachedMemory(Device::Cuda(0));
}

TEST(CudaTensor, CopiesMovesAndRoundTrips) {
  SPMD_REQUIRE_GPU();
  Tensor host = Tensor::FromVector<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor dev = OnGpu(host);
  EXPECT_EQ(dev.device(), Device::Cuda(0));
  EXPECT_THROW(dev.data<float>(), SpmdError);
  Tensor copy = dev;  // a device copy through the backend
  Tensor moved = std::move(dev);
  EXPECT_TRUE(ToHost(copy) == host);
  EXPECT_TRUE(ToHost(moved) == host);
  const Stream s = NewStream(Device::Cuda(0));
  Tensor on_stream = ToDevice(host, Device::Cuda(0), s);
  EXPECT_EQ(on_stream.stream(), s);
  EXPECT_TRUE(ToHost(on_stream) == host);
  EXPECT_TRUE(ToHost(OnGpu(Tensor(Shape{0, 3}, DType::kBFloat16))) == Tensor(Shape{0, 3}, DType::kBFloat16));
}

SPMD_GPU_PROP(CudaConvert, ConvertOnDeviceIsTheCpuCast) {
  const DType from = *rc::gen::elementOf(std::vector<DType>(std::begin(kAll), std::end(kAll)));
  const DType to = *rc::gen::elementOf(std::vector<DType>(std::begin(kAll), std::end(kAll)));
  const Tensor x = RandomHost(from, *rc::gen::inRange<int64_t>(1, 2000));
  Attrs attrs;
  attrs.Set("dtype", std::string(ToString(to)));
  const std::string diff = testing::SameOutcome(
      [&] { return RunCpuKernel("cast", {x}, attrs); },
      [&] { return TensorList(ConvertOnDevice(OnGpu(x), to)); },
      [&](const Tensors& want, const Tensors& got) {
        const Tensor h = ToHost(got[0]);
        return std::memcmp(h.bytes(), want[0].bytes(), want[0].nbytes()) == 0 || Mismatch(want[0], h, Tolerance{}) == ""
                   ? std::string()
                   : Mismatch(want[0], h, Tolerance{}) + " (bits differ)";
      });
  RC_ASSERT(diff == "");
}

SPMD_GPU_PROP(CudaPermute, PermuteOnDeviceIsTheCpuTranspose) {
  const int rank = *rc::gen::inRange(0, 6);
  Shape shape(rank);
  for (int64_t& d : shape) d = *rc::gen::inRange<int64_t>(0, 7);
  if (rank > 0 && *rc::gen::inRange(0, 4) == 0) shape[rank - 1] = *rc::gen::inRange<int64_t>(30, 300);
  std::vector<int64_t> perm(rank);
  for (int i = 0; i < rank; ++i) perm[i] = i;
  for (int i = rank - 1; i > 0; --i) std::swap(perm[i], perm[*rc::gen::inRange(0, i + 1)]);
  const DType dtype = *rc::gen::elementOf(std::vector<DType>(std::begin(kAll), std::end(kAll)));
  Tensor x = RandomHost(dtype, NumElements(shape));
  x.Reshape(shape);
  Attrs attrs;
  attrs.Set("perm", perm);
  const Tensor want = RunCpuKernel("transpose", {x}, attrs)[0];
  const Tensor got = ToHost(PermuteOnDevice(OnGpu(x), perm));
  RC_ASSERT(got.shape() == want.shape());
  RC_ASSERT(want.nbytes() == 0 || std::memcmp(got.bytes(), want.bytes(), want.nbytes()) == 0);
}

}  // namespace
}  // namespace spmd::kernels::cuda
