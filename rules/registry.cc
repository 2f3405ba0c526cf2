#include "rules/registry.h"

namespace spmd {

const std::vector<OpDecl>& AllOps() {
  static const std::vector<OpDecl> kOps = {
#define SPMD_REGISTER_OP(name) declare::name(),
      SPMD_FOR_EACH_OP(SPMD_REGISTER_OP)
#undef SPMD_REGISTER_OP
  };
  return kOps;
}

const OpDecl* FindOp(std::string_view name) {
  for (const OpDecl& op : AllOps()) {
    if (op.name == name) return &op;
  }
  return nullptr;
}

}  // namespace spmd
