// The reshard time model's parameters, measured, and the model checked against the clock,
// under mpirun (docs/RESHARD.md "Time").
//
// --fit: for each step kind, a one-step plan on the mesh of all the ranks, forced with
//   ReshardOptions::excluded, executed by the reshard executor (runtime/exec/reshard_executor.h)
//   at a range of sizes; alpha and beta fitted (Theil-Sen) to time = alpha * messages + beta * bytes
//   (local steps: + beta * bytes written; send_recv: minus the local fit's beta times the
//   bytes it writes). Prints the points and the fit and
//   writes the model as JSON (--out FILE, io/cost_model_json.h), the file `spmd plan
//   --cost-model` reads.
//     all_gather      [S(0)] -> [R]
//     reduce_scatter  [P(sum)] -> [S(0)]
//     all_reduce      [P(sum)] -> [R]
//     all_to_all      [S(0)] -> [S(1)]   (send_recv and all_gather excluded)
//     send_recv       [S(0)] -> [S(1)]   (all_to_all and all_gather excluded)
//     local           [R] -> [S(1)]      (local_slice)
// --compare: for reshards where a SendRecv exchange competes with all-gather / all-to-all
//   plans, every distinct plan among: the time planner's, the bytes planner's, the best
//   without SendRecv, the best with SendRecv and no all_gather / all_to_all; each one's
//   bytes, modelled time (under --model FILE, default the built-in model) and measured
//   time, and which one the time planner picks. Meshes: [n] for every n, and with 4 ranks
//   also 2x2.
//
// Timing: the input buffers are made outside the timed region; 5 warm-up rounds, then
// --reps rounds, each running every contender once (a barrier before each, the first one
// rotating), so that a slow stretch of a shared machine hits them alike. Each contender's
// times are the slowest rank's per round; the tables give their median and lower quartile.
// The fit and the modelled/measured ratio use the lower quartile: on a shared machine
// (2 cores, load far above 2) a round is either uncontended or loses a whole scheduler
// slice (~10 ms) to other jobs, and the median falls among the latter.
//
//   OMPI_MCA_mpi_yield_when_idle=1 mpirun -np 2 --mca pml ob1 --mca btl self,vader \
//     build/bin/alphabeta_bench --fit --out model.json [--reps 15] [--transport mpi|nccl]
//   ... alphabeta_bench --compare --model model.json
//
// --transport nccl runs the same on NcclCommunicator (buffers on the GPU); it needs a build
// with NCCL and a GPU per rank. Rank 0 prints Markdown tables.
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/cost_model_json.h"
#include "io/placements.h"
#include "kernels/backend.h"
#include "kernels/tensor.h"
#include "rules/model/layout.h"
#include "rules/reshard/reshard.h"
#include "runtime/comm/mpi_communicator.h"
#include "runtime/exec/reshard_executor.h"
#ifdef SPMD_HAVE_NCCL
#include "kernels/cuda/cuda.h"
#include "runtime/comm/nccl_communicator.h"
#endif

