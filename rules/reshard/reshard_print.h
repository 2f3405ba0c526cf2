// The one printer for reshard plans (CLI, logs, goldens). The JSON form is io/plan_json.h.
#pragma once

#include <string>

#include "rules/reshard/reshard.h"

namespace spmd {

// Prints the plan as a table:
//   reshard [1024, 512] float32 on mesh[2,4] ids=[0,1,2,3,4,5,6,7]
//   from [S(0), P(sum)] to [R, S(1)]
//     #  group  collective                        after               bytes/rank
//     1  {1}    reduce_scatter(sum) -> dim 1      [S(0), S(1)]             ...
//   total ... bytes per rank; lower bound ...; ratio 1.00
std::string ToString(const ReshardPlan& plan);

}  // namespace spmd
