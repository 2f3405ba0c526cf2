// Views (Tensor::View, what reshape / flatten / squeeze / unsqueeze return) share their
// buffer copy-on-write. The property: over random sequences of views, deep copies, moves,
// writes and drops across many handles, every handle always reads exactly the values a
// model of independent arrays gives it (a write through one handle is never seen through
// another), every buffer is freed exactly once, and a view copies no bytes until written.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/tensor.h"
#include "rules/model/attrs.h"

namespace spmd::kernels {
namespace {

// Host memory, counted.
class CountingAllocator final : public Allocator {
 public:
  Device device() const override { return Device::Host(); }
  void* Allocate(size_t nbytes, Stream stream) override {
    ++allocations;
    return HostAllocator().Allocate(nbytes, stream);
  }
  void Deallocate(void* p, size_t nbytes, Stream stream) noexcept override {
    if (p != nullptr) ++deallocations;
    HostAllocator().Deallocate(p, nbytes, stream);
  }
  int64_t allocations = 0;
  int64_t deallocations = 0;
};

// A shape with `n` elements: n split into up to three factors, in a random order.
Shape RandomShapeOf(int64_t n, std::mt19937& rng) {
  Shape shape;
  int64_t left = n;
  for (int64_t f : {2, 3, 2}) {
    if (left % f == 0 && rng() % 2 == 0) {
      shape.push_back(f);
      left /= f;
    }
  }
  shape.push_back(left);
  if (rng() % 3 == 0) shape.insert(shape.begin() + static_cast<int64_t>(rng() % (shape.size() + 1)), 1);
  std::shuffle(shape.begin(), shape.end(), rng);
  return shape;
}

struct Handle {
  std::unique_ptr<Tensor> tensor;  // null once dropped or moved from
  std::vector<float> model;
};

void ExpectMatches(const std::vector<Handle>& handles, const std::string& where) {
  for (size_t h = 0; h < handles.size(); ++h) {
    if (!handles[h].tensor) continue;
    const Tensor& t = *handles[h].tensor;  // const: reading must not unshare
    ASSERT_EQ(t.numel(), static_cast<int64_t>(handles[h].model.size())) << where;
    for (size_t i = 0; i < handles[h].model.size(); ++i) {
      ASSERT_EQ(t.data<float>()[i], handles[h].model[i]) << where << ": handle " << h << " element " << i;
    }
  }
}

TEST(TensorView, AWriteThroughOneHandleIsNeverSeenThroughAnother) {
  std::mt19937 rng(20261203);
  for (int round = 0; round < 300; ++round) {
    CountingAllocator allocator;
    {
      const int64_t n = std::vector<int64_t>{1, 6, 12, 24}[rng() % 4];
      std::vector<Handle> handles;
      {
        Tensor first = Tensor::Uninitialized({n}, DType::kFloat32, allocator, Stream{});
        std::vector<float> model(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) model[i] = first.data<float>()[i] = static_cast<float>(i);
        handles.push_back({std::make_unique<Tensor>(std::move(first)), model});
      }
      std::string trace = "round " + std::to_string(round) + ":";
      for (int step = 0; step < 40; ++step) {
        const size_t h = rng() % handles.size();
        Handle& from = handles[h];
        if (!from.tensor) continue;
        switch (rng() % 6) {
          case 0:
          case 1: {  // a view: same bytes, no copy
            const Tensor& source = *from.tensor;
            Tensor view = source.View(RandomShapeOf(n, rng));
            EXPECT_TRUE(view.SharesBufferWith(source)) << trace;
            handles.push_back({std::make_unique<Tensor>(std::move(view)), from.model});
            trace += " view" + std::to_string(h);
            break;
          }
          case 2: {  // a deep copy
            handles.push_back({std::make_unique<Tensor>(*from.tensor), from.model});
            trace += " copy" + std::to_string(h);
            break;
          }
          case 3: {  // a move: the buffer (shared or not) goes with it
            auto moved = std::make_unique<Tensor>(std::move(*from.tensor));
            from.tensor.reset();
            handles.push_back({std::move(moved), from.model});
            trace += " move" + std::to_string(h);
            break;
          }
          case 4: {  // a write through the mutable accessor
            const size_t i = rng() % static_cast<size_t>(n);
            const float value = static_cast<float>(100 + step);
            from.tensor->data<float>()[i] = value;
            from.model[i] = value;
            trace += " write" + std::to_string(h);
            break;
          }
          case 5: {  // a drop
            from.tensor.reset();
            trace += " drop" + std::to_string(h);
            break;
          }
        }
        ExpectMatches(handles, trace);
        if (HasFatalFailure()) return;
      }
    }
    EXPECT_EQ(allocator.allocations, allocator.deallocations) << "round " << round;
  }
}

TEST(TensorView, ReshapeClassKernelsCopyNoBytesAndStayCopyOnWrite) {
  Tensor x = Tensor::FromVector<float>({2, 3}, {0, 1, 2, 3, 4, 5});
  Backend& cpu = BackendFor(Device::Host());
  const struct {
    const char* op;
    Attrs attrs;
  } cases[] = {{"reshape", Attrs().With("shape", std::vector<int64_t>{3, 2})},
               {"flatten", Attrs().With("start_axis", int64_t{0}).With("stop_axis", int64_t{-1})},
               {"unsqueeze", Attrs().With("axis", std::vector<int64_t>{0})},
               {"squeeze", Attrs().With("axis", std::vector<int64_t>{})}};
  for (const auto& c : cases) {
    Tensors out = cpu.RunKernel(c.op, TensorArgs(std::vector<const Tensor*>{&x}), c.attrs);
    ASSERT_EQ(out.size(), 1u) << c.op;
    EXPECT_TRUE(out[0].SharesBufferWith(x)) << c.op;
    out[0].data<float>()[0] = 7;  // the output's write leaves x as it was
    EXPECT_EQ(x.data<float>()[0], 0.0f) << c.op;
    EXPECT_FALSE(out[0].SharesBufferWith(x)) << c.op;
  }
  Tensors kept = cpu.RunKernel("flatten", TensorArgs(std::vector<const Tensor*>{&x}), cases[1].attrs);
  x.data<float>()[5] = -1;  // and x's write leaves the output as it was
  EXPECT_EQ(kept[0].data<float>()[5], 5.0f);
}

TEST(TensorView, AViewOfTheWrongSizeIsATypedError) {
  const Tensor x({2, 3}, DType::kFloat32);
  try {
    (void)x.View({4});
    ADD_FAILURE() << "no error";
  } catch (const SpmdError& e) {
    EXPECT_EQ(e.field(), "shape");
  }
  const Tensor empty({0, 3}, DType::kFloat32);  // no buffer to share: a fresh empty tensor
  EXPECT_EQ(empty.View({3, 0}).shape(), (Shape{3, 0}));
}

}  // namespace
}  // namespace spmd::kernels
