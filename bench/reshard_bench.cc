// The reshard executor against raw MPI, under mpirun: is executing a plan as fast as
// calling the same MPI collectives by hand?
//
// For every 1-d transition of SEMANTICS.md §8 on a mesh of all the ranks, and the main 2-d
// ones on 2 x (ranks/2), at each size (global float32 tensor of 1, 16 and 64 MiB by
// default):
// - bytes: the plan's bytes per rank, the max over ranks of the bytes the executor's
//   communicator counted and the ratio to the lower bound;
// - time: DistTensor::Reshard (planning cached, the source buffer prepared outside the
//   timed region, no report) against two raw MPI programs, on the same groups with the same
//   counts:
//   * "raw work": what a hand-written MPI program does to get the same result in the same
//     layouts: the blocking collective (own part included), plus a packing pass before it
//     and / or an unpacking pass after it wherever a piece is not one contiguous run of its
//     buffer (plain memcpy per row), plus the copy of what a rank keeps (send_recv). This
//     is the yardstick: "runtime / raw work" and "paired ratio".
//   * "raw coll.": the blocking collective alone on contiguous buffers, others' parts only
//     (MPI_Allgatherv, MPI_Reduce_scatter, MPI_Allreduce, MPI_Alltoallv,
//     MPI_Isend/Irecv; local steps cost nothing there): the same where no data has to be
//     rearranged, a lower bound where it does.
//   * with --nonblocking also the MPI_I* collectives polled with MPI_Test and sched_yield
//     (how the MPI backend issued them before it used blocking calls).
// - the runtime's time split in two: inside the communicator (the backend's hooks, waits
//   for peers included: CommCounters::seconds) and outside it (packing, local steps,
//   allocation, planning-cache lookup, bookkeeping).
// Runs are interleaved: 6 warm-up rounds, then --reps rounds, each running every contender
// once (a barrier before each, in an order shuffled per round), so that a slow stretch of a
// shared machine hits them alike. Every contender's source buffer is written just before
// its run (the same bytes, the same way), so that all start from the same cache state.
// Each time is the median over rounds of the max over ranks; "runtime / raw work" is the
// ratio of those medians, "paired ratio" the median over rounds of the per-round ratio
// (both ran in the same round), and "raw work IQR" the interquartile range of raw work
// over its median: how noisy the row is.
//
// A plain MPI program, not Google Benchmark: every rank must run the same iterations, and
// the number that matters is the slowest rank's.
//
//   mpirun -np 4 --oversubscribe --mca pml ob1 --mca btl self,vader build/bin/reshard_bench
//   ... reshard_bench --sizes-mib 1,16,64 --reps 9 [--only "P -> R"] [--fresh-pages] [--nonblocking]
//       [--idle-raw-source]   (the raw programs' sources not rewritten before their runs:
//                              the unequal start of the older tables)
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
#include <random>
#include <string>
#include <vector>

#include "kernels/tensor.h"
#include "rules/model/dist_attr.h"
#include "rules/model/layout.h"
#include "rules/reshard/reshard.h"
#include "runtime/exec/dist_tensor.h"
#include "runtime/comm/mpi_communicator.h"
#include "runtime/exec/reshard_executor.h"

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
  double q1 = 0, q3 = 0;  // the quartiles of the slowest rank's time over runs
  std::vector<double> runs;  // the slowest rank's time per round, in round order
};

// One contender: prepare() (not timed), run() (timed), and, when given, inside(): the
// seconds of the last run this rank spent inside the communicator.
struct Variant {
  std::function<void()> prepare = [] {};
  std::function<void()> run;
  std::function<double()> inside = nullptr;
};

double Quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}
double Median(const std::vector<double>& v) { return Quantile(v, 0.5); }

// The median over rounds of a[r] / b[r]: each round's contenders ran back to back, so a
// slow stretch of the machine that hits one round hits both and cancels in the ratio.
double PairedRatio(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> r;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) r.push_back(a[i] / b[i]);
  return Median(r);
}

