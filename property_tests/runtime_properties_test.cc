// Level 3 (docs/ARCHITECTURE.md "Verification, three levels"): the runtime on real collectives.
//
// (a) Reshard round trip: a random mesh among 2, 3, 4, 8, 2x2, 2x3, 2x4, 4x2, 2x2x2 that
//     fits the world, with process ids in order, permuted, or a subset of the world (a
//     sub-mesh: the other ranks hold nothing and must not take part); a random shape (rank
//     0-3, sizes 0-9, uneven and empty shards included) and dtype (float32, float64, int64,
//     bool); random source and target dist attrs (co-shard orders, partial axes with the
//     reduce ops the dtype allows, sum mixed with avg for floats), and half the time a target
//     on another mesh (permuted ids, a sub-mesh, another shape). The source holds integer
//     values (so every reduction is exact): shards of the global tensor, or, for a partial
//     source, unequal sign-varying addends whose reduction is the value. Reshard, then
//     ToGlobal must give the original tensor bit for bit (by value for partial sources:
//     -0 == +0), and on every rank and step the communicator's counted bytes, and the
//     bytes the backend really handed MPI (or copied between threads), equal the plan's
//     StepBytesOf, uneven reductions included (runtime/exec/reshard_executor.h).
// (b) Every registered op: a random mesh as above; an example of the op's declaration
//     (sizes from a palette in 1-8); inputs of the op's value kinds (float32 or float64;
//     int64 ids; bool); random input dist attrs (not the required ones: Dispatch must
//     reshard), partial inputs included (float64 sum/avg: random real addends; otherwise
//     LocalPartial's contract). Dispatch, then every output's dist attr must be the rule's,
//     and ToGlobal must match the float64 reference on the global inputs: float64 within
//     1e-9 relative (absolute floor 1e-9); float32 within the op's float32 error bound
//     (the model of kernel_properties_test.cc); int64 and bool outputs exactly.
//
// One seed for all ranks (rank 0 draws it, or RC_PARAMS fixes it; it is broadcast), every
// rank generates the same case, each rank computes its verdict, and the verdicts are
// combined over the world (the lowest failing rank's message) before RC_ASSERT: all ranks
// shrink to the same minimal case. On failure rank 0 prints the case and one replay line.
//
// Built twice: runtime_properties_test (Open MPI, SPMD_RUNTIME_PROPS_MPI, run under mpirun)
// and runtime_properties_threads_test (the thread backend, a random world of 2, 4 or 8).
// Case counts: SPMD_RUNTIME_RESHARD_CASES (default 200) and SPMD_RUNTIME_OP_CASES (per op,
// default 20); SPMD_RUNTIME_OPS=a,b limits the ops.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/detail/Configuration.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "checker/input_values.h"
#include "kernels/tensor.h"
#include "property_tests/tolerance.h"
#include "reference/reference.h"
#include "rules/model/error.h"
#include "rules/model/half.h"
#include "rules/model/layout.h"
#include "rules/engine/partial_split.h"
#include "rules/engine/registry.h"
#include "rules/reshard/reshard.h"
#include "runtime/comm/communicator.h"
#include "runtime/exec/dispatch.h"
#include "runtime/exec/dist_tensor.h"
#include "runtime/exec/reshard_executor.h"

#ifdef SPMD_RUNTIME_PROPS_MPI
#include <mpi.h>

#include "runtime/comm/mpi_communicator.h"
#include "runtime/testing/mpi_test_main.h"
#else
#include "runtime/comm/thread_communicator.h"
#endif

namespace spmd {
// RapidCheck's printers for the generated values (found by argument-dependent lookup).
void showValue(ReduceOp op, std::ostream& os) { os << ToString(op); }
void showValue(DType dtype, std::ostream& os) { os << ToString(dtype); }
}  // namespace spmd

