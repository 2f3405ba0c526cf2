// What a backend answered a request: accepted, or refused with an error type and field. The
// agreement tests (validation_agreement_test.cc, plan_agreement_test.cc) compare these
// between the rule, the reference and the kernels.
#pragma once

#include <cstdint>
#include <string>

#include "rules/model/error.h"
#include "rules/engine/op_decl.h"

namespace spmd::agreement {

struct Verdict {
  bool accepted = true;
  ErrorType type = ErrorType::kInvalidArgument;
  std::string field;
  std::string Describe() const {
    return accepted ? "accepted" : std::string(ToString(type)) + " " + field;
  }
  bool operator==(const Verdict& o) const {
    return accepted == o.accepted && (accepted || (type == o.type && field == o.field));
  }
};

// Runs `fn`: accepted, or the SpmdError it threw.
template <typename Fn>
Verdict Run(Fn&& fn) {
  try {
    fn();
    return {};
  } catch (const SpmdError& e) {
    return {false, e.type(), e.field()};
  }
}

inline int64_t Numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

}  // namespace spmd::agreement
