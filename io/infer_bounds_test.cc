// `spmd infer`'s bounds and strictness: a line over the length or depth limit gets a typed
// error naming the limit and the stream goes on, reading a line never keeps more than the
// limit, a key the format does not have is an error naming it, and a malformed golden case
// (`spmd infer --check`) is a typed error naming its field, never an exception of the JSON
// library.
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "io/infer_io.h"
#include "io/placements.h"
#include "rules/model/error.h"

namespace spmd::io {
namespace {

using nlohmann::json;

const std::string kRelu =
    R"({"op":"relu","mesh_shape":[2],"inputs":[{"shape":[4,3],"dims_mapping":[0,-1]}]})";

json Answer(const std::string& line) { return json::parse(InferLine(line)); }

std::string ErrorMessage(const std::string& line) {
  const json answer = Answer(line);
  if (!answer.contains("error")) return "";
  return answer["error"]["message"].get<std::string>();
}

// Random nestings of lists and objects around a scalar, the brackets in random kinds: the
// depth error comes exactly when the depth passes the limit, and never from brackets
// inside a string.
TEST(InferBoundsTest, DepthOverTheLimitIsATypedErrorNamingIt) {
  std::mt19937 gen(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int depth = std::uniform_int_distribution<int>(1, 3 * kMaxJsonDepth)(gen);
    std::string open, close;
    for (int d = 0; d < depth; ++d) {
      if (gen() % 2 == 0) {
        open += "[";
        close = "]" + close;
      } else {
        open += "{\"k\":";
        close = "}" + close;
      }
    }
    const std::string line = open + "1" + close;
    const json answer = Answer(line);
    SCOPED_TRACE(line);
    ASSERT_TRUE(answer.contains("error"));
    EXPECT_EQ(answer["error"]["type"], "InvalidArgument");
    const std::string message = answer["error"]["message"];
    const bool deep = message.rfind("line: lists and objects nest deeper than 64", 0) == 0;
    EXPECT_EQ(deep, depth > kMaxJsonDepth) << message;
    // The same brackets inside a string are text: an unknown op, not a depth error.
    const std::string quoted = R"({"op":")" + std::string(depth, '[') + R"(\"{","mesh_shape":[2]})";
    EXPECT_EQ(Answer(quoted)["error"]["type"], "UnknownOp") << quoted;
  }
}

// A line of exactly the limit is read and answered; one byte more is refused, naming the
// limit, and the lines after it are answered in order.
TEST(InferBoundsTest, LongLinesAreRefusedAndTheStreamGoesOn) {
  const std::string at_limit = kRelu + std::string(kMaxLineBytes - kRelu.size(), ' ');
  const std::string over = at_limit + " ";
  const std::string deep = std::string(40 << 20, '[');  // 40 MB of nesting
  std::istringstream in(kRelu + "\n" + at_limit + "\n" + over + "\n" + deep + "\n\n" + kRelu);
  std::ostringstream out;
  InferStream(in, out);
  std::vector<json> answers;
  std::istringstream lines(out.str());
  for (std::string line; std::getline(lines, line);) answers.push_back(json::parse(line));
  ASSERT_EQ(answers.size(), 5u) << out.str();
  const json ok = Answer(kRelu);
  EXPECT_EQ(answers[0], ok);
  EXPECT_EQ(answers[1], ok);
  for (int i : {2, 3}) {
    EXPECT_EQ(answers[i]["error"]["type"], "InvalidArgument");
    EXPECT_EQ(answers[i]["error"]["message"].get<std::string>().rfind(
                  "line: longer than " + std::to_string(kMaxLineBytes) + " bytes (the limit)", 0),
              0u)
        << answers[i];
  }
  EXPECT_EQ(answers[4], ok);
  // InferLine on its own (the Python infer_json) applies the same bound.
  EXPECT_EQ(ErrorMessage(over).rfind("line: longer than", 0), 0u);
}

// LineReader against std::getline on random text with random line lengths around a small
// limit: the same lines, in order; a longer line is reported and its bytes are not kept.
TEST(InferBoundsTest, LineReaderReadsWhatGetlineReadsUpToTheLimit) {
  std::mt19937 gen(11);
  for (int trial = 0; trial < 500; ++trial) {
    const size_t limit = std::uniform_int_distribution<size_t>(0, 9)(gen);
    std::string text;
    const int n = std::uniform_int_distribution<int>(0, 8)(gen);
    for (int i = 0; i < n; ++i) {
      text += std::string(std::uniform_int_distribution<size_t>(0, 14)(gen), 'a' + i);
      if (i + 1 < n || gen() % 2 == 0) text += '\n';
    }
    std::istringstream want_in(text), got_in(text);
    LineReader reader(got_in, limit);
    std::string want, got;
    while (std::getline(want_in, want)) {
      const LineReader::Status status = reader.Next(got);
      if (want.size() <= limit) {
        ASSERT_EQ(status, LineReader::Status::kLine) << text;
        EXPECT_EQ(got, want);
      } else {
        ASSERT_EQ(status, LineReader::Status::kTooLong) << text;
        EXPECT_TRUE(got.empty());
      }
    }
    EXPECT_EQ(reader.Next(got), LineReader::Status::kEnd) << text;
  }
}