namespace spmd::runtime {
namespace {

namespace ref = reference;
using kernels::Tensor;

// Uniform in [lo, hi), shrinking toward lo. (RapidCheck scales inRange by the test size,
// which would make the first cases all-replicated and tiny; every case here may use any
// mesh and layout.)
int64_t Uniform(int64_t lo, int64_t hi) {
  return *rc::gen::resize(100, rc::gen::inRange<int64_t>(lo, hi));
}
bool Coin() { return Uniform(0, 2) == 1; }
template <class T>
T PickOf(const std::vector<T>& v) {
  return v[static_cast<size_t>(Uniform(0, static_cast<int64_t>(v.size())))];
}
uint64_t Seed() { return static_cast<uint64_t>(Uniform(0, int64_t{1} << 30)); }

// ---- Backends ---------------------------------------------------------------------------------

#ifdef SPMD_RUNTIME_PROPS_MPI
MpiCommunicator* g_comm = nullptr;
std::string g_program = "runtime_properties_test";

int64_t GenWorld() { return WorldSize(); }

// Runs fn on every rank (this process is one of them); the combined verdict.
std::string OnEveryRank(int64_t, const std::function<std::string(Communicator&)>& fn) {
  std::string mine;
  try {
    mine = fn(*g_comm);
  } catch (const std::exception& e) {
    mine = std::string("threw: ") + e.what();
  }
  return FirstError(mine);
}

std::string ReplayLine(const std::string& test) {
  return "RC_PARAMS=\"seed=" + std::to_string(rc::detail::configuration().testParams.seed) +
         "\" mpirun -np " + std::to_string(WorldSize()) +
         " --oversubscribe --mca pml ob1 --mca btl self,vader " + g_program +
         " --gtest_filter='" + test + "'";
}
#else
int64_t GenWorld() { return PickOf<int64_t>({2, 4, 8}); }

std::string OnEveryRank(int64_t world, const std::function<std::string(Communicator&)>& fn) {
  std::vector<std::string> errors(world);
  CommOptions options;
  options.timeout_s = 30;
  try {
    RunRanks(
        world,
        [&](Communicator& comm) {
          try {
            errors[comm.rank()] = fn(comm);
          } catch (const CommError&) {
            throw;
          } catch (const std::exception& e) {
            errors[comm.rank()] = std::string("threw: ") + e.what();
            throw;
          }
        },
        options);
  } catch (const std::exception& e) {
    for (int64_t r = 0; r < world; ++r) {
      if (!errors[r].empty()) return "rank " + std::to_string(r) + ": " + errors[r];
    }
    return std::string("the run failed: ") + e.what();
  }
  for (int64_t r = 0; r < world; ++r) {
    if (!errors[r].empty()) return "rank " + std::to_string(r) + ": " + errors[r];
  }
  return "";
}

std::string ReplayLine(const std::string& test) {
  return "RC_PARAMS=\"seed=" + std::to_string(rc::detail::configuration().testParams.seed) +
         "\" runtime_properties_threads_test --gtest_filter='" + test + "'";
}
#endif

int64_t EnvCount(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  return std::max<int64_t>(1, std::atoll(v));
}

// Runs a RapidCheck property with `cases` successes, as a gtest failure with the
// counterexample and one replay line.
template <typename Testable>
void CheckProperty(Testable&& testable, int64_t cases) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string test = std::string(info->test_suite_name()) + "." + info->name();
  rc::detail::TestMetadata metadata;
  metadata.id = test;
  metadata.description = test;
  rc::detail::TestParams params = rc::detail::configuration().testParams;
  params.maxSuccess = static_cast<int>(cases);
  const auto result = rc::detail::checkTestable(std::forward<Testable>(testable), metadata, params);
  if (result.template is<rc::detail::SuccessResult>()) {
    if (!result.template get<rc::detail::SuccessResult>().distribution.empty()) {
      rc::detail::printResultMessage(result, std::cout);
      std::cout << std::endl;
    }
  } else {
    std::ostringstream ss;
    rc::detail::printResultMessage(result, ss);
    FAIL() << ss.str() << "\nreplay: " << ReplayLine(test) << "\n";
  }
}

// ---- Printing ---------------------------------------------------------------------------------

std::string Join(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::string Placements(const DistAttr& attr, const Mesh& mesh) {
  return ToPlacementString(attr, mesh.ndim());
}

// ---- Generators ---------------------------------------------------------------------------


// A mesh that fits `world` ranks: ids in order, permuted, or a subset of the world.
Mesh GenMesh(int64_t world) {
  static const std::vector<std::vector<int64_t>> kShapes = {
      {2}, {3}, {4}, {8}, {2, 2}, {2, 3}, {2, 4}, {4, 2}, {2, 2, 2}};
  std::vector<std::vector<int64_t>> fits;
  for (const auto& s : kShapes) {
    int64_t n = 1;
    for (int64_t x : s) n *= x;
    if (n <= world) fits.push_back(s);
  }
  const std::vector<int64_t> shape = PickOf(fits);
  int64_t n = 1;
  for (int64_t x : shape) n *= x;
  const int mode = static_cast<int>(Uniform(0, 3));  // 0: in order, 1: permuted, 2: from the world
  std::vector<int64_t> ids(mode == 2 ? world : n);
  std::iota(ids.begin(), ids.end(), 0);
  if (mode != 0) {
    std::mt19937_64 rng(Seed());
    std::shuffle(ids.begin(), ids.end(), rng);
  }
  ids.resize(n);
  return Mesh(shape, ids);
}

std::vector<ReduceOp> PartialOpsFor(DType dtype) {
  switch (dtype) {
    case DType::kBool: return {ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAny, ReduceOp::kAll};
    default:
      return {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProd};
  }
}

// A valid dist attr of `rank` dims: each mesh axis (in random order, so co-shard orders
// vary) replicated, appended to a dim's list, or partial. Partial axes share one reduce op,
// or (floats) mix sum and avg. Without `exact_avg`, no avg: an avg of n equal float32
// values is not always the value (n v rounds when n is not a power of two).
DistAttr GenAttr(const Mesh& mesh, int rank, DType dtype, bool allow_partial, bool exact_avg = true) {
  DistAttr attr = DistAttr::Replicated(rank);
  std::vector<int> axes(mesh.ndim());
  std::iota(axes.begin(), axes.end(), 0);
  std::mt19937_64 order(Seed());
  std::shuffle(axes.begin(), axes.end(), order);
  std::vector<ReduceOp> ops = PartialOpsFor(dtype);
  if (!exact_avg) ops.erase(std::remove(ops.begin(), ops.end(), ReduceOp::kAvg), ops.end());
  const ReduceOp op = PickOf(ops);
  const bool mixed =
      exact_avg && IsFloating(dtype) && op == ReduceOp::kSum && Uniform(0, 3) == 0;
  for (int axis : axes) {
    const int role = Uniform(0, allow_partial ? 9 : 7);  // 0-2 R, 3-6 S, 7-8 P
    if (role >= 3 && role <= 6 && rank > 0) {
      attr.dims[Uniform(0, rank)].push_back(axis);
    } else if (role >= 7) {
      attr.partial[axis] = mixed && Coin() ? ReduceOp::kAvg : op;
    }
  }
  return attr;
}

// ---- Values -----------------------------------------------------------------------------------

int64_t Numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Tensor MakeTensor(const Shape& shape, DType dtype, const std::vector<double>& v) {
  Tensor t = Tensor::Uninitialized(shape, dtype);
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (dtype) {
      case DType::kFloat64: t.data<double>()[i] = v[i]; break;
      case DType::kFloat32: t.data<float>()[i] = static_cast<float>(v[i]); break;
      case DType::kInt64: t.data<int64_t>()[i] = static_cast<int64_t>(std::llround(v[i])); break;
      case DType::kBool: t.data<bool>()[i] = v[i] != 0; break;
      case DType::kBFloat16: t.data<BFloat16>()[i] = BFloat16::FromBits(DoubleToBFloat16Bits(v[i])); break;
      case DType::kFloat16: t.data<Float16>()[i] = Float16::FromBits(DoubleToFloat16Bits(v[i])); break;
    }
  }
  return t;
}

std::vector<double> ValuesOf(const Tensor& t) {
  std::vector<double> v(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (t.dtype()) {
      case DType::kFloat64: v[i] = t.data<double>()[i]; break;
      case DType::kFloat32: v[i] = t.data<float>()[i]; break;
      case DType::kInt64: v[i] = static_cast<double>(t.data<int64_t>()[i]); break;
      case DType::kBool: v[i] = t.data<bool>()[i] ? 1 : 0; break;
      case DType::kBFloat16: v[i] = static_cast<float>(t.data<BFloat16>()[i]); break;
      case DType::kFloat16: v[i] = static_cast<float>(t.data<Float16>()[i]); break;
    }
  }
  return v;
}

// Addends for every partial slot (rules/engine/partial_split.h). `integer`: integer addends
// (exact in every dtype); else real ones (float64 only).
std::vector<std::vector<double>> SplitPartial(const std::vector<double>& whole,
                                              const PartialMap& partial, const Mesh& mesh,
                                              bool integer, DType dtype, std::mt19937_64& rng) {
  SplitOptions options;
  options.integer = integer;
  options.boolean = dtype == DType::kBool;
  options.avg_copies = dtype == DType::kInt64;
  return spmd::SplitPartial(whole, partial, mesh, options, rng);
}

// A DistTensor on this rank holding `addends` (one global tensor per partial slot).
DistTensor FromAddends(const Shape& shape, DType dtype, const std::vector<std::vector<double>>& addends,
                       const Mesh& mesh, const DistAttr& attr, int64_t me) {
  const std::optional<std::vector<int64_t>> coord = mesh.CoordinateOf(me);
  if (!coord) return DistTensor::FromLocal(Tensor(), shape, dtype, mesh, attr, me);
  const Tensor whole = MakeTensor(shape, dtype, addends[PartialSlot(attr.partial, mesh, *coord)]);
  return DistTensor::FromLocal(SliceBox(whole, BoxAt(shape, attr, mesh, *coord)), shape, dtype, mesh,
                               attr, me);
}

// ---- Bytes ------------------------------------------------------------------------------------

// Every step's counted bytes, and the bytes the backend really handed its transport,
// equal the plan's, on every rank.
int64_t g_steps_checked = 0;  // steps whose bytes were checked on this rank

std::string CheckBytes(const ReshardPlan& plan, const ReshardReport& report,
                       const std::string& what) {
  if (report.steps.size() != plan.steps.size()) {
    return what + ": the report has " + std::to_string(report.steps.size()) + " steps, the plan " +
           std::to_string(plan.steps.size());
  }
  for (size_t k = 0; k < plan.steps.size(); ++k) {
    const StepRecord& r = report.steps[k];
    const ReshardStep& step = plan.steps[k];
    auto text = [](RankBytes b) {
      return "sent " + std::to_string(b.sent) + ", received " + std::to_string(b.received);
    };
    const std::string where = what + " step " + std::to_string(k + 1) + " (" + step.Describe() + ")";
    if (r.counted != r.planned) {
      return where + ": counted " + text(r.counted) + ", the plan says " + text(r.planned);
    }
    if (r.transport != r.planned) {
      return where + ": the transport moved " + text(r.transport) + ", the plan says " +
             text(r.planned);
    }
    ++g_steps_checked;
  }
  return "";
}

// ---- (a) Reshard round trip -------------------------------------------------------------------

struct ReshardCase {
  Mesh mesh;
  Mesh to_mesh;
  Shape shape;
  DType dtype = DType::kFloat32;
  DistAttr from;
  DistAttr to;
  bool addends = false;  // partial source from random addends (else LocalPartial's contract)
  uint64_t seed = 0;
};

std::string Describe(const ReshardCase& c) {
  std::ostringstream os;
  os << "reshard " << Join(c.shape) << " " << ToString(c.dtype) << " on " << ToString(c.mesh) << " from "
     << Placements(c.from, c.mesh);
  if (!(c.to_mesh == c.mesh)) os << " to " << ToString(c.to_mesh);
  os << " to " << Placements(c.to, c.to_mesh) << (c.addends && c.from.IsPartial() ? " (addends)" : "") << " seed " << c.seed;
  return os.str();
}

std::string RunReshardCase(const ReshardCase& c, const ReshardPlan& plan, Communicator& comm) {
  const int64_t me = comm.rank();
  std::mt19937_64 rng(c.seed);
  std::vector<double> values(Numel(c.shape));
  for (double& v : values) {
    v = c.dtype == DType::kBool ? static_cast<double>(rng() % 2)
                                : static_cast<double>(static_cast<int64_t>(rng() % 17) - 8);
  }
  const Tensor global = MakeTensor(c.shape, c.dtype, values);
  DistTensor source;
  if (c.from.IsPartial() && c.addends) {
    const auto parts = SplitPartial(values, c.from.partial, c.mesh, true, c.dtype, rng);
    source = FromAddends(c.shape, c.dtype, parts, c.mesh, c.from, me);
  } else {
    source = DistTensor::ShardTensor(global, c.mesh, c.from, me);
  }
  ReshardReport report;
  const DistTensor result = source.Reshard(c.to_mesh, c.to, comm, &report);
  const bool takes_part = c.mesh.CoordinateOf(me) || c.to_mesh.CoordinateOf(me);
  std::string error = takes_part ? CheckBytes(plan, report, "reshard") : "";
  if (!error.empty()) return error;
  if (const auto coord = c.to_mesh.CoordinateOf(me)) {
    if (!result.has_local()) return "a rank of the target mesh holds no buffer";
    const Shape want = LocalShape(c.shape, c.to, c.to_mesh, *coord);
    if (result.local().shape() != want || result.local().dtype() != c.dtype) {
      return "local shape " + Join(result.local().shape()) + ", the layout gives " + Join(want);
    }
  } else if (result.has_local()) {
    return "a rank outside the target mesh holds a buffer";
  }
  ReshardReport gather_report;
  const std::optional<Tensor> back = result.ToGlobal(comm, &gather_report);
  if (c.to_mesh.CoordinateOf(me)) {
    const ReshardPlan gather = CachedPlanReshard(c.to_mesh, c.to, c.to_mesh,
                                                 DistAttr::Replicated(static_cast<int>(c.shape.size())),
                                                 c.shape, c.dtype);
    error = CheckBytes(gather, gather_report, "to_global");
    if (!error.empty()) return error;
    if (!back) return "ToGlobal gave nothing on a rank of the mesh";
    if (back->shape() != c.shape || back->dtype() != c.dtype) return "ToGlobal: wrong shape or dtype";
    if (c.from.IsPartial() || c.to.IsPartial()) {
      // Integer addends reduce exactly (2-byte floats too: the sums stay below 2^8), except
      // through a Rescale (avg <-> sum divides by the axis size: inexact for 3): then within
      // a few units of rounding of the addends (2-byte floats: 16 units of 2^-8 / 2^-11 of
      // the value, each addend and partial sum rounded once).
      bool rescaled = false;
      for (const ReshardPlan* p : {&plan, &gather}) {
        for (const ReshardStep& step : p->steps) rescaled = rescaled || step.kind() == StepKind::kRescale;
      }
      const double two_byte_u = c.dtype == DType::kBFloat16 ? 0x1p-8 : 0x1p-11;
      const double tolerance = !rescaled                     ? 0.0
                               : c.dtype == DType::kFloat32 ? 1e-4
                               : IsTwoByteFloat(c.dtype)    ? 16 * two_byte_u * 64
                                                            : 1e-12;
      const std::vector<double> got = ValuesOf(*back), original = ValuesOf(global);
      for (size_t i = 0; i < values.size(); ++i) {
        const double want = original[i];
        if (!(std::fabs(got[i] - want) <= tolerance)) {
          std::ostringstream os;
          os.precision(17);
          os << "element " << i << ": got " << got[i] << ", expected " << want << " (tolerance "
             << tolerance << ")";
          return os.str();
        }
      }
    } else if (!(*back == global)) {
      const std::vector<double> got = ValuesOf(*back), want = ValuesOf(global);
      for (size_t i = 0; i < want.size(); ++i) {
        if (std::memcmp(&got[i], &want[i], sizeof(double)) != 0) {
          return "element " + std::to_string(i) + ": got " + std::to_string(got[i]) + ", expected " +
                 std::to_string(want[i]);
        }
      }
      return "ToGlobal differs from the original";
    }
  } else if (back) {
    return "ToGlobal gave a tensor on a rank outside the mesh";
  }
  return "";
}

std::map<std::string, int64_t> g_step_kinds;  // how often each step kind ran

TEST(RuntimeProperties, ReshardRoundTrip) {
  CheckProperty(
      [] {
        const int64_t world = GenWorld();
        ReshardCase c;
        c.mesh = GenMesh(world);
        c.to_mesh = Coin() ? c.mesh : GenMesh(world);
        c.shape = Shape(static_cast<size_t>(PickOf<int64_t>({0, 1, 1, 2, 2, 2, 3, 3})));
        for (int64_t& d : c.shape) d = Uniform(0, 10);
        c.dtype = PickOf<DType>({DType::kFloat32, DType::kFloat64, DType::kInt64, DType::kBool,
                                 DType::kBFloat16, DType::kFloat16});
        const int rank = static_cast<int>(c.shape.size());
        c.from = GenAttr(c.mesh, rank, c.dtype, true);
        c.to = GenAttr(c.to_mesh, rank, c.dtype, true);
        c.addends = Coin();
        c.seed = Seed();
        RC_LOG() << Describe(c) << "\n";
        ReshardPlan plan;
        try {
          plan = CachedPlanReshard(c.mesh, c.from, c.to_mesh, c.to, c.shape, c.dtype);
        } catch (const SpmdError& e) {
          RC_DISCARD(std::string("the planner refuses: ") + e.what());
        }
        for (const ReshardStep& step : plan.steps) ++g_step_kinds[std::string(ToString(step.kind()))];
        if (plan.steps.empty()) ++g_step_kinds["(no step)"];
        const std::string error =
            OnEveryRank(world, [&](Communicator& comm) { return RunReshardCase(c, plan, comm); });
        if (!error.empty()) RC_LOG() << error << "\n";
        RC_ASSERT(error.empty());
      },
      EnvCount("SPMD_RUNTIME_RESHARD_CASES", 200));
  std::cout << "steps run:";
  for (const auto& [kind, count] : g_step_kinds) std::cout << " " << kind << " " << count;
  std::cout << "\nbytes (this process): transport == counted == planned on " << g_steps_checked
            << " steps"
            << std::endl;
}

// ---- (b) Every op -----------------------------------------------------------------------------

// float32 error model (the one of kernel_properties_test.cc; the bounds hold for any
// summation order, so they cover partial sums combined across ranks).
using prop::Bounds;
using prop::MakeBounds;

using prop::SameSpecial;

// The checker's generated values (checker/input_values.h) in the run's float dtype.
ref::Tensor MakeInput(const Shape& shape, InputValues values, DType float_dtype, std::mt19937_64& rng) {
  ref::Tensor t = checker::MakeInputValues(shape, values, rng);
  if (t.dtype == DType::kFloat64) t.dtype = float_dtype;
  for (double& v : t.data) v = prop::RoundToDType(v, t.dtype);  // the run's values, exactly
  return t;
}

std::string AttrsText(const Attrs& attrs) {
  std::ostringstream os;
  os << "{";
  bool first = true;
  for (const auto& [name, value] : attrs.values()) {
    os << (first ? "" : ", ") << name << ": ";
    first = false;
    std::visit(
        [&](const auto& v) {
          using V = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<V, std::vector<int64_t>> || std::is_same_v<V, std::vector<double>>) {
            os << "[";
            for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
            os << "]";
          } else if constexpr (std::is_same_v<V, std::string>) {
            os << '"' << v << '"';
          } else {
            os << v;
          }
        },
        value);
  }
  os << "}";
  return os.str();
}

