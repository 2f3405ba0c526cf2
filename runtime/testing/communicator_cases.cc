#include "runtime/testing/communicator_cases.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <list>
#include <numeric>
#include <ostream>
#include <sstream>

#include "rules/model/error.h"

namespace spmd::runtime::testing {
namespace {

uint64_t Mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

bool Reduces(Collective kind) {
  return kind == Collective::kAllReduce || kind == Collective::kReduceScatter;
}

// The value of element i of the input of member p of group g (send/recv: sender g,
// message p). Small integers (and halves) so that every reduction is exact in float32 in
// any order, and the expected bits are unique; data movement gets distinct values.
double InputValue(const CollectiveCase& c, int64_t g, int64_t p, int64_t i) {
  const uint64_t h = Mix(c.data_seed ^ Mix((static_cast<uint64_t>(g) << 40) ^
                                           (static_cast<uint64_t>(p) << 32) ^
                                           static_cast<uint64_t>(i)));
  const bool any = c.op == ReduceOp::kAny;
  const bool all = c.op == ReduceOp::kAll;
  if (c.dtype == DType::kBool) {
    if (Reduces(c.kind) && any) return h % 4 == 0;
    if (Reduces(c.kind) && all) return h % 4 != 0;
    return static_cast<double>(h & 1);
  }
  if (!Reduces(c.kind)) return static_cast<double>((g * 64 + p) * 1000 + i + 1);
  switch (c.op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return static_cast<double>(static_cast<int64_t>(h % 17) - 8);
    case ReduceOp::kProd: {
      constexpr double kFactors[] = {-2, -1, 1, 2};
      return kFactors[h % 4];
    }
    case ReduceOp::kMax:
    case ReduceOp::kMin:
      return static_cast<double>(static_cast<int64_t>(h % 101) - 50);
    case ReduceOp::kAny:
    case ReduceOp::kAll: {
      const bool nonzero = any ? h % 4 == 0 : h % 4 != 0;
      if (!nonzero) return 0;
      if (c.dtype == DType::kInt64) return (h >> 8) % 2 ? 3 : -1;
      constexpr double kNonzero[] = {0.5, -1.5, 3, std::numeric_limits<double>::quiet_NaN()};
      return kNonzero[(h >> 8) % 4];
    }
  }
  return 0;
}

template <class T>
T As(double v) {
  if constexpr (std::is_same_v<T, uint8_t>) {
    return v != 0 ? 1 : 0;
  } else {
    return static_cast<T>(v);
  }
}

// Bool buffers are bytes holding 0 or 1.
template <class T>
constexpr DType ElementDType() {
  if constexpr (std::is_same_v<T, uint8_t>) {
    return DType::kBool;
  } else {
    return DTypeOf<T>();
  }
}

template <class T>
std::vector<T> Inputs(const CollectiveCase& c, int64_t g, int64_t p, int64_t count) {
  std::vector<T> out(count);
  for (int64_t i = 0; i < count; ++i) out[i] = As<T>(InputValue(c, g, p, i));
  return out;
}

// The reference reduction of one element over the members, in position order.
template <class T>
T Fold(ReduceOp op, const std::vector<T>& xs) {
  const auto truth = [](T x) { return x != T{0}; };  // NaN is nonzero
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: {
      T s = xs[0];
      for (size_t q = 1; q < xs.size(); ++q) s = s + xs[q];
      if (op == ReduceOp::kAvg) s = s / static_cast<T>(xs.size());
      return s;
    }
    case ReduceOp::kProd: {
      T s = xs[0];
      for (size_t q = 1; q < xs.size(); ++q) s = static_cast<T>(s * xs[q]);
      return s;
    }
    case ReduceOp::kMax: return *std::max_element(xs.begin(), xs.end());
    case ReduceOp::kMin: return *std::min_element(xs.begin(), xs.end());
    case ReduceOp::kAny: return std::any_of(xs.begin(), xs.end(), truth) ? T{1} : T{0};
    case ReduceOp::kAll: return std::all_of(xs.begin(), xs.end(), truth) ? T{1} : T{0};
  }
  return T{0};
}

template <class T>
T Sentinel() {
  if constexpr (std::is_same_v<T, uint8_t>) {
    return 2;
  } else {
    return static_cast<T>(-7777);
  }
}

template <class T>
std::string Show(T v) {
  std::ostringstream os;
  if constexpr (std::is_same_v<T, uint8_t>) {
    os << static_cast<int>(v);
  } else {
    os << v;
  }
  return os.str();
}

template <class T>
std::string Compare(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  if (got.size() != want.size()) return what + ": size " + std::to_string(got.size()) + " != " + std::to_string(want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) {
      return what + " element " + std::to_string(i) + ": got " + Show(got[i]) + ", want " +
             Show(want[i]);
    }
  }
  return "";
}

