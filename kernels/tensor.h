// The kernels' tensor: a shape, a dtype and one contiguous row-major byte buffer on a device.
//
// What the kernels (kernels/cpu, kernels/cuda, kernels/sim) read and write, and what the
// runtime hands to a Communicator: `bytes()` is one contiguous buffer of `nbytes()` bytes
// on the tensor's device that MPI, NCCL or the simulated NCCL use. Element types:
//   float64 -> double, float32 -> float, int64 -> int64_t, bool -> bool (one byte, 0 or 1),
//   bfloat16 -> BFloat16, float16 -> Float16 (rules/model/half.h: 2-byte storage, convert to
//   float to compute).
// The dtype set is open: a new DType needs a size in ElementSize() and, where typed
// access is wanted, a DTypeOf<> specialisation.
//
// A Tensor owns its buffer, which comes from an Allocator (kernels/allocator.h: host memory
// by default, 64-byte aligned) and lives on that allocator's device. It records the stream
// its work is ordered on (kernels/device.h; host tensors: the null stream): a Backend
// (kernels/backend.h) enqueues work on a tensor's stream, and the buffer is freed in that
// stream's order. Copies are deep (same allocator, device and stream), moves are cheap.
// View() is the one way two tensors share a buffer (reshape-class kernels return the same
// bytes under a new shape without copying them): a shared buffer is copy-on-write, so the
// mutable accessors (bytes(), data<T>() on a non-const tensor) first give the writer a
// buffer of its own while another tensor still holds the shared one, and no write through
// one tensor is ever seen through another. A pointer taken from a mutable accessor is the
// tensor's own until a View() of it is made: write through it before viewing, not after.
// Typed host access (data<T>(), FromVector, ==) needs a host tensor: on a device tensor it
// throws InvalidArgument ("device"); bytes() is the raw buffer on any device.
// Invariant: the buffer holds exactly NumElements(shape) elements of dtype.
// Kernels read their inputs through TensorArgs (below), a list of pointers, so passing
// tensors to a kernel copies no buffer.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/allocator.h"
#include "kernels/device.h"
#include "rules/model/dtype.h"
#include "rules/model/error.h"
#include "rules/model/half.h"

namespace spmd::kernels {

using Shape = std::vector<int64_t>;

// Bytes per element of `dtype` (rules/model/dtype.h).
using spmd::ElementSize;

// The product of the dims ([] gives 1). Assumes a checked shape (CheckShape).
int64_t NumElements(const Shape& shape);

// "[2, 3]".
std::string ShapeToString(const Shape& shape);

// Throws SpmdError(kInvalidArgument, field) unless every dim is >= 0 and the tensor's
// bytes (at `element_size` each) stay below 2^62, so counts, strides and byte sizes
// cannot overflow.
void CheckShape(const Shape& shape, size_t element_size, const std::string& field);

// The DType of a C++ element type (double, float, int64_t, bool).
template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::kFloat64;
};
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kFloat32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::kInt64;
};
template <>
struct DTypeOf<bool> {
  static constexpr DType value = DType::kBool;
};
template <>
struct DTypeOf<BFloat16> {
  static constexpr DType value = DType::kBFloat16;
};
template <>
struct DTypeOf<Float16> {
  static constexpr DType value = DType::kFloat16;
};
static_assert(sizeof(bool) == 1, "bool tensors store one byte per element");

class Tensor {
 public:
  // A 0-d float64 tensor holding 0.
  Tensor();
  // A zero-filled tensor. Throws InvalidArgument ("shape") for a negative dim or a size
  // that overflows, Unsupported ("dtype") for a dtype without a size.
  Tensor(Shape shape, DType dtype);
  // As above, with the contents left uninitialised (for kernels that write every element).
  static Tensor Uninitialized(Shape shape, DType dtype);
  // An uninitialised tensor whose bytes come from `allocator` (on its device), ordered on
  // `stream`. Same errors as above.
  static Tensor Uninitialized(Shape shape, DType dtype, Allocator& allocator, Stream stream);
  // A tensor holding `values` (NumElements(shape) of them; InvalidArgument "data" else).
  template <typename T>
  static Tensor FromVector(Shape shape, const std::vector<T>& values);

  Tensor(const Tensor& other);
  Tensor& operator=(const Tensor& other);
  Tensor(Tensor&& other) noexcept;
  Tensor& operator=(Tensor&& other) noexcept;
  ~Tensor();

  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t numel() const { return numel_; }
  size_t element_size() const { return element_size_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * element_size_; }
  // Where the buffer lives, the allocator it came from, and the stream its work is on.
  Device device() const { return allocator_->device(); }
  Allocator& allocator() const { return *allocator_; }
  Stream stream() const { return stream_; }

  // The raw buffer on device(): nbytes() contiguous bytes, row-major (nullptr only when
  // empty). On a device tensor this is a device address, for a Backend or a Communicator.
  // The mutable accessor first gives the tensor a buffer of its own if it shares one (View).
  std::byte* bytes() {
    if (shared_.load(std::memory_order_acquire) != nullptr) [[unlikely]] Unshare();
    return data_;
  }
  const std::byte* bytes() const { return data_; }

  // Typed host access; throws InvalidArgument ("dtype") when T is not this tensor's type,
  // InvalidArgument ("device") when the tensor is not on the host.
  template <typename T>
  T* data() {
    CheckType(DTypeOf<T>::value);
    return reinterpret_cast<T*>(bytes());
  }
  template <typename T>
  const T* data() const {
    CheckType(DTypeOf<T>::value);
    return reinterpret_cast<const T*>(data_);
  }

