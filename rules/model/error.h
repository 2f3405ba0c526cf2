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

// Returns `text` with every byte that is not part of well-formed UTF-8, and every ASCII
// control character (newline and tab included: an error is one line), written as `\xNN`
// (two upper-case hex digits). The result is valid UTF-8 with no control bytes; text that
// needs no escaping is returned unchanged, and escaping twice changes nothing more.
std::string EscapeForText(std::string_view text);

// Thrown by rules/, reference/ and the CLI for anything a caller did wrong.
// `field` names the offending field, e.g. `inputs[1].dims_mapping[0]` or `attrs.perm`.
// Messages often quote the caller's own text (an op name, an equation, a placement): the
// field and the message are kept through EscapeForText, so what() is always valid UTF-8
// and can go into JSON or onto a terminal as it is.
class SpmdError : public std::runtime_error {
 public:
  SpmdError(ErrorType type, std::string field, const std::string& message)
      : SpmdError(type, EscapeForText(field), EscapeForText(message), Escaped{}) {}
  ErrorType type() const { return type_; }
  const std::string& field() const { return field_; }

 private:
  struct Escaped {};
  SpmdError(ErrorType type, std::string field, const std::string& message, Escaped)
      : std::runtime_error(field.empty() ? message : field + ": " + message),
        type_(type),
        field_(std::move(field)) {}

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