int64_t Sum(const std::vector<int64_t>& v, size_t begin = 0, size_t end = SIZE_MAX) {
  end = std::min(end, v.size());
  int64_t s = 0;
  for (size_t i = begin; i < end; ++i) s += v[i];
  return s;
}

template <class T>
std::string RunTyped(Communicator& comm, const CollectiveCase& c) {
  constexpr DType kDType = ElementDType<T>();
  const int64_t e = sizeof(T);
  const int64_t r = comm.rank();
  const std::string who = "rank " + std::to_string(r) + ": ";
  comm.ResetCounters();
  const int64_t step0 = comm.step();
  const ByteCount transport0 = comm.transport_bytes();

  // What the counters must read afterwards, per the convention of communicator.h.
  CommCounters want;
  auto expect = [&want](Collective kind, int64_t calls, int64_t sent, int64_t received) {
    auto& k = want.per_kind[static_cast<int>(kind)];
    k.calls += calls;
    k.sent += sent;
    k.received += received;
  };
  std::string error;

  if (c.kind == Collective::kSend) {
    const int64_t to = c.peer_of[r];
    const int64_t from = std::find(c.peer_of.begin(), c.peer_of.end(), r) - c.peer_of.begin();
    if (to != r) {
      std::list<std::vector<T>> sends;
      std::list<std::vector<T>> recvs;
      auto post_sends = [&] {
        for (size_t m = 0; m < c.message_counts[r].size(); ++m) {
          sends.push_back(Inputs<T>(c, r, m, c.message_counts[r][m]));
          comm.Send(sends.back().data(), sends.back().size(), kDType, to);
        }
      };
      auto post_recvs = [&] {
        for (size_t m = 0; m < c.message_counts[from].size(); ++m) {
          recvs.emplace_back(c.message_counts[from][m], Sentinel<T>());
          comm.Recv(recvs.back().data(), recvs.back().size(), kDType, from);
        }
      };
      if (c.recv_first) {
        post_recvs();
        post_sends();
      } else {
        post_sends();
        post_recvs();
      }
      comm.Synchronize();
      int64_t m = 0;
      for (const std::vector<T>& got : recvs) {
        if (error.empty()) {
          error = Compare(got, Inputs<T>(c, from, m, got.size()),
                          who + "message " + std::to_string(m) + " from rank " + std::to_string(from));
        }
        ++m;
      }
      expect(Collective::kSend, c.message_counts[r].size(), Sum(c.message_counts[r]) * e, 0);
      expect(Collective::kRecv, c.message_counts[from].size(), 0, Sum(c.message_counts[from]) * e);
    }
  } else {
    int64_t g = -1;
    int64_t p = -1;
    for (size_t gi = 0; gi < c.groups.size() && g < 0; ++gi) {
      const auto it = std::find(c.groups[gi].begin(), c.groups[gi].end(), r);
      if (it != c.groups[gi].end()) {
        g = gi;
        p = it - c.groups[gi].begin();
      }
    }
    if (g >= 0) {
      const Group& group = c.groups[g];
      const auto n = static_cast<int64_t>(group.size());
      const std::vector<int64_t>& counts = c.counts[g];
      const int64_t solo = n == 1 ? 0 : 1;  // a group of one moves nothing
      switch (c.kind) {
        case Collective::kAllGather: {
          const std::vector<T> send = Inputs<T>(c, g, p, counts[p]);
          std::vector<T> recv(Sum(counts), Sentinel<T>());
          comm.AllGather(send.data(), recv.data(), counts, kDType, group);
          comm.Synchronize();
          std::vector<T> want_out;
          for (int64_t q = 0; q < n; ++q) {
            const std::vector<T> in = Inputs<T>(c, g, q, counts[q]);
            want_out.insert(want_out.end(), in.begin(), in.end());
          }
          error = Compare(recv, want_out, who + "all_gather output");
          expect(c.kind, 1, solo * (n - 1) * counts[p] * e, solo * (Sum(counts) - counts[p]) * e);
          break;
        }
        case Collective::kReduceScatter: {
          const int64_t total = Sum(counts);
          const std::vector<T> send = Inputs<T>(c, g, p, total);
          std::vector<T> recv(counts[p], Sentinel<T>());
          comm.ReduceScatter(send.data(), recv.data(), counts, kDType, c.op, group);
          comm.Synchronize();
          std::vector<std::vector<T>> ins;
          for (int64_t q = 0; q < n; ++q) ins.push_back(Inputs<T>(c, g, q, total));
          std::vector<T> want_out(counts[p]);
          const int64_t offset = Sum(counts, 0, p);
          for (int64_t i = 0; i < counts[p]; ++i) {
            std::vector<T> xs;
            for (int64_t q = 0; q < n; ++q) xs.push_back(ins[q][offset + i]);
            want_out[i] = Fold(c.op, xs);
          }
          error = Compare(recv, want_out, who + "reduce_scatter output");
          expect(c.kind, 1, solo * (total - counts[p]) * e, solo * (n - 1) * counts[p] * e);
          break;
        }
        case Collective::kAllReduce: {
          const int64_t count = counts[0];
          std::vector<T> send = Inputs<T>(c, g, p, count);
          std::vector<T> recv(count, Sentinel<T>());
          T* out = c.in_place ? send.data() : recv.data();
          comm.AllReduce(send.data(), out, count, kDType, c.op, group);
          comm.Synchronize();
          std::vector<std::vector<T>> ins;
          for (int64_t q = 0; q < n; ++q) ins.push_back(Inputs<T>(c, g, q, count));
          std::vector<T> want_out(count);
          for (int64_t i = 0; i < count; ++i) {
            std::vector<T> xs;
            for (int64_t q = 0; q < n; ++q) xs.push_back(ins[q][i]);
            want_out[i] = Fold(c.op, xs);
          }
          error = Compare(c.in_place ? send : recv, want_out, who + "all_reduce output");
          // Ring: reduce_scatter then all_gather over the balanced split.
          const int64_t chunk = count / n + (p < count % n ? 1 : 0);
          const int64_t bytes = solo * ((count - chunk) + (n - 1) * chunk) * e;
          expect(c.kind, 1, bytes, bytes);
          break;
        }
        case Collective::kAllToAll: {
          // counts[from * n + to]; send chunks packed by destination, recv by source.
          std::vector<int64_t> send_counts(n);
          std::vector<int64_t> recv_counts(n);
          for (int64_t q = 0; q < n; ++q) {
            send_counts[q] = counts[p * n + q];
            recv_counts[q] = counts[q * n + p];
          }
          const std::vector<T> send = Inputs<T>(c, g, p, Sum(send_counts));
          std::vector<T> recv(Sum(recv_counts), Sentinel<T>());
          comm.AllToAll(send.data(), send_counts, recv.data(), recv_counts, kDType, group);
          comm.Synchronize();
          std::vector<T> want_out;
          for (int64_t q = 0; q < n; ++q) {
            const int64_t offset = Sum(counts, q * n, q * n + p);
            const std::vector<T> in = Inputs<T>(c, g, q, offset + counts[q * n + p]);
            want_out.insert(want_out.end(), in.begin() + offset, in.end());
          }
          error = Compare(recv, want_out, who + "all_to_all output");
          expect(c.kind, 1, solo * (Sum(send_counts) - send_counts[p]) * e,
                 solo * (Sum(recv_counts) - recv_counts[p]) * e);
          break;
        }
        case Collective::kBroadcast: {
          const int64_t count = counts[0];
          const int64_t root = c.roots[g];
          std::vector<T> buffer = p == root ? Inputs<T>(c, g, root, count)
                                            : std::vector<T>(count, Sentinel<T>());
          comm.Broadcast(buffer.data(), count, kDType, group[root], group);
          comm.Synchronize();
          error = Compare(buffer, Inputs<T>(c, g, root, count), who + "broadcast output");
          expect(c.kind, 1, p == root ? solo * (n - 1) * count * e : 0,
                 p == root ? 0 : solo * count * e);
          break;
        }
        case Collective::kBarrier:
          comm.Barrier(group);
          comm.Synchronize();
          expect(c.kind, 1, 0, 0);
          break;
        default:
          break;
      }
    }
  }

  if (error.empty()) {
    int64_t calls = 0;
    for (int k = 0; k < kNumCollectives; ++k) {
      const CommCounters::PerKind& got = comm.counters().per_kind[k];
      const CommCounters::PerKind& w = want.per_kind[k];
      calls += w.calls;
      if (!(got == w)) {
        error = who + "counters of " + std::string(ToString(static_cast<Collective>(k))) +
                ": got {calls " + std::to_string(got.calls) + ", sent " + std::to_string(got.sent) +
                ", received " + std::to_string(got.received) + "}, want {" +
                std::to_string(w.calls) + ", " + std::to_string(w.sent) + ", " +
                std::to_string(w.received) + "}";
        break;
      }
    }
    if (error.empty() && (comm.counters().total_sent() != want.total_sent() ||
                          comm.counters().total_received() != want.total_received())) {
      error = who + "total counters differ";
    }
    // What the backend really handed its transport, counted apart from the counters.
    const ByteCount transport = comm.transport_bytes();
    const int64_t sent = transport.sent - transport0.sent;
    const int64_t received = transport.received - transport0.received;
    if (error.empty() && (sent != want.total_sent() || received != want.total_received())) {
      error = who + "transport moved sent " + std::to_string(sent) + ", received " +
              std::to_string(received) + "; want " + std::to_string(want.total_sent()) + ", " +
              std::to_string(want.total_received());
    }
    if (error.empty() && comm.step() - step0 != calls) {
      error = who + "step advanced by " + std::to_string(comm.step() - step0) + ", want " +
              std::to_string(calls);
    }
  }
  return error;
}

}  // namespace

