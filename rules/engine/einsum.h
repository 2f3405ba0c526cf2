// The einsum engine (SEMANTICS.md §4, DECISIONS.md): per operand, one factor id per dim
// (Shardy-style integer ids, so there is no limit on the number of factors); operands
// sharing an id share that factor; kBroadcastDim is a size-1 broadcast dim that is never
// sharded. The spec carries every factor's size, so it also gives the output shapes.
//
// Worked example (SEMANTICS.md §4 step 6): matmul `mk,kn->mn` on mesh 2x3 with
// x = [1, 0], y = [-1, -1]: walk x: m <- [1], k <- [0]; walk y: nothing claims.
// Required x = [1, 0], y = [0, -1]; out = [1, -1], k is absent from out and mapped to
// axis 0, so out is partial {0: sum}.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "rules/model/dist_attr.h"
#include "rules/model/mesh.h"

namespace spmd {

// Which partial inputs an op keeps instead of reducing them first (DECISIONS.md).
enum class PartialAcceptance {
  kNone,         // every partial input is reduced (the default)
  kSumOfAll,     // add/subtract: axis a stays partial(sum) on every (linear) input when
                 // one is partial(sum) there and none partial otherwise (R -> P)
  kLinearFirst,  // divide: partial(sum) of input 0 stays; the others are reduced
  kMultilinear,  // multiply/matmul/einsum: partial(sum) stays in the first operand having it
  kSameOp,       // reductions: partial with `accepted_op` stays (sum on sum, max on max)
  kAnyOp,        // shape ops that only move elements: every partial stays
};

// A factor: an index into EinsumSpec::factor_sizes.
using FactorId = int32_t;
// The id of a size-1 broadcast dim: it belongs to no factor and is never sharded.
inline constexpr FactorId kBroadcastDim = -1;
// One operand's notation: a factor id per dim.
using Notation = std::vector<FactorId>;

// A rule as a value: the notation of every operand plus what the op adds.
struct EinsumSpec {
  std::vector<Notation> inputs;
  std::vector<Notation> outputs;
  std::vector<int64_t> factor_sizes;  // per factor id; kUnsized until bound to input shapes
  std::vector<FactorId> forced_replicated;  // factors the local kernel needs whole
  // Factors whose pieces the op's own exchange combines (OpDecl::exchange): they may stay
  // sharded, and an output without them is whole on their axes, not partial.
  std::vector<FactorId> exchanged;
  // Inputs whose values the op never reads, only their global shape (expand_as's y): the
  // forward requires them as given (dims mapping and partial, so nothing is moved for them),
  // their factors claim no mesh axis and their partials do not reach the outputs; the
  // reverse answers them replicated. Their factors must appear in no other operand.
  std::vector<int> unread_inputs;
  // Factors that follow another (follower, leader): the follower's dims take the leader's
  // axis list, kept only when the list's size product divides both factors' sizes
  // (flash_attention's grouped heads: k's heads follow q's, so a shard of q's heads meets
  // exactly its own k heads). A follower appears in no other pair as a leader.
  std::vector<std::pair<FactorId, FactorId>> tied;
  // kSumOfAll: the inputs the op is linear in (empty: all); the others never keep a partial
  // (where's condition).
  std::vector<int> linear_inputs;
  // Outputs the op computes from its attrs alone, the same on every rank (a generator's
  // seed and offset, an unset output): replicated and never partial. Their factors must be
  // forced replicated or theirs alone.
  std::vector<int> whole_outputs;
  // Per output, the inputs it is computed from (empty: every output reads every input). A
  // factor missing from an output makes it partial only when an input it reads holds the
  // factor, and a kept input partial reaches only the outputs that read that input
  // (fused_linear_param_grad_add's dbias_out reads dout and dbias, not x: a sharded k of x
  // leaves it whole, not partial).
  std::vector<std::vector<int>> output_reads;
  // Factors whose size only the op's run decides (nonzero's count of nonzero elements,
  // unique's number of distinct values): SEMANTICS.md §3.1. They appear
  // in outputs only, are forced replicated, and keep kDataDependentSize as their size after
  // binding; an output holding one is never sharded on it and never partial (BindFactorSizes
  // refuses a spec that could make it so, a declaration bug).
  std::vector<FactorId> data_dependent;
  // Inputs the op adds into an output, (input, output): output = input + the rest, every
  // factor of the input in the output's notation. The input is required partial(sum)
  // exactly where that output is partial (R -> P, S -> P: local steps), so that the addends
  // of the output carry it once (fused_linear_param_grad_add's dweight into dweight_out).
  std::vector<std::pair<int, int>> accumulated;
  ReduceOp reduce = ReduceOp::kSum;  // reduce op of partial outputs from absent factors
  PartialAcceptance accept = PartialAcceptance::kNone;
  ReduceOp accepted_op = ReduceOp::kSum;  // for kSameOp

