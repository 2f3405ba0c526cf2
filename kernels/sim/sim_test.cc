// The simulated device (kernels/sim/sim.h): its contract (asynchrony, streams, events, the
// pool, capacity, errors), the broken usage it catches where the CPU backend runs the same
// code silently, and every op's CPU kernel through it equal to the CPU backend.
#include "kernels/sim/sim.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/kernels.h"
#include "rules/engine/op_decl.h"
#include "kernels/sim/op_inputs_test_util.h"
#include "rules/engine/registry.h"

namespace spmd::kernels::sim {
namespace {

using testing::MakeInputs;
using testing::WholeTensorAttrs;

constexpr DType kAllDTypes[] = {DType::kFloat64, DType::kFloat32, DType::kInt64,
                                DType::kBool,    DType::kBFloat16, DType::kFloat16};

const Device kSim0 = Device::Sim(0);

// A host tensor of `shape` with bytes from `seed` (bool 0 / 1; 2-byte floats finite).
Tensor Random(const Shape& shape, DType dtype, uint64_t seed) {
  Tensor t = Tensor::Uninitialized(shape, dtype);
  std::mt19937_64 rng(seed);
  auto* b = reinterpret_cast<uint8_t*>(t.bytes());
  for (size_t i = 0; i < t.nbytes(); ++i) b[i] = static_cast<uint8_t>(rng());
  if (dtype == DType::kBool) {
    for (size_t i = 0; i < t.nbytes(); ++i) b[i] &= 1;
  }
  if (dtype == DType::kBFloat16 || dtype == DType::kFloat16) {
    auto* h = reinterpret_cast<uint16_t*>(t.bytes());
    for (int64_t i = 0; i < t.numel(); ++i) h[i] &= 0x3fff;
  }
  if (dtype == DType::kFloat32) {
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(rng() % 1000) / 8.0f - 60;
  }
  if (dtype == DType::kFloat64) {
    for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = static_cast<double>(rng() % 1000) / 8.0 - 60;
  }
  return t;
}

Tensor Floats(std::vector<float> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return Tensor::FromVector<float>({n}, v);
}

// Kernel inputs by pointer (the tensors outlive the call).
template <class... T>
TensorArgs Args(const T&... tensors) {
  return TensorArgs(std::vector<const Tensor*>{&tensors...});
}

bool SameBytes(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         (a.nbytes() == 0 || std::memcmp(a.bytes(), b.bytes(), a.nbytes()) == 0);
}

// Runs `fn` and returns the hazard of the HazardError it throws (nullopt: none thrown).
std::optional<Hazard> HazardOf(const std::function<void()>& fn, std::string* field = nullptr) {
  try {
    fn();
  } catch (const HazardError& e) {
    if (field != nullptr) *field = e.field();
    return e.hazard();
  }
  return std::nullopt;
}

// ---- The device and its tensors ---------------------------------------------------------

TEST(SimDevice, NamesKindAndRegisteredBackend) {
  EXPECT_EQ(ToString(Device::Sim(3)), "sim:3");
  EXPECT_FALSE(Device::Sim(0).is_host());
  Backend& backend = EnableSim();
  EXPECT_EQ(backend.kind(), DeviceKind::kSim);
  EXPECT_EQ(&BackendFor(kSim0), &backend);
  EXPECT_EQ(&EnableSim(), &backend);  // idempotent
  EXPECT_EQ(DeviceOf(DefaultStream(Device::Sim(1))), Device::Sim(1));
}

TEST(SimDevice, BadDevicesAndStreamsAreTypedErrors) {
  for (Device bad : {Device::Sim(-1), Device::Sim(kMaxSimDevices), Device::Host(), Device::Cuda(0)}) {
    try {
      (void)NewStream(bad);
      ADD_FAILURE() << ToString(bad);
    } catch (const SpmdError& e) {
      EXPECT_EQ(e.field(), "device");
    }
  }
  int not_a_stream = 0;
  try {
    EnableSim().Synchronize(Stream{&not_a_stream});
    ADD_FAILURE();
  } catch (const SpmdError& e) {
    EXPECT_EQ(e.field(), "stream");
  }
  try {
    StreamWaitEvent(DefaultStream(kSim0), Event{&not_a_stream, 1});
    ADD_FAILURE();
  } catch (const SpmdError& e) {
    EXPECT_EQ(e.field(), "event.stream");
  }
}

TEST(SimDevice, TypedHostAccessIsRefusedAsForCuda) {
  const Tensor d = ToDevice(Floats({1, 2}), kSim0);
  EXPECT_EQ(d.device(), kSim0);
  try {
    (void)d.data<float>();
    ADD_FAILURE();
  } catch (const SpmdError& e) {
    EXPECT_EQ(e.type(), ErrorType::kInvalidArgument);
    EXPECT_EQ(e.field(), "device");
  }
  try {
    (void)(d == d);
    ADD_FAILURE();
  } catch (const SpmdError& e) {
    EXPECT_EQ(e.field(), "device");
  }
  try {
    (void)ToDevice(d, kSim0);
    ADD_FAILURE();
  } catch (const SpmdError& e) {
    EXPECT_EQ(e.field(), "host");
  }
}

TEST(SimDevice, HostAddressesAreNotDeviceBuffers) {
  Tensor host = Floats({1, 2, 3});
  Tensor d = ToDevice(host, kSim0);
  std::string field;
  try {
    EnableSim().Copy(d.bytes(), host.bytes(), host.nbytes(), d.stream());
    ADD_FAILURE();
  } catch (const SpmdError& e) {
    EXPECT_EQ(e.field(), "src");
  }
  try {  // past the end of the block
    EnableSim().Copy(d.bytes(), d.bytes() + 4, d.nbytes(), d.stream());
    ADD_FAILURE();
  } catch (const SpmdError& e) {
    EXPECT_EQ(e.field(), "src");
  }
}

TEST(SimDevice, RoundTripEveryDType) {
  for (DType dtype : kAllDTypes) {
    for (const Shape& shape : {Shape{}, Shape{0}, Shape{3, 5}, Shape{1000}}) {
      const Tensor h = Random(shape, dtype, 7);
      const Tensor back = ToHost(ToDevice(h, kSim0));
      EXPECT_TRUE(SameBytes(back, h)) << ToString(dtype) << " " << ShapeToString(shape);
    }
  }
}

TEST(SimDevice, TensorCopiesAreDeepAndOrdered) {
  const Tensor h = Random({64}, DType::kFloat64, 3);
  Tensor d = ToDevice(h, kSim0);
  Tensor copy = d;  // through SimBackend::Copy on d's stream
  EnableSim().Fill(d.bytes(), d.numel(), d.dtype(), 0.0, d.stream());
  EXPECT_TRUE(SameBytes(ToHost(copy), h));
  EXPECT_TRUE(SameBytes(ToHost(d), Tensor({64}, DType::kFloat64)));
}

// ---- Asynchrony, streams, events ---------------------------------------------------------
// SimDeferred: what only the default (deferred) schedule guarantees; the rest also runs
// under SPMD_SIM_SCHEDULE=eager (ctest sim_kernels_test_eager).

TEST(SimDeferred, CallsReturnBeforeTheirWorkRuns) {
  Backend& sim = EnableSim();
  const Tensor d = ToDevice(Floats({1, 2, 3}), kSim0);
  std::vector<float> out(3, -1.0f);
  CopyToHostAsync(out.data(), d);
  EXPECT_EQ(out, std::vector<float>(3, -1.0f));  // queued, not run
  sim.Synchronize(d.stream());
  EXPECT_EQ(out, (std::vector<float>{1, 2, 3}));
}

TEST(SimStreams, OneStreamRunsInCallOrderWithoutSynchronize) {
  Backend& sim = EnableSim();
  Tensor d = ToDevice(Floats({1, 2, 3, 4}), kSim0);
  Tensor e = ToDevice(Floats({10, 20, 30, 40}), kSim0);
  sim.Scale(d.bytes(), 4, DType::kFloat32, 3, false, d.stream());      // 3 6 9 12
  sim.Reduce(d.bytes(), e.bytes(), 4, DType::kFloat32, ReduceOp::kSum, d.stream());  // 13 26 39 52
  sim.Scale(d.bytes(), 4, DType::kFloat32, 13, true, d.stream());      // 1 2 3 4
  const Tensors sq = sim.RunKernel("multiply", Args(d, d), Attrs());       // 1 4 9 16
  EXPECT_TRUE(SameBytes(ToHost(sq[0]), Floats({1, 4, 9, 16})));
}

TEST(SimStreams, EventWaitOrdersCrossStreamWork) {
  Backend& sim = EnableSim();
  const Stream a = NewStream(kSim0), b = NewStream(kSim0);
  const Tensor x = ToDevice(Floats({1, 2, 3}), kSim0, a);
  const Tensors y = sim.RunKernel("add", Args(x, x), Attrs());  // on a
  Tensor z = Tensor::Uninitialized({3}, DType::kFloat32, sim.AllocatorFor(kSim0), b);
  StreamWaitEvent(b, RecordEvent(a));
  sim.Copy(z.bytes(), y[0].bytes(), y[0].nbytes(), b);
  sim.Synchronize(b);  // runs a up to the event first: no hazard
  EXPECT_TRUE(SameBytes(ToHost(z), Floats({2, 4, 6})));
}

TEST(SimDeferred, SynchronizeEventRunsUpToTheEventOnly) {
  Backend& sim = EnableSim();
  const Stream a = NewStream(kSim0);
  Tensor x = ToDevice(Floats({1, 1}), kSim0, a);
  std::vector<float> first(2, 0), second(2, 0);
  CopyToHostAsync(first.data(), x);
  const Event event = RecordEvent(a);
  sim.Fill(x.bytes(), 2, DType::kFloat32, 2.0, a);
  CopyToHostAsync(second.data(), x);
  SynchronizeEvent(event);
  EXPECT_EQ(first, (std::vector<float>{1, 1}));
  EXPECT_EQ(second, (std::vector<float>{0, 0}));  // after the event: not run yet
  sim.Synchronize(a);
  EXPECT_EQ(second, (std::vector<float>{2, 2}));
}

TEST(SimStreams, SynchronizeDeviceAndNullStreamWaitForEveryStream) {
  Backend& sim = EnableSim();
  const Stream a = NewStream(kSim0), b = NewStream(kSim0);
  const Tensor x = ToDevice(Floats({5}), kSim0, a), y = ToDevice(Floats({6}), kSim0, b);
  float hx = 0, hy = 0;
  CopyToHostAsync(&hx, x);
  CopyToHostAsync(&hy, y);
  SynchronizeDevice(kSim0);
  EXPECT_EQ(hx, 5);
  EXPECT_EQ(hy, 6);
  CopyToHostAsync(&hx, ToDevice(Floats({7}), Device::Sim(1)));  // the temporary's free is queued after
  sim.Synchronize(Stream{});
  EXPECT_EQ(hx, 7);
}

// ---- The pool: stream-ordered reuse, poison, capacity -------------------------------------

TEST(SimDeferred, ABlockIsReusedOnlyAfterItsStreamPassedTheFree) {
  Backend& sim = EnableSim();
  const Device dev = Device::Sim(2);
  const Stream a = NewStream(dev);
  Allocator& pool = sim.AllocatorFor(dev);
  void* first = pool.Allocate(4096, a);
  pool.Deallocate(first, 4096, a);
  void* second = pool.Allocate(4096, a);  // the free has not run: another block
  EXPECT_NE(second, first);
  sim.Synchronize(a);
  void* third = pool.Allocate(4096, a);  // now the freed block comes back
  EXPECT_EQ(third, first);
  pool.Deallocate(second, 4096, a);
  pool.Deallocate(third, 4096, a);
  sim.Synchronize(a);
}

TEST(SimPool, FreedAndFreshMemoryIsPoisoned) {
  Backend& sim = EnableSim();
  // Frees that earlier tests queued on other streams of the device run first: one landing
  // after x's below would put its block on top of the pool's cache (eager schedule), and the
  // reuse would not be x's block.
  SynchronizeDevice(kSim0);
  const Stream a = NewStream(kSim0);
  Tensor fresh = Tensor::Uninitialized({8}, DType::kFloat64, sim.AllocatorFor(kSim0), a);
  for (int64_t i = 0; i < 8; ++i) EXPECT_TRUE(std::isnan(ToHost(fresh).data<double>()[i]));
  const std::byte* where = nullptr;
  {
    Tensor x = ToDevice(Tensor::FromVector<double>({8}, {1, 2, 3, 4, 5, 6, 7, 8}), kSim0, a);
    where = x.bytes();
    sim.Synchronize(a);
  }
  sim.Synchronize(a);  // the free has run: the block is poisoned and pooled
  Tensor reused = Tensor::Uninitialized({8}, DType::kFloat64, sim.AllocatorFor(kSim0), a);
  ASSERT_EQ(reused.bytes(), where);
  const Tensor seen = ToHost(reused);
  for (int64_t i = 0; i < 8; ++i) EXPECT_TRUE(std::isnan(seen.data<double>()[i])) << i;
}

TEST(SimPool, UsageCountsBlocksInUseAndPeak) {
  Backend& sim = EnableSim();
  const Device dev = Device::Sim(4);
  Allocator& pool = sim.AllocatorFor(dev);
  const MemoryUsage before = UsageOf(dev);
  void* p = pool.Allocate(1000, {});
  void* q = pool.Allocate(10, {});
  MemoryUsage now = UsageOf(dev);
  EXPECT_EQ(now.bytes_in_use - before.bytes_in_use, 1024 + 256);
  EXPECT_EQ(now.live_blocks - before.live_blocks, 2);
  pool.Deallocate(p, 1000, {});
  pool.Deallocate(q, 10, {});
  now = UsageOf(dev);
  EXPECT_EQ(now.bytes_in_use, before.bytes_in_use);
  EXPECT_GE(now.peak_bytes, before.bytes_in_use + 1024 + 256);
  SynchronizeDevice(dev);
}

TEST(SimPool, CapacityLimitIsATypedOutOfMemory) {
  Backend& sim = EnableSim();
  const Device dev = Device::Sim(3);
  SetCapacity(dev, 8192);
  Allocator& pool = sim.AllocatorFor(dev);
  const Stream a = DefaultStream(dev);
  {
    Tensor big = Tensor::Uninitialized({1024}, DType::kFloat64, pool, a);  // 8192 bytes: all of it
    try {
      Tensor more = Tensor::Uninitialized({1}, DType::kFloat64, pool, a);
      ADD_FAILURE() << "allocated past the capacity";
    } catch (const OutOfMemory& e) {
      EXPECT_NE(std::string(e.what()).find("8192"), std::string::npos) << e.what();
    }
  }
  // `big`'s free is queued, not run: the allocation waits for it rather than failing.
  Tensor again = Tensor::Uninitialized({1024}, DType::kFloat64, pool, a);
  EXPECT_EQ(again.nbytes(), 8192u);
  EXPECT_THROW(SetCapacity(dev, -1), SpmdError);
}

TEST(SimPool, CapacityFromTheEnvironment) {
  // sim:5 is touched by this test only, so the variable is read when it is created.
  ASSERT_EQ(setenv("SPMD_SIM_DEVICE_BYTES", "4096", 1), 0);
  EXPECT_EQ(UsageOf(Device::Sim(5)).capacity, 4096);
  unsetenv("SPMD_SIM_DEVICE_BYTES");
  EXPECT_THROW((void)Tensor::Uninitialized({4097}, DType::kBool, EnableSim().AllocatorFor(Device::Sim(5)), {}),
               std::bad_alloc);
  EXPECT_EQ(ParseCapacity(nullptr), 0);
  EXPECT_EQ(ParseCapacity(""), 0);
  EXPECT_EQ(ParseCapacity("123"), 123);
  for (const char* bad : {"12x", "-5", "abc", "+3", "99999999999999999999999"}) {
    try {
      (void)ParseCapacity(bad);
      ADD_FAILURE() << bad;
    } catch (const SpmdError& e) {
      EXPECT_EQ(e.field(), "SPMD_SIM_DEVICE_BYTES");
    }
  }
}

// ---- Errors ------------------------------------------------------------------------------

TEST(SimErrors, AWorkerErrorSurfacesAtTheNextSynchronize) {
  Backend& sim = EnableSim();
  // cast to int64 refuses NaN: the zero stand-ins pass, the real data fails on the worker.
  const Tensor x = ToDevice(Floats({1, std::nanf("")}), kSim0, NewStream(kSim0));
  const Attrs attrs = FindOp("cast")->NormalizeAttrs(Attrs().With("dtype", std::string("int64")));
  std::string cpu_field;
  try {
    const Tensor hx = ToHost(x);
    (void)RunCpuKernel("cast", {hx}, attrs);
  } catch (const SpmdError& e) {
    cpu_field = e.field();
  }
  ASSERT_FALSE(cpu_field.empty());
  const Tensors out = sim.RunKernel("cast", Args(x), attrs);  // returns: the work is queued
  try {
    sim.Synchronize(x.stream());
    ADD_FAILURE() << "the worker's error was lost";
  } catch (const SpmdError& e) {
    EXPECT_EQ(e.field(), cpu_field);
  }
  sim.Synchronize(x.stream());  // thrown once
}

TEST(SimErrors, RefusedRequestsThrowAtTheCallAsOnTheCpu) {
  Backend& sim = EnableSim();
  const Tensor x = ToDevice(Floats({1, 2}), kSim0), y = ToDevice(Floats({1, 2, 3}), kSim0);
  try {
    (void)sim.RunKernel("no_such_op", Args(x), Attrs());
    ADD_FAILURE();
  } catch (const SpmdError& e) {
    EXPECT_EQ(e.type(), ErrorType::kUnknownOp);
  }
  try {  // shapes the op refuses: the CPU kernel's error, at the call
    (void)sim.RunKernel("matmul", Args(x, y), FindOp("matmul")->NormalizeAttrs(Attrs()));
    ADD_FAILURE();
  } catch (const SpmdError& e) {
    try {
      const Tensor hx = ToHost(x), hy = ToHost(y);
      (void)RunCpuKernel("matmul", {hx, hy}, FindOp("matmul")->NormalizeAttrs(Attrs()));
    } catch (const SpmdError& c) {
      EXPECT_EQ(e.field(), c.field());
      EXPECT_EQ(e.type(), c.type());
    }
  }
  const Tensor h = Floats({1, 2});
  try {
    (void)sim.RunKernel("add", TensorArgs(std::vector<const Tensor*>{&x, &h}), Attrs());
    ADD_FAILURE();
  } catch (const SpmdError& e) {
    EXPECT_EQ(e.field(), "inputs[1].device");
  }
  try {
    sim.Scale(nullptr, 0, DType::kBool, 2, false, {});
    ADD_FAILURE();
  } catch (const SpmdError& e) {
    EXPECT_EQ(e.field(), "dtype");
  }
  try {
    sim.Reduce(nullptr, nullptr, 0, DType::kBool, ReduceOp::kSum, {});
    ADD_FAILURE();
  } catch (const SpmdError& e) {
    EXPECT_EQ(e.field(), "op");
  }
}

TEST(SimErrors, ADoubleFreeIsReportedAtTheNextSynchronize) {
  Backend& sim = EnableSim();
  const Device dev = Device::Sim(6);
  Allocator& pool = sim.AllocatorFor(dev);
  void* p = pool.Allocate(64, {});
  pool.Deallocate(p, 64, {});
  pool.Deallocate(p, 64, {});  // noexcept: kept for the next synchronizing call
  EXPECT_EQ(HazardOf([&] { SynchronizeDevice(dev); }), Hazard::kDoubleFree);
}

// ---- Broken usage: caught on the sim, silent on the CPU -----------------------------------
//
// Each variant runs the same code on the CPU backend (host tensors; every call done before
// it returns) and on the sim; the CPU gets the right answer by luck of its schedule, the
// sim reports the bug.

struct Target {
  bool sim = false;
  Backend& backend() const { return sim ? EnableSim() : BackendFor(Device::Host()); }
  Device device() const { return sim ? kSim0 : Device::Host(); }
  Stream NewQueue() const { return sim ? NewStream(kSim0) : Stream{}; }
  Tensor Put(const Tensor& host, Stream s) const { return sim ? ToDevice(host, kSim0, s) : host; }
  Tensor Empty(const Shape& shape, DType dtype, Stream s) const {
    return Tensor::Uninitialized(shape, dtype, backend().AllocatorFor(device()), s);
  }
  // Starts a copy of `t` into host memory (on the CPU: a copy, done at once).
  void StartCopyOut(void* host, const Tensor& t) const {
    if (sim) {
      CopyToHostAsync(host, t);
    } else {
      backend().Copy(host, t.bytes(), t.nbytes(), t.stream());
    }
  }
  Tensor Get(const Tensor& t) const { return sim ? ToHost(t) : t; }
};

const Target kCpu{false}, kSimTarget{true};

// The host reads a result without synchronizing its stream.
std::vector<float> ReadWithoutSynchronize(const Target& t) {
  const Stream s = t.NewQueue();
  const Tensor x = t.Put(Floats({1, 2, 3}), s);
  const Tensors y = t.backend().RunKernel("add", Args(x, x), Attrs());
  std::vector<float> host(3, -1.0f);
  t.StartCopyOut(host.data(), y[0]);
  std::vector<float> seen = host;  // BUG: no Synchronize(s) before reading
  t.backend().Synchronize(s);
  return seen;
}

TEST(SimBrokenUsage, MissingSynchronizeBeforeAHostRead) {
  const std::vector<float> want = {2, 4, 6};
  EXPECT_EQ(ReadWithoutSynchronize(kCpu), want);     // silent on the CPU
  EXPECT_NE(ReadWithoutSynchronize(kSimTarget), want);  // stale on the sim
}

// The host synchronizes a stream, but not the one the result is on.
std::vector<float> SynchronizeTheWrongStream(const Target& t) {
  const Stream a = t.NewQueue(), b = t.NewQueue();
  const Tensor x = t.Put(Floats({1, 2}), a);
  const Tensors y = t.backend().RunKernel("multiply", Args(x, x), Attrs());
  std::vector<float> host(2, -1.0f);
  t.StartCopyOut(host.data(), y[0]);
  t.backend().Synchronize(b);  // BUG: y and its copy are on a
  std::vector<float> seen = host;
  t.backend().Synchronize(a);
  return seen;
}

TEST(SimBrokenUsage, SynchronizingAnotherStreamBeforeAHostRead) {
  EXPECT_EQ(SynchronizeTheWrongStream(kCpu), (std::vector<float>{1, 4}));
  EXPECT_NE(SynchronizeTheWrongStream(kSimTarget), (std::vector<float>{1, 4}));
}

// A buffer is freed on its own stream while another stream still has a read of it queued;
// its memory is then reused. Returns the hazards reported by each synchronization (and the
// result in `*out`).
std::vector<Hazard> FreeOnTheWrongStreamThenReuse(const Target& t, Tensor* result,
                                                  std::vector<std::string>* fields) {
  const Stream a = t.NewQueue(), b = t.NewQueue();
  std::vector<Hazard> seen;
  auto sync = [&](Stream s) {
    std::string field;
    if (std::optional<Hazard> h = HazardOf([&] { t.backend().Synchronize(s); }, &field)) {
      seen.push_back(*h);
      fields->push_back(field);
    }
  };
  Tensor out = t.Empty({4}, DType::kFloat32, b);
  {
    const Tensor x = t.Put(Floats({1, 2, 3, 4}), a);
    t.backend().Synchronize(a);
    t.backend().Copy(out.bytes(), x.bytes(), x.nbytes(), b);  // a read of x queued on b
  }  // BUG: x is freed on a, which is not ordered after b's read
  sync(a);  // a passes the free
  const Tensor reuse = t.Put(Floats({9, 9, 9, 9}), a);  // the pool hands x's block out again
  sync(a);
  sync(b);
  *result = t.Get(out);
  return seen;
}

TEST(SimBrokenUsage, FreeOnTheWrongStreamThenReuseWhileAnotherStreamReads) {
  Tensor got;
  std::vector<std::string> fields;
  EXPECT_TRUE(FreeOnTheWrongStreamThenReuse(kCpu, &got, &fields).empty());
  EXPECT_TRUE(SameBytes(got, Floats({1, 2, 3, 4})));
  // The free runs before b's read (a free not ordered after a read), then the read finds
  // its buffer freed and does not run.
  EXPECT_EQ(FreeOnTheWrongStreamThenReuse(kSimTarget, &got, &fields),
            (std::vector<Hazard>{Hazard::kUnorderedAccess, Hazard::kUseAfterFree}));
  EXPECT_EQ(fields, (std::vector<std::string>{"buffer", "src"}));
}

// A stream overwrites a buffer that a kernel queued on another stream has not read yet.
Tensor OverwriteWhatAnotherStreamReads(const Target& t) {
  const Stream a = t.NewQueue(), b = t.NewQueue();
  Tensor x = t.Put(Floats({1, 2, 3}), a);
  t.backend().Synchronize(a);
  const Tensors y = t.backend().RunKernel("add", Args(x, x), Attrs());  // reads x on a
  t.backend().Fill(x.bytes(), 3, DType::kFloat32, 0.0, b);  // BUG: b does not wait for a
  t.backend().Synchronize(b);
  t.backend().Synchronize(a);
  return t.Get(y[0]);
}

TEST(SimBrokenUsage, OverwritingABufferAnotherStreamStillReads) {
  EXPECT_TRUE(SameBytes(OverwriteWhatAnotherStreamReads(kCpu), Floats({2, 4, 6})));
  std::string field;
  EXPECT_EQ(HazardOf([&] { (void)OverwriteWhatAnotherStreamReads(kSimTarget); }, &field),
            Hazard::kUnorderedAccess);
  EXPECT_EQ(field, "dst");
}

// A kernel on one stream reads a buffer another stream is still writing: no event wait.
Tensor ReadWithoutEventWait(const Target& t, bool wait) {
  const Stream a = t.NewQueue(), b = t.NewQueue();
  const Tensor x = t.Put(Floats({1, 2, 3}), a);
  const Tensors y = t.backend().RunKernel("add", Args(x, x), Attrs());  // written on a
  const Tensor one = t.Put(Floats({1, 1, 1}), b);
  if (wait && t.sim) StreamWaitEvent(b, RecordEvent(a));
  // BUG (without wait): b reads y before a has written it.
  const Tensor y_on_b = [&] {
    Tensor v = t.Empty({3}, DType::kFloat32, b);
    t.backend().Copy(v.bytes(), y[0].bytes(), y[0].nbytes(), b);
    return v;
  }();
  const Tensors z = t.backend().RunKernel("add", Args(y_on_b, one), Attrs());
  t.backend().Synchronize(b);
  t.backend().Synchronize(a);
  return t.Get(z[0]);
}

TEST(SimBrokenUsage, AKernelReadsABufferAnotherStreamIsStillWriting) {
  EXPECT_TRUE(SameBytes(ReadWithoutEventWait(kCpu, false), Floats({3, 5, 7})));
  std::string field;
  EXPECT_EQ(HazardOf([&] { (void)ReadWithoutEventWait(kSimTarget, false); }, &field),
            Hazard::kUnorderedAccess);
  EXPECT_EQ(field, "src");
  // With the event wait the same code is right on the sim too.
  EXPECT_TRUE(SameBytes(ReadWithoutEventWait(kSimTarget, true), Floats({3, 5, 7})));
}

// The host frees a buffer and then reads it through a pointer it kept. 16384 floats: the
// host allocator caches a block this large when freed, so the CPU's read is of mapped
// memory (wrong, but not a crash a sanitizer would see).
Tensor ReadAFreedBuffer(const Target& t) {
  const Stream s = t.NewQueue();
  Tensor out = t.Empty({16384}, DType::kFloat32, s);
  const std::byte* stale = nullptr;
  {
    const Tensor x = t.Put(Tensor({16384}, DType::kFloat32), s);
    stale = x.bytes();
  }
  t.backend().Copy(out.bytes(), stale, out.nbytes(), s);  // BUG: x is gone
  t.backend().Synchronize(s);
  return t.Get(out);
}

TEST(SimBrokenUsage, ReadingAFreedBuffer) {
  EXPECT_NO_THROW((void)ReadAFreedBuffer(kCpu));
  std::string field;
  EXPECT_EQ(HazardOf([&] { (void)ReadAFreedBuffer(kSimTarget); }, &field), Hazard::kUseAfterFree);
  EXPECT_EQ(field, "src");
}

// A kernel is given a tensor whose memory the host allocated but nothing wrote yet (an
// Uninitialized output someone forgot to fill): the sim's poison shows as NaN.
Tensor ReadUninitialized(const Target& t) {
  const Stream s = t.NewQueue();
  Tensor acc = t.Empty({4}, DType::kFloat32, s);
  if (!t.sim) std::memset(acc.bytes(), 0, acc.nbytes());  // what fresh host pages often hold
  const Tensor x = t.Put(Floats({1, 2, 3, 4}), s);
  t.backend().Reduce(acc.bytes(), x.bytes(), 4, DType::kFloat32, ReduceOp::kSum, s);  // BUG: no Fill(0)
  t.backend().Synchronize(s);
  return t.Get(acc);
}

TEST(SimBrokenUsage, AccumulatingIntoMemoryNothingWrote) {
  EXPECT_TRUE(SameBytes(ReadUninitialized(kCpu), Floats({1, 2, 3, 4})));
  const Tensor got = ReadUninitialized(kSimTarget);
  for (int64_t i = 0; i < 4; ++i) EXPECT_TRUE(std::isnan(got.data<float>()[i])) << i;
}

// A buffer is freed on one stream while a write to it queued on another has not run.
void FreeBeforeAnotherStreamsWrite(const Target& t) {
  const Stream a = t.NewQueue(), b = t.NewQueue();
  {
    Tensor x = t.Empty({8}, DType::kFloat64, a);
    t.backend().Fill(x.bytes(), 8, DType::kFloat64, 1.0, b);  // a write queued on b
  }  // BUG: freed on a without waiting for b
  t.backend().Synchronize(a);
  t.backend().Synchronize(b);
}

TEST(SimBrokenUsage, FreeingWhileAnotherStreamStillWrites) {
  EXPECT_NO_THROW(FreeBeforeAnotherStreamsWrite(kCpu));
  EXPECT_EQ(HazardOf([&] { FreeBeforeAnotherStreamsWrite(kSimTarget); }), Hazard::kUnorderedAccess);
}

// ---- The element loops and every op's kernel, equal to the CPU backend --------------------

TEST(SimEquality, ElementLoopsEqualTheCpuBackendForEveryDType) {
  Backend& sim = EnableSim();
  Backend& cpu = BackendFor(Device::Host());
  const Stream s = NewStream(kSim0);
  for (DType dtype : kAllDTypes) {
    const int64_t n = 37;
    const Tensor a = Random({n}, dtype, 1), b = Random({n}, dtype, 2);
    Tensor ca = a, cb = b;
    Tensor da = ToDevice(a, kSim0, s), db = ToDevice(b, kSim0, s);
    auto same = [&](const std::string& what) {
      EXPECT_TRUE(SameBytes(ToHost(da), ca)) << what << " " << ToString(dtype);
      EXPECT_TRUE(SameBytes(ToHost(db), cb)) << what << " " << ToString(dtype);
    };
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAny,
                        ReduceOp::kAll}) {
      if (dtype == DType::kBool && (op == ReduceOp::kSum)) continue;
      cpu.Reduce(ca.bytes(), cb.bytes(), n, dtype, op, {});
      sim.Reduce(da.bytes(), db.bytes(), n, dtype, op, s);
    }
    same("Reduce");
    if (dtype != DType::kBool) {
      cpu.Scale(ca.bytes(), n, dtype, 3, true, {});
      sim.Scale(da.bytes(), n, dtype, 3, true, s);
      cpu.Scale(cb.bytes(), n, dtype, 2, false, {});
      sim.Scale(db.bytes(), n, dtype, 2, false, s);
      same("Scale");
    }
    cpu.ToTruth(ca.bytes(), cb.bytes(), n, dtype, {});
    sim.ToTruth(da.bytes(), db.bytes(), n, dtype, s);
    same("ToTruth");
    cpu.Fill(ca.bytes() + ca.element_size(), 5, dtype, 1.0, {});
    sim.Fill(da.bytes() + da.element_size(), 5, dtype, 1.0, s);
    same("Fill");
    cpu.Copy(ca.bytes() + 2 * ca.element_size(), ca.bytes(), 10 * ca.element_size(), {});  // overlapping
    sim.Copy(da.bytes() + 2 * da.element_size(), da.bytes(), 10 * da.element_size(), s);
    same("Copy");
    const Tensor box_src = Random({4, 5, 6}, dtype, 3);
    Tensor cpu_box = Tensor({3, 7, 2}, dtype), sim_box = ToDevice(cpu_box, kSim0, s);
    const Tensor sim_src = ToDevice(box_src, kSim0, s);
    cpu.CopyBox(box_src.bytes(), {4, 5, 6}, {1, 2, 3}, cpu_box.bytes(), {3, 7, 2}, {0, 4, 0}, {2, 3, 2},
                box_src.element_size(), {});
    sim.CopyBox(sim_src.bytes(), {4, 5, 6}, {1, 2, 3}, sim_box.bytes(), {3, 7, 2}, {0, 4, 0}, {2, 3, 2},
                box_src.element_size(), s);
    EXPECT_TRUE(SameBytes(ToHost(sim_box), cpu_box)) << "CopyBox " << ToString(dtype);
  }
}

class SimOpTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SimOpTest, KernelThroughTheSimEqualsTheCpuBackendBitForBit) {
  const OpDecl& op = *FindOp(GetParam());
  Backend& sim = EnableSim();
  Backend& cpu = BackendFor(Device::Host());
  int compared = 0, refused = 0;
  const Stream s = NewStream(kSim0);
  for (const SizePalette& palette : {SizePalette{{4, 6, 8}}, SizePalette{{1, 2, 3}}}) {
    for (const Example& example : op.examples(palette)) {
      const std::optional<Attrs> attrs = WholeTensorAttrs(op, example);
      if (!attrs) continue;
      for (DType dtype : {DType::kFloat64, DType::kFloat32, DType::kBFloat16}) {
        const Tensors inputs = MakeInputs(op, example.shapes, *attrs, dtype, compared + refused + 1);
        const std::string what = op.name + " on " + std::to_string(example.shapes.size()) + " inputs, " +
                                 std::string(ToString(dtype));
        std::optional<SpmdError> cpu_error;
        Tensors want;
        try {
          want = cpu.RunKernel(op.name, inputs, *attrs);
        } catch (const SpmdError& e) {
          cpu_error = e;
        }
        Tensors device_inputs;
        for (const Tensor& t : inputs) device_inputs.push_back(ToDevice(t, kSim0, s));
        Tensors got;
        try {
          const Tensors out = sim.RunKernel(op.name, device_inputs, *attrs);
          for (const Tensor& t : out) got.push_back(ToHost(t));
          sim.Synchronize(s);
        } catch (const SpmdError& e) {
          ASSERT_TRUE(cpu_error) << what << ": the sim refused what the CPU ran: " << e.what();
          EXPECT_EQ(e.type(), cpu_error->type()) << what;
          EXPECT_EQ(e.field(), cpu_error->field()) << what;
          ++refused;
          continue;
        }
        ASSERT_FALSE(cpu_error) << what << ": the sim ran what the CPU refused: " << cpu_error->what();
        ASSERT_EQ(got.size(), want.size()) << what;
        for (size_t o = 0; o < got.size(); ++o) EXPECT_TRUE(SameBytes(got[o], want[o])) << what << " output " << o;
        ++compared;
      }
    }
  }
  EXPECT_GT(compared, 0) << op.name << ": every example was refused";
}

std::vector<std::string> OpNames() {
  std::vector<std::string> names;
  for (const OpDecl& op : AllOps()) names.push_back(op.name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(AllOps, SimOpTest, ::testing::ValuesIn(OpNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace spmd::kernels::sim
