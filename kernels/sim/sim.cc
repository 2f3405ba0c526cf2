// The simulated device: streams run by worker threads, a stream-ordered pool with poisoned,
// generation-counted blocks, and SimBackend over the CPU kernels (kernels/sim/sim.h).
//
// One process-wide Runtime holds every device, stream and block behind one mutex. A worker
// runs its stream's work while holding that mutex: the workers' work is serialised (it is a
// simulation, not a fast path), so poisoning, reuse and the checks never race with the
// work itself, while the order of work across streams is still whatever the program asked
// for (and, by default, the latest the contract allows).
#include "kernels/sim/sim.h"

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "kernels/backend_checks.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/kernels.h"
#include "rules/engine/op_decl.h"
#include "rules/engine/registry.h"

namespace spmd::kernels::sim {
namespace {

constexpr size_t kGranule = 256;  // block sizes and alignment, as the CUDA pools (pool_stats.h)
size_t Rounded(size_t n) { return (n + kGranule - 1) / kGranule * kGranule; }

struct SimStream;

struct Block {
  std::byte* base = nullptr;
  size_t size = 0;       // rounded
  size_t requested = 0;  // what the caller asked for: accesses past it are refused
  int device = 0;
  bool live = true;         // handed out, not freed by the host
  uint64_t generation = 0;  // bumped when a free of the block runs
  // The last write enqueued on the block (null: none since it was handed out), and the
  // last read enqueued on it by each stream.
  SimStream* writer = nullptr;
  uint64_t write_position = 0;
  std::vector<std::pair<SimStream*, uint64_t>> reads;
};

// One access of a queued piece of work, as it was when the work was enqueued.
struct Use {
  Block* block = nullptr;
  uint64_t generation = 0;
  bool write = false;
  std::string field;
  SimStream* writer = nullptr;  // the write this access must come after
  uint64_t write_position = 0;
  // A write: the reads queued on other streams before it, which it must come after.
  std::vector<std::pair<SimStream*, uint64_t>> reads;
};

struct Item {
  uint64_t position = 0;
  std::string what;
  std::vector<Use> uses;
  std::function<void()> fn;        // work (empty for a wait or a free)
  SimStream* wait_for = nullptr;   // a stream wait: runs once wait_for reached wait_position
  uint64_t wait_position = 0;
  Block* free_block = nullptr;     // a free: poisons and pools the block
  Use free_use;                    // the write the free must come after
};

struct SimStream {
  int device = 0;
  int id = 0;
  std::deque<Item> queue;
  uint64_t enqueued = 0, completed = 0, released = 0;
  std::condition_variable wake;  // the worker's: work released
};

std::string Name(const SimStream* s) {
  return "sim:" + std::to_string(s->device) + " stream " + std::to_string(s->id);
}

class SimAllocator;

struct DeviceState {
  bool ready = false;
  SimStream* default_stream = nullptr;
  std::vector<SimStream*> streams;
  std::map<size_t, std::vector<Block*>> cache;  // freed blocks whose free has run
  int64_t in_use = 0, peak = 0, live_blocks = 0, reserved = 0, capacity = 0;
  std::exception_ptr error;  // the first error raised on a worker since the last sync
  SimAllocator* allocator = nullptr;
};

class Runtime {
 public:
  static Runtime& Get() {
    static Runtime* runtime = new Runtime;  // never destroyed: workers and tensors outlive statics
    return *runtime;
  }

  // ---- devices and streams ----------------------------------------------------------------

  static void CheckDevice(Device device, const char* field) {
    checks::CheckDeviceIndex(device, DeviceKind::kSim, kMaxSimDevices, field);
  }

  DeviceState& DeviceLocked(int index) {
    DeviceState& d = devices_[index];
    if (!d.ready) {
      d.capacity = ParseCapacity(std::getenv("SPMD_SIM_DEVICE_BYTES"));
      d.default_stream = NewStreamLocked(index);
      d.allocator = NewAllocator(index);
      d.ready = true;
    }
    return d;
  }

  SimAllocator& AllocatorOf(Device device);

  Stream DefaultStream(Device device) {
    CheckDevice(device, "device");
    std::lock_guard<std::mutex> lock(mu_);
    return Stream{DeviceLocked(device.index).default_stream};
  }

  Stream NewStream(Device device) {
    CheckDevice(device, "device");
    std::lock_guard<std::mutex> lock(mu_);
    DeviceLocked(device.index);
    return Stream{NewStreamLocked(device.index)};
  }

  // The stream of a handle; InvalidArgument (`field`) for one that is not a sim stream.
  SimStream* StreamLocked(Stream stream, const char* field) {
    for (const auto& s : streams_) {
      if (s.get() == stream.handle) return s.get();
    }
    ThrowInvalid(field, "not a stream of a sim device (NewStream / DefaultStream make them)");
  }
  // A Backend call's stream: Stream{} is the default stream of the buffer's device.
  SimStream* CallStreamLocked(Stream stream, int device) {
    if (stream.handle == nullptr) return DeviceLocked(device).default_stream;
    return StreamLocked(stream, "stream");
  }

