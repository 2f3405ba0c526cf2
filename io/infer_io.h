// The `spmd infer` interface (SEMANTICS.md §10): one JSON request in, one JSON answer out.
// The golden tests and the CLI both go through InferJson.
#pragma once

#include <iosfwd>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "rules/dist_attr.h"
#include "rules/op_decl.h"

namespace spmd::io {

// A parsed request (SEMANTICS.md §10 fields).
struct RuleRequest {
  const OpDecl* op = nullptr;
  Mesh mesh;
  bool reverse = false;
  std::vector<TensorArg> inputs;   // forward: shapes and dist attrs; reverse: shapes
  std::vector<TensorArg> outputs;  // reverse: shapes and dist attrs
  Attrs attrs;                     // as given (not normalised)
};

// Parses a request; throws SpmdError naming the field (UnknownOp for an unknown op).
RuleRequest ParseRuleRequest(const nlohmann::json& request);
// Parses a list of tensors like "inputs" (shape, dims_mapping, partial_dims / partial).
std::vector<TensorArg> ParseTensorList(const nlohmann::json& request, const char* key);

// Answers one request object. Never throws: a bad request gives
// {"error": {"type": ..., "message": ...}} with the field named in the message.
nlohmann::json InferJson(const nlohmann::json& request);

// Answers one line of text (parses it first; text that is not a JSON object is an
// InvalidArgument naming `line`). Returns the answer on one line, always valid UTF-8; never
// throws.
std::string InferLine(std::string_view line);

// `spmd infer`: one answer line per non-blank input line, in order (blank: only spaces,
// tabs, a carriage return). No line ends the stream.
void InferStream(std::istream& in, std::ostream& out);

// Golden cases are requests with three more fields: "name", "why" and "expect" (either
// {"inputs": [...], "outputs": [...]} or {"error": {"type": ..., "field": ...}}).
// Returns the request without them.
nlohmann::json StripGoldenFields(const nlohmann::json& golden_case);
// Returns an empty string when `answer` is what `expect` says, else what differs.
std::string CompareWithExpect(const nlohmann::json& answer, const nlohmann::json& expect);

// The answer line of a result: InferJson's answer for it as InferLine prints it
// (`{"inputs":[...],"outputs":[...]}`, byte for byte), written straight from the result.
std::string ResultLine(const InferResult& result);

// The JSON form of a dist attr: {"dims_mapping": [...], "partial": {"0": "sum"}}; the flat
// form when every dim has at most one axis, else a list per dim.
nlohmann::json DistAttrToJson(const DistAttr& attr);

}  // namespace spmd::io
