// Fuzz target: one `spmd infer` request line, through io::InferLine as the CLI streams it.
// InferLine promises never to throw and to answer every line with one line of JSON (an
// answer or {"error": ...}); anything else ends the stream and is a finding.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "fuzz/fuzz_check.h"
#include "io/infer_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view line(reinterpret_cast<const char*>(data), size);
  if (line.find('\n') != std::string_view::npos) return 0;  // the CLI splits lines first
  const std::string answer = spmd::io::InferLine(line);
  SPMD_FUZZ_EXPECT(answer.find('\n') == std::string::npos, "the answer spans several lines");
  const nlohmann::json parsed = nlohmann::json::parse(answer, nullptr, /*allow_exceptions=*/false);
  SPMD_FUZZ_EXPECT(!parsed.is_discarded() && parsed.is_object(), "the answer is not a JSON object");
  return 0;
}