  Device DeviceOf(Stream stream) {
    std::lock_guard<std::mutex> lock(mu_);
    return Device::Sim(StreamLocked(stream, "stream")->device);
  }

  // ---- memory ------------------------------------------------------------------------------

  void* Allocate(int device, size_t nbytes) {
    if (nbytes == 0) return nullptr;
    const size_t size = Rounded(nbytes);
    std::unique_lock<std::mutex> lock(mu_);
    DeviceState& d = DeviceLocked(device);
    Block* b = FromCache(d, size);
    if (b == nullptr && d.capacity > 0 && d.reserved + static_cast<int64_t>(size) > d.capacity) {
      Trim(d);
      if (d.reserved + static_cast<int64_t>(size) > d.capacity) {
        // Frees queued on the device's streams may make room: wait for them, as a driver
        // would before giving up.
        std::vector<std::pair<SimStream*, uint64_t>> targets;  // what is queued now
        for (SimStream* s : d.streams) {
          targets.emplace_back(s, s->enqueued);
          Release(s, s->enqueued);
        }
        done_.wait(lock, [&] {
          return std::all_of(targets.begin(), targets.end(),
                             [](const auto& t) { return t.first->completed >= t.second; });
        });
        b = FromCache(d, size);
        if (b == nullptr) Trim(d);
      }
      if (b == nullptr && d.reserved + static_cast<int64_t>(size) > d.capacity) {
        throw OutOfMemory("sim:" + std::to_string(device) + ": out of memory allocating " +
                          std::to_string(nbytes) + " bytes (" + std::to_string(d.reserved) +
                          " of the capacity of " + std::to_string(d.capacity) +
                          " bytes in use, SPMD_SIM_DEVICE_BYTES)");
      }
    }
    if (b == nullptr) {
      void* p = std::aligned_alloc(kGranule, size);
      if (p == nullptr) throw std::bad_alloc();
      std::memset(p, 0xff, size);  // poison: what nobody wrote reads as NaN
      blocks_.push_back(std::make_unique<Block>());
      b = blocks_.back().get();
      b->base = static_cast<std::byte*>(p);
      b->size = size;
      b->device = device;
      by_address_[reinterpret_cast<uintptr_t>(p)] = b;
      d.reserved += static_cast<int64_t>(size);
    }
    b->live = true;
    b->requested = nbytes;
    b->writer = nullptr;
    b->write_position = 0;
    b->reads.clear();
    d.in_use += static_cast<int64_t>(size);
    d.peak = std::max(d.peak, d.in_use);
    ++d.live_blocks;
    return b->base;
  }

  void Deallocate(int device, void* p, Stream stream) noexcept {
    if (p == nullptr) return;
    try {
      std::lock_guard<std::mutex> lock(mu_);
      DeviceState& d = DeviceLocked(device);
      auto found = by_address_.find(reinterpret_cast<uintptr_t>(p));
      if (found == by_address_.end() || !found->second->live || found->second->device != device) {
        RecordLocked(d, std::make_exception_ptr(HazardError(
                            Hazard::kDoubleFree, "buffer",
                            "freeing an address of sim:" + std::to_string(device) +
                                " that is not a live block of its pool (a double free)")));
        return;
      }
      Block* b = found->second;
      b->live = false;
      d.in_use -= static_cast<int64_t>(b->size);
      --d.live_blocks;
      SimStream* s = stream.handle == nullptr ? d.default_stream : StreamLocked(stream, "stream");
      Item item;
      item.what = "free";
      item.free_block = b;
      item.free_use = UseOf(b, true, "buffer");
      EnqueueLocked(s, std::move(item));
    } catch (...) {
      // Nothing to report from a destructor; the block stays out of the pool.
    }
  }

  MemoryUsage Usage(Device device) {
    CheckDevice(device, "device");
    std::lock_guard<std::mutex> lock(mu_);
    const DeviceState& d = DeviceLocked(device.index);
    return {d.in_use, d.peak, d.live_blocks, d.reserved, d.capacity};
  }

  void SetCapacity(Device device, int64_t bytes) {
    CheckDevice(device, "device");
    if (bytes < 0) ThrowInvalid("bytes", "a capacity is >= 0, got " + std::to_string(bytes));
    std::lock_guard<std::mutex> lock(mu_);
    DeviceLocked(device.index).capacity = bytes;
  }

  // ---- work --------------------------------------------------------------------------------

  struct Range {
    const void* p = nullptr;
    size_t nbytes = 0;
    bool write = false;
    std::string field;
  };

