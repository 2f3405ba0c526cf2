// The completeness report of `spmd check --completeness`: where does a rule ask for a
// reshard although the inputs as given already support a sound answer?
//
// For each op and small mesh: every input dist attr combination of the op's examples
// (on one palette) for which the rule's required inputs differ from the given ones; the
// candidate answers keep the inputs as given (no communication) and try every output
// dist attr (R, S(d), P(sum|max|min), co-shard orders) through the claim checker. A case
// counts as "missed" when some candidate is sound. A report with counts, not a failure.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rules/engine/op_decl.h"

namespace spmd::checker {

struct CompletenessRow {
  std::string op;
  std::string mesh;
  int64_t resharding = 0;  // input combinations where the rule asked for a reshard
  int64_t missed = 0;      // ... of which a sound answer without reshard exists
  int64_t unsearched = 0;  // ... skipped: too many candidate outputs
  std::string example;     // one missed case: inputs and the sound outputs found
};

struct CompletenessOptions {
  std::vector<std::string> ops;              // empty: every op
  std::vector<std::vector<int64_t>> meshes;  // empty: 2 and 2x2
  int64_t max_candidates = 4096;             // output combinations tried per case
  int64_t max_cases = 400;                   // resharding cases examined per op and mesh
  int jobs = 1;
};

std::vector<CompletenessRow> RunCompleteness(const CompletenessOptions& options);

}  // namespace spmd::checker
