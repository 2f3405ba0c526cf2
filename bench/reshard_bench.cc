// The reshard executor against raw MPI, under mpirun: is executing a plan as fast as
// calling the same MPI collectives by hand?
//
// For every 1-d transition of SEMANTICS.md §8 on a mesh of all the ranks, and the main 2-d
// ones on 2 x (ranks/2), at each size (global float32 tensor of 1 and 64 MiB by default):
// - bytes: the plan's bytes per rank, the max over ranks of the bytes the executor's
//   communicator counted, the lower bound and the ratio;
// - time: DistTensor::Reshard (planning cached, the source buffer prepared outside the
//   timed region) against the raw MPI collectives the plan's steps amount to, on the same
//   groups with the same counts and contiguous buffers (MPI_Allgatherv, MPI_Reduce_scatter,
//   MPI_Allreduce, MPI_Alltoallv, MPI_Isend/Irecv; local steps cost nothing there). The
//   difference is the runtime's overhead: packing along inner dims, local steps, the
//   polling of nonblocking collectives, and bookkeeping.
// - the runtime's time split in two: inside the communicator (the backend's hooks, waits
//   for peers included: CommCounters::seconds) and outside it (packing, local steps,
//   allocation, planning-cache lookup, bookkeeping). "outside / raw" is the runtime's own
//   cost relative to the raw blocking collectives: the part no faster network would hide.
// Each time is the median over repetitions of the max over ranks (a barrier before each).
//
// A plain MPI program, not Google Benchmark: every rank must run the same iterations, and
// the number that matters is the slowest rank's.
//
//   mpirun -np 4 --oversubscribe --mca pml ob1 --mca btl self,vader build/bin/reshard_bench
//   ... reshard_bench --sizes-mib 1,64 --reps 5 [--only "P -> R"] [--fresh-pages]
//
// Rank 0 prints one Markdown table.
#include <mpi.h>
#include <malloc.h>
#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kernels/tensor.h"
#include "rules/dist_attr.h"
#include "rules/layout.h"
#include "rules/reshard.h"
#include "runtime/dist_tensor.h"
#include "runtime/mpi_communicator.h"
#include "runtime/reshard_executor.h"