  // Checks every range (InvalidArgument naming its field: not sim memory, or a freed block)
  // and enqueues `fn` on `stream` (Stream{}: the default stream of the first range's
  // device). Returns the stream and the work's position.
  std::pair<SimStream*, uint64_t> Submit(Stream stream, const std::vector<Range>& ranges,
                                         std::string what, std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(mu_);
    Item item;
    int device = -1;
    for (const Range& r : ranges) {
      if (r.nbytes == 0) continue;
      Block* b = BlockOfLocked(r.p, r.nbytes, r.field);
      if (device < 0) device = b->device;
      item.uses.push_back(UseOf(b, r.write, r.field));
    }
    SimStream* s = nullptr;
    if (stream.handle != nullptr) {
      s = StreamLocked(stream, "stream");
    } else if (device >= 0) {
      s = DeviceLocked(device).default_stream;
    } else {
      return {nullptr, 0};  // nothing to touch and no stream: nothing to do
    }
    item.what = std::move(what);
    item.fn = std::move(fn);
    const uint64_t position = EnqueueLocked(s, std::move(item));
    return {s, position};
  }

  // Waits until `s` has run its work up to `position`; no error is thrown.
  void WaitFor(SimStream* s, uint64_t position) {
    std::unique_lock<std::mutex> lock(mu_);
    Release(s, position);
    done_.wait(lock, [&] { return s->completed >= position; });
  }

  // Takes the pending error of `device`, if any.
  std::exception_ptr TakeError(int device) {
    std::lock_guard<std::mutex> lock(mu_);
    return std::exchange(devices_[device].error, nullptr);
  }

  void SynchronizeStream(Stream stream) {
    int device = -1;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (stream.handle == nullptr) {
        lock.unlock();
        SynchronizeAll();
        return;
      }
      SimStream* s = StreamLocked(stream, "stream");
      device = s->device;
      const uint64_t target = s->enqueued;
      Release(s, target);
      done_.wait(lock, [&] { return s->completed >= target; });
    }
    Rethrow(device);
  }

  void SynchronizeDevice(int device, bool rethrow = true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      DeviceState& d = DeviceLocked(device);
      std::vector<std::pair<SimStream*, uint64_t>> targets;
      for (SimStream* s : d.streams) {
        targets.emplace_back(s, s->enqueued);
        Release(s, s->enqueued);
      }
      done_.wait(lock, [&] {
        return std::all_of(targets.begin(), targets.end(),
                           [](const auto& t) { return t.first->completed >= t.second; });
      });
    }
    if (rethrow) Rethrow(device);
  }