struct OpCase {
  const OpDecl* op = nullptr;
  Mesh mesh;
  std::vector<Shape> shapes;
  Attrs attrs;
  DType float_dtype = DType::kFloat64;
  std::vector<DistAttr> inputs;
  uint64_t seed = 0;
};

std::string Describe(const OpCase& c) {
  std::ostringstream os;
  os << c.op->name << " on " << ToString(c.mesh) << " " << ToString(c.float_dtype) << " attrs "
     << AttrsText(c.attrs) << " seed " << c.seed << "; inputs:";
  for (size_t i = 0; i < c.shapes.size(); ++i) {
    os << " " << Join(c.shapes[i]) << " " << Placements(c.inputs[i], c.mesh);
  }
  return os.str();
}

// The global inputs (the same on every rank) and the reference outputs.
struct OpValues {
  ref::Tensors inputs;
  ref::Tensors expected;
  Attrs normalized;
  std::vector<InputValues> kinds;  // per input
};

OpValues MakeOpValues(const OpCase& c) {
  OpValues v;
  v.normalized = c.op->NormalizeAttrs(c.attrs);
  v.kinds = c.op->InputValueKinds(RuleContext{c.shapes, v.normalized});
  std::mt19937_64 rng(c.seed);
  for (size_t i = 0; i < c.shapes.size(); ++i) v.inputs.push_back(MakeInput(c.shapes[i], v.kinds[i], c.float_dtype, rng));
  v.expected = ref::FindReference(c.op->name)(v.inputs, v.normalized);
  return v;
}

