#include "runtime/diagnostics/flight_recorder.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <mutex>

#include "rules/model/error.h"

namespace spmd::runtime {

std::string_view ToString(FlightState state) {
  switch (state) {
    case FlightState::kEnqueued:
      return "enqueued";
    case FlightState::kStarted:
      return "started";
    case FlightState::kCompleted:
      return "completed";
  }
  return "enqueued";
}

struct FlightRecorder::Entry {
  std::atomic<int64_t> n{0};  // 1-based number of the call in this recorder; 0: empty
  int64_t step = 0, seq = 0;
  int32_t group = -1;
  int8_t kind = 0, dtype = 0, op = 0;
  std::atomic<int> state{0};
  int64_t root = -1;
  int64_t ncounts = 0, counts[kShownCounts] = {}, total = 0;
  uint64_t counts_hash = 0;
  int64_t nrecv = 0, recv[kShownCounts] = {};
  uint64_t recv_hash = 0;
  int64_t sent = 0, received = 0;
  int64_t enqueued_us = 0, started_us = 0;
  std::atomic<int64_t> completed_us{0};
  char phase[kPhaseSize] = {};
};

namespace {

int64_t NowUs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

uint64_t HashCounts(const std::vector<int64_t>& values) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the bytes
  for (int64_t v : values) {
    for (int i = 0; i < 8; ++i) {
      h ^= (static_cast<uint64_t>(v) >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  }
  return h;
}

// Appends to a fixed buffer and hands it to write(2) when full: no allocation.
class FdSink {
 public:
  explicit FdSink(int fd) : fd_(fd) {}
  ~FdSink() { Flush(); }
  FdSink(const FdSink&) = delete;
  FdSink& operator=(const FdSink&) = delete;
  void Put(const char* s, size_t n) {
    while (n > 0) {
      if (used_ == sizeof(buffer_)) Flush();
      const size_t k = std::min(n, sizeof(buffer_) - used_);
      std::memcpy(buffer_ + used_, s, k);
      used_ += k;
      s += k;
      n -= k;
    }
  }
  void Flush() {
    size_t done = 0;
    while (done < used_) {
      const ssize_t w = ::write(fd_, buffer_ + done, used_ - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        ok_ = false;
        break;
      }
      done += static_cast<size_t>(w);
    }
    used_ = 0;
  }
  bool ok() const { return ok_; }

 private:
  int fd_;
  char buffer_[4096];
  size_t used_ = 0;
  bool ok_ = true;
};

class StringSink {
 public:
  void Put(const char* s, size_t n) { out.append(s, n); }
  std::string out;
};

template <class Sink>
void PutText(Sink& sink, const char* s) {
  sink.Put(s, std::strlen(s));
}
template <class Sink>
void PutText(Sink& sink, std::string_view s) {
  sink.Put(s.data(), s.size());
}
template <class Sink>
void PutUnsigned(Sink& sink, uint64_t v) {
  char digits[24];
  int k = 0;
  do {
    digits[k++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  char out[24];
  for (int i = 0; i < k; ++i) out[i] = digits[k - 1 - i];
  sink.Put(out, static_cast<size_t>(k));
}
template <class Sink>
void PutInt(Sink& sink, int64_t v) {
  if (v < 0) {
    sink.Put("-", 1);
    PutUnsigned(sink, static_cast<uint64_t>(0) - static_cast<uint64_t>(v));
  } else {
    PutUnsigned(sink, static_cast<uint64_t>(v));
  }
}
template <class Sink>
void PutList(Sink& sink, const int64_t* v, int64_t n) {
  sink.Put("[", 1);
  for (int64_t i = 0; i < n; ++i) {
    if (i) sink.Put(",", 1);
    PutInt(sink, v[i]);
  }
  sink.Put("]", 1);
}
template <class Sink>
void PutField(Sink& sink, const char* key, int64_t v) {
  sink.Put(" ", 1);
  PutText(sink, key);
  sink.Put("=", 1);
  PutInt(sink, v);
}

// Live recorders with a directory, for the signal handlers (lock-free slots).
constexpr int kRegistrySlots = 256;
std::atomic<const FlightRecorder*> g_registry[kRegistrySlots];

void OnSignal(int signal) {
  const int saved = errno;
  FlightRecorder::DumpAll(signal == SIGUSR1 ? "SIGUSR1" : "SIGTERM");
  errno = saved;
  if (signal == SIGTERM) {
    ::signal(SIGTERM, SIG_DFL);  // die of it, as without the recorder
    ::raise(SIGTERM);
  }
}

void InstallSignalHandlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_handler = &OnSignal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    // Only where nobody else has claimed the signal (keep an application's own handler).
    for (int signal : {SIGUSR1, SIGTERM}) {
      struct sigaction old {};
      if (sigaction(signal, nullptr, &old) == 0 && old.sa_handler == SIG_DFL &&
          (old.sa_flags & SA_SIGINFO) == 0) {
        sigaction(signal, &action, nullptr);
      }
    }
  });
}

std::string Sanitize(std::string_view text, size_t limit) {
  std::string out(text.substr(0, limit));
  for (char& c : out) {
    if (c == '"' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return out;
}

}  // namespace

FlightRecorder::FlightRecorder(int64_t rank, int64_t world_size, int64_t capacity, std::string dir)
    : rank_(rank),
      world_size_(world_size),
      capacity_(std::max<int64_t>(capacity, 0)),
      dir_(std::move(dir)) {
  if (capacity_ == 0) return;
  ring_ = std::make_unique<Entry[]>(static_cast<size_t>(capacity_));
  sends_ = std::make_unique<std::atomic<int64_t>[]>(static_cast<size_t>(world_size_));
  recvs_ = std::make_unique<std::atomic<int64_t>[]>(static_cast<size_t>(world_size_));
  for (int64_t p = 0; p < world_size_; ++p) {
    sends_[p] = 0;
    recvs_[p] = 0;
  }
  if (dir_.empty()) return;
  path_ = dir_ + "/flight_rank" + std::to_string(rank_) + ".txt";
  for (int slot = 0; slot < kRegistrySlots; ++slot) {
    const FlightRecorder* expected = nullptr;
    if (g_registry[slot].compare_exchange_strong(expected, this)) {
      registry_slot_ = slot;
      break;
    }
  }
  InstallSignalHandlers();
}

FlightRecorder::~FlightRecorder() {
  if (registry_slot_ >= 0) g_registry[registry_slot_].store(nullptr);
}

void FlightRecorder::SetPhase(std::string_view phase) {
  const std::string clean = Sanitize(phase, kPhaseSize - 1);
  std::memcpy(phase_, clean.data(), clean.size());
  phase_[clean.size()] = '\0';
}

int FlightRecorder::GroupIndex(const Group& group) {
  if (auto it = group_index_.find(group); it != group_index_.end()) return it->second;
  const int count = group_count_.load();
  if (count >= kMaxFlightGroups) return -1;
  auto info = std::make_unique<GroupInfo>();
  info->text = ToString(group);
  groups_[count] = std::move(info);
  group_count_.store(count + 1);  // published after the text is in place
  group_index_.emplace(group, count);
  return count;
}

int64_t FlightRecorder::Enqueued(const CollectiveDesc& desc, int64_t step, ByteCount bytes) {
  if (capacity_ == 0) return -1;
  const int64_t n = recorded_.load() + 1;
  Entry& e = ring_[(n - 1) % capacity_];
  e.n.store(0);  // invalid while it is rewritten
  e.step = step;
  e.kind = static_cast<int8_t>(desc.kind);
  e.dtype = static_cast<int8_t>(desc.dtype);
  e.op = static_cast<int8_t>(desc.op);
  e.root = desc.root;
  if (desc.kind == Collective::kSend || desc.kind == Collective::kRecv) {
    e.group = -1;
    std::atomic<int64_t>* per_peer = desc.kind == Collective::kSend ? sends_.get() : recvs_.get();
    e.seq = per_peer[desc.root].fetch_add(1) + 1;
    if (open_p2p_++ == 0) first_open_p2p_ = n;
  } else {
    e.group = GroupIndex(desc.group);
    e.seq = e.group >= 0 ? groups_[e.group]->calls.fetch_add(1) + 1 : 0;
  }
  e.ncounts = static_cast<int64_t>(desc.counts.size());
  e.total = 0;
  for (int64_t i = 0; i < e.ncounts; ++i) {
    if (i < kShownCounts) e.counts[i] = desc.counts[i];
    e.total += desc.counts[i];
  }
  e.counts_hash = HashCounts(desc.counts);
  e.nrecv = static_cast<int64_t>(desc.recv_counts.size());
  for (int64_t i = 0; i < std::min<int64_t>(e.nrecv, kShownCounts); ++i)
    e.recv[i] = desc.recv_counts[i];
  e.recv_hash = HashCounts(desc.recv_counts);
  e.sent = bytes.sent;
  e.received = bytes.received;
  e.enqueued_us = NowUs();
  e.started_us = 0;
  e.completed_us.store(0);
  e.state.store(static_cast<int>(FlightState::kEnqueued));
  std::memcpy(e.phase, phase_, kPhaseSize);
  e.n.store(n);
  recorded_.store(n);
  return n;
}

void FlightRecorder::Started(int64_t handle) {
  if (handle <= 0) return;
  Entry& e = ring_[(handle - 1) % capacity_];
  if (e.n.load() != handle) return;
  e.started_us = NowUs();
  e.state.store(static_cast<int>(FlightState::kStarted));
}

void FlightRecorder::Completed(int64_t handle) {
  if (handle <= 0) return;
  Entry& e = ring_[(handle - 1) % capacity_];
  if (e.n.load() != handle) return;
  e.completed_us.store(NowUs());
  e.state.store(static_cast<int>(FlightState::kCompleted));
}

void FlightRecorder::CompletedPointToPoint() {
  if (capacity_ == 0 || open_p2p_ == 0) return;
  open_p2p_ = 0;
  const int64_t now = NowUs();
  const int64_t last = recorded_.load();
  // Only the entries from the first send / recv since the last call: every one before it
  // was marked then. (Scanning the whole ring touched a cache line per entry at every
  // Synchronize: 0.6 us on a send + recv of one element, more once a large transfer has
  // evicted the ring from the caches.)
  for (int64_t n = std::max<int64_t>(first_open_p2p_, last - capacity_ + 1); n <= last; ++n) {
    Entry& e = ring_[(n - 1) % capacity_];
    const auto kind = static_cast<Collective>(e.kind);
    if ((kind == Collective::kSend || kind == Collective::kRecv) &&
        e.state.load() == static_cast<int>(FlightState::kStarted)) {
      e.completed_us.store(now);
      e.state.store(static_cast<int>(FlightState::kCompleted));
    }
  }
}

template <class Sink>
void FlightRecorder::Write(Sink& sink, const char* reason) const {
  PutText(sink, "spmd-flight-record 1\nrank=");
  PutInt(sink, rank_);
  PutField(sink, "world", world_size_);
  PutField(sink, "capacity", capacity_);
  const int64_t last = recorded_.load();
  PutField(sink, "recorded", last);
  PutField(sink, "pid", static_cast<int64_t>(::getpid()));
  PutText(sink, " reason=\"");
  for (const char* c = reason; *c != '\0'; ++c) {
    const char ch = (*c == '"' || static_cast<unsigned char>(*c) < 0x20) ? '?' : *c;
    sink.Put(&ch, 1);
  }
  PutText(sink, "\"\n");
  const int groups = group_count_.load();
  for (int g = 0; g < groups; ++g) {
    PutText(sink, "group id=");
    PutInt(sink, g);
    PutText(sink, " members=");
    PutText(sink, std::string_view(groups_[g]->text));
    PutField(sink, "calls", groups_[g]->calls.load());
    PutText(sink, "\n");
  }
  for (int64_t p = 0; p < world_size_; ++p) {
    const int64_t s = sends_[p].load(), r = recvs_[p].load();
    if (s == 0 && r == 0) continue;
    PutText(sink, "p2p peer=");
    PutInt(sink, p);
    PutField(sink, "sends", s);
    PutField(sink, "recvs", r);
    PutText(sink, "\n");
  }
  for (int64_t n = std::max<int64_t>(1, last - capacity_ + 1); n <= last; ++n) {
    const Entry& e = ring_[(n - 1) % capacity_];
    if (e.n.load() != n) continue;  // being rewritten by the interrupted thread
    PutText(sink, "call n=");
    PutInt(sink, n);
    PutField(sink, "step", e.step);
    PutField(sink, "group", e.group);
    PutField(sink, "seq", e.seq);
    PutText(sink, " kind=");
    PutText(sink, ToString(static_cast<Collective>(e.kind)));
    PutText(sink, " dtype=");
    PutText(sink, ToString(static_cast<DType>(e.dtype)));
    PutText(sink, " op=");
    PutText(sink, ToString(static_cast<ReduceOp>(e.op)));
    PutField(sink, "root", e.root);
    PutField(sink, "ncounts", e.ncounts);
    PutText(sink, " counts=");
    PutList(sink, e.counts, std::min<int64_t>(e.ncounts, kShownCounts));
    PutField(sink, "total", e.total);
    PutText(sink, " counts_hash=");
    PutUnsigned(sink, e.counts_hash);
    PutField(sink, "nrecv", e.nrecv);
    PutText(sink, " recv_counts=");
    PutList(sink, e.recv, std::min<int64_t>(e.nrecv, kShownCounts));
    PutText(sink, " recv_hash=");
    PutUnsigned(sink, e.recv_hash);
    PutField(sink, "sent", e.sent);
    PutField(sink, "received", e.received);
    PutText(sink, " state=");
    PutText(sink, ToString(static_cast<FlightState>(e.state.load())));
    PutField(sink, "enqueued_us", e.enqueued_us);
    PutField(sink, "started_us", e.started_us);
    PutField(sink, "completed_us", e.completed_us.load());
    PutText(sink, " phase=\"");
    sink.Put(e.phase, ::strnlen(e.phase, kPhaseSize));
    PutText(sink, "\"\n");
  }
  PutText(sink, "end\n");
}

std::string FlightRecorder::Format(const char* reason) const {
  StringSink sink;
  if (capacity_ > 0) Write(sink, reason);
  return sink.out;
}

std::string FlightRecorder::Dump(const char* reason, bool final) const {
  if (capacity_ == 0 || path_.empty()) return "";
  if (final) final_dumped_.store(true);
  const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return "";
  bool ok = false;
  {
    FdSink sink(fd);
    Write(sink, reason);
    sink.Flush();
    ok = sink.ok();
  }
  ::close(fd);
  return ok ? path_ : "";
}

void FlightRecorder::DumpAll(const char* reason) {
  for (auto& slot : g_registry) {
    if (const FlightRecorder* r = slot.load(); r != nullptr && !r->final_dumped_.load()) {
      r->Dump(reason);
    }
  }
}

}  // namespace spmd::runtime
