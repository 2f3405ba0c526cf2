// `spmd explain`: one rule case in words.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace spmd::cli {
// The explanation of one request (as for `spmd infer`), the lines `spmd explain` prints.
// Throws SpmdError naming the field for a bad request.
std::string ExplainText(const nlohmann::json& request);
int Explain(const std::vector<std::string>& args);
}