std::string CompareOutput(const OpCase& c, const OpValues& v, size_t o, const Tensor& got,
                          std::optional<Bounds>& bounds) {
  const ref::Tensor& e = v.expected[o];
  const std::string where = "outputs[" + std::to_string(o) + "]";
  if (got.shape() != e.shape) return where + " shape " + Join(got.shape()) + ", reference " + Join(e.shape);
  return CompareValues(*c.op, o, where, got.dtype(), ValuesOf(got), e.data, 1e-9, bounds,
                       [&] { return MakeBounds(*c.op, v.inputs, v.normalized, v.expected); });
}

std::string RunOpCase(const OpCase& c, const OpValues& v, const InferResult& rule, Communicator& comm) {
  const int64_t me = comm.rank();
  std::mt19937_64 rng(c.seed ^ 0x9e3779b97f4a7c15ull);
  std::vector<DistTensor> inputs;
  for (size_t i = 0; i < c.shapes.size(); ++i) {
    const ref::Tensor& t = v.inputs[i];
    const DistAttr& attr = c.inputs[i];
    const bool real_addends = t.dtype == DType::kFloat64 && attr.IsPartial();
    bool sum_like = true;
    for (const auto& [axis, op] : attr.partial) sum_like = sum_like && (op == ReduceOp::kSum || op == ReduceOp::kAvg);
    if (real_addends && sum_like) {
      // Small integers (nonzero's and unique's x) get integer addends (avg: copies, as int64's),
      // so the reduced input is exactly the global one: an op that tests values for equality
      // or zero sees the reference's values, not a rounding of them (1 + 2^-52 is a value of
      // its own).
      std::vector<std::vector<double>> parts;
      if (i < v.kinds.size() && v.kinds[i].kind == ValueKind::kSmallInt) {
        SplitOptions exact;
        exact.integer = true;
        exact.avg_copies = true;
        parts = spmd::SplitPartial(t.data, attr.partial, c.mesh, exact, rng);
      } else {
        parts = SplitPartial(t.data, attr.partial, c.mesh, false, t.dtype, rng);
      }
      inputs.push_back(FromAddends(t.shape, t.dtype, parts, c.mesh, attr, me));
    } else {
      inputs.push_back(DistTensor::ShardTensor(MakeTensor(t.shape, t.dtype, t.data), c.mesh, attr, me));
    }
  }
  DispatchReport report;
  const std::vector<DistTensor> outputs = Dispatch(*c.op, inputs, c.attrs, comm, &report);
  if (outputs.size() != v.expected.size()) {
    return "Dispatch gave " + std::to_string(outputs.size()) + " outputs, the reference " +
           std::to_string(v.expected.size());
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!report.resharded[i] || !c.mesh.CoordinateOf(me)) continue;
    const ReshardPlan plan = CachedPlanReshard(c.mesh, c.inputs[i], c.mesh, rule.inputs[i], c.shapes[i],
                                               inputs[i].dtype());
    const std::string error = CheckBytes(plan, report.reshards[i], "inputs[" + std::to_string(i) + "]");
    if (!error.empty()) return error;
  }
  std::optional<Bounds> bounds;
  for (size_t o = 0; o < outputs.size(); ++o) {
    if (!(outputs[o].dist_attr() == rule.outputs[o])) {
      return "outputs[" + std::to_string(o) + "] has dist attr " + Placements(outputs[o].dist_attr(), c.mesh) +
             ", the rule says " + Placements(rule.outputs[o], c.mesh);
    }
    const std::optional<Tensor> global = outputs[o].ToGlobal(comm);
    if (!c.mesh.CoordinateOf(me)) {
      if (global || outputs[o].has_local()) return "a rank outside the mesh holds an output";
      continue;
    }
    if (outputs[o].shape() != v.expected[o].shape) {
      return "outputs[" + std::to_string(o) + "] global shape " + Join(outputs[o].shape()) + ", reference " +
             Join(v.expected[o].shape);
    }
    const std::string error = CompareOutput(c, v, o, *global, bounds);
    if (!error.empty()) return error;
  }
  return "";
}

