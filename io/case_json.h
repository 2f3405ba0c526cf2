// The JSON form of a soundness case (`spmd check --claim`, `--case`, replay lines).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checker/simulate.h"

namespace spmd::io {

// Reads a case from a request as for `spmd infer` (op, mesh_shape, process_ids, attrs,
// inputs) plus "seed"; with `claims`, also "claim_outputs" (dist attrs; shape optional).
// Throws SpmdError naming the field.
checker::Case CaseFromJson(const nlohmann::json& j, std::vector<DistAttr>* claims);

// Prints the case as one `spmd check --claim` / replay JSON object.
std::string CaseToJson(const checker::Case& c);

// One line: how to replay a failing case (`spmd check --case '<CaseToJson>'`).
std::string ReplayCommand(const checker::Case& c);

}  // namespace spmd::io
