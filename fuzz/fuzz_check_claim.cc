// Fuzz target: `spmd check --claim JSON`, through the CLI's own entry point (cli/check.cc: the
// case JSON of io/case_json, then the checker). Bad input must end in a typed error (exit 2),
// never an uncaught exception, a sanitizer report, or unbounded time or memory.
#include <cstddef>
#include <cstdint>
#include <string>

#include "cli/check.h"
#include "fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string json;
  if (!spmd::fuzz::AsArgument(data, size, &json)) return 0;
  const int code = spmd::cli::Check({"--claim", json});
  SPMD_FUZZ_EXPECT(spmd::fuzz::IsExitCode(code), "spmd check returned an unknown exit code");
  return 0;
}