  void SynchronizeAll() {
    std::vector<int> ready;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int i = 0; i < kMaxSimDevices; ++i) {
        if (devices_[i].ready) ready.push_back(i);
      }
    }
    for (int i : ready) SynchronizeDevice(i, false);
    for (int i : ready) Rethrow(i);
  }

  Event RecordEvent(Stream stream) {
    std::lock_guard<std::mutex> lock(mu_);
    SimStream* s = StreamLocked(stream, "stream");
    return Event{s, s->enqueued};
  }

  void StreamWaitEvent(Stream stream, Event event) {
    std::lock_guard<std::mutex> lock(mu_);
    SimStream* s = StreamLocked(stream, "stream");
    SimStream* target = StreamLocked(Stream{event.stream}, "event.stream");
    if (event.position > target->enqueued) {
      ThrowInvalid("event.position", "past the end of " + Name(target) + "'s queue");
    }
    if (target == s || event.position == 0) return;  // in order already / nothing to wait for
    Item item;
    item.what = "wait for " + Name(target);
    item.wait_for = target;
    item.wait_position = event.position;
    EnqueueLocked(s, std::move(item));
  }

  void SynchronizeEvent(Event event) {
    int device = 0;
    {
      std::unique_lock<std::mutex> lock(mu_);
      SimStream* s = StreamLocked(Stream{event.stream}, "event.stream");
      device = s->device;
      Release(s, event.position);
      done_.wait(lock, [&] { return s->completed >= event.position; });
    }
    Rethrow(device);
  }

  void CheckHostAccess(const void* p, size_t nbytes, const std::string& field, bool write) {
    if (nbytes == 0) return;
    std::lock_guard<std::mutex> lock(mu_);
    const Block* b = BlockOfLocked(p, nbytes, field);
    if (b->writer != nullptr && b->writer->completed < b->write_position) {
      throw HazardError(Hazard::kUnorderedAccess, field,
                        "the host touches a buffer whose write queued on " + Name(b->writer) +
                            " has not run (no event wait or Synchronize orders them)");
    }
    for (const auto& [reader, position] : write ? b->reads : decltype(b->reads){}) {
      if (reader->completed < position) {
        throw HazardError(Hazard::kUnorderedAccess, field,
                          "the host overwrites a buffer whose read queued on " + Name(reader) +
                              " has not run (no event wait or Synchronize orders them)");
      }
    }
  }

  // Copies `nbytes` of live sim memory at `p` to `out` (the caller has synchronized).
  void ReadBack(const void* p, size_t nbytes, void* out, const char* field) {
    if (nbytes == 0) return;
    std::lock_guard<std::mutex> lock(mu_);
    (void)BlockOfLocked(p, nbytes, field);
    std::memcpy(out, p, nbytes);
  }

 private:
  Runtime() {
    const char* schedule = std::getenv("SPMD_SIM_SCHEDULE");
    const std::string text = schedule == nullptr ? "" : schedule;
    if (text == "eager") {
      eager_ = true;
    } else if (!text.empty() && text != "deferred") {
      ThrowInvalid("SPMD_SIM_SCHEDULE", "'" + text + "' is neither deferred nor eager");
    }
  }

  SimAllocator* NewAllocator(int device);

  SimStream* NewStreamLocked(int device) {
    streams_.push_back(std::make_unique<SimStream>());
    SimStream* s = streams_.back().get();
    s->device = device;
    s->id = static_cast<int>(devices_[device].streams.size());
    devices_[device].streams.push_back(s);
    std::thread([this, s] { Work(s); }).detach();
    return s;
  }

  Block* FromCache(DeviceState& d, size_t size) {
    auto found = d.cache.find(size);
    if (found == d.cache.end() || found->second.empty()) return nullptr;
    Block* b = found->second.back();
    found->second.pop_back();
    return b;
  }

  // Returns the cached blocks' memory to the system (their Block records stay, so queued
  // work holding one still finds its generation changed).
  void Trim(DeviceState& d) {
    for (auto& [size, list] : d.cache) {
      for (Block* b : list) {
        by_address_.erase(reinterpret_cast<uintptr_t>(b->base));
        std::free(b->base);
        b->base = nullptr;
        d.reserved -= static_cast<int64_t>(b->size);
      }
      list.clear();
    }
  }

  Block* BlockOfLocked(const void* p, size_t nbytes, const std::string& field) {
    const auto at = reinterpret_cast<uintptr_t>(p);
    auto it = by_address_.upper_bound(at);
    if (p == nullptr || it == by_address_.begin()) {
      ThrowInvalid(field, "not memory of a sim device (host memory crosses by ToDevice / ToHost)");
    }
    Block* b = std::prev(it)->second;
    const auto base = reinterpret_cast<uintptr_t>(b->base);
    if (at >= base + b->size) {
      ThrowInvalid(field, "not memory of a sim device (host memory crosses by ToDevice / ToHost)");
    }
    if (!b->live) {
      throw HazardError(Hazard::kUseAfterFree, field,
                        "buffer of sim:" + std::to_string(b->device) + " used after its free");
    }
    if (at + nbytes > base + b->requested) {
      ThrowInvalid(field, std::to_string(nbytes) + " bytes at offset " + std::to_string(at - base) +
                              " overrun the block of " + std::to_string(b->requested) + " bytes");
    }
    return b;
  }

  Use UseOf(Block* b, bool write, std::string field) {
    Use u;
    u.block = b;
    u.generation = b->generation;
    u.write = write;
    u.field = std::move(field);
    u.writer = b->writer;
    u.write_position = b->write_position;
    return u;
  }

  uint64_t EnqueueLocked(SimStream* s, Item item) {
    item.position = ++s->enqueued;
    // A write (a free too) must come after the reads other streams queued before it.
    auto capture = [s](Use& u) {
      if (!u.write) return;
      for (const auto& r : u.block->reads) {
        if (r.first != s) u.reads.push_back(r);
      }
    };
    for (Use& u : item.uses) capture(u);
    if (item.free_block != nullptr) capture(item.free_use);
    for (const Use& u : item.uses) {
      if (u.write) {
        u.block->writer = s;
        u.block->write_position = item.position;
      } else {
        auto& reads = u.block->reads;
        auto mine = std::find_if(reads.begin(), reads.end(), [s](const auto& r) { return r.first == s; });
        if (mine == reads.end()) {
          reads.emplace_back(s, item.position);
        } else {
          mine->second = item.position;
        }
      }
    }
    const uint64_t position = item.position;
    s->queue.push_back(std::move(item));
    if (eager_) Release(s, position);
    return position;
  }

  void RecordLocked(DeviceState& d, std::exception_ptr error) {
    if (!d.error) d.error = std::move(error);
  }

  void Rethrow(int device) {
    if (std::exception_ptr e = TakeError(device)) std::rethrow_exception(e);
  }

  // A write `u` must follow that another stream has not run yet.
  static bool Unordered(const Use& u, const SimStream* s) {
    return u.writer != nullptr && u.writer != s && u.writer->completed < u.write_position;
  }
  // A read on another stream that write `u` must follow and that has not run yet.
  static const SimStream* PendingRead(const Use& u) {
    for (const auto& [stream, position] : u.reads) {
      if (stream->completed < position) return stream;
    }
    return nullptr;
  }

  // Runs one item with mu_ held (a wait releases it while waiting).
  void Run(SimStream* s, Item& item, std::unique_lock<std::mutex>& lock) {
    DeviceState& d = devices_[s->device];
    if (item.wait_for != nullptr) {
      SimStream* t = item.wait_for;
      Release(t, item.wait_position);
      done_.wait(lock, [&] { return t->completed >= item.wait_position; });
      return;
    }
    if (item.free_block != nullptr) {
      Block* b = item.free_block;
      if (Unordered(item.free_use, s)) {
        RecordLocked(d, std::make_exception_ptr(HazardError(
                            Hazard::kUnorderedAccess, "buffer",
                            "a free on " + Name(s) + " ran before the write queued on " +
                                Name(item.free_use.writer) + " (no event wait orders them)")));
      } else if (const SimStream* reader = PendingRead(item.free_use)) {
        RecordLocked(d, std::make_exception_ptr(HazardError(
                            Hazard::kUnorderedAccess, "buffer",
                            "a free on " + Name(s) + " ran before a read of the buffer queued on " +
                                Name(reader) + " (no event wait orders them)")));
      }
      std::memset(b->base, 0xff, b->size);
      ++b->generation;
      if (!b->live) d.cache[b->size].push_back(b);
      return;
    }
    for (const Use& u : item.uses) {
      if (u.block->generation != u.generation) {
        RecordLocked(d, std::make_exception_ptr(HazardError(
                            Hazard::kUseAfterFree, u.field,
                            item.what + " on " + Name(s) +
                                " ran after the free of this buffer had run (it was freed "
                                "on a stream this work was not ordered before): not run")));
        return;
      }
      if (Unordered(u, s)) {
        RecordLocked(d, std::make_exception_ptr(HazardError(
                            Hazard::kUnorderedAccess, u.field,
                            item.what + " on " + Name(s) + " touches a buffer whose write on " +
                                Name(u.writer) +
                                " has not run (no event wait orders them): not run")));
        return;
      }
      if (const SimStream* reader = u.write ? PendingRead(u) : nullptr) {
        RecordLocked(d, std::make_exception_ptr(HazardError(
                            Hazard::kUnorderedAccess, u.field,
                            item.what + " on " + Name(s) + " overwrites a buffer a read queued on " +
                                Name(reader) + " has not done yet (no event wait orders them): not run")));
        return;
      }
    }
    try {
      if (item.fn) item.fn();
    } catch (...) {
      RecordLocked(d, std::current_exception());
    }
  }

  void Work(SimStream* s) {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      s->wake.wait(lock, [&] { return !s->queue.empty() && s->queue.front().position <= s->released; });
      Item item = std::move(s->queue.front());
      s->queue.pop_front();
      Run(s, item, lock);
      s->completed = item.position;
      done_.notify_all();
    }
  }

  // Lets `s` run its work up to `position` (wakes its worker).
  static void Release(SimStream* s, uint64_t position) {
    if (position <= s->released) return;
    s->released = position;
    s->wake.notify_one();
  }

  std::mutex mu_;
  std::condition_variable done_;  // a stream completed work (host waits, stream waits)
  bool eager_ = false;
  DeviceState devices_[kMaxSimDevices];
  std::vector<std::unique_ptr<SimStream>> streams_;
  std::vector<std::unique_ptr<Block>> blocks_;     // never freed (see Trim)
  std::map<uintptr_t, Block*> by_address_;         // blocks holding memory, by base address
};