  // Gives the tensor a new shape with the same element count (the data stay as they
  // are, row-major); InvalidArgument ("shape") otherwise.
  void Reshape(Shape shape);

  // A tensor holding this tensor's elements under `shape` (same element count; the data
  // row-major as they are) that shares its buffer instead of copying it: copy-on-write (see
  // the top of this file), so each of the two reads the same bytes until one of them is
  // written. InvalidArgument ("shape") when the counts differ.
  Tensor View(Shape shape) const;

  // Whether this tensor reads the same buffer as `other` (a View of it, or it of this).
  bool SharesBufferWith(const Tensor& other) const {
    return data_ != nullptr && data_ == other.data_;
  }

  // Byte-wise equality of shape, dtype and contents (host tensors; InvalidArgument
  // ("device") for a device tensor).
  bool operator==(const Tensor& other) const;

 private:
  Tensor(Shape shape, DType dtype, Allocator& allocator, Stream stream);
  // The record of a buffer that View() made shared: who holds it and how to free it.
  struct SharedBuffer;
  struct ViewOf {};
  // A tensor reading `of`'s buffer under `shape`, not yet counted as one of its holders.
  Tensor(ViewOf, const Tensor& of, Shape shape);
  void Release() noexcept;
  // Gives the tensor a buffer of its own: a copy of the shared one while another tensor
  // holds it too, else the same buffer, no longer marked shared.
  void Unshare();
  // Throws unless the tensor is on the host and holds `want`.
  void CheckType(DType want) const;

  Shape shape_;
  DType dtype_ = DType::kFloat64;
  int64_t numel_ = 1;
  size_t element_size_ = 8;
  Allocator* allocator_ = &HostAllocator();
  Stream stream_;
  std::byte* data_ = nullptr;  // from allocator_, nbytes() long
  // Null while the tensor is the buffer's only owner (the common case: no record, no
  // count); set, on both tensors, by View(). Atomic because View() of a const tensor sets it.
  mutable std::atomic<SharedBuffer*> shared_{nullptr};
};

using Tensors = std::vector<Tensor>;

// A list of tensors moved in: `return Tensors{out}` would copy each buffer (an
// initializer list holds const elements).
template <typename... Ts>
Tensors TensorList(Ts&&... tensors) {
  Tensors list;
  list.reserve(sizeof...(Ts));
  (list.push_back(std::forward<Ts>(tensors)), ...);
  return list;
}

// The inputs of a kernel: a non-owning, read-only list of tensors. Kernels take this rather
// than `const Tensors&` so that a caller holding its tensors elsewhere (the runtime's
// Dispatch: the caller's shards next to freshly resharded ones) passes them without
// copying their buffers. The tensors must outlive the list: use it as a parameter type,
// not to keep tensors around (a list made from a temporary Tensors dangles once that
// temporary is gone). Entries may alias one another (add(x, x)); kernels only read them.
class TensorArgs {
 public:
  // Iterates the tensors as `const Tensor&`.
  class Iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = Tensor;
    using difference_type = std::ptrdiff_t;
    using pointer = const Tensor*;
    using reference = const Tensor&;
    explicit Iterator(const Tensor* const* at) : at_(at) {}
    const Tensor& operator*() const { return **at_; }
    const Tensor* operator->() const { return *at_; }
    Iterator& operator++() {
      ++at_;
      return *this;
    }
    Iterator operator++(int) {
      Iterator before = *this;
      ++at_;
      return before;
    }
    bool operator==(const Iterator& other) const { return at_ == other.at_; }
    bool operator!=(const Iterator& other) const { return at_ != other.at_; }

   private:
    const Tensor* const* at_;
  };

  TensorArgs() = default;
  // Views every tensor of `tensors` (implicit, so a Tensors can be passed as it is).
  TensorArgs(const Tensors& tensors) {
    ptrs_.reserve(tensors.size());
    for (const Tensor& t : tensors) ptrs_.push_back(&t);
  }
  // Views the tensors pointed to; InvalidArgument ("inputs[i]") for a null pointer.
  explicit TensorArgs(std::vector<const Tensor*> tensors) : ptrs_(std::move(tensors)) {
    for (size_t i = 0; i < ptrs_.size(); ++i) {
      if (ptrs_[i] == nullptr) ThrowInvalid("inputs[" + std::to_string(i) + "]", "null tensor");
    }
  }

  size_t size() const { return ptrs_.size(); }
  bool empty() const { return ptrs_.empty(); }
  const Tensor& operator[](size_t i) const { return *ptrs_[i]; }
  Iterator begin() const { return Iterator(ptrs_.data()); }
  Iterator end() const { return Iterator(ptrs_.data() + ptrs_.size()); }

 private:
  std::vector<const Tensor*> ptrs_;
};

template <typename T>
Tensor Tensor::FromVector(Shape shape, const std::vector<T>& values) {
  Tensor t = Uninitialized(std::move(shape), DTypeOf<T>::value);
  if (static_cast<int64_t>(values.size()) != t.numel()) {
    ThrowInvalid("data", std::to_string(values.size()) + " values for shape " +
                             ShapeToString(t.shape()));
  }
  T* out = t.data<T>();
  for (size_t i = 0; i < values.size(); ++i) out[i] = values[i];
  return t;
}

}  // namespace spmd::kernels
