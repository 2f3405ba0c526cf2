// `spmd ops`: every op's declared interface (rules/engine/op_list.h, rules/ops/<family>.cc), printed from
// the declarations so that the docs and the numeric goldens' generator can be checked
// against them.
//   spmd ops --markdown   a table: | op | inputs -> outputs | attrs |, the attrs cell as
//                         docs/OPS.md and docs/SEMANTICS.md write it (ci/check-docs.sh
//                         diffs their attrs columns against it)
//   spmd ops --json       one JSON object per op and line: name, inputs, variadic_inputs,
//                         outputs, attrs (name, kind, default or required, aliases)
#pragma once

#include <string>
#include <vector>

#include "rules/engine/op_decl.h"

namespace spmd::cli {

// The attrs cell of `op`: `name: kind = default` per attr, declaration order, joined by
// ", "; an attr without a default is `name: kind (required)`; aliases follow in
// parentheses, `keep_dim: bool = false (alias keepdim)`. An op without attrs: `none`.
// Floats print in their shortest exact form with a `.0` when integral and no `+` or
// leading zeros in the exponent (`1e-5`, `10000.0`, `-1.7976931348623157e308`); strings
// quoted, lists in brackets.
std::string AttrsCell(const OpDecl& op);

// Runs `spmd ops ARGS`; returns the exit code (2 for bad arguments).
int Ops(const std::vector<std::string>& args);

}  // namespace spmd::cli
