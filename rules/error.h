// Typed errors: every bad input becomes one of these, with a message naming the field.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace spmd {

// The fixed set of error types of SEMANTICS.md §10.
enum class ErrorType {
  kInvalidArgument,  // bad input: wrong arity, bad mapping, bad attrs, bad JSON
  kUnknownOp,        // an op name spmdkit does not have
  kUnsupported,      // a valid request the rule cannot satisfy
  kConflict,         // a reverse conflict (one mesh axis on two factors, ...)
};

std::string_view ToString(ErrorType type);

// Thrown by rules/, reference/ and the CLI for anything a caller did wrong.
// `field` names the offending field, e.g. `inputs[1].dims_mapping[0]` or `attrs.perm`.
class SpmdError : public std::runtime_error {
 public:
  SpmdError(ErrorType type, std::string field, const std::string& message)
      : std::runtime_error(field.empty() ? message : field + ": " + message),
        type_(type),
        field_(std::move(field)) {}
  ErrorType type() const { return type_; }
  const std::string& field() const { return field_; }

 private:
  ErrorType type_;
  std::string field_;
};

[[noreturn]] inline void ThrowInvalid(std::string field, const std::string& message) {
  throw SpmdError(ErrorType::kInvalidArgument, std::move(field), message);
}
[[noreturn]] inline void ThrowUnsupported(std::string field, const std::string& message) {
  throw SpmdError(ErrorType::kUnsupported, std::move(field), message);
}

}  // namespace spmd
