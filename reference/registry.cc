#include <string_view>
#include <utility>

#include "reference/reference.h"
#include "rules/exchange_ops.h"

namespace spmd::reference {

// Generated from the op list and the exchange list (rules/exchange_ops.h): an op or
// phase without its reference does not link.
ReferenceFn FindReference(std::string_view op) {
  static constexpr std::pair<std::string_view, ReferenceFn> kTable[] = {
#define SPMD_REFERENCE_ENTRY(name) {#name, &ops::name},
      SPMD_FOR_EACH_OP(SPMD_REFERENCE_ENTRY)
#undef SPMD_REFERENCE_ENTRY
#define SPMD_EXCHANGE_REFERENCE_ENTRIES(name) {#name "@stats", &ops::name##_stats}, {#name "@finish", &ops::name##_finish},
      SPMD_FOR_EACH_EXCHANGE_OP(SPMD_EXCHANGE_REFERENCE_ENTRIES)
#undef SPMD_EXCHANGE_REFERENCE_ENTRIES
  };
  for (const auto& [name, fn] : kTable) {
    if (name == op) return fn;
  }
  return nullptr;
}

}  // namespace spmd::reference
