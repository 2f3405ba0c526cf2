// A per-thread cache of rule answers for Dispatch: InferForwardWithShapes is a pure function
// of (op, mesh, each input's shape and dist attr, attrs), so the answer to a request seen
// before is reused instead of inferred again (a training step repeats the same few hundred
// requests every step).
//
// Key: the op's declaration (by address), the whole Mesh (shape, process ids, axis names),
// every input's shape and dist attr (dims mapping and partial map) and the attrs exactly as
// the caller gave them (before normalisation). A hit compares every part of the key, not
// only its hash, so two requests that differ anywhere never share an answer.
//
// Only declarations of the registry (AllOps(), built once and never changed) are cached: a
// caller's own OpDecl may be destroyed and another built at its address, so its requests
// always run the rule. Refusals are not cached (they throw again, the same way).
//
// Bounded: a direct-mapped table of kRuleCacheSlots entries per thread; a new answer
// replaces the one in its slot. Per thread, so rank threads never contend for a lock.
// SPMD_RULE_CACHE=0 in the environment turns it off (every call runs the rule).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "rules/model/attrs.h"
#include "rules/model/mesh.h"
#include "rules/engine/op_decl.h"
#include "runtime/exec/dist_tensor.h"

namespace spmd::runtime {

inline constexpr int64_t kRuleCacheSlots = 1024;

struct RuleCacheStats {
  int64_t hits = 0;
  int64_t misses = 0;    // answered by the rule and stored
  int64_t bypassed = 0;  // not cacheable (an op outside the registry, or the cache is off)
};

// The rule's answer for this request, from this thread's cache or from
// InferForwardWithShapes (then stored). Throws what InferForwardWithShapes throws.
std::shared_ptr<const ForwardInference> CachedInferForward(const OpDecl& op, const Mesh& mesh,
                                                           const std::vector<TensorArg>& inputs,
                                                           const Attrs& attrs);
// The same for the inputs' shapes and dist attrs read from the caller's DistTensors (a hit
// copies neither).
std::shared_ptr<const ForwardInference> CachedInferForward(const OpDecl& op, const Mesh& mesh,
                                                           const std::vector<const DistTensor*>& inputs,
                                                           const Attrs& attrs);

// This thread's counters since its first call (or the last reset).
RuleCacheStats ThisThreadRuleCacheStats();
// Empties this thread's cache and zeroes its counters.
void ResetThisThreadRuleCache();

}  // namespace spmd::runtime
