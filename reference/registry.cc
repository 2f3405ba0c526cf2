#include <optional>
#include <string_view>
#include <utility>

#include "reference/reference.h"
#include "rules/ops/exchange_ops.h"
#include "rules/engine/phase.h"

namespace spmd::reference {

// Generated from the op list and the exchange list (rules/ops/exchange_ops.h): an op or
// phase without its reference does not link.
ReferenceFn FindReference(const KernelRef& kernel) {
  struct Entry {
    std::string_view op;
    std::optional<Phase> phase;
    ReferenceFn fn;
  };
  static constexpr Entry kTable[] = {
#define SPMD_REFERENCE_ENTRY(name) {#name, std::nullopt, &ops::name},
      SPMD_FOR_EACH_OP(SPMD_REFERENCE_ENTRY)
#undef SPMD_REFERENCE_ENTRY
#define SPMD_EXCHANGE_REFERENCE_ENTRIES(name) \
  {#name, Phase::kStats, &ops::name##_stats}, {#name, Phase::kFinish, &ops::name##_finish},
      SPMD_FOR_EACH_EXCHANGE_OP(SPMD_EXCHANGE_REFERENCE_ENTRIES)
#undef SPMD_EXCHANGE_REFERENCE_ENTRIES
  };
  for (const Entry& e : kTable) {
    if (e.op == kernel.op && e.phase == kernel.phase) return e.fn;
  }
  return nullptr;
}

}  // namespace spmd::reference