std::ostream& operator<<(std::ostream& os, const CollectiveCase& c) {
  os << ToString(c.kind) << " " << ToString(c.dtype);
  if (Reduces(c.kind)) os << " op=" << ToString(c.op);
  os << " world=" << c.world_size << " seed=" << c.data_seed;
  if (c.kind == Collective::kSend) {
    os << (c.recv_first ? " recv_first" : "") << " peer_of=" << ToString(c.peer_of) << " messages=[";
    for (const auto& m : c.message_counts) os << ToString(m);
    return os << "]";
  }
  if (c.in_place) os << " in_place";
  for (size_t g = 0; g < c.groups.size(); ++g) {
    os << " group" << ToString(c.groups[g]) << " counts" << ToString(c.counts[g]);
    if (c.kind == Collective::kBroadcast) os << " root@" << c.roots[g];
  }
  return os;
}

rc::Gen<CollectiveCase> GenCase(int64_t world_size, Collective kind) {
  return rc::gen::exec([world_size, kind] {
    CollectiveCase c;
    c.kind = kind;
    c.world_size = world_size;
    if (Reduces(kind)) {
      c.op = *rc::gen::element(ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin,
                               ReduceOp::kProd, ReduceOp::kAny, ReduceOp::kAll);
    }
    c.dtype = c.op == ReduceOp::kSum || c.op == ReduceOp::kAvg
                  ? *rc::gen::element(DType::kFloat64, DType::kFloat32, DType::kInt64)
                  : *rc::gen::element(DType::kFloat64, DType::kFloat32, DType::kInt64,
                                      DType::kBool);
    c.data_seed = *rc::gen::arbitrary<uint64_t>();
    // Mostly small counts (empty chunks included), sometimes large enough for MPI's
    // rendezvous protocol.
    const auto count = [](int64_t small) {
      return rc::gen::weightedOneOf<int64_t>(
          {{6, rc::gen::inRange<int64_t>(0, small)}, {1, rc::gen::inRange<int64_t>(0, 3000)}});
    };

    // A random order of the world: sort ranks by random keys (shrinks to the identity).
    const auto keys = *rc::gen::container<std::vector<int>>(world_size, rc::gen::inRange(0, 64));
    std::vector<int64_t> order(world_size);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&keys](int64_t a, int64_t b) { return keys[a] < keys[b]; });

    if (kind == Collective::kSend) {
      c.peer_of.resize(world_size);  // a permutation: rank r sends to peer_of[r]
      for (int64_t i = 0; i < world_size; ++i) c.peer_of[order[i]] = order[(i + 1) % world_size];
      const int64_t fixed = *rc::gen::inRange<int64_t>(0, world_size);  // some send to no one
      for (int64_t i = 0; i < fixed && world_size > 1; ++i) {
        // Taking rank order[i] out of the cycle keeps a permutation.
        const int64_t r = order[i];
        const int64_t before = std::find(c.peer_of.begin(), c.peer_of.end(), r) - c.peer_of.begin();
        c.peer_of[before] = c.peer_of[r];
        c.peer_of[r] = r;
      }
      for (int64_t r = 0; r < world_size; ++r) {
        c.message_counts.push_back(
            *rc::gen::container<std::vector<int64_t>>(*rc::gen::inRange(1, 4), count(9)));
      }
      c.recv_first = *rc::gen::arbitrary<bool>();
      return c;
    }

    // Disjoint groups in that order; the last `idle` ranks take no part.
    const int64_t idle = *rc::gen::inRange<int64_t>(0, world_size);
    const int64_t active = world_size - idle;
    for (int64_t pos = 0; pos < active;) {
      const int64_t size = *rc::gen::inRange<int64_t>(1, active - pos + 1);
      c.groups.emplace_back(order.begin() + pos, order.begin() + pos + size);
      pos += size;
    }
    for (const Group& group : c.groups) {
      const auto n = static_cast<int64_t>(group.size());
      switch (kind) {
        case Collective::kAllGather:
        case Collective::kReduceScatter:
          c.counts.push_back(*rc::gen::container<std::vector<int64_t>>(n, count(9)));
          break;
        case Collective::kAllToAll:
          c.counts.push_back(*rc::gen::container<std::vector<int64_t>>(n * n, count(6)));
          break;
        case Collective::kAllReduce:
        case Collective::kBroadcast:
          c.counts.push_back({*count(33)});
          break;
        default:
          c.counts.emplace_back();
      }
      c.roots.push_back(*rc::gen::inRange<int64_t>(0, n));
    }
    c.in_place = kind == Collective::kAllReduce && *rc::gen::arbitrary<bool>();
    return c;
  });
}

