#include "kernels/tensor.h"

#include <cstdlib>
#include <cstring>
#include <new>

namespace spmd::kernels {
namespace {

constexpr size_t kAlignment = 64;

std::byte* Allocate(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (p == nullptr) throw std::bad_alloc();
  return static_cast<std::byte*>(p);
}

}  // namespace

size_t ElementSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat64: return 8;
    case DType::kFloat32: return 4;
    case DType::kInt64: return 8;
    case DType::kBool: return 1;
  }
  ThrowUnsupported("dtype", "no element size for dtype " +
                                std::to_string(static_cast<int>(dtype)));
}

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

void Tensor::FreeDeleter::operator()(std::byte* p) const { std::free(p); }

Tensor::Tensor() : Tensor(Shape{}, DType::kFloat64, true) {}

Tensor::Tensor(Shape shape, DType dtype) : Tensor(std::move(shape), dtype, true) {}

Tensor Tensor::Uninitialized(Shape shape, DType dtype) { return Tensor(std::move(shape), dtype, false); }

Tensor::Tensor(Shape shape, DType dtype, bool zero) : shape_(std::move(shape)), dtype_(dtype) {
  element_size_ = ElementSize(dtype);
  CheckShape(shape_, element_size_, "shape");
  numel_ = NumElements(shape_);
  buffer_.reset(Allocate(nbytes()));
  if (zero && nbytes() > 0) std::memset(buffer_.get(), 0, nbytes());
}

Tensor::Tensor(const Tensor& other)
    : shape_(other.shape_),
      dtype_(other.dtype_),
      numel_(other.numel_),
      element_size_(other.element_size_),
      buffer_(Allocate(other.nbytes())) {
  if (nbytes() > 0) std::memcpy(buffer_.get(), other.buffer_.get(), nbytes());
}

Tensor& Tensor::operator=(const Tensor& other) {
  if (this != &other) {
    Tensor copy(other);
    *this = std::move(copy);
  }
  return *this;
}

void Tensor::Reshape(Shape shape) {
  CheckShape(shape, element_size_, "shape");
  if (NumElements(shape) != numel_) {
    ThrowInvalid("shape", ShapeToString(shape) + " does not hold the " + std::to_string(numel_) +
                              " elements of " + ShapeToString(shape_));
  }
  shape_ = std::move(shape);
}

bool Tensor::operator==(const Tensor& other) const {
  if (shape_ != other.shape_ || dtype_ != other.dtype_) return false;
  return nbytes() == 0 || std::memcmp(buffer_.get(), other.buffer_.get(), nbytes()) == 0;
}

void Tensor::CheckType(DType want) const {
  if (want != dtype_) {
    ThrowInvalid("dtype", "tensor holds " + std::string(ToString(dtype_)) + ", accessed as " +
                              std::string(ToString(want)));
  }
}

}  // namespace spmd::kernels