namespace {

using spmd::CostModel;
using spmd::DistAttr;
using spmd::DType;
using spmd::Mesh;
using spmd::ReshardObjective;
using spmd::ReshardOptions;
using spmd::ReshardPlan;
using spmd::StepKind;
using spmd::kernels::Tensor;
using spmd::runtime::Communicator;

int g_rank = 0;
int g_size = 1;
bool g_nccl = false;

double MaxOverRanks(double v) {
  double out = 0;
  MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The lower quartile: what a run takes when the shared machine lets both ranks run.
double Quartile(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 4];
}

struct Timing {
  double median = 0;
  double quartile = 0;
};

// A plan ready to run: its input made once, on the communicator's device.
struct Contender {
  ReshardPlan plan;
  std::optional<Tensor> input;
};

Contender Prepare(const ReshardPlan& plan, Communicator& comm) {
  Contender c{plan, std::nullopt};
  if (const auto coord = plan.from_mesh.CoordinateOf(g_rank)) {
    Tensor host(spmd::LocalShape(plan.shape, plan.from, plan.from_mesh, *coord), plan.dtype);
#ifdef SPMD_HAVE_NCCL
    if (g_nccl) {
      c.input = spmd::kernels::cuda::ToDevice(host, comm.device(), comm.stream());
      return c;
    }
#endif
    (void)comm;
    c.input = std::move(host);
  }
  return c;
}

void Run(const Contender& c, std::optional<Tensor> input, Communicator& comm) {
  std::optional<Tensor> out = spmd::runtime::ExecutePlan(c.plan, std::move(input), comm);
  spmd::kernels::BackendFor(comm.device()).Synchronize(comm.stream());
}

// Interleaved medians and lower quartiles (seconds) of the slowest rank, one per contender.
std::vector<Timing> TimeInterleaved(const std::vector<Contender>& cs, Communicator& comm, int reps) {
  const size_t n = cs.size();
  std::vector<std::vector<double>> times(n);
  for (int round = -5; round < reps; ++round) {
    for (size_t k = 0; k < n; ++k) {
      const size_t v = (k + static_cast<size_t>(round + 5)) % n;
      std::optional<Tensor> input = cs[v].input;  // the executor consumes its input
      spmd::kernels::BackendFor(comm.device()).Synchronize(comm.stream());
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      Run(cs[v], std::move(input), comm);
      const double t = MaxOverRanks(MPI_Wtime() - t0);
      if (round >= 0) times[v].push_back(t);
    }
  }
  std::vector<Timing> out;
  for (auto& t : times) out.push_back({Median(t), Quartile(t)});
  return out;
}

DistAttr Parse(const std::string& text, const Mesh& mesh) {
  return spmd::io::ParsePlacementsOnMesh(text, mesh.ndim(), 2, "placements");
}

std::string Kinds(const ReshardPlan& plan) {
  std::string out;
  for (const auto& s : plan.steps) out += (out.empty() ? "" : " + ") + std::string(ToString(s.kind()));
  return out.empty() ? "(none)" : out;
}

// ---- --fit ----------------------------------------------------------------------------------

struct FitCase {
  std::string kind;
  StepKind step;
  std::string from, to;
  std::vector<StepKind> excluded;
};

struct Point {
  double messages, bytes, local_bytes, seconds;
};

// Theil-Sen fit of t = a * m + b * x (m constant per kind): b is the median of the slopes
// between every two sizes, a the median of (t - b * x) over m. Robust to the outliers a
// shared machine makes (one slow round of a size moves a least-squares fit a lot).
// Negative values clamp to 0.
std::pair<double, double> Fit(const std::vector<Point>& pts) {
  std::vector<double> slopes, intercepts;
  for (size_t i = 0; i < pts.size(); ++i) {
    for (size_t j = i + 1; j < pts.size(); ++j) {
      if (pts[j].bytes != pts[i].bytes)
        slopes.push_back((pts[j].seconds - pts[i].seconds) / (pts[j].bytes - pts[i].bytes));
    }
  }
  const double b = slopes.empty() ? 0 : std::max(0.0, Median(slopes));
  for (const Point& p : pts) intercepts.push_back(p.seconds - b * p.bytes);
  const double m = pts.empty() ? 1 : std::max(1.0, pts[0].messages);
  const double a = intercepts.empty() ? 0 : std::max(0.0, Median(intercepts));
  return {a / m, b};
}

int FitMain(Communicator& comm, int reps, const std::string& out_path) {
  const Mesh mesh({g_size});
  const std::vector<FitCase> cases = {
      {"local", StepKind::kLocalSlice, "[R]", "[S(1)]", {StepKind::kSendRecv}},
      {"all_gather", StepKind::kAllGather, "[S(0)]", "[R]", {StepKind::kSendRecv}},
      {"reduce_scatter", StepKind::kReduceScatter, "[P(sum)]", "[S(0)]",
       {StepKind::kAllReduce, StepKind::kSendRecv}},
      {"all_reduce", StepKind::kAllReduce, "[P(sum)]", "[R]", {StepKind::kReduceScatter}},
      {"all_to_all", StepKind::kAllToAll, "[S(0)]", "[S(1)]",
       {StepKind::kSendRecv, StepKind::kAllGather}},
      {"send_recv", StepKind::kSendRecv, "[S(0)]", "[S(1)]",
       {StepKind::kAllToAll, StepKind::kAllGather}},
  };
  // Global [rows * ranks, 256] float32: 8 KiB to 2 MiB per rank. Larger buffers leave the
  // cache-resident regime: on the loaded 2-core machine they ran 2-30x slower per byte
  // (docs/RESHARD.md "Time"), which one line cannot fit; --compare shows that regime.
  const std::vector<int64_t> rows = {8, 32, 128, 512, 1024, 2048};
  CostModel model = CostModel::Default();
  char source[256];
  std::snprintf(source, sizeof source, "measured by alphabeta_bench --fit on %s, %d ranks",
                g_nccl ? "NCCL" : "Open MPI", g_size);
  model.source = source;
  if (g_rank == 0) {
    std::printf("| kind | global MiB | messages | bytes/rank | local bytes | median us | quartile us | fitted us |\n");
    std::printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
  }
  for (const FitCase& fc : cases) {
    std::vector<Contender> cs;
    std::vector<Point> pts;
    for (int64_t r : rows) {
      ReshardOptions options;
      options.objective = ReshardObjective::kBytes;
      options.excluded = fc.excluded;
      const ReshardPlan plan = spmd::PlanReshard(mesh, Parse(fc.from, mesh), mesh, Parse(fc.to, mesh),
                                                 {r * g_size, 256}, DType::kFloat32, options);
      if (plan.steps.size() != 1 || plan.steps[0].kind() != fc.step) {
        if (g_rank == 0) std::fprintf(stderr, "%s: planned %s, skipped\n", fc.kind.c_str(), Kinds(plan).c_str());
        continue;
      }
      cs.push_back(Prepare(plan, comm));
    }
    const std::vector<Timing> t = TimeInterleaved(cs, comm, reps);
    for (size_t i = 0; i < cs.size(); ++i) {
      const auto& s = cs[i].plan.steps[0];
      const spmd::StepView view{s.action, s.mesh, s.to_mesh, s.before, s.after};
      double local = static_cast<double>(spmd::LocalStepBytes(view, cs[i].plan.shape, DType::kFloat32));
      double seconds = t[i].quartile;
      double bytes = static_cast<double>(s.bytes_per_rank);
      if (fc.kind == "local") {
        bytes = local;  // the local fit's beta is per byte written
      } else if (fc.kind == "send_recv") {
        seconds -= model.local.beta_ns_per_byte * 1e-9 * local;
      }
      pts.push_back({static_cast<double>(s.messages), bytes, local, std::max(seconds, 1e-7)});
    }
    const auto [alpha_s, beta_s] = Fit(pts);
    *spmd::CostOf(model, fc.kind) = {alpha_s * 1e6, beta_s * 1e9};
    if (g_rank == 0) {
      for (size_t i = 0; i < pts.size(); ++i) {
        const Point& p = pts[i];
        const double fitted = alpha_s * std::max(1.0, p.messages) + beta_s * p.bytes;
        std::printf("| %s | %.3f | %.0f | %.0f | %.0f | %.1f | %.1f | %.1f |\n", fc.kind.c_str(),
                    static_cast<double>(cs[i].plan.shape[0] * 256 * 4) / (1 << 20), p.messages,
                    fc.kind == "local" ? 0.0 : p.bytes, p.local_bytes, t[i].median * 1e6,
                    t[i].quartile * 1e6, fitted * 1e6 +
                    (fc.kind == "send_recv" ? model.local.beta_ns_per_byte * 1e-3 * p.local_bytes : 0));
      }
    }
  }
  if (g_rank == 0) {
    std::printf("\n| kind | alpha us | beta ns/byte | GB/s |\n|---|---:|---:|---:|\n");
    for (const std::string& kind : spmd::CostModelKinds()) {
      const auto& c = *spmd::CostOf(model, kind);
      std::printf("| %s | %.2f | %.4f | %.2f |\n", kind.c_str(), c.alpha_us, c.beta_ns_per_byte,
                  c.beta_ns_per_byte > 0 ? 1 / c.beta_ns_per_byte : 0.0);
    }
    if (!out_path.empty()) {
      std::ofstream(out_path) << spmd::io::ToJson(model).dump(2) << "\n";
      std::printf("\nwrote %s\n", out_path.c_str());
    }
  }
  return 0;
}

// ---- --compare ------------------------------------------------------------------------------

struct CompareCase {
  Mesh mesh;
  std::string from, to;
};

int CompareMain(Communicator& comm, int reps, const CostModel& model) {
  std::vector<CompareCase> cases = {
      {Mesh({g_size}), "[S(0)]", "[S(1)]"},
      {Mesh({g_size}), "[S(1)]", "[S(0)]"},
      {Mesh({g_size}), "[S(0)]", "[R]"},
  };
  if (g_size == 4) {
    cases.push_back({Mesh({2, 2}), "[S(0)#0, S(0)#1]", "[S(0)#1, S(0)#0]"});
    cases.push_back({Mesh({2, 2}), "[S(0), S(1)]", "[S(1), S(0)]"});
    cases.push_back({Mesh({2, 2}), "[S(0), R]", "[R, S(0)]"});
  }
  const std::vector<int64_t> rows = {16, 1024, 16384};  // [rows, 256] float32: 16 KiB, 1, 16 MiB
  if (g_rank == 0) {
    std::printf("| mesh | from -> to | MiB | plan | steps | bytes/rank | modelled us | median us | quartile us | quartile / modelled |\n");
    std::printf("|---|---|---:|---|---|---:|---:|---:|---:|---:|\n");
  }
  for (const CompareCase& cc : cases) {
    const DistAttr from = Parse(cc.from, cc.mesh), to = Parse(cc.to, cc.mesh);
    for (int64_t r : rows) {
      const std::vector<int64_t> shape = {r * 4, 256};
      struct Variant {
        std::string name;
        ReshardOptions options;
      };
      std::vector<Variant> variants(4);
      variants[0].name = "time planner";
      variants[1].name = "bytes planner";
      variants[1].options.objective = ReshardObjective::kBytes;
      variants[2].name = "no send_recv";
      variants[2].options.excluded = {StepKind::kSendRecv};
      variants[3].name = "send_recv";
      variants[3].options.excluded = {StepKind::kAllGather, StepKind::kAllToAll};
      // The alternatives are the fastest plans the model finds with those kinds.
      for (size_t v : {size_t{0}, size_t{2}, size_t{3}}) variants[v].options.objective = ReshardObjective::kTime;
      std::vector<Contender> cs;
      std::vector<std::string> names;
      for (Variant& v : variants) {
        v.options.model = model;
        ReshardPlan plan;
        try {
          plan = spmd::PlanReshard(cc.mesh, from, cc.mesh, to, shape, DType::kFloat32, v.options);
        } catch (const spmd::SpmdError&) {
          continue;  // no plan without those kinds
        }
        // Reprice under the time objective's model (the bytes planner's plan too).
        bool seen = false;
        for (size_t k = 0; k < cs.size(); ++k) {
          if (Kinds(cs[k].plan) == Kinds(plan) && cs[k].plan.bytes_per_rank == plan.bytes_per_rank) {
            names[k] += ", " + v.name;
            seen = true;
          }
        }
        if (seen) continue;
        cs.push_back(Prepare(plan, comm));
        names.push_back(v.name);
      }
      const std::vector<Timing> t = TimeInterleaved(cs, comm, reps);
      if (g_rank != 0) continue;
      for (size_t k = 0; k < cs.size(); ++k) {
        const ReshardPlan& p = cs[k].plan;
        std::printf("| %s | %s -> %s | %.3f | %s | %s | %lld | %.1f | %.1f | %.1f | %.2f |\n",
                    spmd::ToString(cc.mesh).c_str(), cc.from.c_str(), cc.to.c_str(),
                    static_cast<double>(r * 4 * 256 * 4) / (1 << 20), names[k].c_str(),
                    Kinds(p).c_str(), static_cast<long long>(p.bytes_per_rank), p.Seconds() * 1e6,
                    t[k].median * 1e6, t[k].quartile * 1e6,
                    t[k].quartile / std::max(p.Seconds(), 1e-12));
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  bool fit = false, compare = false;
  int reps = 15;
  std::string out_path, model_path, transport = "mpi";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        if (g_rank == 0) std::fprintf(stderr, "alphabeta_bench: %s needs a value\n", a.c_str());
        MPI_Abort(MPI_COMM_WORLD, 2);
      }
      return argv[++i];
    };
    if (a == "--fit") fit = true;
    else if (a == "--compare") compare = true;
    else if (a == "--reps") reps = std::max(1, std::atoi(value().c_str()));
    else if (a == "--out") out_path = value();
    else if (a == "--model") model_path = value();
    else if (a == "--transport") transport = value();
    else {
      if (g_rank == 0) std::fprintf(stderr, "alphabeta_bench: unknown argument %s\n", a.c_str());
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  if (!fit && !compare) fit = compare = true;
  int rc = 0;
  try {
    std::unique_ptr<Communicator> comm;
    if (transport == "nccl") {
#ifdef SPMD_HAVE_NCCL
      g_nccl = true;
      comm = std::make_unique<spmd::runtime::NcclCommunicator>(MPI_COMM_WORLD);
#else
      spmd::ThrowUnsupported("--transport", "nccl: built without NCCL");
#endif
    } else if (transport == "mpi") {
      comm = std::make_unique<spmd::runtime::MpiCommunicator>(MPI_COMM_WORLD);
    } else {
      spmd::ThrowInvalid("--transport", "expected mpi or nccl, got '" + transport + "'");
    }
    const CostModel model = model_path.empty() ? CostModel::Default()
                                               : spmd::io::LoadCostModel(model_path, "--model");
    if (g_rank == 0) {
      std::printf("transport %s, %d ranks, %d reps; model: %s\n\n", transport.c_str(), g_size, reps,
                  model.source.c_str());
    }
    if (fit) rc |= FitMain(*comm, reps, out_path);
    if (compare) {
      if (g_rank == 0) std::printf("\n");
      rc |= CompareMain(*comm, reps, model);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "alphabeta_bench: rank %d: %s\n", g_rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  MPI_Finalize();
  return rc;
}