class SimAllocator final : public Allocator {
 public:
  explicit SimAllocator(int device) : device_(device) {}
  Device device() const override { return Device::Sim(device_); }
  void* Allocate(size_t nbytes, Stream) override { return Runtime::Get().Allocate(device_, nbytes); }
  void Deallocate(void* p, size_t, Stream stream) noexcept override {
    Runtime::Get().Deallocate(device_, p, stream);
  }

 private:
  int device_;
};

SimAllocator* Runtime::NewAllocator(int device) { return new SimAllocator(device); }

SimAllocator& Runtime::AllocatorOf(Device device) {
  CheckDevice(device, "device");
  (void)EnableSim();  // a sim tensor's Backend is always registered
  std::lock_guard<std::mutex> lock(mu_);
  return *DeviceLocked(device.index).allocator;
}

int64_t Product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

CpuBackend& Cpu() {
  static CpuBackend cpu;
  return cpu;
}

// A host copy of `nbytes` of sim memory at `p` as a tensor (run on a worker).
Tensor HostCopy(const std::byte* p, const Shape& shape, DType dtype) {
  Tensor t = Tensor::Uninitialized(shape, dtype);
  if (t.nbytes() > 0) std::memcpy(t.bytes(), p, t.nbytes());
  return t;
}

struct InputView {
  const std::byte* p;
  Shape shape;
  DType dtype;
};

Tensors RunOnCopies(const KernelRef& kernel, const std::vector<InputView>& views, const Attrs& attrs) {
  Tensors host;
  host.reserve(views.size());
  for (const InputView& v : views) host.push_back(HostCopy(v.p, v.shape, v.dtype));
  return RunCpuKernel(kernel, host, attrs);
}

