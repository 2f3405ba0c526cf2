// The JSON form of the reshard time model (rules/reshard/reshard_cost.h): what
// bench/alphabeta_bench.cc writes and `spmd plan --cost-model FILE` reads.
//
//   {"source": "measured 2026-12-03, ...",
//    "all_gather":     {"alpha_us": 14.0, "beta_ns_per_byte": 0.60},
//    "reduce_scatter": {...}, "all_reduce": {...}, "all_to_all": {...},
//    "send_recv": {...}, "local": {...}}
//
// Every kind is optional (a missing one keeps the default's values), every field of a kind
// too; "source" defaults to "file". Anything else is an error.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "rules/reshard/reshard_cost.h"

namespace spmd::io {

nlohmann::json ToJson(const CostModel& model);

// Returns the model `j` describes over CostModel::Default(). Throws
// SpmdError(kInvalidArgument) naming the field at fault, prefixed with `field`:
// "cost_model.all_gather.alpha_us: -1 is not a time ...", "cost_model.gather: unknown key",
// "cost_model.local.beta_ns_per_byte: expected a number", "cost_model: expected an object".
CostModel CostModelFromJson(const nlohmann::json& j, const std::string& field = "cost_model");

// Reads the JSON file at `path`: the same errors, and one naming `field` for a file that
// cannot be read or is not JSON.
CostModel LoadCostModel(const std::string& path, const std::string& field = "cost_model");

}  // namespace spmd::io