std::vector<const OpDecl*> OpsUnderTest() {
  std::set<std::string> only;
  if (const char* env = std::getenv("SPMD_RUNTIME_OPS")) {
    std::stringstream ss(env);
    std::string name;
    while (std::getline(ss, name, ',')) {
      if (!name.empty()) only.insert(name);
    }
  }
  std::vector<const OpDecl*> ops;
  for (const OpDecl& op : AllOps()) {
    if (only.empty() || only.count(op.name)) ops.push_back(&op);
  }
  return ops;
}

class RuntimeOps : public ::testing::TestWithParam<const OpDecl*> {};

// Exchange ops (OpDecl::exchange): shards the exchanged dim of the exchange input over the
// mesh axes its other dims leave free (a random non-empty subset, in random order), so that
// Dispatch's all-gather runs over a group of more than one rank.
void ShardExchangedDim(const OpDecl& op, const std::vector<Shape>& shapes, const Attrs& normalized,
                       const Mesh& mesh, DistAttr& attr) {
  const int dim = ExchangedDim(op, RuleContext{shapes, normalized});
  RC_PRE(dim >= 0);  // no exchange for these shapes (cumsum's flatten)
  attr.dims[dim].clear();
  std::vector<int> free;
  for (int axis = 0; axis < mesh.ndim(); ++axis) {
    bool used = false;
    for (const std::vector<int>& axes : attr.dims) used = used || std::count(axes.begin(), axes.end(), axis) > 0;
    if (!used) free.push_back(axis);
  }
  std::mt19937_64 order(Seed());
  std::shuffle(free.begin(), free.end(), order);
  for (int axis : free) {
    if (attr.dims[dim].empty() || Coin()) {
      attr.dims[dim].push_back(axis);
      attr.partial.erase(axis);
    }
  }
  RC_PRE(!attr.dims[dim].empty());
}