std::string RunBoxSendRecv(Communicator& comm) {
  const int64_t n = comm.world_size(), me = comm.rank();
  if (n < 2) return "";
  const int64_t to = (me + 1) % n, from = (me + n - 1) % n;
  // Element (index i of the sender's [4, 5, 3] array) carries sender * 1000 + i.
  auto source = [](int64_t sender) {
    std::vector<double> a(4 * 5 * 3);
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<double>(sender * 1000 + static_cast<int64_t>(i));
    return a;
  };
  const BufferBox piece{{4, 5, 3}, {1, 2, 0}, {2, 3, 3}};  // 18 elements, strided
  const BufferBox target{{3, 6, 3}, {0, 1, 0}, {2, 3, 3}};
  const BufferBox scalar{{}, {}, {}};                      // a 0-d array: one element
  const BufferBox empty{{4, 5, 3}, {1, 2, 0}, {2, 0, 3}};  // nothing
  // What arrives from `from`, in row-major order of the piece.
  std::vector<double> want;
  const std::vector<double> theirs = source(from);
  for (int64_t i = 1; i < 3; ++i)
    for (int64_t j = 2; j < 5; ++j)
      for (int64_t k = 0; k < 3; ++k) want.push_back(theirs[(i * 5 + j) * 3 + k]);

  const std::vector<double> mine = source(me);
  // Each buffer holds its box's whole array (a staging communicator copies the array).
  std::vector<double> boxed(3 * 6 * 3, -1.0), flat(18, -1.0), from_flat(4 * 5 * 3, -1.0);
  double one = -1.0;
  const double my_scalar = static_cast<double>(me) + 0.5;
  const int64_t step0 = comm.step();
  const CommCounters before = comm.counters();
  const ByteCount transport0 = comm.transport_bytes();
  // Box -> box, box -> contiguous, contiguous -> box, 0-d box, empty box; receives first on
  // even ranks, sends first on odd ones.
  auto sends = [&] {
    comm.SendBox(mine.data(), piece, DType::kFloat64, to);
    comm.SendBox(mine.data(), piece, DType::kFloat64, to);
    comm.Send(want.data(), 0, DType::kFloat64, to);  // an empty message keeps the order honest
    comm.SendBox(&my_scalar, scalar, DType::kFloat64, to);
    comm.SendBox(mine.data(), empty, DType::kFloat64, to);
  };
  auto recvs = [&] {
    comm.RecvBox(boxed.data(), target, DType::kFloat64, from);
    comm.Recv(flat.data(), 18, DType::kFloat64, from);
    comm.Recv(nullptr, 0, DType::kFloat64, from);
    comm.RecvBox(&one, scalar, DType::kFloat64, from);
    comm.RecvBox(from_flat.data(), empty, DType::kFloat64, from);
  };
  if (me % 2 == 0) {
    recvs();
    sends();
  } else {
    sends();
    recvs();
  }
  comm.Synchronize();
  std::ostringstream err;
  if (flat != want) err << "box -> contiguous: wrong values; ";
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < 6; ++j) {
      for (int64_t k = 0; k < 3; ++k) {
        const bool inside = i < 2 && j >= 1 && j < 4;
        const double expect = inside ? want[(i * 3 + (j - 1)) * 3 + k] : -1.0;
        if (boxed[(i * 6 + j) * 3 + k] != expect) {
          err << "box -> box: element (" << i << "," << j << "," << k << ") is "
              << boxed[(i * 6 + j) * 3 + k] << ", expected " << expect << "; ";
          i = 3, j = 6, k = 3;
        }
      }
    }
  }
  if (one != static_cast<double>(from) + 0.5) err << "0-d box: got " << one << "; ";
  if (std::any_of(from_flat.begin(), from_flat.end(), [](double v) { return v != -1.0; }))
    err << "empty box wrote into its array; ";
  const int64_t sent = comm.counters()[Collective::kSend].sent - before[Collective::kSend].sent;
  const int64_t received =
      comm.counters()[Collective::kRecv].received - before[Collective::kRecv].received;
  if (sent != (18 + 18 + 1) * 8 || received != (18 + 18 + 1) * 8) {
    err << "counted sent " << sent << ", received " << received << ", expected " << 37 * 8 << "; ";
  }
  const ByteCount transport = comm.transport_bytes();
  if (transport.sent - transport0.sent != 37 * 8 ||
      transport.received - transport0.received != 37 * 8) {
    err << "transport sent " << transport.sent - transport0.sent << ", received "
        << transport.received - transport0.received << ", expected " << 37 * 8 << "; ";
  }
  if (comm.step() != step0 + 10) err << "step " << comm.step() << ", expected " << step0 + 10 << "; ";
  // A box that does not fit is refused before anything moves.
  try {
    comm.SendBox(mine.data(), BufferBox{{4, 5, 3}, {3, 0, 0}, {2, 1, 1}}, DType::kFloat64, to);
    err << "a box past its array was accepted; ";
  } catch (const SpmdError& e) {
    if (e.field() != "send.box") err << "bad box: field " << e.field() << "; ";
  }
  return err.str();
}

