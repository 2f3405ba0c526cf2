// The `spmd infer` interface (SEMANTICS.md §10): one JSON request in, one JSON answer out.
// The golden tests and the CLI both go through InferJson.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <iosfwd>
#include <vector>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "rules/model/dist_attr.h"
#include "rules/model/error.h"
#include "rules/engine/op_decl.h"

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

// Parses a request; throws SpmdError naming the field (UnknownOp for an unknown op). A key
// the request format does not have is an InvalidArgument naming it (`mesh_shap: unknown
// key`, `inputs[0].dims_mappin: unknown key`); `extra_keys` are top-level keys the caller
// reads itself (`spmd check --claim`'s `claim_outputs`, `seed`, ...).
RuleRequest ParseRuleRequest(const nlohmann::json& request,
                             std::initializer_list<std::string_view> extra_keys = {});
// Parses a list of tensors like "inputs" (shape, dims_mapping, partial_dims / partial).
std::vector<TensorArg> ParseTensorList(const nlohmann::json& request, const char* key);

// Answers one request object. Never throws: a bad request gives
// {"error": {"type": ..., "message": ...}} with the field named in the message.
nlohmann::json InferJson(const nlohmann::json& request);

// The bounds on one request line (SEMANTICS.md §10): its length in bytes (without the
// newline) and how deep its lists and objects nest. A real request is a few hundred bytes
// deep 4; the largest mesh's process_ids are under 400 KB.
inline constexpr size_t kMaxLineBytes = size_t{1} << 20;
inline constexpr int kMaxJsonDepth = 64;

// The error a line over a bound gets: an InvalidArgument on `line` naming the bound.
// CheckLineBounds throws it (before anything is parsed: the depth is counted by a scan
// of the text, no DOM is built), TooLongLineError is the one LineReader's caller answers a
// line it skipped with.
void CheckLineBounds(std::string_view line);
SpmdError TooLongLineError();

// Reads lines of at most kMaxLineBytes bytes, in chunks of what the stream has ready (so
// that a request written to a pipe is answered before the next one comes; the stream tied
// to the input is flushed before each wait, as std::getline does). A longer line
// is not kept: it is read through to its newline and reported as kTooLong, so memory
// stays bounded by the limit whatever the input holds.
class LineReader {
 public:
  enum class Status { kLine, kTooLong, kEnd };
  explicit LineReader(std::istream& in, size_t limit = kMaxLineBytes);
  // The next line (without its newline) into `line`; kTooLong leaves `line` empty.
  Status Next(std::string& line);

 private:
  bool Fill();
  std::istream* in_;
  std::streambuf* buf_;
  size_t limit_;
  std::vector<char> chunk_;
  size_t pos_ = 0, end_ = 0;
};

// Answers one line of text (parses it first; text that is not a JSON object is an
// InvalidArgument naming `line`, and so is a line over the bounds above). Returns the
// answer on one line, always valid UTF-8; never throws.
std::string InferLine(std::string_view line);

// `spmd infer`: one answer line per non-blank input line, in order (blank: only spaces,
// tabs, a carriage return). No line ends the stream: a line over kMaxLineBytes gets
// TooLongLineError's answer and the next line is read.
void InferStream(std::istream& in, std::ostream& out);

// Golden cases are requests with three more fields: "name", "why" and "expect" (either
// {"inputs": [...], "outputs": [...]} or {"error": {"type": ..., "field": ...}}).
// Returns the request without them.
nlohmann::json StripGoldenFields(const nlohmann::json& golden_case);
// Checks that `expect` has one of the two forms above (`type`, `field` strings; `inputs`,
// `outputs` lists; no other key); throws SpmdError naming the field (`expect`,
// `expect.error.type`, `expect.inputs`, ...).
void ValidateExpect(const nlohmann::json& expect);
// Returns an empty string when `answer` is what `expect` says, else what differs. Throws
// ValidateExpect's error for a malformed `expect`.
std::string CompareWithExpect(const nlohmann::json& answer, const nlohmann::json& expect);
// One line of a golden file (`spmd infer --check`): "" when its answer is what its
// "expect" says, else what differs. A line that is not a golden case (over the line
// bounds, not JSON, not an object, no "expect" or a malformed one, a "name" or "why" that
// is not a string) throws SpmdError naming the field. `name`: the case's name, if it has
// one.
std::string CheckGoldenLine(std::string_view line, std::string* name);

// The answer line of a result: InferJson's answer for it as InferLine prints it
// (`{"inputs":[...],"outputs":[...]}`, byte for byte), written straight from the result.
std::string ResultLine(const InferResult& result);

// The JSON form of a dist attr: {"dims_mapping": [...], "partial": {"0": "sum"}}; the flat
// form when every dim has at most one axis, else a list per dim.
nlohmann::json DistAttrToJson(const DistAttr& attr);

}  // namespace spmd::io
