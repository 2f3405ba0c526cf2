// The soundness sweep behind `spmd check`: every op x mesh, exhaustive over the input
// dist attrs of the op's examples (and over output dist attrs, for the reverse rule), or
// random cases on larger meshes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "checker/simulate.h"
#include "rules/engine/op_decl.h"

namespace spmd::checker {

struct SweepOptions {
  std::vector<std::string> ops;                  // empty: every registered op
  std::vector<std::vector<int64_t>> meshes;      // empty: 2, 3, 4, 2x2, 2x3, 2x2x2
  bool exhaustive = true;                        // else random
  int64_t random_cases = 0;                      // random: cases per op
  uint64_t seed = 1;
  int jobs = 1;
  bool reverse = true;                           // also check the reverse rule
  int64_t max_combinations = 20000;              // per example, palette and direction
  // How to replay a failing case (one line, e.g. io::ReplayCommand); none: failures
  // carry no replay line. The checker prints no JSON itself (io/ does).
  std::function<std::string(const Case&)> replay;
  reference::ReferenceFn reference = nullptr;    // the oracle; null: each op's registered one
};

struct SweepRow {
  std::string op;
  std::string mesh;     // "2x3"; "random" in random mode
  int64_t cases = 0;    // cases run (not-applicable ones excluded)
  int64_t passed = 0;
  int64_t failed = 0;
  int64_t skipped = 0;  // the rule refused (typed error); a reference refusing what the
                        // rule accepted counts as failed
  double seconds = 0;
  // Exhaustive mode: (required, claimed) pairs simulated, and cases whose pair was already
  // simulated in its family (the same computation; SimulationCache in checker/simulate.h).
  int64_t simulated = 0;
  int64_t reused = 0;
  std::vector<std::string> failures;  // the first few: message and replay command
};

// The ops named in `names` (every registered op when empty); SpmdError(kUnknownOp, "--op")
// for a name spmdkit does not have.
std::vector<const OpDecl*> SelectOps(const std::vector<std::string>& names);

// The default meshes of the exhaustive sweep.
std::vector<std::vector<int64_t>> DefaultMeshes();
// The size palettes: divisible, uneven, and smaller than the mesh axes (empty shards,
// size-1 dims).
std::vector<SizePalette> DefaultPalettes();

// The reduce ops a generated partial input of `example` may carry: those the op's rule may
// keep (sum and max for DimTrans ops, for ops with their own forward (concat, stack) and for
// ops with an unread input; the einsum spec's acceptance otherwise). Throws the rule
// builder's SpmdError for an example these sizes make invalid.
std::vector<ReduceOp> PartialInputOps(const OpDecl& op, const Example& example, const Attrs& normalized);

// Every dist attr of a rank-`rank` tensor on a mesh of `mesh_ndim` axes: each axis R,
// S(d) or P(op) for op in `partial_ops`, every co-shard order.
std::vector<DistAttr> EnumerateDistAttrs(int rank, int mesh_ndim,
                                         const std::vector<ReduceOp>& partial_ops);

// Runs the sweep; `progress` is called after each (op, mesh) row completes.
std::vector<SweepRow> RunSweep(const SweepOptions& options,
                               const std::function<void(const SweepRow&, size_t done, size_t total)>& progress);

}  // namespace spmd::checker
