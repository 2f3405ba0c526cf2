// The JSON form of a reshard plan (`spmd plan --json`).
#pragma once

#include <nlohmann/json.hpp>

#include "rules/reshard/reshard.h"

namespace spmd::io {

// {"shape", "dtype", "from_mesh", "to_mesh", "from", "to", "steps": [{"kind", "group",
// "dim", "to_dim", "op", "to_op", "before", "after", "bytes_per_rank", "messages",
// "seconds"}], "bytes_per_rank", "lower_bound_bytes", "seconds" (modelled), "objective"
// ("time" or "bytes"), "cost_model_source", "ratio"} (ratio null when the bound is 0 and
// the plan is not). A
// step has the fields of its kind only: "dim" (all_gather, reduce_scatter, local_slice,
// shard_to_partial; all_to_all: the source dim, with "to_dim"), "op" (reduce_scatter,
// all_reduce, local_partial; rescale: the source op, with "to_op"), "between_meshes"
// (send_recv); "group" is the step's mesh axes (one for a local step, none for send_recv).
nlohmann::json ToJson(const ReshardPlan& plan);

}  // namespace spmd::io