namespace {

using spmd::DistAttr;
using spmd::Mesh;
using spmd::ReshardPlan;
using spmd::ReshardStep;
using spmd::StepKind;
using spmd::kernels::Tensor;
using spmd::runtime::DistTensor;
using spmd::runtime::MpiCommunicator;
using spmd::runtime::Shape;

struct Case {
  std::string name;
  Mesh mesh;
  std::string from;
  std::string to;
  std::optional<Mesh> to_mesh = std::nullopt;
};

int WorldRank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int WorldSize() {
  int s = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

double MaxOverRanks(double v) {
  double out = 0;
  MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

int64_t MaxOverRanks(int64_t v) {
  long long in = v, out = 0;
  MPI_Allreduce(&in, &out, 1, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

struct Timing {
  double total = 0;    // median over runs of the slowest rank's time
  double inside = 0;   // median over runs of the max over ranks of inside() (0 without it)
  double outside = 0;  // median over runs of the max over ranks of (own time - inside())
};

// Times run() `reps` times (after 6 warm-up runs); prepare() is not timed. `inside`, when
// given, returns the seconds of the last run this rank spent inside the communicator.
Timing TimeIt(const std::function<void()>& prepare, const std::function<void()>& run, int reps,
              const std::function<double()>& inside = nullptr) {
  for (int warm = 0; warm < 6; ++warm) {
    prepare();
    MPI_Barrier(MPI_COMM_WORLD);
    run();
  }
  std::vector<double> totals, insides, outsides;
  for (int r = 0; r < reps; ++r) {
    prepare();
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    run();
    const double mine = MPI_Wtime() - t0;
    const double in = inside ? inside() : 0.0;
    totals.push_back(MaxOverRanks(mine));
    insides.push_back(MaxOverRanks(in));
    outsides.push_back(MaxOverRanks(mine - in));
  }
  auto median = [](std::vector<double>& v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  return Timing{median(totals), median(insides), median(outsides)};
}

// ---- The raw MPI version of a plan -------------------------------------------------------

// The communicator of this rank's group for `axes` on `mesh` (MPI_COMM_NULL outside).
MPI_Comm GroupComm(const Mesh& mesh, const spmd::AxisList& axes) {
  static std::map<std::string, MPI_Comm> cache;
  std::string key = spmd::ToString(mesh) + "|";
  for (int a : axes) key += std::to_string(a) + ",";
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  const auto coord = mesh.CoordinateOf(WorldRank());
  int color = MPI_UNDEFINED, position = 0;
  if (coord) {
    color = 0;
    for (int a = 0; a < mesh.ndim(); ++a) {
      if (std::find(axes.begin(), axes.end(), a) == axes.end()) color = color * mesh.axis_size(a) + coord->at(a);
    }
    for (int a : axes) position = position * static_cast<int>(mesh.axis_size(a)) + static_cast<int>(coord->at(a));
  }
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, color, position, &comm);
  cache[key] = comm;
  return comm;
}

std::vector<int> Displs(const std::vector<int>& counts) {
  std::vector<int> d(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) d[i] = d[i - 1] + counts[i - 1];
  return d;
}

int64_t Numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t x : s) n *= x;
  return n;
}

// Completes `r` as the MPI backend does: MPI_Test polling, yielding the core.
void PollWait(MPI_Request& r) {
  for (int i = 0;; ++i) {
    int done = 0;
    MPI_Test(&r, &done, MPI_STATUS_IGNORE);
    if (done) return;
    if (i >= 16) sched_yield();
  }
}

// One prepared raw step: a closure over its buffers and counts. `nonblocking`: the
// collective as the MPI backend issues it (MPI_I<collective>, then polling), else the
// blocking MPI call.
std::function<void()> RawStep(const ReshardStep& step, const Shape& shape, std::vector<float>& a,
                              std::vector<float>& b, bool nonblocking) {
  const int me = WorldRank();
  auto grow = [](std::vector<float>& v, int64_t n) {
    if (static_cast<int64_t>(v.size()) < n) v.resize(n, 1.0f);
  };
  if (step.kind() == StepKind::kSendRecv) {
    std::vector<std::pair<int, int>> sends, recvs;  // (peer, count)
    for (const spmd::Transfer& t : spmd::SendRecvTransfers(step, shape)) {
      const int64_t v = spmd::Volume(t.box);
      if (t.from_process == me) sends.push_back({static_cast<int>(t.to_process), static_cast<int>(v)});
      if (t.to_process == me) recvs.push_back({static_cast<int>(t.from_process), static_cast<int>(v)});
    }
    int64_t out = 0, in = 0;
    for (auto [p, c] : sends) out += c;
    for (auto [p, c] : recvs) in += c;
    grow(a, out);
    grow(b, in);
    return [sends, recvs, &a, &b] {
      std::vector<MPI_Request> requests;
      int64_t offset = 0;
      for (auto [peer, count] : sends) {
        requests.emplace_back();
        MPI_Isend(a.data() + offset, count, MPI_FLOAT, peer, 7, MPI_COMM_WORLD, &requests.back());
        offset += count;
      }
      offset = 0;
      for (auto [peer, count] : recvs) {
        requests.emplace_back();
        MPI_Irecv(b.data() + offset, count, MPI_FLOAT, peer, 7, MPI_COMM_WORLD, &requests.back());
        offset += count;
      }
      MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
    };
  }
  if (!spmd::Communicates(step.kind())) return [] {};
  const spmd::AxisList axes = step.axes();
  MPI_Comm comm = GroupComm(step.mesh, axes);
  const auto coord = step.mesh.CoordinateOf(me);
  if (!coord) return [] {};
  const std::vector<int64_t> group = step.mesh.GroupOf(*coord, axes);
  std::vector<std::vector<int64_t>> coords;
  for (int64_t pid : group) coords.push_back(*step.mesh.CoordinateOf(pid));
  const int n = static_cast<int>(group.size());
  const Shape local = spmd::LocalShape(shape, step.before, step.mesh, *coord);
  switch (step.kind()) {
    case StepKind::kAllGather: {
      std::vector<int> counts;
      for (const auto& c : coords) counts.push_back(static_cast<int>(Numel(spmd::LocalShape(shape, step.before, step.mesh, c))));
      const int mine = static_cast<int>(Numel(local));
      grow(a, mine);
      grow(b, Numel(spmd::LocalShape(shape, step.after, step.mesh, *coord)));
      return [=, &a, &b] {
        const std::vector<int> displs = Displs(counts);
        if (!nonblocking) {
          MPI_Allgatherv(a.data(), mine, MPI_FLOAT, b.data(), counts.data(), displs.data(), MPI_FLOAT, comm);
          return;
        }
        MPI_Request r;
        MPI_Iallgatherv(a.data(), mine, MPI_FLOAT, b.data(), counts.data(), displs.data(), MPI_FLOAT, comm, &r);
        PollWait(r);
      };
    }
    case StepKind::kReduceScatter: {
      std::vector<int> counts;
      for (const auto& c : coords) counts.push_back(static_cast<int>(Numel(spmd::LocalShape(shape, step.after, step.mesh, c))));
      grow(a, Numel(local));
      grow(b, Numel(local));
      return [=, &a, &b] {
        if (!nonblocking) {
          MPI_Reduce_scatter(a.data(), b.data(), counts.data(), MPI_FLOAT, MPI_SUM, comm);
          return;
        }
        MPI_Request r;
        MPI_Ireduce_scatter(a.data(), b.data(), counts.data(), MPI_FLOAT, MPI_SUM, comm, &r);
        PollWait(r);
      };
    }
    case StepKind::kAllReduce: {
      const int count = static_cast<int>(Numel(local));
      grow(a, count);
      return [=, &a] {
        if (!nonblocking) {
          MPI_Allreduce(MPI_IN_PLACE, a.data(), count, MPI_FLOAT, MPI_SUM, comm);
          return;
        }
        MPI_Request r;
        MPI_Iallreduce(MPI_IN_PLACE, a.data(), count, MPI_FLOAT, MPI_SUM, comm, &r);
        PollWait(r);
      };
    }
    case StepKind::kAllToAll: {
      const auto my_before = spmd::BoxAt(shape, step.before, step.mesh, *coord);
      const auto my_after = spmd::BoxAt(shape, step.after, step.mesh, *coord);
      std::vector<int> sc(n, 0), rc(n, 0);
      for (int q = 0; q < n; ++q) {
        if (group[q] == me) continue;
        sc[q] = static_cast<int>(spmd::Volume(spmd::Intersect(
            my_before, spmd::BoxAt(shape, step.after, step.mesh, coords[q]))));
        rc[q] = static_cast<int>(spmd::Volume(spmd::Intersect(
            spmd::BoxAt(shape, step.before, step.mesh, coords[q]), my_after)));
      }
      int64_t st = 0, rt = 0;
      for (int q = 0; q < n; ++q) {
        st += sc[q];
        rt += rc[q];
      }
      grow(a, st);
      grow(b, rt);
      return [=, &a, &b] {
        const std::vector<int> sd = Displs(sc), rd = Displs(rc);
        if (!nonblocking) {
          MPI_Alltoallv(a.data(), sc.data(), sd.data(), MPI_FLOAT, b.data(), rc.data(), rd.data(), MPI_FLOAT, comm);
          return;
        }
        MPI_Request r;
        MPI_Ialltoallv(a.data(), sc.data(), sd.data(), MPI_FLOAT, b.data(), rc.data(), rd.data(), MPI_FLOAT, comm, &r);
        PollWait(r);
      };
    }
    default:
      return [] {};
  }
}

// ---- The table ---------------------------------------------------------------------------

std::string Mib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

std::string MeshText(const Mesh& mesh) {
  std::string s;
  for (int a = 0; a < mesh.ndim(); ++a) s += (a ? "x" : "") + std::to_string(mesh.axis_size(a));
  return s;
}

std::string StepsText(const ReshardPlan& plan) {
  if (plan.steps.empty()) return "(none)";
  std::string s;
  for (const ReshardStep& step : plan.steps) {
    if (!s.empty()) s += "; ";
    s += step.Describe();
  }
  return s;
}

void RunCase(MpiCommunicator& comm, const Case& c, int64_t mib, int reps) {
  const int64_t elements = mib * (1 << 20) / 4;
  int64_t rows = 1;
  while (rows * rows < elements) rows *= 2;
  const Shape shape = {rows, elements / rows};
  const DistAttr from = spmd::ParsePlacementString(c.from, 2, "from");
  const Mesh& to_mesh = c.to_mesh ? *c.to_mesh : c.mesh;
  const DistAttr to = spmd::ParsePlacementString(c.to, 2, "to");
  const ReshardPlan plan = spmd::runtime::CachedPlanReshard(c.mesh, from, to_mesh, to, shape,
                                                            spmd::DType::kFloat32);
  // The source: each rank builds only its own shard (no global tensor).
  std::optional<DistTensor> source;
  {
    const auto coord = c.mesh.CoordinateOf(comm.rank());
    Tensor local = coord ? Tensor(spmd::LocalShape(shape, from, c.mesh, *coord), spmd::DType::kFloat32)
                         : Tensor();
    if (coord) std::fill_n(local.data<float>(), local.numel(), 1.0f);
    source = DistTensor::FromLocal(std::move(local), shape, spmd::DType::kFloat32, c.mesh, from, comm.rank());
  }
  std::optional<DistTensor> ready;
  spmd::runtime::ReshardReport report;
  double comm_seconds_before = 0;
  const Timing runtime = TimeIt(
      [&] {
        ready = *source;
        comm_seconds_before = comm.counters().seconds;
      },
      [&] {
        DistTensor out = c.to_mesh ? std::move(*ready).Reshard(to_mesh, to, comm, &report)
                                   : std::move(*ready).Reshard(to, comm, &report);
      },
      reps, [&] { return comm.counters().seconds - comm_seconds_before; });
  const double runtime_s = runtime.total;
  ready.reset();
  const int64_t counted = MaxOverRanks(report.counted.received);
  std::vector<float> a, b;
  std::vector<std::function<void()>> raw, raw_nb;
  for (const ReshardStep& step : plan.steps) raw.push_back(RawStep(step, shape, a, b, false));
  for (const ReshardStep& step : plan.steps) raw_nb.push_back(RawStep(step, shape, a, b, true));
  bool any_raw = false;
  for (const ReshardStep& step : plan.steps) any_raw = any_raw || spmd::Communicates(step.kind());
  const double raw_s = TimeIt([] {}, [&] {
    for (auto& f : raw) f();
  }, reps).total;
  const double raw_nb_s = TimeIt([] {}, [&] {
    for (auto& f : raw_nb) f();
  }, reps).total;
  if (WorldRank() == 0) {
    char overhead[32] = "local";
    if (any_raw) std::snprintf(overhead, sizeof overhead, "%+.0f%%", 100.0 * (runtime_s - raw_s) / raw_s);
    char ratio[32] = "n/a";
    if (plan.lower_bound_bytes > 0 || plan.bytes_per_rank == 0) std::snprintf(ratio, sizeof ratio, "%.2f", plan.Ratio());
    char raw_ms[32] = "-", raw_nb_ms[32] = "-", overhead_nb[32] = "local", outside_share[32] = "local";
    if (any_raw) {
      std::snprintf(raw_ms, sizeof raw_ms, "%.3f", raw_s * 1e3);
      std::snprintf(raw_nb_ms, sizeof raw_nb_ms, "%.3f", raw_nb_s * 1e3);
      std::snprintf(overhead_nb, sizeof overhead_nb, "%+.0f%%", 100.0 * (runtime_s - raw_nb_s) / raw_nb_s);
      std::snprintf(outside_share, sizeof outside_share, "%.0f%%", 100.0 * runtime.outside / raw_s);
    }
    std::printf("| %s | %s | %lld | %s | %s | %s | %s | %s | %.3f | %s | %s | %s | %s | %.3f | %.3f | %s |\n",
                c.name.c_str(), MeshText(c.mesh).c_str(), static_cast<long long>(mib), StepsText(plan).c_str(),
                Mib(plan.bytes_per_rank).c_str(), Mib(counted).c_str(), Mib(plan.lower_bound_bytes).c_str(),
                ratio, runtime_s * 1e3, raw_ms, overhead, raw_nb_ms, overhead_nb, runtime.inside * 1e3,
                runtime.outside * 1e3, outside_share);
    std::fflush(stdout);
  }
}

std::vector<int64_t> ParseList(const char* text) {
  std::vector<int64_t> out;
  std::string s(text);
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = s.find(',', start);
    const std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) out.push_back(std::atoll(item.c_str()));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  return spmd::runtime::GuardedMain(argc, argv, [&](MpiCommunicator& comm) {
    std::vector<int64_t> sizes = {1, 64};
    int reps = 5;
    std::string only;
    bool keep_pages = true;
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "--sizes-mib" && i + 1 < argc) sizes = ParseList(argv[++i]);
      if (arg == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
      if (arg == "--only" && i + 1 < argc) only = argv[++i];
      if (arg == "--fresh-pages") keep_pages = false;
    }
    // Freed buffers stay in the heap for the next call (as a caching allocator keeps them),
    // instead of going back to the kernel and coming back as fresh zeroed pages every call.
    if (keep_pages) {
      mallopt(M_MMAP_MAX, 0);  // no mmap: every buffer comes from the heap
      mallopt(M_TRIM_THRESHOLD, 1 << 30);
    }
    const int n = WorldSize();
    const Mesh line({n});
    std::vector<int64_t> rotated(n);
    for (int r = 0; r < n; ++r) rotated[r] = (r + 1) % n;
    std::vector<Case> cases = {
        {"S(0) -> R", line, "[S(0)]", "[R]"},
        {"S(1) -> R", line, "[S(1)]", "[R]"},
        {"P -> R", line, "[P(sum)]", "[R]"},
        {"P -> S(0)", line, "[P(sum)]", "[S(0)]"},
        {"P -> S(1)", line, "[P(sum)]", "[S(1)]"},
        {"S(0) -> S(1)", line, "[S(0)]", "[S(1)]"},
        {"S(1) -> S(0)", line, "[S(1)]", "[S(0)]"},
        {"R -> S(0)", line, "[R]", "[S(0)]"},
        {"R -> P", line, "[R]", "[P(sum)]"},
        {"S(0) -> P", line, "[S(0)]", "[P(sum)]"},
        {"P(sum) -> P(avg)", line, "[P(sum)]", "[P(avg)]"},
        {"S(0) -> S(0), ids rotated", line, "[S(0)]", "[S(0)]", Mesh({n}, rotated)},
    };
    if (n % 2 == 0 && n >= 4) {
      const Mesh grid({2, n / 2});
      cases.push_back({"(P, P) -> (R, R)", grid, "[P(sum), P(sum)]", "[R, R]"});
      cases.push_back({"(S(0), S(1)) -> (R, R)", grid, "[S(0), S(1)]", "[R, R]"});
      cases.push_back({"(S(0), P) -> (R, S(1))", grid, "[S(0), P(sum)]", "[R, S(1)]"});
      cases.push_back({"(S(0), S(1)) -> (S(1), S(0))", grid, "[S(0), S(1)]", "[S(1), S(0)]"});
      cases.push_back({"(S(0)#0, S(0)#1) -> (R, R)", grid, "[S(0)#0, S(0)#1]", "[R, R]"});
      cases.push_back({"(P, P) -> (S(0), S(1))", grid, "[P(sum), P(sum)]", "[S(0), S(1)]"});
    }
    if (comm.rank() == 0) {
      std::printf("reshard_bench: %d ranks, float32, median of %d (max over ranks)%s\n\n", n, reps,
                  keep_pages ? "" : ", fresh pages for every buffer");
      std::printf("| transition | mesh | MiB | plan | plan MiB/rank | counted MiB (max) | bound MiB | ratio | runtime ms | raw MPI ms | vs raw | raw MPI_I* ms | vs MPI_I* | in collectives ms | outside ms | outside / raw |\n");
      std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    }
    for (int64_t mib : sizes) {
      for (const Case& c : cases) {
        if (!only.empty() && c.name.find(only) == std::string::npos) continue;
        RunCase(comm, c, mib, reps);
      }
    }
    return 0;
  });
}
