// The simulated device (DeviceKind::kSim): an asynchronous, stream-ordered device built on
// every machine, so that the Backend contract (kernels/backend.h) is exercised the way a
// GPU exercises it, and the usage bugs a first GPU run would hit are caught in ordinary
// tests. kernels/README.md "The simulated device" says what it models and what it catches.
//
// Shape of the thing, mirroring the CUDA backend (kernels/cuda/cuda.h):
// - Device::Sim(k), k in [0, kMaxSimDevices). Its memory is not host memory to callers:
//   typed host access refuses it (InvalidArgument "device"), and data crosses only through
//   ToDevice / ToHost / CopyToHostAsync or the backend's copies.
// - Each stream is an in-order queue run by its own worker thread. A call enqueues and
//   returns; by default the queued work runs only when a synchronizing call needs it
//   (Synchronize of the stream, SynchronizeEvent, SynchronizeDevice, ToHost, a stream
//   waiting on an event of this one, memory pressure), so a missing Synchronize or event
//   wait shows up every run, not by chance. SPMD_SIM_SCHEDULE=eager runs work as soon as
//   it is queued (timing as a GPU's: races then depend on the schedule).
// - Memory comes from one stream-ordered pool per device. A freed block is poisoned (0xFF
//   bytes: NaN in every float dtype) when its stream reaches the free, and only then handed
//   out again. New blocks are poisoned too, so reading memory nobody wrote shows NaN.
// - Each block has a generation, bumped when its free runs. Work captures the generation of
//   every buffer it touches when it is enqueued, and checks it when it runs: work running
//   after the buffer's free is a HazardError (kUseAfterFree) and does not run. Work (or a
//   free) touching a buffer whose last write was queued on another stream and has not run
//   yet is a HazardError (kUnorderedAccess), as is writing or freeing a buffer while a read
//   of it queued earlier on another stream has not run. Errors raised on a worker (these,
//   and the CPU kernels' own SpmdErrors) are kept per device and thrown, in their own type,
//   by the next synchronizing call on that device.
// - Capacity: unlimited unless SPMD_SIM_DEVICE_BYTES (bytes, a decimal integer) or
//   SetCapacity says otherwise; an allocation past it first waits for every stream of the
//   device (pending frees run) and returns cached blocks, then throws OutOfMemory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <string>

#include "kernels/backend.h"
#include "kernels/device.h"
#include "kernels/tensor.h"
#include "rules/model/error.h"

namespace spmd::kernels::sim {

inline constexpr int kMaxSimDevices = 8;

// What a simulated device caught.
enum class Hazard {
  kUseAfterFree,     // work touching a buffer after (or enqueued after) its free
  kUnorderedAccess,  // a buffer touched while another stream's write to it has not run, or
                     // written (or freed) while another stream's read of it has not run
  kDoubleFree,       // a block freed twice, or an address the pool never handed out
};
std::string_view ToString(Hazard hazard);

// A misuse the simulated device detected: InvalidArgument naming the buffer's parameter
// ("src", "inputs[1]", ...) or "buffer" for work already queued; hazard() says which.
class HazardError : public SpmdError {
 public:
  HazardError(Hazard hazard, std::string field, const std::string& message)
      : SpmdError(ErrorType::kInvalidArgument, std::move(field), message), hazard_(hazard) {}
  Hazard hazard() const { return hazard_; }

