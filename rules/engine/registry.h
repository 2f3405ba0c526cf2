// The op registry: one declaration per entry of rules/engine/op_list.h, built once, in order.
#pragma once

#include <string_view>
#include <vector>

#include "rules/engine/op_decl.h"
#include "rules/engine/op_list.h"

namespace spmd {

// Returns the declaration of `name`, or nullptr when spmdkit has no such op.
const OpDecl* FindOp(std::string_view name);
// Every declaration, in the order of rules/op_list.h.
const std::vector<OpDecl>& AllOps();

// One function per op, defined in rules/ops/<family>.cc: a missing declaration does not link.
namespace declare {
#define SPMD_DECLARE_OP(name) OpDecl name();
SPMD_FOR_EACH_OP(SPMD_DECLARE_OP)
#undef SPMD_DECLARE_OP
}  // namespace declare

}  // namespace spmd
