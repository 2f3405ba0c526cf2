// `spmd hangs DIR`: reads every rank's flight record dump in DIR (cli/flight_dump.h; the
// format: runtime/diagnostics/flight_recorder.h) and names the first collective that some
// ranks entered and others did not, with the ranks on each side, and any calls the ranks
// describe differently at one sequence number.
#pragma once

#include <string>
#include <vector>

namespace spmd::cli {
// Returns the exit code: 0 when every group's members agree ("no divergence"), 1 when a
// divergence or a mismatch is found, 2 on bad input (a typed error naming the dump file
// and line, or DIR, on stderr).
int Hangs(const std::vector<std::string>& args);
}  // namespace spmd::cli