// Whether `kernel`'s outputs have a data-dependent dim for these inputs and attrs (nonzero's
// count, unique's: SEMANTICS.md §3.1). Zero stand-ins would give other shapes than the data,
// so such a kernel runs staged on the real data, as its CUDA entry does.
bool HasDataDependentOutputs(const KernelRef& kernel, const TensorArgs& inputs, const Attrs& attrs) {
  if (kernel.phase) return false;
  const OpDecl* op = FindOp(kernel.op);
  if (op == nullptr) return false;
  std::vector<Shape> shapes;
  for (const Tensor& t : inputs) shapes.push_back(t.shape());
  try {
    for (const Shape& shape : InferOutputShapes(*op, shapes, attrs)) {
      if (HasDataDependentDim(shape)) return true;
    }
  } catch (const std::exception&) {  // a request the declaration refuses: the kernel says why
  }
  return false;
}

}  // namespace

std::string_view ToString(Hazard hazard) {
  switch (hazard) {
    case Hazard::kUseAfterFree: return "use after free";
    case Hazard::kUnorderedAccess: return "unordered access";
    case Hazard::kDoubleFree: return "double free";
  }
  return "?";
}

int64_t ParseCapacity(const char* text) {
  if (text == nullptr || *text == '\0') return 0;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || errno != 0 || v < 0 || *text == '-' || *text == '+') {
    ThrowInvalid("SPMD_SIM_DEVICE_BYTES",
                 "'" + std::string(text) + "' is not a non-negative decimal number of bytes");
  }
  return v;
}

Allocator& SimBackend::AllocatorFor(Device device) { return Runtime::Get().AllocatorOf(device); }

Tensors SimBackend::RunKernel(const KernelRef& kernel, const TensorArgs& inputs, const Attrs& attrs) {
  // Owned copies for the queued work (a KernelRef borrows the caller's name).
  const std::string name(kernel.op);
  const std::optional<Phase> phase = kernel.phase;
  const std::string op = ToString(kernel);  // for messages
  if (FindCpuKernel(kernel) == nullptr) ThrowUnknownKernel(kernel);
  if (inputs.empty()) {
    (void)RunCpuKernel(kernel, inputs, attrs);  // the kernel's arity check names "inputs"
    ThrowInvalid("inputs", "no input tensor: the outputs of '" + op + "' have no sim device");
  }
  const Device device = *checks::CheckOnOneDevice(inputs, DeviceKind::kSim);
  const Stream stream = inputs[0].stream();
  std::vector<InputView> views;
  std::vector<Runtime::Range> ranges;
  for (size_t i = 0; i < inputs.size(); ++i) {
    views.push_back({inputs[i].bytes(), inputs[i].shape(), inputs[i].dtype()});
    ranges.push_back({inputs[i].bytes(), inputs[i].nbytes(), false, "inputs[" + std::to_string(i) + "]"});
  }
  // The outputs' shapes and dtypes, from the CPU kernel on zero-filled stand-ins (none for an
  // output whose size the data decides: staged below).
  std::optional<Tensors> shapes;
  if (!HasDataDependentOutputs(kernel, inputs, attrs)) {
    try {
      Tensors stand_ins;
      for (const Tensor& t : inputs) stand_ins.emplace_back(t.shape(), t.dtype());
      shapes = RunCpuKernel(kernel, stand_ins, attrs);
    } catch (const SpmdError&) {
    }
  }
  Runtime& rt = Runtime::Get();
  Allocator& allocator = AllocatorFor(device);
  if (!shapes) {
    // Staged: the kernel on the real data, waited for; its error is thrown here.
    struct Result {
      bool ran = false;
      Tensors outputs;
      std::exception_ptr error;
    };
    auto result = std::make_shared<Result>();
    const auto [s, position] = rt.Submit(stream, ranges, "'" + op + "' kernel (staged)", [=] {
      result->ran = true;
      try {
        result->outputs = RunOnCopies(KernelRef(name, phase), views, attrs);
      } catch (...) {
        result->error = std::current_exception();
      }
    });
    rt.WaitFor(s, position);
    if (result->error) std::rethrow_exception(result->error);
    if (!result->ran) {
      if (std::exception_ptr e = rt.TakeError(device.index)) std::rethrow_exception(e);
    }
    Tensors outputs;
    for (size_t o = 0; o < result->outputs.size(); ++o) {
      const Tensor& h = result->outputs[o];
      outputs.push_back(Tensor::Uninitialized(h.shape(), h.dtype(), allocator, stream));
      std::byte* dst = outputs.back().bytes();
      rt.Submit(stream, {{dst, h.nbytes(), true, "outputs[" + std::to_string(o) + "]"}},
                "'" + op + "' staged output", [result, o, dst] {
                  const Tensor& t = result->outputs[o];
                  if (t.nbytes() > 0) std::memcpy(dst, t.bytes(), t.nbytes());
                });
    }
    return outputs;
  }
  Tensors outputs;
  std::vector<std::byte*> out_ptrs;
  std::vector<std::pair<Shape, DType>> metas;
  for (size_t o = 0; o < shapes->size(); ++o) {
    const Tensor& h = (*shapes)[o];
    outputs.push_back(Tensor::Uninitialized(h.shape(), h.dtype(), allocator, stream));
    out_ptrs.push_back(outputs.back().bytes());
    metas.emplace_back(h.shape(), h.dtype());
    ranges.push_back({outputs.back().bytes(), outputs.back().nbytes(), true,
                      "outputs[" + std::to_string(o) + "]"});
  }
  rt.Submit(stream, ranges, "'" + op + "' kernel", [=] {
    Tensors got = RunOnCopies(KernelRef(name, phase), views, attrs);
    if (got.size() != metas.size()) {
      throw std::logic_error("'" + op + "' gave " + std::to_string(got.size()) +
                             " outputs on the device data, " + std::to_string(metas.size()) +
                             " on zero stand-ins: data-dependent outputs are not simulated");
    }
    for (size_t o = 0; o < got.size(); ++o) {
      if (got[o].shape() != metas[o].first || got[o].dtype() != metas[o].second) {
        throw std::logic_error("'" + op + "' output " + std::to_string(o) + " has shape " +
                               ShapeToString(got[o].shape()) + " on the device data, " +
                               ShapeToString(metas[o].first) + " on zero stand-ins");
      }
      if (got[o].nbytes() > 0) std::memcpy(out_ptrs[o], got[o].bytes(), got[o].nbytes());
    }
  });
  return outputs;
}

