#include "rules/engine/registry.h"

#include <unordered_map>

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
  // A hash map over the registry, built once (thread-safe static initialisation): Dispatch
  // and autograd look an op up by name on every call. The first declaration of a name
  // wins, as the scan over AllOps() did.
  static const std::unordered_map<std::string_view, const OpDecl*> kByName = [] {
    std::unordered_map<std::string_view, const OpDecl*> map;
    for (const OpDecl& op : AllOps()) map.emplace(op.name, &op);
    return map;
  }();
  const auto it = kByName.find(name);
  return it == kByName.end() ? nullptr : it->second;
}

}  // namespace spmd
