// Simulated-mesh soundness (level 2 of docs/ARCHITECTURE.md; SEMANTICS.md §3): no communication.
//
// For one case: make global float64 inputs (value kinds from the op's declaration), give
// each rank its shard of every input under the required dist attrs (partial inputs split
// into unequal, sign-varying addends, or values that make a wrong reduce op visible), run
// the reference per rank with attrs localized to its shards, assemble each output per
// SEMANTICS.md §2.1, and compare with the reference on the global inputs.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <random>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "reference/reference.h"
#include "reference/tensor.h"
#include "rules/engine/op_decl.h"

namespace spmd::checker {

struct SimulationCache;

// One case: an op, a mesh, input shapes and dist attrs, attrs.
struct Case {
  const OpDecl* op = nullptr;
  Mesh mesh;
  std::vector<Shape> shapes;
  std::vector<DistAttr> inputs;  // forward: the given input dist attrs
  Attrs attrs;                   // as a caller gives them (normalised inside)
  uint64_t seed = 1;
  // The oracle; null: the registered reference of op->name (tests inject others).
  reference::ReferenceFn reference = nullptr;
  // Optional: results shared by the cases of one family (see SimulationCache); null: none.
  SimulationCache* cache = nullptr;
};

// The smallest evidence that a claim is wrong.
struct Counterexample {
  std::string what;            // "value", "shape", "replica", "local error", "reference refuses"
  int output = -1;             // which output
  int64_t process_id = -1;     // the rank at fault (for value: the rank holding the element)
  std::vector<int64_t> index;  // global element index (value) or local shape (shape)
  double expected = 0;
  double got = 0;
  std::string message;         // one line, readable
};

enum class Verdict {
  kSound,
  kUnsound,
  kNotApplicable,  // the rule (the declaration) refused the case (typed error); the
                   // reference refusing what the declaration accepts is kUnsound
};

struct Outcome {
  Verdict verdict = Verdict::kNotApplicable;
  std::optional<Counterexample> counterexample;
  std::vector<DistAttr> required;  // the required input dist attrs checked
  std::vector<DistAttr> outputs;   // the output dist attrs checked
  std::string note;                // why not applicable
};

// The most elements a simulated case may hold, every input and output counted once per
// rank of the mesh; a larger case is refused with a typed error (kUnsupported) naming the
// first tensor over the budget.
inline constexpr int64_t kMaxSimulatedElements = int64_t{1} << 24;
// How many value draws a case with a 0/1 output gets (see CheckClaim).
inline constexpr int kBooleanDraws = 12;

// What the cases of one family share: cases that differ only in their input dist attrs
// (same op, mesh, shapes, attrs, seed and reference; the sweep gives every case of one
// example and size palette on one mesh the same seed). A case's check is a deterministic
// function of the case and its (required, claimed) dist attrs, so
// - the global input values of a draw (seed, value kinds, negation) and the reference's
//   outputs on them are computed once per family and reused (with the generator's state
//   after the draw, from which the partial addends continue);
// - the outcome of a (required, claimed) pair already checked in the family is the
//   outcome of the same computation, and is reused rather than recomputed.
// The rule is still inferred, and its answer checked, for every case. A cache is bound to
// the first case it sees; a case of another family throws std::logic_error.
struct SimulationCache {
  struct Draw {
    uint64_t seed = 0;
    bool negate = false;
    std::vector<InputValues> kinds;
    std::vector<reference::Tensor> inputs;   // global inputs
    std::vector<reference::Tensor> outputs;  // the reference's outputs on them
    std::string refused;               // non-empty: the reference refused (the message)
    std::mt19937_64 rng;               // the generator after the draw
  };
  std::deque<Draw> draws;  // (a deque: a reference to a draw stays valid as more come)
  std::unordered_map<std::string, Outcome> claims;  // encoded (required, claimed) -> outcome
  // The rule prepared for the family (PreparedForward: the same answers as InferForward),
  // made by the first forward case.
  std::optional<PreparedForward> forward;
  std::string key;                         // the key being looked up (no allocation per case)
  std::vector<const DistAttr*> dists;      // the case's input dist attrs, by address
  Outcome refused;                         // the outcome of a case the rule refuses
  int64_t simulated = 0;  // claims checked by simulation
  int64_t reused = 0;     // claims answered from `claims`
  // The family (set by the first case).
  bool bound = false;
  const OpDecl* op = nullptr;
  Mesh mesh;
  std::vector<Shape> shapes;
  Attrs attrs;
  uint64_t seed = 0;
  reference::ReferenceFn reference = nullptr;
};

// Infers the rule forward and checks it (throws as CheckClaim does).
Outcome CheckForward(const Case& c);
// CheckForward for a case with a cache (c.cache set; std::logic_error otherwise), without
// copying: the outcome is held by the cache, and valid until its next use.
const Outcome& CheckForwardCached(const Case& c);

// Checks a claim as if a rule had made it: the inputs hold `required`, the outputs are
// claimed to be `claimed`. Throws SpmdError for a case over kMaxSimulatedElements. A case
// with a 0/1 output is checked on kBooleanDraws draws of values (the first from c.seed); a
// claim with a partial(max) or partial(min) output also on the first draw with its real
// inputs negated.
Outcome CheckClaim(const Case& c, const std::vector<DistAttr>& required,
                   const std::vector<DistAttr>& claimed);

}  // namespace spmd::checker