void SimBackend::Copy(void* dst, const void* src, size_t nbytes, Stream stream) {
  if (nbytes == 0 || dst == src) return;
  Runtime::Get().Submit(stream, {{dst, nbytes, true, "dst"}, {src, nbytes, false, "src"}}, "Copy",
                        [=] { std::memmove(dst, src, nbytes); });
}

// The host bytes are staged when the call is made (the caller may reuse its buffer), as
// ToDevice does; the destination is checked as device memory the stream writes.
void SimBackend::CopyFromHost(void* dst, const void* host_src, size_t nbytes, Stream stream) {
  if (nbytes == 0) return;
  checks::CheckHostBuffer(host_src, "host_src");
  const auto* p = static_cast<const std::byte*>(host_src);
  auto staged = std::make_shared<std::vector<std::byte>>(p, p + nbytes);
  Runtime::Get().Submit(stream, {{dst, nbytes, true, "dst"}}, "CopyFromHost",
                        [staged, dst] { std::memcpy(dst, staged->data(), staged->size()); });
}

void SimBackend::CopyToHost(void* host_dst, const void* src, size_t nbytes, Stream stream) {
  if (nbytes == 0) return;
  checks::CheckHostBuffer(host_dst, "host_dst");
  Runtime::Get().Submit(stream, {{src, nbytes, false, "src"}}, "CopyToHost",
                        [=] { std::memcpy(host_dst, src, nbytes); });
}

void SimBackend::CopyBox(const std::byte* src, const std::vector<int64_t>& src_shape,
                         const std::vector<int64_t>& src_at, std::byte* dst,
                         const std::vector<int64_t>& dst_shape, const std::vector<int64_t>& dst_at,
                         const std::vector<int64_t>& extent, size_t element_size, Stream stream) {
  for (int64_t x : extent) {
    if (x == 0) return;
  }
  const size_t src_bytes = static_cast<size_t>(Product(src_shape)) * element_size;
  const size_t dst_bytes = static_cast<size_t>(Product(dst_shape)) * element_size;
  Runtime::Get().Submit(stream, {{dst, dst_bytes, true, "dst"}, {src, src_bytes, false, "src"}},
                        "CopyBox", [=] {
                          Cpu().CopyBox(src, src_shape, src_at, dst, dst_shape, dst_at, extent,
                                        element_size, Stream{});
                        });
}

void SimBackend::Fill(void* dst, int64_t count, DType dtype, double value, Stream stream) {
  Cpu().Fill(nullptr, 0, dtype, value, Stream{});  // the dtype's check, on the host
  if (count <= 0) return;
  const size_t n = static_cast<size_t>(count) * ElementSize(dtype);
  Runtime::Get().Submit(stream, {{dst, n, true, "dst"}}, "Fill",
                        [=] { Cpu().Fill(dst, count, dtype, value, Stream{}); });
}

void SimBackend::Scale(void* buffer, int64_t count, DType dtype, int64_t n, bool divide, Stream stream) {
  Cpu().Scale(nullptr, 0, dtype, n, divide, Stream{});
  if (count <= 0) return;
  const size_t bytes = static_cast<size_t>(count) * ElementSize(dtype);
  Runtime::Get().Submit(stream, {{buffer, bytes, true, "buffer"}}, "Scale",
                        [=] { Cpu().Scale(buffer, count, dtype, n, divide, Stream{}); });
}

