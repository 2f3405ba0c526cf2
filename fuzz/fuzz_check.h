// What every fuzz target shares: a failed promise aborts with a message, so libFuzzer (or the
// replay driver in the test suite) reports the input as a finding.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#define SPMD_FUZZ_EXPECT(condition, what)                                      \
  do {                                                                         \
    if (!(condition)) {                                                        \
      std::fprintf(stderr, "fuzz finding: %s (%s:%d)\n", what, __FILE__, __LINE__); \
      std::abort();                                                            \
    }                                                                          \
  } while (0)

namespace spmd::fuzz {

// The input as one command-line argument: the shell cannot pass a NUL byte, so inputs with
// one are not arguments the CLI can be given (returns false).
inline bool AsArgument(const uint8_t* data, size_t size, std::string* arg) {
  arg->assign(reinterpret_cast<const char*>(data), size);
  return arg->find('\0') == std::string::npos;
}

// The exit codes a CLI command may return: 0, 1 (a finding it reports) or 2 (bad input).
inline bool IsExitCode(int code) { return code == 0 || code == 1 || code == 2; }

}  // namespace spmd::fuzz
