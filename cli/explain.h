// `spmd explain`: one rule case in words.
#pragma once

#include <string>
#include <vector>

namespace spmd::cli {
int Explain(const std::vector<std::string>& args);
}
