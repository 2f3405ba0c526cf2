// `spmd check`: the soundness sweep, one case (--case) or a claim (--claim).
#pragma once

#include <string>
#include <vector>

namespace spmd::cli {
int Check(const std::vector<std::string>& args);
}