void SimBackend::Reduce(void* acc, const void* in, int64_t count, DType dtype, ReduceOp op, Stream stream) {
  Cpu().Reduce(nullptr, nullptr, 0, dtype, op, Stream{});
  if (count <= 0) return;
  const size_t bytes = static_cast<size_t>(count) * ElementSize(dtype);
  Runtime::Get().Submit(stream, {{acc, bytes, true, "acc"}, {in, bytes, false, "in"}}, "Reduce",
                        [=] { Cpu().Reduce(acc, in, count, dtype, op, Stream{}); });
}

void SimBackend::ToTruth(const void* in, void* out, int64_t count, DType dtype, Stream stream) {
  Cpu().ToTruth(nullptr, nullptr, 0, dtype, Stream{});
  if (count <= 0) return;
  const size_t bytes = static_cast<size_t>(count) * ElementSize(dtype);
  Runtime::Get().Submit(stream, {{out, bytes, true, "out"}, {in, bytes, false, "in"}}, "ToTruth",
                        [=] { Cpu().ToTruth(in, out, count, dtype, Stream{}); });
}

void SimBackend::Synchronize(Stream stream) { Runtime::Get().SynchronizeStream(stream); }

Backend& EnableSim() {
  static SimBackend* backend = new SimBackend;  // never destroyed: tensors may outlive statics
  static std::once_flag registered;
  std::call_once(registered, [] { SetBackend(DeviceKind::kSim, backend); });
  return *backend;
}

Stream DefaultStream(Device device) {
  (void)EnableSim();
  return Runtime::Get().DefaultStream(device);
}
Stream NewStream(Device device) {
  (void)EnableSim();
  return Runtime::Get().NewStream(device);
}
Device DeviceOf(Stream stream) { return Runtime::Get().DeviceOf(stream); }
Event RecordEvent(Stream stream) { return Runtime::Get().RecordEvent(stream); }
void StreamWaitEvent(Stream stream, Event event) { Runtime::Get().StreamWaitEvent(stream, event); }
void SynchronizeEvent(Event event) { Runtime::Get().SynchronizeEvent(event); }

void SynchronizeDevice(Device device) {
  Runtime::CheckDevice(device, "device");
  Runtime::Get().SynchronizeDevice(device.index);
}

Tensor ToDevice(const Tensor& host, Device device, Stream stream) {
  checks::CheckHostTensor(host, "host");
  Runtime::CheckDevice(device, "device");
  Backend& backend = EnableSim();
  if (stream.handle == nullptr) stream = DefaultStream(device);
  if (DeviceOf(stream) != device) {
    ThrowInvalid("stream", "a stream of " + ToString(DeviceOf(stream)) + ", not of " + ToString(device));
  }
  Tensor out = Tensor::Uninitialized(host.shape(), host.dtype(), backend.AllocatorFor(device), stream);
  if (out.nbytes() == 0) return out;
  auto staged = std::make_shared<std::vector<std::byte>>(host.bytes(), host.bytes() + host.nbytes());
  std::byte* dst = out.bytes();
  Runtime::Get().Submit(stream, {{dst, out.nbytes(), true, "dst"}}, "ToDevice",
                        [staged, dst] { std::memcpy(dst, staged->data(), staged->size()); });
  return out;
}

Tensor ToHost(const Tensor& tensor) {
  if (tensor.device().is_host()) return tensor;
  if (tensor.device().kind != DeviceKind::kSim) {
    ThrowInvalid("tensor", "sim::ToHost copies sim tensors, got one on " + ToString(tensor.device()));
  }
  Runtime::Get().SynchronizeStream(tensor.stream().handle == nullptr ? DefaultStream(tensor.device())
                                                                     : tensor.stream());
  Tensor out = Tensor::Uninitialized(tensor.shape(), tensor.dtype());
  Runtime::Get().ReadBack(tensor.bytes(), tensor.nbytes(), out.bytes(), "tensor");
  return out;
}

void CopyToHostAsync(void* host_dst, const Tensor& src) {
  if (src.device().kind != DeviceKind::kSim) {
    ThrowInvalid("src", "CopyToHostAsync copies a sim tensor, got one on " + ToString(src.device()));
  }
  if (src.nbytes() == 0) return;
  checks::CheckHostBuffer(host_dst, "host_dst");
  const std::byte* p = src.bytes();
  const size_t n = src.nbytes();
  Runtime::Get().Submit(src.stream(), {{p, n, false, "src"}}, "CopyToHostAsync",
                        [=] { std::memcpy(host_dst, p, n); });
}

void CheckHostAccess(const void* p, size_t nbytes, const std::string& field, bool write) {
  Runtime::Get().CheckHostAccess(p, nbytes, field, write);
}

MemoryUsage UsageOf(Device device) { return Runtime::Get().Usage(device); }
void SetCapacity(Device device, int64_t bytes) { Runtime::Get().SetCapacity(device, bytes); }

}  // namespace spmd::kernels::sim