std::string RunMeshAxes(Communicator& comm) {
  const int64_t w = comm.world_size();
  std::vector<int64_t> shape = {w};
  if (w == 4) shape = {2, 2};
  if (w == 8) shape = {2, 2, 2};
  std::vector<int64_t> identity(w);
  std::iota(identity.begin(), identity.end(), 0);
  std::vector<int64_t> reversed(identity.rbegin(), identity.rend());
  std::vector<int64_t> odd;  // a sub-mesh: the odd ranks, last first
  for (int64_t r = w - 1; r >= 0; --r) {
    if (r % 2 == 1) odd.push_back(r);
  }
  std::vector<Mesh> meshes = {Mesh(shape, identity), Mesh(shape, reversed)};
  if (!odd.empty()) meshes.emplace_back(std::vector<int64_t>{static_cast<int64_t>(odd.size())}, odd);

  for (const Mesh& mesh : meshes) {
    const std::optional<std::vector<int64_t>> coord = mesh.CoordinateOf(comm.rank());
    if (!coord) continue;  // outside this mesh: takes no part
    // Every ordered subset of the axes.
    std::vector<std::vector<int>> subsets;
    for (int mask = 1; mask < (1 << mesh.ndim()); ++mask) {
      std::vector<int> axes;
      for (int a = 0; a < mesh.ndim(); ++a) {
        if (mask & (1 << a)) axes.push_back(a);
      }
      do {
        subsets.push_back(axes);
      } while (std::next_permutation(axes.begin(), axes.end()));
    }
    for (const std::vector<int>& axes : subsets) {
      const Group group = mesh.GroupOf(*coord, axes);
      const int64_t mine = comm.rank() + 1;
      int64_t sum = 0;
      comm.AllReduce(&mine, &sum, 1, DType::kInt64, ReduceOp::kSum, group);
      std::vector<int64_t> gathered(group.size(), -1);
      const std::vector<int64_t> ones(group.size(), 1);
      comm.AllGather(&mine, gathered.data(), ones, DType::kInt64, group);
      comm.Synchronize();
      int64_t want_sum = 0;
      std::vector<int64_t> want_gathered;
      for (int64_t r : group) {
        want_sum += r + 1;
        want_gathered.push_back(r + 1);
      }
      if (sum != want_sum || gathered != want_gathered) {
        std::ostringstream os;
        os << "rank " << comm.rank() << ": " << ToString(mesh) << " axes";
        for (int a : axes) os << " " << a;
        os << " group " << ToString(group) << ": sum " << sum << " (want " << want_sum
           << "), gathered " << ToString(gathered) << " (want " << ToString(want_gathered) << ")";
        return os.str();
      }
    }
  }
  return "";
}

std::string RunCase(Communicator& comm, const CollectiveCase& c) {
  switch (c.dtype) {
    case DType::kFloat64: return RunTyped<double>(comm, c);
    case DType::kFloat32: return RunTyped<float>(comm, c);
    case DType::kInt64: return RunTyped<int64_t>(comm, c);
    case DType::kBool: return RunTyped<uint8_t>(comm, c);
    case DType::kBFloat16:
    case DType::kFloat16: break;  // not generated: their reshards are tested as bytes
  }
  return "unknown dtype";
}

}  // namespace spmd::runtime::testing
