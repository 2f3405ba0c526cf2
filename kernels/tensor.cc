#include "kernels/tensor.h"

#include <cstring>

#include "kernels/backend.h"

namespace spmd::kernels {

int64_t NumElements(const Shape& shape) {
  for (int64_t d : shape) {
    if (d == 0) return 0;  // before multiplying: the other dims may be huge
  }
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeToString(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

void CheckShape(const Shape& shape, size_t element_size, const std::string& field) {
  const int64_t limit = (int64_t{1} << 62) / static_cast<int64_t>(element_size == 0 ? 1 : element_size);
  int64_t product = 1;
  for (int64_t d : shape) {
    if (d < 0) ThrowInvalid(field, "negative dim in " + ShapeToString(shape));
  }
  for (int64_t d : shape) {
    if (d == 0) continue;  // the non-zero dims are bounded too, so their products cannot overflow
    if (product > limit / d) ThrowInvalid(field, "too many elements in " + ShapeToString(shape));
    product *= d;
  }
}

struct Tensor::SharedBuffer {
  std::atomic<int64_t> holders;  // tensors holding `data`
  std::byte* data;
  size_t nbytes;
  Allocator* allocator;
  Stream stream;
};

Tensor::Tensor() : Tensor(Shape{}, DType::kFloat64) {}

Tensor::Tensor(Shape shape, DType dtype) : Tensor(std::move(shape), dtype, HostAllocator(), Stream{}) {
  if (nbytes() > 0) std::memset(data_, 0, nbytes());
}

Tensor Tensor::Uninitialized(Shape shape, DType dtype) {
  return Tensor(std::move(shape), dtype, HostAllocator(), Stream{});
}

Tensor Tensor::Uninitialized(Shape shape, DType dtype, Allocator& allocator, Stream stream) {
  return Tensor(std::move(shape), dtype, allocator, stream);
}

Tensor::Tensor(Shape shape, DType dtype, Allocator& allocator, Stream stream)
    : shape_(std::move(shape)), dtype_(dtype), allocator_(&allocator), stream_(stream) {
  element_size_ = ElementSize(dtype);
  CheckShape(shape_, element_size_, "shape");
  numel_ = NumElements(shape_);
  data_ = static_cast<std::byte*>(allocator_->Allocate(nbytes(), stream_));
}

Tensor::Tensor(const Tensor& other)
    : Tensor(other.shape_, other.dtype_, *other.allocator_, other.stream_) {
  if (nbytes() == 0) return;
  if (device().is_host()) {
    std::memcpy(data_, other.data_, nbytes());
  } else {
    BackendFor(device()).Copy(data_, other.data_, nbytes(), stream_);
  }
}

Tensor& Tensor::operator=(const Tensor& other) {
  if (this != &other) {
    Tensor copy(other);
    *this = std::move(copy);
  }
  return *this;
}

Tensor::Tensor(Tensor&& other) noexcept
    : shape_(std::move(other.shape_)),
      dtype_(other.dtype_),
      numel_(other.numel_),
      element_size_(other.element_size_),
      allocator_(other.allocator_),
      stream_(other.stream_),
      data_(other.data_),
      shared_(other.shared_.exchange(nullptr, std::memory_order_acq_rel)) {
  other.data_ = nullptr;
}

Tensor& Tensor::operator=(Tensor&& other) noexcept {
  if (this != &other) {
    Release();
    shape_ = std::move(other.shape_);
    dtype_ = other.dtype_;
    numel_ = other.numel_;
    element_size_ = other.element_size_;
    allocator_ = other.allocator_;
    stream_ = other.stream_;
    data_ = other.data_;
    shared_.store(other.shared_.exchange(nullptr, std::memory_order_acq_rel), std::memory_order_release);
    other.data_ = nullptr;
  }
  return *this;
}

Tensor::~Tensor() { Release(); }

void Tensor::Release() noexcept {
  SharedBuffer* shared = shared_.exchange(nullptr, std::memory_order_acq_rel);
  if (shared != nullptr) {
    if (shared->holders.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      shared->allocator->Deallocate(shared->data, shared->nbytes, shared->stream);
      delete shared;
    }
  } else if (data_ != nullptr) {
    allocator_->Deallocate(data_, nbytes(), stream_);
  }
  data_ = nullptr;
}

void Tensor::Unshare() {
  SharedBuffer* shared = shared_.load(std::memory_order_acquire);
  if (shared == nullptr) return;
  if (shared->holders.load(std::memory_order_acquire) == 1) {  // the other holders are gone
    shared_.store(nullptr, std::memory_order_release);
    delete shared;
    return;
  }
  auto* own = static_cast<std::byte*>(allocator_->Allocate(nbytes(), stream_));
  if (device().is_host()) {
    std::memcpy(own, data_, nbytes());
  } else {
    BackendFor(device()).Copy(own, data_, nbytes(), stream_);
  }
  data_ = own;
  shared_.store(nullptr, std::memory_order_release);
  if (shared->holders.fetch_sub(1, std::memory_order_acq_rel) == 1) {  // they let go meanwhile
    shared->allocator->Deallocate(shared->data, shared->nbytes, shared->stream);
    delete shared;
  }
}

Tensor Tensor::View(Shape shape) const {
  CheckShape(shape, element_size_, "shape");
  if (NumElements(shape) != numel_) {
    ThrowInvalid("shape", ShapeToString(shape) + " does not hold the " + std::to_string(numel_) +
                              " elements of " + ShapeToString(shape_));
  }
  // An empty tensor has no buffer to share.
  if (data_ == nullptr || nbytes() == 0) return Tensor(std::move(shape), dtype_, *allocator_, stream_);
  SharedBuffer* shared = shared_.load(std::memory_order_acquire);
  if (shared == nullptr) {
    auto* record = new SharedBuffer{{1}, data_, nbytes(), allocator_, stream_};
    if (shared_.compare_exchange_strong(shared, record, std::memory_order_acq_rel)) {
      shared = record;
    } else {
      delete record;  // another thread made this tensor shared first: `shared` is its record
    }
  }
  shared->holders.fetch_add(1, std::memory_order_relaxed);
  Tensor view(ViewOf{}, *this, std::move(shape));
  view.shared_.store(shared, std::memory_order_release);
  return view;
}

Tensor::Tensor(ViewOf, const Tensor& of, Shape shape)
    : shape_(std::move(shape)),
      dtype_(of.dtype_),
      numel_(of.numel_),
      element_size_(of.element_size_),
      allocator_(of.allocator_),
      stream_(of.stream_),
      data_(of.data_) {}

void Tensor::Reshape(Shape shape) {
  CheckShape(shape, element_size_, "shape");
  if (NumElements(shape) != numel_) {
    ThrowInvalid("shape", ShapeToString(shape) + " does not hold the " + std::to_string(numel_) +
                              " elements of " + ShapeToString(shape_));
  }
  shape_ = std::move(shape);
}

bool Tensor::operator==(const Tensor& other) const {
  for (const Tensor* t : {this, &other}) {
    if (!t->device().is_host()) {
      ThrowInvalid("device", "comparing a tensor on " + ToString(t->device()) +
                                 ": contents compare on the host only");
    }
  }
  if (shape_ != other.shape_ || dtype_ != other.dtype_) return false;
  return nbytes() == 0 || std::memcmp(data_, other.data_, nbytes()) == 0;
}

void Tensor::CheckType(DType want) const {
  if (!device().is_host()) {
    ThrowInvalid("device", "typed host access (as " + std::string(ToString(want)) +
                               ") to a tensor on " + ToString(device()));
  }
  if (want != dtype_) {
    ThrowInvalid("dtype", "tensor holds " + std::string(ToString(dtype_)) + ", accessed as " +
                              std::string(ToString(want)));
  }
}

}  // namespace spmd::kernels
