// Backend: the local work of one device behind one interface, so that Dispatch, the reshard
// executor and the Communicator's local paths run unchanged on another device.
//
// What it covers: running an op's kernel, and the element loops the runtime needs around
// communication: copies (flat and strided boxes between row-major arrays), fills, scaling
// (the Rescale step, avg's division), elementwise reductions of two buffers for every reduce
// op, and truth conversion for any / all. Buffers are raw addresses on the backend's device
// (Tensor::bytes(), or what a Communicator was handed); element types are those of
// rules/model/dtype.h.
//
// Ordering contract (what callers may rely on, and all they may rely on):
// - Every call enqueues its work on `stream` (a stream of this backend's device) after the
//   work already enqueued there, and may return before the work has run. Work on one stream
//   runs in call order, so a later call on the same stream sees an earlier call's results
//   without any Synchronize.
// - Buffers a call reads or writes must stay valid until that work has run: free them
//   through their Allocator on the same stream (stream-ordered, kernels/allocator.h), or
//   after Synchronize(stream).
// - Synchronize(stream) returns once every call enqueued on `stream` has completed; only
//   then may the host read results through a host pointer. (CpuBackend runs each call
//   before returning, so its Synchronize has nothing to wait for.)
// - A Communicator's collectives are ordered on the communicator's stream the same way
//   (runtime/comm/communicator.h); point-to-point calls complete at Communicator::Synchronize.
//   So the reshard executor synchronizes the communicator after steps that move data
//   point to point, and not after collectives or local steps.
//
// Picking a backend: BackendFor(device). The CPU is built in (CpuBackend in
// kernels/cpu/cpu_backend.h, over kernels/cpu);
// a device backend (CUDA, the simulated device of kernels/sim) registers itself with
// SetBackend. SetBackend also lets a test put
// a wrapping backend in front of the built-in one, process-wide (every rank thread sees it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "kernels/allocator.h"
#include "kernels/device.h"
#include "kernels/tensor.h"
#include "rules/model/attrs.h"
#include "rules/model/dist_attr.h"
#include "rules/model/dtype.h"
#include "rules/engine/phase.h"

namespace spmd::kernels {

class Backend {
 public:
  virtual ~Backend() = default;

  // The kind of device this backend computes on (its calls take buffers of that kind).
  virtual DeviceKind kind() const = 0;
  // Where new tensors of `device` come from.
  virtual Allocator& AllocatorFor(Device device) = 0;

  // Runs the kernel of an op (a name) or of one phase of its exchange (KernelRef{op,
  // phase}, rules/engine/phase.h) on `inputs` (all on one device of this backend's kind; attrs as
  // CpuKernelFn documents them). Outputs are on the inputs' device and stream. Throws
  // SpmdError(kUnknownOp, "op") for an unknown op or phase, and SpmdError naming the field for
  // inputs or attrs the op cannot take (InvalidArgument "inputs[i].device" for an input
  // on another device).
  virtual Tensors RunKernel(const KernelRef& kernel, const TensorArgs& inputs, const Attrs& attrs) = 0;

  // dst[0, nbytes) = src[0, nbytes); the ranges may overlap (memmove).
  virtual void Copy(void* dst, const void* src, size_t nbytes, Stream stream) = 0;
  // Host memory to this backend's device memory, and back: the only crossings besides the
  // device kind's own ToDevice / ToHost. CopyFromHost reads `host_src` before it returns
  // (the buffer may be reused at once); CopyToHost writes `host_dst` when `stream` reaches
  // the copy (read it after Synchronize(stream)). On the host both are memmove.
  virtual void CopyFromHost(void* dst, const void* host_src, size_t nbytes, Stream stream) = 0;
  virtual void CopyToHost(void* host_dst, const void* src, size_t nbytes, Stream stream) = 0;
  // Copies the sub-box of `extent` elements per dim starting at `src_at` in the row-major
  // array `src` of shape `src_shape` to `dst_at` in `dst` (shape `dst_shape`);
  // `element_size` bytes per element. All vectors have the array's rank (0-d: one element);
  // the caller has checked that both boxes fit their arrays. Source and destination do
  // not overlap.
  virtual void CopyBox(const std::byte* src, const std::vector<int64_t>& src_shape,
                       const std::vector<int64_t>& src_at, std::byte* dst,
                       const std::vector<int64_t>& dst_shape, const std::vector<int64_t>& dst_at,
                       const std::vector<int64_t>& extent, size_t element_size,
                       Stream stream) = 0;
  // Sets `count` elements of `dtype` at `dst` to `value` (0 or 1 in the runtime's uses),
  // converted to the dtype as a static_cast would (bool: value != 0).
  virtual void Fill(void* dst, int64_t count, DType dtype, double value, Stream stream) = 0;
  // Multiplies (divide = false) or divides (divide = true) each of `count` elements by `n`
  // (> 0): the Rescale step and avg's last step. int64 divides truncating toward zero;
  // 2-byte floats compute in float32 and round once. Unsupported ("dtype") for bool.
  virtual void Scale(void* buffer, int64_t count, DType dtype, int64_t n, bool divide,
                     Stream stream) = 0;
  // acc[i] = acc[i] op in[i] for `count` elements: sum and avg add (avg's division is a
  // separate Scale), prod multiplies, max / min as std::max / std::min; any / all expect
  // inputs already mapped by ToTruth and combine them as max / min (bool: or / and).
  // Unsupported ("op") for sum / avg on bool. `acc` and `in` may be the same buffer.
  virtual void Reduce(void* acc, const void* in, int64_t count, DType dtype, ReduceOp op,
                      Stream stream) = 0;
  // out[i] = 1 if in[i] is nonzero (NaN included), else 0, in the same dtype; in == out is
  // allowed.
  virtual void ToTruth(const void* in, void* out, int64_t count, DType dtype, Stream stream) = 0;
  // Returns once every call enqueued on `stream` has completed.
  virtual void Synchronize(Stream stream) = 0;
};

// The backend of `device`: the registered one for its kind (SetBackend), else the built-in
// one (the CPU for the host). Throws SpmdError(kUnsupported, "device") when no backend of
// that kind exists in this build.
Backend& BackendFor(Device device);

// Makes `backend` the one BackendFor returns for devices of `kind`, in every thread, and
// returns the one it replaces (nullptr where the built-in one was in place). nullptr
// restores the built-in one. `backend` must outlive its registration.
Backend* SetBackend(DeviceKind kind, Backend* backend);

}  // namespace spmd::kernels