// Memory stays bounded by the limit: reading a 40 MB line never grows the line past it.
TEST(InferBoundsTest, ReadingAnOverlongLineKeepsAtMostTheLimit) {
  std::istringstream in(std::string(40 << 20, '[') + "\n" + kRelu + "\n");
  LineReader reader(in);
  std::string line;
  EXPECT_EQ(reader.Next(line), LineReader::Status::kTooLong);
  EXPECT_LE(line.capacity(), 2 * kMaxLineBytes);
  EXPECT_EQ(reader.Next(line), LineReader::Status::kLine);
  EXPECT_EQ(line, kRelu);
}

// A misspelt key anywhere in a request is an InvalidArgument naming it; every golden
// request's own keys stay allowed (rules_golden_test runs them all).
TEST(InferBoundsTest, UnknownKeysAreRefusedNamingThem) {
  const json base = json::parse(kRelu);
  struct Case {
    std::function<void(json&)> edit;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[](json& j) {
         j["inputs"][0]["dims_mappin"] = j["inputs"][0]["dims_mapping"];
         j["inputs"][0].erase("dims_mapping");
       },
       "inputs[0].dims_mappin: unknown key"},
      {[](json& j) { j["inputs"][0]["partail"] = json{{"0", "sum"}}; },
       "inputs[0].partail: unknown key"},
      {[](json& j) { j["mesh_shap"] = json::array({2}); }, "mesh_shap: unknown key"},
      {[](json& j) { j["name"] = "a golden's name outside --check"; }, "name: unknown key"},
      {[](json& j) {
         j["direction"] = "reverse";
         j["outputs"] = json::array({json{{"shape", {4, 3}}, {"dims_mapin", {0, -1}}}});
       },
       "outputs[0].dims_mapin: unknown key"},
  };
  for (const Case& c : cases) {
    json request = base;
    c.edit(request);
    const json answer = Answer(request.dump());
    ASSERT_TRUE(answer.contains("error")) << request.dump();
    EXPECT_EQ(answer["error"]["type"], "InvalidArgument");
    EXPECT_EQ(answer["error"]["message"].get<std::string>().rfind(c.field, 0), 0u) << answer;
    EXPECT_EQ(InferJson(request), answer);
  }
}

// Golden cases that are not golden cases: a typed error naming the field, whatever the
// JSON holds; a good case passes and a wrong expectation is a mismatch, not an error.
TEST(InferBoundsTest, MalformedGoldenCasesAreTypedErrorsNamingTheField) {
  const json answer = Answer(kRelu);
  auto golden = [&](const json& expect) {
    json g = json::parse(kRelu);
    g["name"] = "relu";
    g["expect"] = expect;
    return g.dump();
  };
  std::string name;
  EXPECT_EQ(CheckGoldenLine(golden(answer), &name), "");
  EXPECT_EQ(name, "relu");
  json wrong = answer;
  wrong["outputs"] = json::array();
  EXPECT_NE(CheckGoldenLine(golden(wrong), &name), "");

  const std::vector<std::pair<std::string, std::string>> bad = {
      {golden(5), "expect"},
      {golden("x"), "expect"},
      {golden(json::array()), "expect"},
      {golden(json{{"error", 3}}), "expect.error"},
      {golden(json{{"error", json::object()}}), "expect.error.type"},
      {golden(json{{"error", {{"type", 1}}}}), "expect.error.type"},
      {golden(json{{"error", {{"type", "InvalidArgument"}, {"field", 2}}}}), "expect.error.field"},
      {golden(json{{"inputs", json::array()}}), "expect.outputs"},
      {golden(json{{"inputs", json::object()}, {"outputs", json::array()}}), "expect.inputs"},
      {golden(json{{"inputs", json::array()}, {"outputs", json::array()}, {"x", 1}}), "expect.x"},
      {kRelu, "expect"},
      {R"({"name":5,"expect":{}})", "name"},
      {"[1,2]", "line"},
      {"not json", "line"},
      {std::string(kMaxJsonDepth + 1, '['), "line"},
      {std::string(kMaxLineBytes + 1, ' '), "line"},
  };
  for (const auto& [line, field] : bad) {
    try {
      const std::string result = CheckGoldenLine(line, &name);
      ADD_FAILURE() << "no error for " << line.substr(0, 200) << ": " << result;
    } catch (const SpmdError& e) {
      EXPECT_EQ(e.type(), ErrorType::kInvalidArgument);
      EXPECT_EQ(e.field(), field) << e.what();
    }
  }
  // CompareWithExpect on its own: the same typed error, never the JSON library's.
  EXPECT_THROW(CompareWithExpect(answer, json(5)), SpmdError);
  EXPECT_THROW(CompareWithExpect(answer, json{{"error", "x"}}), SpmdError);
}

// A placements string has one entry per mesh axis: never padded or cut.
TEST(InferBoundsTest, PlacementsMustMatchTheMesh) {
  EXPECT_EQ(CountPlacements("[S(0), P(sum)]"), 2);
  EXPECT_EQ(CountPlacements("[]"), 0);
  EXPECT_NO_THROW(ParsePlacementsOnMesh("[S(0), R]", 2, 2, "x"));
  for (const char* text : {"[S(0)]", "[S(0), R, R]", "[]"}) {
    try {
      ParsePlacementsOnMesh(text, 2, 2, "inputs[0].placements");
      ADD_FAILURE() << text;
    } catch (const SpmdError& e) {
      EXPECT_EQ(e.field(), "inputs[0].placements") << e.what();
      EXPECT_NE(std::string(e.what()).find("for a mesh of 2 axis/axes"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace spmd::io
