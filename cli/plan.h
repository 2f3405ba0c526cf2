// `spmd plan`: the reshard plan for (mesh, shape, from, to) (SEMANTICS.md §8, rules/reshard/reshard.h).
#pragma once

#include <string>
#include <vector>

namespace spmd::cli {
// Returns the exit code: 0, or 2 on bad input (a typed error naming the flag on stderr).
int Plan(const std::vector<std::string>& args);
}  // namespace spmd::cli