// Dispatch of one generated case of `op` on every rank matches the reference;
// `shard_exchange`: the exchanged dim is sharded (ShardExchangedDim).
void CheckDispatchedOp(const OpDecl* op, bool shard_exchange) {
  CheckProperty(
      [op, shard_exchange] {
        const int64_t world = GenWorld();
        OpCase c;
        c.op = op;
        c.mesh = GenMesh(world);
        SizePalette palette;
        palette.sizes = std::vector<int64_t>(4);
        for (int64_t& size : palette.sizes) size = Uniform(1, 9);
        RC_PRE(static_cast<bool>(op->examples));
        const std::vector<Example> examples = op->examples(palette);
        RC_PRE(!examples.empty());
        const Example& example = PickOf(examples);
        c.shapes = example.shapes;
        c.attrs = example.attrs;
        c.float_dtype = PickOf<DType>({DType::kFloat32, DType::kFloat64});
        c.seed = Seed();
        Attrs normalized;
        std::vector<InputValues> kinds;
        try {
          normalized = op->NormalizeAttrs(c.attrs);
          kinds = op->InputValueKinds(RuleContext{c.shapes, normalized});
        } catch (const SpmdError& e) {
          RC_DISCARD(std::string("the example's attrs are refused: ") + e.what());
        }
        for (size_t i = 0; i < c.shapes.size(); ++i) {
          const DType dtype = kinds[i].kind == ValueKind::kBool    ? DType::kBool
                              : IsIntegerKind(kinds[i].kind)       ? DType::kInt64
                                                                   : c.float_dtype;
          c.inputs.push_back(GenAttr(c.mesh, static_cast<int>(c.shapes[i].size()), dtype, true,
                                     dtype != DType::kFloat32));
        }
        if (shard_exchange) {
          ShardExchangedDim(*op, c.shapes, normalized, c.mesh, c.inputs[op->exchange->input]);
        }
        RC_LOG() << Describe(c) << "\n";
        std::vector<TensorArg> args;
        for (size_t i = 0; i < c.shapes.size(); ++i) args.push_back({c.shapes[i], c.inputs[i]});
        InferResult rule;
        try {
          rule = InferForward(*op, c.mesh, args, c.attrs);
        } catch (const SpmdError& e) {
          RC_DISCARD(std::string("the rule refuses: ") + e.what());
        }
        OpValues values;
        try {
          values = MakeOpValues(c);
        } catch (const SpmdError& e) {
          RC_DISCARD(std::string("the reference refuses: ") + e.what());
        }
        bool moves = false;
        for (size_t i = 0; i < c.inputs.size(); ++i) moves = moves || !(c.inputs[i] == rule.inputs[i]);
        RC_TAG(moves ? "resharded" : "as given");
        if (shard_exchange) {
          // Another input may contest the exchanged dim's mesh axes; the rule gives them to
          // the cheaper claim (docs/DECISIONS.md), and a case where the exchanged dim lost
          // them runs no exchange: it belongs to the plain property, not to this one.
          const int dim = ExchangedDim(*op, RuleContext{c.shapes, normalized});
          if (rule.inputs[op->exchange->input].dims[dim].empty()) {
            RC_DISCARD("a contested axis went to another input: the exchanged dim is whole");
          }
        }
        const std::string error =
            OnEveryRank(world, [&](Communicator& comm) { return RunOpCase(c, values, rule, comm); });
        if (!error.empty()) RC_LOG() << error << "\n";
        RC_ASSERT(error.empty());
      },
      EnvCount("SPMD_RUNTIME_OP_CASES", 20));
}

TEST_P(RuntimeOps, DispatchMatchesReference) { CheckDispatchedOp(GetParam(), false); }

INSTANTIATE_TEST_SUITE_P(AllOps, RuntimeOps, ::testing::ValuesIn(OpsUnderTest()),
                         [](const ::testing::TestParamInfo<const OpDecl*>& info) { return info.param->name; });

// The ops with a collective inside, their exchanged dim sharded: the all-gather between
// the two phases runs over a group of more than one rank.
TEST(RuntimeExchange, ShardedExchangedDimMatchesReference) {
  int exchanging = 0;
  for (const OpDecl* op : OpsUnderTest()) {
    if (!op->exchange) continue;
    ++exchanging;
    SCOPED_TRACE(op->name);
    CheckDispatchedOp(op, true);
  }
  EXPECT_GT(exchanging, 0) << "no op declares an exchange";
}

}  // namespace
}  // namespace spmd::runtime

#ifdef SPMD_RUNTIME_PROPS_MPI
int main(int argc, char** argv) {
  spmd::runtime::g_program = argv[0];
  return spmd::runtime::RunMpiTests(argc, argv, "", [](spmd::runtime::MpiCommunicator* comm) {
    spmd::runtime::g_comm = comm;
  });
}
#endif
