#include "cli/hangs.h"

#include <iostream>

#include "rules/model/error.h"
#include "cli/flight_dump.h"

namespace spmd::cli {

int Hangs(const std::vector<std::string>& args) {
  if (args.size() == 1 && (args[0] == "--help" || args[0] == "-h")) {
    std::cout << "usage: spmd hangs DIR\n"
                 "  DIR holds flight_rank<R>.txt, the flight records the ranks of a job wrote\n"
                 "  (SPMD_FLIGHT_DIR=DIR; on a timeout or error, on SIGUSR1 or SIGTERM).\n"
                 "  Prints the suspects (a rank with no dump that others wait on; a rank that\n"
                 "  did not enter a call the others wait in), the first collective some ranks\n"
                 "  entered and others did not, and any call the ranks describe differently.\n"
                 "  Exit 0: no divergence; 1: found; 2: bad input.\n";
    return 0;
  }
  try {
    if (args.size() != 1) ThrowInvalid("DIR", "expected one directory of flight records");
    const std::vector<FlightDump> dumps = ReadFlightDumps(args[0]);
    const HangReport report = AnalyzeFlightDumps(dumps);
    std::cout << FormatHangReport(report);
    const bool found = !report.divergences.empty() || !report.mismatches.empty() ||
                       !report.suspects.empty();
    return found ? 1 : 0;
  } catch (const SpmdError& e) {
    std::cerr << ToString(e.type()) << ": " << e.what() << "\n";
    return 2;
  }
}

}  // namespace spmd::cli