// Times the variants interleaved: 6 warm-up rounds, then `reps` rounds; each round runs
// every variant once (a barrier before each) in an order shuffled per round (the same
// seed on every rank), so that a slow stretch of the machine hits all of them alike and no
// contender always runs right after the same other one (at 1 MiB what the previous run
// left in the caches moves a time by 20-40%, more than the effects measured here).
// Returns one Timing per variant.
std::vector<Timing> TimeInterleaved(const std::vector<Variant>& variants, int reps) {
  const size_t n = variants.size();
  std::vector<std::vector<double>> totals(n), insides(n), outsides(n);
  std::vector<size_t> order(n);
  for (int round = -6; round < reps; ++round) {
    for (size_t k = 0; k < n; ++k) order[k] = k;
    std::mt19937 rng(static_cast<unsigned>(round + 1000));
    std::shuffle(order.begin(), order.end(), rng);
    for (const size_t v : order) {
      variants[v].prepare();
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      variants[v].run();
      const double mine = MPI_Wtime() - t0;
      const double in = variants[v].inside ? variants[v].inside() : 0.0;
      const double total = MaxOverRanks(mine), inside = MaxOverRanks(in), outside = MaxOverRanks(mine - in);
      if (round < 0) continue;
      totals[v].push_back(total);
      insides[v].push_back(inside);
      outsides[v].push_back(outside);
    }
  }
  std::vector<Timing> out;
  for (size_t v = 0; v < n; ++v) {
    out.push_back({Median(totals[v]), Median(insides[v]), Median(outsides[v]), Quantile(totals[v], 0.25),
                   Quantile(totals[v], 0.75), totals[v]});
  }
  return out;
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

// Completes `r` as the MPI backend did before it used blocking collectives: MPI_Test
// polling, yielding the core.
void PollWait(MPI_Request& r) {
  for (int i = 0;; ++i) {
    int done = 0;
    MPI_Test(&r, &done, MPI_STATUS_IGNORE);
    if (done) return;
    if (i >= 16) sched_yield();
  }
}

// The element offset of `extent` at `at` in a row-major array of `shape` when that box is
// one contiguous run; -1 otherwise.
int64_t RunOffset(const Shape& shape, const Shape& at, const Shape& extent) {
  size_t k = 0;
  while (k < shape.size() && extent[k] == 1) ++k;
  for (size_t d = k + 1; d < shape.size(); ++d) {
    if (extent[d] != shape[d]) return -1;
  }
  int64_t offset = 0;
  for (size_t d = 0; d < shape.size(); ++d) offset = offset * shape[d] + at[d];
  return offset;
}

// A plain strided copy (the packing pass a hand-written MPI program does): `extent` at
// `src_at` in `src` (row-major `src_shape`) to `dst_at` in `dst`, one memcpy per run of the
// last dim.
void CopyBox(const float* src, const Shape& src_shape, const Shape& src_at, float* dst,
             const Shape& dst_shape, const Shape& dst_at, const Shape& extent, size_t d = 0) {
  if (Numel(extent) == 0) return;
  if (d + 1 == extent.size()) {
    std::memcpy(dst + dst_at[d], src + src_at[d], extent[d] * sizeof(float));
    return;
  }
  int64_t src_stride = 1, dst_stride = 1;
  for (size_t k = d + 1; k < extent.size(); ++k) {
    src_stride *= src_shape[k];
    dst_stride *= dst_shape[k];
  }
  for (int64_t i = 0; i < extent[d]; ++i) {  // the offsets of dims below d come from them
    CopyBox(src + (src_at[d] + i) * src_stride, src_shape, src_at, dst + (dst_at[d] + i) * dst_stride,
            dst_shape, dst_at, extent, d + 1);
  }
}

// One piece of a rank's buffer (`shape`) that travels: where it lies and its size.
struct Piece {
  int peer = 0;
  Shape at, extent;
  int count = 0;
};

// The buffers one raw step owns (`work`: in its rank's real layouts).
struct RawBuffers {
  std::vector<float> in, out, pack_in, pack_out;
};

// One prepared raw step: a closure over its buffers and counts.
// - `work` false: the collective alone on contiguous buffers (no own part, no packing):
//   the yardstick of the older tables.
// - `work` true: the same result as the executor's step in the same layouts, as a plain MPI
//   program would write it: the collective (own part included), plus a packing pass
//   before it and / or an unpacking pass after it where a piece is not one contiguous run
//   of its buffer (plain memcpy per row), plus the copy of what a rank keeps.
// `nonblocking`: the collective as MPI_I<collective> polled (the MPI backend's old way).
std::function<void()> RawStep(const ReshardStep& step, const Shape& shape, RawBuffers& buf,
                              bool work, bool nonblocking) {
  const int me = WorldRank();
  auto grow = [](std::vector<float>& v, int64_t n) {
    if (static_cast<int64_t>(v.size()) < n) v.resize(n, 1.0f);
  };
  if (step.kind() == StepKind::kSendRecv) {
    const auto from_coord = step.mesh.CoordinateOf(me);
    const auto to_coord = step.to_mesh.CoordinateOf(me);
    spmd::Box my_before, my_after;
    Shape in_shape, out_shape;
    if (from_coord) {
      my_before = spmd::BoxAt(shape, step.before, step.mesh, *from_coord);
      in_shape = spmd::SizesOf(my_before);
    }
    if (to_coord) {
      my_after = spmd::BoxAt(shape, step.after, step.to_mesh, *to_coord);
      out_shape = spmd::SizesOf(my_after);
    }
    std::vector<Piece> sends, recvs;
    for (const spmd::Transfer& t : spmd::SendRecvTransfers(step, shape)) {
      const int count = static_cast<int>(spmd::Volume(t.box));
      if (t.from_process == me) {
        sends.push_back({static_cast<int>(t.to_process), spmd::BeginsOf(spmd::RelativeTo(t.box, my_before)),
                         spmd::SizesOf(t.box), count});
      }
      if (t.to_process == me) {
        recvs.push_back({static_cast<int>(t.from_process), spmd::BeginsOf(spmd::RelativeTo(t.box, my_after)),
                         spmd::SizesOf(t.box), count});
      }
    }
    int64_t out_total = 0, in_total = 0;
    for (const Piece& p : sends) out_total += p.count;
    for (const Piece& p : recvs) in_total += p.count;
    // What this rank keeps (work only): from its place in the old buffer to the new one.
    std::optional<Piece> kept;
    Shape kept_dst;
    if (work && from_coord && to_coord) {
      const spmd::Box k = spmd::Intersect(my_before, my_after);
      if (spmd::Volume(k) > 0) {
        kept = Piece{me, spmd::BeginsOf(spmd::RelativeTo(k, my_before)), spmd::SizesOf(k),
                     static_cast<int>(spmd::Volume(k))};
        kept_dst = spmd::BeginsOf(spmd::RelativeTo(k, my_after));
      }
    }
    grow(buf.in, work ? Numel(in_shape) : out_total);
    grow(buf.out, work ? Numel(out_shape) : in_total);
    grow(buf.pack_in, out_total);
    grow(buf.pack_out, in_total);
    return [=, &buf] {
      std::vector<MPI_Request> requests;
      int64_t offset = 0;
      for (const Piece& p : sends) {
        const float* from = buf.in.data() + offset;
        if (work) {
          const int64_t run = RunOffset(in_shape, p.at, p.extent);
          if (run >= 0) {
            from = buf.in.data() + run;
          } else {
            float* packed = buf.pack_in.data() + offset;
            CopyBox(buf.in.data(), in_shape, p.at, packed, p.extent, Shape(p.extent.size(), 0), p.extent);
            from = packed;
          }
        }
        requests.emplace_back();
        MPI_Isend(from, p.count, MPI_FLOAT, p.peer, 7, MPI_COMM_WORLD, &requests.back());
        offset += p.count;
      }
      offset = 0;
      std::vector<std::pair<const Piece*, int64_t>> unpack;  // pieces received into pack_out
      for (const Piece& p : recvs) {
        float* into = buf.out.data() + offset;
        if (work) {
          const int64_t run = RunOffset(out_shape, p.at, p.extent);
          if (run >= 0) {
            into = buf.out.data() + run;
          } else {
            into = buf.pack_out.data() + offset;
            unpack.push_back({&p, offset});
          }
        }
        requests.emplace_back();
        MPI_Irecv(into, p.count, MPI_FLOAT, p.peer, 7, MPI_COMM_WORLD, &requests.back());
        offset += p.count;
      }
      if (kept) {
        CopyBox(buf.in.data(), in_shape, kept->at, buf.out.data(), out_shape, kept_dst, kept->extent);
      }
      MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
      for (const auto& [p, at] : unpack) {
        CopyBox(buf.pack_out.data() + at, p->extent, Shape(p->extent.size(), 0), buf.out.data(), out_shape,
                p->at, p->extent);
      }
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
  int position = 0;
  for (int q = 0; q < n; ++q) {
    if (group[q] == me) position = q;
  }
  const Shape local = spmd::LocalShape(shape, step.before, step.mesh, *coord);
  const Shape after = spmd::LocalShape(shape, step.after, step.mesh, *coord);
  switch (step.kind()) {
    case StepKind::kAllGather: {
      const int d = std::get<spmd::AllGather>(step.action).dim;
      std::vector<int> counts;
      std::vector<Shape> chunks;
      for (const auto& c : coords) {
        chunks.push_back(spmd::LocalShape(shape, step.before, step.mesh, c));
        counts.push_back(static_cast<int>(Numel(chunks.back())));
      }
      const bool unpack = work && Numel(Shape(local.begin(), local.begin() + d)) > 1;
      const int mine = static_cast<int>(Numel(local));
      grow(buf.in, mine);
      grow(buf.out, Numel(after));
      if (unpack) grow(buf.pack_out, Numel(after));
      return [=, &buf] {
        const std::vector<int> displs = Displs(counts);
        float* into = unpack ? buf.pack_out.data() : buf.out.data();
        if (!nonblocking) {
          MPI_Allgatherv(buf.in.data(), mine, MPI_FLOAT, into, counts.data(), displs.data(), MPI_FLOAT, comm);
        } else {
          MPI_Request r;
          MPI_Iallgatherv(buf.in.data(), mine, MPI_FLOAT, into, counts.data(), displs.data(), MPI_FLOAT, comm, &r);
          PollWait(r);
        }
        if (!unpack) return;
        Shape at(after.size(), 0);
        for (int q = 0; q < n; ++q) {
          CopyBox(into + displs[q], chunks[q], Shape(after.size(), 0), buf.out.data(), after, at, chunks[q]);
          at[d] += chunks[q][d];
        }
      };
    }
    case StepKind::kReduceScatter: {
      const int d = std::get<spmd::ReduceScatter>(step.action).dim;
      std::vector<int> counts;
      std::vector<Shape> chunks;
      for (const auto& c : coords) {
        chunks.push_back(spmd::LocalShape(shape, step.after, step.mesh, c));
        counts.push_back(static_cast<int>(Numel(chunks.back())));
      }
      const bool pack = work && Numel(Shape(local.begin(), local.begin() + d)) > 1;
      grow(buf.in, Numel(local));
      grow(buf.out, Numel(local));
      if (pack) grow(buf.pack_in, Numel(local));
      return [=, &buf] {
        const float* from = buf.in.data();
        if (pack) {
          Shape at(local.size(), 0);
          int64_t offset = 0;
          for (int q = 0; q < n; ++q) {
            CopyBox(buf.in.data(), local, at, buf.pack_in.data() + offset, chunks[q], Shape(local.size(), 0),
                    chunks[q]);
            at[d] += chunks[q][d];
            offset += counts[q];
          }
          from = buf.pack_in.data();
        }
        if (!nonblocking) {
          MPI_Reduce_scatter(from, buf.out.data(), counts.data(), MPI_FLOAT, MPI_SUM, comm);
          return;
        }
        MPI_Request r;
        MPI_Ireduce_scatter(from, buf.out.data(), counts.data(), MPI_FLOAT, MPI_SUM, comm, &r);
        PollWait(r);
      };
    }
    case StepKind::kAllReduce: {
      const int count = static_cast<int>(Numel(local));
      grow(buf.in, count);
      return [=, &buf] {
        if (!nonblocking) {
          MPI_Allreduce(MPI_IN_PLACE, buf.in.data(), count, MPI_FLOAT, MPI_SUM, comm);
          return;
        }
        MPI_Request r;
        MPI_Iallreduce(MPI_IN_PLACE, buf.in.data(), count, MPI_FLOAT, MPI_SUM, comm, &r);
        PollWait(r);
      };
    }
    case StepKind::kAllToAll: {
      const auto my_before = spmd::BoxAt(shape, step.before, step.mesh, *coord);
      const auto my_after = spmd::BoxAt(shape, step.after, step.mesh, *coord);
      std::vector<Piece> sends(n), recvs(n);
      std::vector<int> sc(n, 0), rc(n, 0);
      bool pack = false, unpack = false;
      for (int q = 0; q < n; ++q) {
        const spmd::Box s = spmd::Intersect(my_before, spmd::BoxAt(shape, step.after, step.mesh, coords[q]));
        const spmd::Box r = spmd::Intersect(spmd::BoxAt(shape, step.before, step.mesh, coords[q]), my_after);
        sends[q] = {q, spmd::BeginsOf(spmd::RelativeTo(s, my_before)), spmd::SizesOf(s),
                    static_cast<int>(spmd::Volume(s))};
        recvs[q] = {q, spmd::BeginsOf(spmd::RelativeTo(r, my_after)), spmd::SizesOf(r),
                    static_cast<int>(spmd::Volume(r))};
        if (!work && q == position) continue;  // the yardstick: others only
        sc[q] = sends[q].count;
        rc[q] = recvs[q].count;
        if (work && sc[q] > 0 && RunOffset(local, sends[q].at, sends[q].extent) < 0) pack = true;
        if (work && rc[q] > 0 && RunOffset(after, recvs[q].at, recvs[q].extent) < 0) unpack = true;
      }
      // Displacements into the real buffers where no side needs packing.
      std::vector<int> sd = Displs(sc), rd = Displs(rc);
      if (work && !pack) {
        for (int q = 0; q < n; ++q) sd[q] = static_cast<int>(sc[q] > 0 ? RunOffset(local, sends[q].at, sends[q].extent) : 0);
      }
      if (work && !unpack) {
        for (int q = 0; q < n; ++q) rd[q] = static_cast<int>(rc[q] > 0 ? RunOffset(after, recvs[q].at, recvs[q].extent) : 0);
      }
      grow(buf.in, work ? Numel(local) : Numel(local));
      grow(buf.out, Numel(after));
      if (pack) grow(buf.pack_in, Numel(local));
      if (unpack) grow(buf.pack_out, Numel(after));
      return [=, &buf] {
        const float* from = buf.in.data();
        float* into = buf.out.data();
        if (pack) {
          const std::vector<int> packed = Displs(sc);
          for (int q = 0; q < n; ++q) {
            CopyBox(buf.in.data(), local, sends[q].at, buf.pack_in.data() + packed[q], sends[q].extent,
                    Shape(local.size(), 0), sends[q].extent);
          }
          from = buf.pack_in.data();
        }
        if (unpack) into = buf.pack_out.data();
        if (!nonblocking) {
          MPI_Alltoallv(from, sc.data(), sd.data(), MPI_FLOAT, into, rc.data(), rd.data(), MPI_FLOAT, comm);
        } else {
          MPI_Request r;
          MPI_Ialltoallv(from, sc.data(), sd.data(), MPI_FLOAT, into, rc.data(), rd.data(), MPI_FLOAT, comm, &r);
          PollWait(r);
        }
        if (!unpack) return;
        for (int q = 0; q < n; ++q) {
          CopyBox(into + rd[q], recvs[q].extent, Shape(after.size(), 0), buf.out.data(), after, recvs[q].at,
                  recvs[q].extent);
        }
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

std::string Percent(double t, double ref) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.0f%%", 100.0 * (t - ref) / ref);
  return buf;
}

std::string Ratio(double r) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", r);
  return buf;
}

std::string Ms(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", s * 1e3);
  return buf;
}

void RunCase(MpiCommunicator& comm, const Case& c, int64_t mib, int reps, bool nonblocking, bool idle_raw_source) {
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
  // Each raw step owns its buffers (a multi-step plan's steps do not share them).
  std::vector<RawBuffers> raw_buffers(plan.steps.size() * 3);
  std::vector<std::function<void()>> raw, work, raw_nb;
  for (size_t k = 0; k < plan.steps.size(); ++k) {
    raw.push_back(RawStep(plan.steps[k], shape, raw_buffers[3 * k], false, false));
    work.push_back(RawStep(plan.steps[k], shape, raw_buffers[3 * k + 1], true, false));
    if (nonblocking) raw_nb.push_back(RawStep(plan.steps[k], shape, raw_buffers[3 * k + 2], false, true));
  }
  bool any_raw = false;
  for (const ReshardStep& step : plan.steps) any_raw = any_raw || spmd::Communicates(step.kind());
  auto all = [](const std::vector<std::function<void()>>& fs) {
    return [&fs] {
      for (const auto& f : fs) f();
    };
  };
  {  // The bytes, from one run with a report (not timed: the report's bookkeeping is the
     // caller's choice, not the executor's cost).
    std::optional<DistTensor> once = *source;
    DistTensor out = c.to_mesh ? std::move(*once).Reshard(to_mesh, to, comm, &report)
                               : std::move(*once).Reshard(to, comm, &report);
  }
  // The runtime's result is dropped in the next round's prepare, not inside the timed run
  // (a raw program frees nothing there), and in the order that gives every buffer the same
  // block each round, as a raw program keeps its buffers: a result in a block of its own
  // is dropped after the next source has been copied (which then takes the block the
  // source freed), a result computed in place (in the source's block) before it. Dropped
  // inside the run, a two-block step's source and result swapped blocks every round (the
  // caching allocator reuses the block freed last): the result was received into the block
  // the peer had just read, whose lines sat in the peer's cache, and a raw program made to
  // swap its buffers so took 17-24 us longer at 1 MiB on 2 ranks.
  std::optional<DistTensor> result;
  const std::byte* last_source = nullptr;  // the block the last source was copied into
  std::vector<Variant> variants = {
      {[&] {
         const bool in_place = result && result->has_local() && result->local().bytes() == last_source;
         if (in_place) result.reset();
         ready = *source;
         result.reset();
         last_source = ready->has_local() ? ready->local().bytes() : nullptr;
         comm_seconds_before = comm.counters().seconds;
       },
       [&] {
         result = c.to_mesh ? std::move(*ready).Reshard(to_mesh, to, comm)
                            : std::move(*ready).Reshard(to, comm);
       },
       [&] { return comm.counters().seconds - comm_seconds_before; }},
  };
  if (any_raw) {
    // Every contender starts from the same state of its source: written just before the
    // run (the runtime's source is copied from `source` in its prepare; each raw program's
    // first input buffer gets the same bytes written the same way). A buffer just written
    // sits dirty in the writer's caches, and at 1 MiB MPI reading it from there took 20-35%
    // longer than reading an idle one: an unequal start was most of the runtime's old
    // deficit at 1 MiB (docs/BENCHMARKS.md).
    const std::byte* src = source->has_local() ? source->local().bytes() : nullptr;
    const size_t src_bytes = source->has_local() ? source->local().nbytes() : 0;
    auto refill = [src, src_bytes, idle_raw_source](RawBuffers& b) -> std::function<void()> {
      if (idle_raw_source) return [] {};  // the old, unequal start
      return [src, src_bytes, &b] {
        const size_t n = std::min(src_bytes, b.in.size() * sizeof(float));
        if (n > 0) std::memcpy(b.in.data(), src, n);
      };
    };
    size_t first = 0;  // the first step that communicates (local steps have no raw part)
    while (!spmd::Communicates(plan.steps[first].kind())) ++first;
    variants.push_back({refill(raw_buffers[3 * first]), all(raw)});
    variants.push_back({refill(raw_buffers[3 * first + 1]), all(work)});
    if (nonblocking) variants.push_back({refill(raw_buffers[3 * first + 2]), all(raw_nb)});
  }
  const std::vector<Timing> t = TimeInterleaved(variants, reps);
  ready.reset();
  result.reset();
  const Timing& runtime = t[0];
  const int64_t counted = MaxOverRanks(report.counted.received);
  if (WorldRank() != 0) return;
  char ratio[32] = "n/a";
  if (plan.lower_bound_bytes > 0 || plan.bytes_per_rank == 0) std::snprintf(ratio, sizeof ratio, "%.2f", plan.Ratio());
  std::string raw_ms = "-", vs_raw = "local", work_ms = "-", vs_work = "local", nb_ms = "-", vs_nb = "local",
              outside_share = "local", paired = "-", spread = "-";
  if (any_raw) {
    raw_ms = Ms(t[1].total);
    vs_raw = Percent(runtime.total, t[1].total);
    work_ms = Ms(t[2].total);
    vs_work = Ratio(runtime.total / t[2].total);
    paired = Ratio(PairedRatio(runtime.runs, t[2].runs));
    char iqr[32];
    std::snprintf(iqr, sizeof iqr, "%.0f%%", 100.0 * (t[2].q3 - t[2].q1) / t[2].total);
    spread = iqr;
    char share[32];
    std::snprintf(share, sizeof share, "%.0f%%", 100.0 * runtime.outside / t[1].total);
    outside_share = share;
    if (nonblocking) {
      nb_ms = Ms(t[3].total);
      vs_nb = Percent(runtime.total, t[3].total);
    }
  }
  std::string line = "| " + c.name + " | " + MeshText(c.mesh) + " | " + std::to_string(mib) + " | " +
                     StepsText(plan) + " | " + Mib(plan.bytes_per_rank) + " | " + Mib(counted) + " | " + ratio +
                     " | " + Ms(runtime.total) + " | " + work_ms + " | " + vs_work + " | " + paired + " | " + spread +
                     " | " + raw_ms + " | " +
                     vs_raw + " | ";
  if (nonblocking) line += nb_ms + " | " + vs_nb + " | ";
  line += Ms(runtime.inside) + " | " + Ms(runtime.outside) + " | " + outside_share + " |";
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
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
    std::vector<int64_t> sizes = {1, 16, 64};
    int reps = 9;
    std::string only;
    bool keep_pages = true;
    bool nonblocking = false;
    bool idle_raw_source = false;
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "--sizes-mib" && i + 1 < argc) sizes = ParseList(argv[++i]);
      if (arg == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
      if (arg == "--only" && i + 1 < argc) only = argv[++i];
      if (arg == "--fresh-pages") keep_pages = false;
      if (arg == "--nonblocking") nonblocking = true;
      if (arg == "--idle-raw-source") idle_raw_source = true;
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
      std::printf("reshard_bench: %d ranks, float32, median of %d (max over ranks)%s%s\n\n", n, reps,
                  keep_pages ? "" : ", fresh pages for every buffer",
                  idle_raw_source ? ", raw sources idle (not rewritten before each run)" : "");
      std::printf("| transition | mesh | MiB | plan | plan MiB/rank | counted MiB (max) | ratio | runtime ms | raw work ms | runtime / raw work | paired ratio | raw work IQR | raw coll. ms | vs raw coll. |%s in collectives ms | outside ms | outside / raw coll. |\n",
                  nonblocking ? " raw MPI_I* ms | vs MPI_I* |" : "");
      std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|%s---|---|---|\n", nonblocking ? "---|---|" : "");
    }
    for (int64_t mib : sizes) {
      for (const Case& c : cases) {
        if (!only.empty() && c.name.find(only) == std::string::npos) continue;
        RunCase(comm, c, mib, reps, nonblocking, idle_raw_source);
      }
    }
    return 0;
  });
}
