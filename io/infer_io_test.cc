// `spmd infer` against hostile input: every line gets exactly one answer line of valid
// UTF-8 JSON, integers out of int64's range are refused naming their field, reverse
// requests check output sizes, oversized requests are refused naming their field, and the
// reverse split answers (it used to abort the stream) are sound.
#include "io/infer_io.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "checker/simulate.h"
#include "rules/model/error.h"
#include "rules/engine/registry.h"

namespace spmd::io {
namespace {

using nlohmann::json;

// The golden requests (golden/rules/*.jsonl) without their golden fields.
std::vector<json> GoldenRequests() {
  std::vector<json> requests;
  for (const auto& entry : std::filesystem::directory_iterator(SPMD_RULE_GOLDEN_DIR)) {
    std::ifstream in(entry.path());
    std::string line;
    while (std::getline(in, line)) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      requests.push_back(StripGoldenFields(json::parse(line)));
    }
  }
  return requests;
}

bool Parses(const json& request) {
  try {
    ParseRuleRequest(request);
    return true;
  } catch (const SpmdError&) {
    return false;
  }
}

// An answer line must be one JSON object (nlohmann's parser insists on valid UTF-8) with
// either an answer or a typed error whose text has no control bytes.
json CheckAnswerLine(const std::string& answer_line, const std::string& request_line) {
  SCOPED_TRACE("request: " + request_line);
  EXPECT_EQ(answer_line.find('\n'), std::string::npos);
  const json answer = json::parse(answer_line, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(answer.is_discarded()) << "not valid JSON (or not UTF-8): " << answer_line;
  if (answer.is_discarded()) return json();
  EXPECT_TRUE(answer.is_object());
  if (answer.contains("error")) {
    const std::string message = answer["error"]["message"].get<std::string>();
    for (char c : message) EXPECT_GE(static_cast<unsigned char>(c), 0x20) << message;
    const std::string type = answer["error"]["type"].get<std::string>();
    EXPECT_TRUE(type == "InvalidArgument" || type == "UnknownOp" || type == "Unsupported" ||
                type == "Conflict")
        << type;
  } else {
    EXPECT_TRUE(answer.contains("inputs") && answer.contains("outputs")) << answer_line;
  }
  return answer;
}

// Calls `fn(path, pointer)` for every integer in `j`; `path` names the field as the parser
// does (`inputs[0].shape[1]`, `attrs.perm[0]`, `mesh_shape[0]`).
void ForEachInteger(const json& j, const std::string& path, const json::json_pointer& at,
                    const std::function<void(const std::string&, const json::json_pointer&)>& fn) {
  if (j.is_number_integer()) {
    fn(path, at);
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) {
      ForEachInteger(j[i], path + "[" + std::to_string(i) + "]", at / i, fn);
    }
  } else if (j.is_object()) {
    for (const auto& [key, value] : j.items()) {
      ForEachInteger(value, path.empty() ? key : path + "." + key, at / key, fn);
    }
  }
}

// Fields the parser does not read: a forward request's outputs, a reverse request's input
// dist attrs (SEMANTICS.md §10).
bool Ignored(const json& request, const std::string& path) {
  const bool reverse = request.value("direction", "forward") == "reverse";
  if (!reverse) return path.rfind("outputs", 0) == 0;
  return path.rfind("inputs", 0) == 0 && path.find(".shape") == std::string::npos;
}

// ---- Integers of 2^63 and above --------------------------------------------------------

// Every integer field of every golden request that parses, set to 2^63 or 2^64-1, is
// refused with an InvalidArgument naming exactly that field. (nlohmann keeps such numbers
// unsigned; read as int64 they wrapped: dims_mapping 2^64-1 was answered as replicated.)
// InferLine prints an answer straight from the result (ResultLine); it must be exactly the
// text of InferJson's answer as nlohmann prints it, on every golden request (answers and
// errors alike).
TEST(InferLineTest, PrintsWhatInferJsonAnswersOnEveryGolden) {
  const std::vector<json> requests = GoldenRequests();
  ASSERT_GT(requests.size(), 100u);
  for (const json& request : requests) {
    const std::string want =
        InferJson(request).dump(-1, ' ', false, json::error_handler_t::replace);
    EXPECT_EQ(InferLine(request.dump()), want) << request.dump();
  }
}

// ResultLine against nlohmann's printing of DistAttrToJson on generated dist attrs: flat
// and co-sharded dims, and partial axes up to 12 (keys sort as text: "10" before "2").
TEST(InferLineTest, ResultLineIsNlohmannsText) {
  std::mt19937 rng(7);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  auto random_attr = [&] {
    DistAttr attr;
    attr.dims.resize(pick(5));
    for (AxisList& axes : attr.dims) {
      for (int k = pick(3); k > 0; --k) axes.push_back(pick(13));
    }
    for (int k = pick(4); k > 0; --k) attr.partial[pick(13)] = static_cast<ReduceOp>(pick(7));
    return attr;
  };
  for (int trial = 0; trial < 500; ++trial) {
    InferResult result;
    for (int i = pick(4); i > 0; --i) result.inputs.push_back(random_attr());
    for (int o = pick(3); o > 0; --o) result.outputs.push_back(random_attr());
    json want = json::object();
    want["inputs"] = json::array();
    want["outputs"] = json::array();
    for (const DistAttr& d : result.inputs) want["inputs"].push_back(DistAttrToJson(d));
    for (const DistAttr& d : result.outputs) want["outputs"].push_back(DistAttrToJson(d));
    EXPECT_EQ(ResultLine(result), want.dump(-1, ' ', false, json::error_handler_t::replace));
  }
}

TEST(InferHostileTest, EveryIntegerFieldRefusesValuesAboveInt64) {
  int checked = 0;
  for (const json& base : GoldenRequests()) {
    if (!Parses(base)) continue;
    ForEachInteger(base, "", json::json_pointer(), [&](const std::string& path,
                                                        const json::json_pointer& at) {
      if (Ignored(base, path)) return;
      for (const uint64_t value : {uint64_t{1} << 63, ~uint64_t{0}}) {
        json request = base;
        request[at] = value;
        const std::string line = request.dump();
        const json answer = CheckAnswerLine(InferLine(line), line);
        ASSERT_TRUE(answer.contains("error")) << "answered " << answer.dump() << "\n" << line;
        EXPECT_EQ(answer["error"]["type"], "InvalidArgument") << line;
        const std::string message = answer["error"]["message"].get<std::string>();
        EXPECT_EQ(message.rfind(path + ": ", 0), 0u) << message << "\n" << line;
        ++checked;
      }
    });
  }
  EXPECT_GT(checked, 2000);
}

TEST(InferHostileTest, TheReportedWrappingRequestsAreRefused) {
  for (const std::string& line : {
           std::string(R"({"op":"relu","mesh_shape":[2],"inputs":[{"shape":[4],"dims_mapping":[18446744073709551615]}]})"),
           std::string(R"({"op":"transpose","attrs":{"perm":[18446744073709551615,0]},"mesh_shape":[2],"inputs":[{"shape":[4,3]}]})"),
           std::string(R"({"op":"softmax","attrs":{"axis":18446744073709551615},"mesh_shape":[2],"inputs":[{"shape":[4,3]}]})"),
           std::string(R"({"op":"relu","mesh_shape":[2],"inputs":[{"shape":[4],"partial_dims":[9223372036854775808]}]})"),
       }) {
    const json answer = CheckAnswerLine(InferLine(line), line);
    ASSERT_TRUE(answer.contains("error")) << line << " -> " << answer.dump();
    EXPECT_EQ(answer["error"]["type"], "InvalidArgument");
    EXPECT_NE(answer["error"]["message"].get<std::string>().find("out of range"),
              std::string::npos);
  }
}

// ---- Error texts never carry raw bytes; no line ends the stream --------------------------

// Text that is not UTF-8 reaches an error through the library API (the CLI's --from, a
// caller's equation): every SpmdError's text is valid UTF-8 without control bytes, valid
// text is kept as it is, and escaping is idempotent.
TEST(InferHostileTest, ErrorTextsAreValidUtf8) {
  std::mt19937 random(12);
  for (int n = 0; n < 20000; ++n) {
    std::string bytes(random() % 12, '\0');
    for (char& c : bytes) c = static_cast<char>(random() % 256);
    const SpmdError error(ErrorType::kInvalidArgument, "attrs.equation", "'" + bytes + "'");
    const std::string text = error.what();
    EXPECT_NO_THROW((void)json(text).dump()) << n;
    for (char c : text) EXPECT_GE(static_cast<unsigned char>(c), 0x20) << n;
    EXPECT_EQ(EscapeForText(text), text);
  }
  for (const std::string& valid :
       {std::string("é"), std::string("日本"), std::string("\xF0\x9F\x98\x80"), std::string("a~ ")}) {
    EXPECT_EQ(EscapeForText(valid), valid);
  }
  EXPECT_EQ(EscapeForText("a\nb\tc"), "a\\x0Ab\\x09c");
  EXPECT_EQ(EscapeForText("\xC3"), "\\xC3");
  EXPECT_EQ(EscapeForText("\xED\xA0\x80"), "\\xED\\xA0\\x80");  // a surrogate
  EXPECT_EQ(EscapeForText("\xC0\xAF"), "\\xC0\\xAF");            // overlong '/'
  EXPECT_EQ(EscapeForText("\x1B[2J"), "\\x1B[2J");
}

// Returns a random einsum equation: letters, commas, arrows, dots, spaces and non-ASCII
// characters (valid UTF-8, as any JSON string is).
std::string RandomEquation(std::mt19937& random) {
  static const std::vector<std::string> pieces = {
      "i", "j", "k", "Z", ",", "->", "...", ".", " ", "é", "ß", "日", "\xF0\x9F\x98\x80",
      "\xEF\xBF\xBF", "-", ">", "\x7F", "0"};
  std::string equation;
  const int length = static_cast<int>(random() % 8);
  for (int i = 0; i < length; ++i) equation += pieces[random() % pieces.size()];
  return equation;
}

// A generated stream of hostile lines (non-ASCII einsum equations, control characters in
// names, invalid UTF-8, integers out of range, bad JSON) interleaved with a valid request:
// every non-blank line gets exactly one answer line, each valid UTF-8 JSON, and the valid
// request is answered right wherever it stands.
TEST(InferHostileTest, EveryHostileLineGetsExactlyOneAnswer) {
  const std::string sentinel =
      R"({"op":"relu","mesh_shape":[2],"inputs":[{"shape":[4,3],"dims_mapping":[0,-1]}]})";
  const std::string sentinel_answer =
      R"({"inputs":[{"dims_mapping":[0,-1],"partial":{}}],"outputs":[{"dims_mapping":[0,-1],"partial":{}}]})";
  std::mt19937 random(7);
  std::vector<std::string> lines;
  for (int n = 0; n < 3000; ++n) {
    json request;
    switch (n % 8) {
      case 0:
      case 1:
        request = {{"op", "einsum"},
                   {"attrs", {{"equation", RandomEquation(random)}}},
                   {"mesh_shape", {2}},
                   {"inputs", {{{"shape", {4, 3}}}, {{"shape", {3, 2}}}}}};
        break;
      case 2:
        request = {{"op", std::string("no\x1B[2J") + RandomEquation(random)},
                   {"mesh_shape", {2}}};
        break;
      case 3:
        request = {{"op", "relu"},
                   {"mesh_shape", {2}},
                   {"axis_names", {RandomEquation(random), RandomEquation(random)}},
                   {"inputs", {{{"shape", {4}}}}}};
        break;
      case 4:
        request = {{"op", "cast"},
                   {"attrs", {{"dtype", RandomEquation(random)}}},
                   {"mesh_shape", {2}},
                   {"inputs", {{{"shape", {4}}, {"partial", {{"0", RandomEquation(random)}}}}}}};
        break;
      case 5:
        request = {{"op", "split"},
                   {"attrs", {{"sections", {~uint64_t{0}, 1}}}},
                   {"mesh_shape", {2}},
                   {"inputs", {{{"shape", {4}}}}}};
        break;
      default:
        break;
    }
    std::string line = request.is_null() ? "" : request.dump();
    if (n % 8 == 6) {
      // Invalid UTF-8 inside a string, and text that is no JSON at all.
      line = std::string("{\"op\":\"\xFF\xC3\",\"mesh_shape\":[2]}");
    } else if (n % 8 == 7) {
      line = "{\"op\": \xE9t\xE9";
    }
    lines.push_back(line);
    if (random() % 3 == 0) lines.push_back(sentinel);
    if (random() % 5 == 0) lines.push_back(" \t");  // blank: no answer
  }
  std::string input;
  std::vector<std::string> answered;
  for (const std::string& line : lines) {
    input += line + "\n";
    if (line.find_first_not_of(" \t\r") != std::string::npos) answered.push_back(line);
  }
  std::istringstream in(input);
  std::ostringstream out;
  InferStream(in, out);
  std::istringstream answers(out.str());
  std::string answer;
  size_t k = 0;
  while (std::getline(answers, answer)) {
    ASSERT_LT(k, answered.size()) << "more answers than lines";
    CheckAnswerLine(answer, answered[k]);
    if (answered[k] == sentinel) {
      EXPECT_EQ(answer, sentinel_answer) << "line " << k;
    }
    ++k;
  }
  EXPECT_EQ(k, answered.size()) << "a line ended the stream";
}

// ---- Reverse requests check output sizes ----------------------------------------------

// For every golden forward request that is answered, the reverse request with the outputs
// its inputs give is accepted, and the same with one output size off by one is refused
// naming that output's shape.
TEST(InferHostileTest, ReverseOutputsMustHaveTheForwardShapes) {
  int checked = 0;
  for (const json& base : GoldenRequests()) {
    if (base.value("direction", "forward") != "forward" || !Parses(base)) continue;
    const RuleRequest r = ParseRuleRequest(base);
    if (InferJson(base).contains("error")) continue;
    std::vector<Shape> input_shapes;
    for (const TensorArg& t : r.inputs) input_shapes.push_back(t.shape);
    std::vector<Shape> shapes = InferOutputShapes(*r.op, input_shapes, r.op->NormalizeAttrs(r.attrs));
    // A data-dependent dim (nonzero's count) takes any size: 3 here, and every other below.
    std::vector<std::vector<bool>> dynamic(shapes.size());
    for (size_t o = 0; o < shapes.size(); ++o) {
      for (int64_t& size : shapes[o]) {
        dynamic[o].push_back(size == kDataDependentDim);
        if (size == kDataDependentDim) size = 3;
      }
    }
    json reverse = base;
    reverse["direction"] = "reverse";
    reverse["outputs"] = json::array();
    for (const Shape& shape : shapes) reverse["outputs"].push_back({{"shape", shape}});
    const json accepted = InferJson(reverse);
    if (accepted.contains("error")) {
      EXPECT_EQ(accepted["error"]["message"].get<std::string>().find(".shape"),
                std::string::npos)
          << reverse.dump() << " -> " << accepted.dump();
    }
    for (size_t o = 0; o < shapes.size(); ++o) {
      for (size_t d = 0; d < shapes[o].size(); ++d) {
        json wrong = reverse;
        wrong["outputs"][o]["shape"][d] = shapes[o][d] + 1;
        if (dynamic[o][d]) {
          EXPECT_FALSE(InferJson(wrong).contains("error")) << wrong.dump();
          continue;
        }
        const json refused = InferJson(wrong);
        ASSERT_TRUE(refused.contains("error")) << wrong.dump() << " -> " << refused.dump();
        EXPECT_EQ(refused["error"]["type"], "InvalidArgument");
        const std::string field = "outputs[" + std::to_string(o) + "].shape";
        EXPECT_EQ(refused["error"]["message"].get<std::string>().rfind(field + ": ", 0), 0u)
            << refused.dump();
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 300);
  const std::string relu =
      R"({"op":"relu","mesh_shape":[2],"direction":"reverse","inputs":[{"shape":[4,6]}],"outputs":[{"shape":[5,7],"dims_mapping":[0,-1]}]})";
  EXPECT_NE(InferLine(relu).find("outputs[0].shape: [5,7]"), std::string::npos) << InferLine(relu);
}

// ---- Reverse split ---------------------------------------------------------------------

// The reported request: answered (it aborted the stream), and the lines after it too.
TEST(InferHostileTest, TheReportedReverseSplitIsAnswered) {
  std::istringstream in(
      R"({"op":"split","attrs":{"sections":[2,2],"axis":0},"mesh_shape":[2,2],"direction":"reverse","inputs":[{"shape":[4],"dims_mapping":[-1]}],"outputs":[{"shape":[2],"dims_mapping":[0]},{"shape":[2],"dims_mapping":[1]}]})"
      "\n"
      R"({"op":"relu","mesh_shape":[2],"inputs":[{"shape":[4]}]})"
      "\n");
  std::ostringstream out;
  InferStream(in, out);
  EXPECT_EQ(out.str(),
            R"({"inputs":[{"dims_mapping":[-1],"partial":{}}],"outputs":[{"dims_mapping":[-1],"partial":{}},{"dims_mapping":[-1],"partial":{}}]})"
            "\n"
            R"({"inputs":[{"dims_mapping":[-1],"partial":{}}],"outputs":[{"dims_mapping":[-1],"partial":{}}]})"
            "\n");
}

// Every reverse split and split_with_num over generated output mappings (each piece's split
// dim on any mesh axis or none, the other dim shared) is answered, and the answer is sound:
// the checker runs the op forward from the answer's inputs on a simulated mesh, and the
// forward outputs are the answer's outputs.
TEST(InferHostileTest, ReverseSplitAnswersAreSound) {
  struct Split {
    std::string op;
    Attrs attrs;
    Shape shape;
    std::vector<Shape> outputs;
  };
  const std::vector<Split> splits = {
      {"split", Attrs().With("sections", std::vector<int64_t>{2, 2}), {4, 6}, {{2, 6}, {2, 6}}},
      {"split", Attrs().With("sections", std::vector<int64_t>{1, -1, 2}), {6, 6},
       {{1, 6}, {3, 6}, {2, 6}}},
      {"split_with_num", Attrs().With("num", int64_t{2}), {4, 6}, {{2, 6}, {2, 6}}},
  };
  const Mesh mesh({2, 2});
  const std::vector<AxisList> choices = {{}, {0}, {1}};
  int checked = 0;
  for (const Split& split : splits) {
    const OpDecl* op = FindOp(split.op);
    ASSERT_NE(op, nullptr);
    const size_t pieces = split.outputs.size();
    for (const AxisList& shared : choices) {
      size_t combinations = 1;
      for (size_t o = 0; o < pieces; ++o) combinations *= choices.size();
      for (size_t pick = 0; pick < combinations; ++pick) {
        std::vector<TensorArg> outputs;
        size_t code = pick;
        bool clash = false;
        for (size_t o = 0; o < pieces; ++o) {
          DistAttr dist;
          dist.dims = {choices[code % choices.size()], shared};
          code /= choices.size();
          clash = clash || (!shared.empty() && dist.dims[0] == shared);
          outputs.push_back({split.outputs[o], dist});
        }
        if (clash) continue;  // one mesh axis on two dims of one tensor is invalid
        SCOPED_TRACE(split.op + " pick " + std::to_string(pick));
        const InferResult answer = InferReverse(*op, mesh, {split.shape}, outputs, split.attrs);
        checker::Case c;
        c.op = op;
        c.mesh = mesh;
        c.shapes = {split.shape};
        c.inputs = answer.inputs;
        c.attrs = split.attrs;
        const checker::Outcome outcome = checker::CheckForward(c);
        ASSERT_EQ(outcome.verdict, checker::Verdict::kSound)
            << (outcome.counterexample ? outcome.counterexample->message : outcome.note);
        ASSERT_EQ(outcome.outputs.size(), answer.outputs.size());
        for (size_t o = 0; o < pieces; ++o) EXPECT_EQ(outcome.outputs[o], answer.outputs[o]);
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 50);
  std::printf("%d reverse splits checked sound\n", checked);
}

// ---- Bounded work ------------------------------------------------------------------------

std::string Repeat(const std::string& item, size_t count) {
  std::string out;
  for (size_t i = 0; i < count; ++i) out += (i ? "," : "") + item;
  return out;
}

// Requests that asked for unbounded work (400,000 split sections, within the 1 MiB line
// limit: 2M took minutes before the sections bound; a mesh of 2^20 ranks:
// seconds per line) are refused with a typed error naming the field. How long a refusal
// takes is a benchmark (bench/infer_bench.cc, BM_InferLine_Hostile*), not a timed test.
TEST(InferHostileTest, OversizedRequestsAreRefusedByField) {
  struct Bad {
    std::string line;
    std::string type;
    std::string field;
  };
  const std::string big = std::to_string(int64_t{1} << 62);
  const std::vector<Bad> bad = {
      {R"({"op":"split","attrs":{"sections":[)" + Repeat("0", 400'000) +
           R"(,4]},"mesh_shape":[2],"inputs":[{"shape":[4]}]})",
       "Unsupported", "attrs.sections"},
      {R"({"op":"split","attrs":{"sections":[)" + Repeat("1", 5000) +
           R"(]},"mesh_shape":[2],"direction":"reverse","inputs":[{"shape":[5000]}],"outputs":[]})",
       "Unsupported", "attrs.sections"},
      {R"({"op":"split_with_num","attrs":{"num":)" + big +
           R"(},"mesh_shape":[2],"inputs":[{"shape":[4]}]})",
       "Unsupported", "attrs.num"},
      {R"({"op":"unbind","mesh_shape":[2],"inputs":[{"shape":[)" + big + R"(]}]})",
       "Unsupported", "inputs[0].shape"},
      {R"({"op":"relu","mesh_shape":[1048576],"inputs":[{"shape":[4]}]})", "InvalidArgument",
       "mesh_shape"},
      {R"({"op":"relu","mesh_shape":[1024,1024],"inputs":[{"shape":[4]}]})", "InvalidArgument",
       "mesh_shape"},
      {R"({"op":"relu","mesh_shape":[65537],"inputs":[{"shape":[4]}]})", "InvalidArgument",
       "mesh_shape"},
      {R"({"op":"relu","mesh_shape":[)" + big + "," + big +
           R"(],"inputs":[{"shape":[4]}]})",
       "InvalidArgument", "mesh_shape"},
      {R"({"op":"relu","mesh_shape":[)" + Repeat("1", 200'000) +
           R"(],"inputs":[{"shape":[4]}]})",
       "InvalidArgument", "mesh_shape"},
      {R"({"op":"relu","mesh_shape":[2],"process_ids":[)" + Repeat("7", 200'000) +
           R"(],"inputs":[{"shape":[4]}]})",
       "InvalidArgument", "process_ids"},
      {R"({"op":"relu","mesh_shape":[2],"inputs":[{"shape":[)" + Repeat("1", 200'000) +
           R"(]}]})",
       "InvalidArgument", "inputs[0].shape"},
      {R"({"op":"relu","mesh_shape":[2],"inputs":[{"shape":[4],"dims_mapping":[)" +
           Repeat("0", 200'000) + R"(]}]})",
       "InvalidArgument", "inputs[0]"},
  };
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.line.substr(0, 120));
    const std::string answer_line = InferLine(b.line);
    const json answer = json::parse(answer_line);
    ASSERT_TRUE(answer.contains("error")) << answer_line.substr(0, 300);
    EXPECT_EQ(answer["error"]["type"], b.type) << answer_line;
    EXPECT_EQ(answer["error"]["message"].get<std::string>().rfind(b.field, 0), 0u)
        << answer_line.substr(0, 300);
  }
  // The largest mesh allowed is answered.
  const std::string largest = R"({"op":"matmul","mesh_shape":[256,256],"inputs":[{"shape":[512,64],"dims_mapping":[0,1]},{"shape":[64,512],"dims_mapping":[1,-1]}]})";
  const std::string answer_line = InferLine(largest);
  EXPECT_EQ(answer_line.find("error"), std::string::npos) << answer_line;
}

// Every op, every list attr of 100,000 entries (ints: 1, -1; floats) and every int attr at
// the ends of int64: answered, with a result or a typed error.
TEST(InferHostileTest, HugeAttrsOfEveryOpAreAnswered) {
  int checked = 0;
  for (const OpDecl& op : AllOps()) {
    const std::vector<Example> examples = op.examples(SizePalette{{2, 3, 4}});
    ASSERT_FALSE(examples.empty()) << op.name;
    json base = {{"op", op.name}, {"mesh_shape", {2, 2}}, {"inputs", json::array()}};
    for (const Shape& shape : examples[0].shapes) base["inputs"].push_back({{"shape", shape}});
    for (const AttrSpec& spec : op.attrs) {
      std::vector<std::string> values;
      if (spec.kind == AttrKind::kInts || spec.kind == AttrKind::kFloats) {
        for (const char* item : {"1", "-1", "0.5"}) {
          values.push_back("[" + Repeat(item, 100'000) + "]");
        }
      } else if (spec.kind == AttrKind::kInt) {
        values = {"9223372036854775807", "-9223372036854775808"};
      } else {
        continue;
      }
      for (const std::string& value : values) {
        std::string line = base.dump();
        line.insert(1, "\"attrs\":{\"" + spec.name + "\":" + value + "},");
        SCOPED_TRACE(op.name + "." + spec.name + " = " + value.substr(0, 20));
        const std::string answer = InferLine(line);
        CheckAnswerLine(answer, line.substr(0, 200));
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 20);
}

}  // namespace
}  // namespace spmd::io
