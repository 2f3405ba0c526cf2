// The phases of an op with an exchange inside (OpDecl::exchange, rules/engine/op_decl.h), and the
// typed name of a kernel to run: an op's own kernel, or one phase of its exchange. The
// reference, CPU and CUDA tables are keyed by (op, phase) and generated from
// rules/ops/exchange_ops.h, so a missing phase does not link.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "rules/model/error.h"

namespace spmd {

// The two phases around the exchange's all-gather: kStats summarises the local shards in
// one tensor; kFinish takes the local shards followed by the gathered summaries and gives
// the op's outputs.
enum class Phase { kStats, kFinish };
inline constexpr Phase kPhases[] = {Phase::kStats, Phase::kFinish};

constexpr std::string_view ToString(Phase phase) { return phase == Phase::kStats ? "stats" : "finish"; }

// A kernel to run or look up: `op`'s own kernel, or `phase` of its exchange. Non-owning
// (like std::string_view): the op's name outlives the call that takes it. Converts from an
// op name, so callers of an op's own kernel pass the name.
struct KernelRef {
  std::string_view op;
  std::optional<Phase> phase;  // none: the op's own kernel

  KernelRef(const char* name) : op(name) {}                  // NOLINT: implicit by design
  KernelRef(std::string_view name) : op(name) {}             // NOLINT
  KernelRef(const std::string& name) : op(name) {}           // NOLINT
  KernelRef(std::string_view name, std::optional<Phase> p) : op(name), phase(p) {}

  bool operator==(const KernelRef&) const = default;
};

// For messages: "softmax", or "softmax (stats phase)".
inline std::string ToString(const KernelRef& kernel) {
  std::string s(kernel.op);
  if (kernel.phase) s += " (" + std::string(ToString(*kernel.phase)) + " phase)";
  return s;
}

// The error of a kernel no table holds: SpmdError(kUnknownOp, "op"), naming the op (and
// the phase: an op without an exchange has none).
[[noreturn]] inline void ThrowUnknownKernel(const KernelRef& kernel) {
  if (!kernel.phase) throw SpmdError(ErrorType::kUnknownOp, "op", "no op named '" + std::string(kernel.op) + "'");
  throw SpmdError(ErrorType::kUnknownOp, "op",
                  "no " + std::string(ToString(*kernel.phase)) + " phase of an op named '" +
                      std::string(kernel.op) + "' (only the ops of rules/ops/exchange_ops.h have phases)");
}

}  // namespace spmd
