// Fuzz target: `spmd plan ARGS...`, through the CLI's own entry point (cli/plan.cc: flag,
// mesh and placement parsing, the planner, the plan JSON). The input is the argument list,
// one argument per line, e.g. "--mesh\n2x4\n--shape\n1024,512\n--from\n[S(0), P(sum)]\n...".
// Bad input must end in a typed error (exit 2), never an uncaught exception, a sanitizer
// report, or unbounded time or memory.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cli/plan.h"
#include "fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text;
  if (!spmd::fuzz::AsArgument(data, size, &text)) return 0;
  std::vector<std::string> args;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = text.find('\n', start);
    args.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  const int code = spmd::cli::Plan(args);
  SPMD_FUZZ_EXPECT(spmd::fuzz::IsExitCode(code), "spmd plan returned an unknown exit code");
  return 0;
}
