// Sharded gradient check: an op's VJP graph (rules/engine/vjp.h) run on a simulated mesh the way
// the runtime runs it, against the unsharded float64 VJP and against central finite
// differences of the float64 reference (docs/CHECKER.md, "Gradients on a simulated mesh").
//
// One case: global inputs and cotangents from the seed; each forward input held under a
// given dist attr, each forward output under the forward rule's output dist attr, each
// cotangent under a given dist attr (partial included). Each call of the graph: the call
// op's forward rule (InferForward) gives the required operand dist attrs and the output
// dist attrs; an operand held otherwise is resharded (assembled and split again: what a
// reshard computes); the call's reference runs per rank on the local shards with the
// localized attrs; its outputs keep the inferred dist attrs, partial included. Each input
// gradient is then assembled and compared. Nothing here is per op: every op whose
// declaration fills OpDecl::vjp is checked.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "reference/reference.h"
#include "checker/simulate.h"
#include "reference/tensor.h"
#include "rules/engine/op_decl.h"
#include "rules/engine/phase.h"

namespace spmd::checker {

// A per-rank reference of a call op (tests inject faults): the op (or one phase of its
// exchange), the local operands, the localized attrs.
using LocalReference =
    std::function<reference::Tensors(const KernelRef& kernel, const reference::Tensors&, const Attrs&)>;

struct GradCase {
  const OpDecl* op = nullptr;
  Mesh mesh;
  std::vector<Shape> shapes;         // forward input shapes
  std::vector<DistAttr> inputs;      // how the forward inputs are held
  Attrs attrs;                       // as a caller gives them (normalised inside)
  std::vector<DistAttr> cotangents;  // how each output's cotangent is held
  uint64_t seed = 1;                 // the global values (inputs, cotangents)
  uint64_t shard_seed = 1;           // the partial addends of every split
  // The per-rank reference of the calls; null: the registered ones.
  LocalReference local_reference;
  // The op's VJP; null: op->vjp (tests inject wrong graphs).
  VjpBuilder vjp;
};

enum class GradVerdict {
  kPassed,
  kFailed,
  kNotApplicable,  // the forward refuses the case (its declaration, reference or rule)
};

struct GradOutcome {
  GradVerdict verdict = GradVerdict::kNotApplicable;
  // kFailed: what went wrong ("rule refuses", "reference refuses", "local shape",
  // "replicas", "sharded vs unsharded", "vs finite differences", "graph"; RunGradCheck
  // adds "case" for a generated case CheckGrad throws on), the call at fault (-1: none,
  // e.g. the assembled gradient) and one readable line (the call named in front).
  std::string what;
  int call = -1;
  std::string call_op;
  std::string message;
  std::string note;  // kNotApplicable: why
  int calls = 0;     // calls the graph made
  int reshards = 0;  // operands the calls' rules wanted held otherwise
  int partial_operands = 0;  // operands a call read partial (no reshard)
};

// What the unsharded side computes once per (op, shapes, attrs, seed): the global
// values, the float64 VJP (EvaluateVjp) and central finite differences of the reference.
struct GradOracle {
  bool applicable = false;
  std::string note;     // not applicable: why
  std::string failure;  // the unsharded VJP is wrong or refuses: why (every case fails)
  reference::Tensors inputs, outputs, cotangents;
  std::vector<std::optional<reference::Tensor>> vjp;          // EvaluateVjp
  std::vector<std::optional<reference::Tensor>> differences;  // floating inputs only
};

// Tolerances (docs/CHECKER.md says why).
inline constexpr double kShardedRelative = 1e-9;   // sharded vs unsharded, of max(1, max|grad|)
inline constexpr double kDifferenceStep = 1e-5;    // central differences
inline constexpr double kDifferenceTolerance = 1e-6;  // of max(1, max|grad|)

// The most input elements a case may have (finite differences run the reference twice
// per element); with kMaxSimulatedElements (checker/simulate.h) over all ranks.
inline constexpr int64_t kMaxGradInputElements = int64_t{1} << 14;

// Builds the oracle of a case (only op, shapes, attrs, seed and vjp are read). Throws
// SpmdError(kUnsupported, "inputs[i].shape" / "outputs[o].shape") for a case over the size
// bounds.
GradOracle MakeGradOracle(const GradCase& c);

// Checks one case against its oracle (MakeGradOracle of the same op, shapes, attrs, seed).
// Throws SpmdError(kInvalidArgument) naming the field for cotangent dist attrs that do not
// fit the outputs or the mesh, and kUnsupported for a case over the size bounds on its mesh.
GradOutcome CheckGrad(const GradCase& c, const GradOracle& oracle);
// Same, building the oracle.
GradOutcome CheckGrad(const GradCase& c);

// ---- The generated check behind `spmd check --grad` --------------------------------------

struct GradOptions {
  std::vector<std::string> ops;  // empty: every op with a VJP
  int64_t families = 80;         // per op: random (example, sizes, values) draws
  int64_t layouts = 16;          // per family: random meshes and shardings
  uint64_t seed = 1;
  int jobs = 1;
  // How to replay a failing case (one line); none: failures carry no replay line.
  std::function<std::string(const GradCase&)> replay;
  // Fault injection for tests (see GradCase).
  LocalReference local_reference;
  std::function<VjpBuilder(const OpDecl& op)> vjp;
};

struct GradRow {
  std::string op;
  int64_t cases = 0;  // checked (not-applicable ones excluded)
  int64_t passed = 0;
  int64_t failed = 0;
  int64_t skipped = 0;
  int64_t calls = 0;     // graph calls run on the mesh, over all cases
  int64_t reshards = 0;  // operands resharded for a call
  int64_t partial_operands = 0;  // operands read partial by a call's rule
  double seconds = 0;
  std::string failure;  // the smallest failing case (ranks, then input elements): message,
                        // then its replay line
};

// The ops checked: those of `names` (every registered op when empty) whose declaration
// has a VJP; SpmdError(kUnknownOp, "--op") for a name spmdkit does not have.
std::vector<const OpDecl*> GradOps(const std::vector<std::string>& names);

// Runs the generated check, one row per op; `progress` after each row.
std::vector<GradRow> RunGradCheck(const GradOptions& options,
                                  const std::function<void(const GradRow&, size_t done, size_t total)>& progress);

}  // namespace spmd::checker