  // A factor size that BindFactorSizes takes from the first input dim of the factor.
  static constexpr int64_t kUnsized = -1;
  // The size of a data-dependent factor, bound or not, and of its dims in output shapes.
  static constexpr int64_t kDataDependentSize = -1;

  // Adds a factor of `size` (kUnsized: taken from the inputs) and returns its id.
  FactorId AddFactor(int64_t size = kUnsized);
  int num_factors() const { return static_cast<int>(factor_sizes.size()); }

  // Prints `ab,bc->ac R(b) [sum]`: factors 0..25 as the letters a..z, later ones as
  // `{f26}`, a broadcast dim as `1`.
  std::string ToString() const;
  // The printed name of factor `id`: `a`, ..., `z`, `{f26}`, ...; `1` for kBroadcastDim.
  static std::string FactorName(FactorId id);
  // Prints one notation as ToString does.
  static std::string NotationString(const Notation& notation);
};

// Returns whether `notation` holds factor `id`.
bool Contains(const Notation& notation, FactorId id);

struct InferResult {
  std::vector<DistAttr> inputs;   // required input dist attrs (forward) / inferred (reverse)
  std::vector<DistAttr> outputs;
  bool operator==(const InferResult&) const = default;
};

// Binds the notation to the input shapes: one factor id per dim, every factor has one size
// over all inputs (an unsized factor takes its first input dim's size), broadcast dims
// have size 1. Throws SpmdError(kInvalidArgument, "inputs[i].shape") on a mismatch, and
// std::logic_error for a declaration bug (a bad id, an output factor left unsized, a
// data-dependent factor that appears in an input or is not forced replicated, or an output
// holding one that could be partial: an input factor missing from it not forced replicated,
// a partial input kept, an accumulated input).
void BindFactorSizes(EinsumSpec& spec, const std::vector<std::vector<int64_t>>& shapes);

// The output shapes of a bound spec: each output dim has its factor's size (1 for a
// broadcast dim, EinsumSpec::kDataDependentSize for a data-dependent factor).
std::vector<std::vector<int64_t>> EinsumOutputShapes(const EinsumSpec& spec);

// Forward inference. Assumes the inputs are valid dist attrs of the notation's ranks.
InferResult InferEinsumForward(const EinsumSpec& spec, const Mesh& mesh,
                               const std::vector<DistAttr>& inputs);
// The same on the caller's dist attrs by address (nothing is copied).
InferResult InferEinsumForward(const EinsumSpec& spec, const Mesh& mesh,
                               const std::vector<const DistAttr*>& inputs);

// Forward inference prepared for many input dist attrs on one bound spec and one mesh
// (the checker asks millions of them, a family's cases differing only in their dist
// attrs): what does not depend on the dist attrs (each factor's canonical id, the forced
// replicated and exchanged factors, the inputs' shapes) is computed once, and every bound
// the pricing computes is kept for the inferences after (it depends on the mesh, the
// input's shape and the two dist attrs alone). Infer gives what InferEinsumForward gives
// for the same spec, mesh and inputs. Not safe to use from two threads at once.
class PreparedEinsumForward {
 public:
  PreparedEinsumForward(EinsumSpec spec, Mesh mesh, size_t num_inputs);
  ~PreparedEinsumForward();
  PreparedEinsumForward(PreparedEinsumForward&&) noexcept;
  PreparedEinsumForward& operator=(PreparedEinsumForward&&) noexcept;

  InferResult Infer(const std::vector<const DistAttr*>& inputs);
  const EinsumSpec& spec() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Reverse inference from the outputs' dist attrs (their partial maps are ignored).
// Throws SpmdError(kConflict, "outputs[i].dims_mapping") when the outputs disagree.
InferResult InferEinsumReverse(const EinsumSpec& spec, const Mesh& mesh,
                               const std::vector<DistAttr>& outputs);

}  // namespace spmd
