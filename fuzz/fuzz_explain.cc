// Fuzz target: `spmd explain JSON`, through the CLI's own entry point (cli/explain.cc: the
// request parser of io/infer_io, the rule, the einsum or DimTrans description). Bad input must
// end in a typed error (exit 2), never an uncaught exception or a sanitizer report.
#include <cstddef>
#include <cstdint>
#include <string>

#include "cli/explain.h"
#include "fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string json;
  if (!spmd::fuzz::AsArgument(data, size, &json)) return 0;
  if (json == "-" || json == "--help") return 0;  // stdin and the usage text, not a request
  const int code = spmd::cli::Explain({json});
  SPMD_FUZZ_EXPECT(spmd::fuzz::IsExitCode(code), "spmd explain returned an unknown exit code");
  return 0;
}