 private:
  Hazard hazard_;
};

// An allocation past the device's capacity (a std::bad_alloc, as kernels/allocator.h
// promises, with the sizes in what()).
class OutOfMemory : public std::bad_alloc {
 public:
  explicit OutOfMemory(std::string message) : message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

// The simulated devices' Backend: every call checks its buffers on the calling thread
// (InvalidArgument naming the parameter for an address that is not live sim memory:
// HazardError kUseAfterFree for a freed one), then enqueues the work on `stream` (Stream{}:
// the default stream of the buffer's device) and returns. RunKernel finds the outputs'
// shapes by running the CPU kernel on zero-filled host stand-ins of the inputs (an op the
// stand-ins cannot take, such as one refusing zeros, and an op whose output size the data
// decides, nonzero and unique, wait for their stream and run on the real data instead,
// throwing their error directly), then enqueues the CPU kernel on the
// worker over copies of the device buffers. Synchronize(Stream{}) waits for every stream
// of every sim device.
class SimBackend final : public Backend {
 public:
  DeviceKind kind() const override { return DeviceKind::kSim; }
  // InvalidArgument ("device") for a device that is not a sim device of this process.
  Allocator& AllocatorFor(Device device) override;
  Tensors RunKernel(const KernelRef& kernel, const TensorArgs& inputs, const Attrs& attrs) override;
  void Copy(void* dst, const void* src, size_t nbytes, Stream stream) override;
  void CopyFromHost(void* dst, const void* host_src, size_t nbytes, Stream stream) override;
  void CopyToHost(void* host_dst, const void* src, size_t nbytes, Stream stream) override;
  void CopyBox(const std::byte* src, const std::vector<int64_t>& src_shape,
               const std::vector<int64_t>& src_at, std::byte* dst,
               const std::vector<int64_t>& dst_shape, const std::vector<int64_t>& dst_at,
               const std::vector<int64_t>& extent, size_t element_size, Stream stream) override;
  void Fill(void* dst, int64_t count, DType dtype, double value, Stream stream) override;
  void Scale(void* buffer, int64_t count, DType dtype, int64_t n, bool divide,
             Stream stream) override;
  void Reduce(void* acc, const void* in, int64_t count, DType dtype, ReduceOp op,
              Stream stream) override;
  void ToTruth(const void* in, void* out, int64_t count, DType dtype, Stream stream) override;
  void Synchronize(Stream stream) override;
};

// Registers the sim Backend for DeviceKind::kSim (idempotent, thread-safe) and returns it.
Backend& EnableSim();

// The default stream of `device` (a non-null handle: what Stream{} means on that device)
// and a new stream with its own worker; streams live as long as the process.
// InvalidArgument ("device") for a device that is not a sim device.
Stream DefaultStream(Device device);
Stream NewStream(Device device);
// The sim device a stream belongs to; InvalidArgument ("stream") for a handle that is not
// a sim stream.
Device DeviceOf(Stream stream);

// A point in a stream's queue: everything enqueued on it before RecordEvent.
struct Event {
  void* stream = nullptr;
  uint64_t position = 0;
};
// InvalidArgument ("stream") for a handle that is not a sim stream (Stream{} too: pass
// DefaultStream(device)).
Event RecordEvent(Stream stream);
// Work enqueued on `stream` after this call runs after the event's work has run.
void StreamWaitEvent(Stream stream, Event event);
// Returns once the event's work has run; throws the device's pending error, if any.
void SynchronizeEvent(Event event);
// Returns once every stream of `device` has run all its work; throws its pending error.
void SynchronizeDevice(Device device);

// A host tensor copied to `device`, ordered on `stream` (Stream{}: the device's default
// stream, recorded in the tensor as DefaultStream(device)). The bytes are staged at the
// call, so the host tensor may go at once; the copy itself runs on the stream.
// InvalidArgument ("host") for a tensor not on the host, ("device") for a bad device.
Tensor ToDevice(const Tensor& host, Device device, Stream stream = {});
// A tensor copied to the host after its stream has run everything enqueued so far (throws
// the device's pending error first). Host tensors are copied as they are.
Tensor ToHost(const Tensor& tensor);
// Enqueues a copy of `src` (a sim tensor) into `nbytes` = src.nbytes() bytes of host memory
// at `host_dst`, on src's stream, as cudaMemcpyAsync into pinned memory: the host may read
// `host_dst` only after synchronizing that stream. The memory must stay valid until then.
void CopyToHostAsync(void* host_dst, const Tensor& src);

// For an engine that reads and writes sim memory from the host itself (the simulated NCCL
// of runtime/testing/sim_device_communicator.h), once it has synchronized the stream its work is
// ordered on: checks that [p, p + nbytes) is live sim memory (InvalidArgument naming
// `field`; HazardError kUseAfterFree for a freed block) and that the last write queued on
// it has run (HazardError kUnorderedAccess: a write on a stream the engine's stream was not
// ordered after); for a `write`, also that every read queued on it has run.
void CheckHostAccess(const void* p, size_t nbytes, const std::string& field, bool write = false);

// The pool of one device.
struct MemoryUsage {
  int64_t bytes_in_use = 0;  // rounded sizes of the blocks handed out and not freed
  int64_t peak_bytes = 0;
  int64_t live_blocks = 0;
  int64_t reserved_bytes = 0;  // every block the pool holds, cached free ones included
  int64_t capacity = 0;        // 0: unlimited
};
MemoryUsage UsageOf(Device device);
// Sets the device's capacity in bytes (0: unlimited) for allocations from now on.
void SetCapacity(Device device, int64_t bytes);
// The capacity SPMD_SIM_DEVICE_BYTES asks for (nullptr or empty: 0, unlimited);
// InvalidArgument ("SPMD_SIM_DEVICE_BYTES") for text that is not a non-negative decimal
// integer.
int64_t ParseCapacity(const char* text);

}  // namespace spmd::kernels::sim
