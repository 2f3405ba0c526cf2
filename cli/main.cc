// The `spmd` command: a thin layer over the library.
//   spmd infer [FILE...]          JSONL requests -> JSONL answers (SEMANTICS.md §10)
//   spmd check ...                the soundness sweep (cli/check.cc)
//   spmd explain JSON             one case in words (cli/explain.cc)
//   spmd plan --mesh ... --from ... --to ...   a reshard plan (cli/plan.cc)
//   spmd audit paddle|dtensor ...  another framework's rules, judged (cli/audit.cc)
//   spmd hangs DIR                the ranks' flight records: where a job hung (cli/hangs.cc)
//   spmd ops --markdown|--json    every op's inputs, outputs and attrs (cli/ops.cc)
//   spmd infer --check FILE...    golden cases: answer each, compare with its "expect",
//                                 print a table and a total; exit 1 on any mismatch, 2 on
//                                 any line that is not a golden case
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "cli/audit.h"
#include "cli/check.h"
#include "cli/explain.h"
#include "cli/hangs.h"
#include "cli/ops.h"
#include "cli/plan.h"
#include "io/infer_io.h"
#include "rules/model/error.h"

namespace {

int Usage(std::ostream& out, int code) {
  out << "usage: spmd infer [FILE...]\n"
         "       spmd infer --check FILE...\n"
         "       spmd check [--op NAME]... [--mesh 2x3]... [--exhaustive | --random N] ...\n"
         "                  (spmd check --help for more)\n"
         "       spmd explain JSON\n"
         "       spmd plan --mesh 2x4 --shape 1024,512 --from '[S(0), P(sum)]' --to '[R, S(1)]'\n"
         "                 [--dtype float32] [--json] (spmd plan --help for more)\n"
         "       spmd audit paddle|dtensor [--cases N] [--op NAME]... [--json]\n"
         "       spmd audit paddle-tests --tests DIR [--json]\n"
         "                 (spmd audit --help for more)\n"
         "       spmd hangs DIR (the flight records of a job that hung or failed)\n"
         "       spmd ops --markdown | --json (every op's inputs, outputs and attrs)\n"
         "  infer          answer SPMD rule requests, one JSON object per line; reads stdin\n"
         "                 when no FILE is given; empty lines are skipped; a line over\n"
         "                 1 MiB or nested deeper than 64 gets an error answer\n"
         "  infer --check  answer golden cases (requests with \"name\" and \"expect\") and\n"
         "                 report every case whose answer differs (exit 1) or that is not\n"
         "                 a golden case (exit 2)\n";
  return code;
}

bool Blank(const std::string& line) { return line.find_first_not_of(" \t\r") == std::string::npos; }

// Every FILE checked before any is read, so that a bad one gives no partial output: a
// typed error naming it (a directory, a file that cannot be opened), exit 2.
bool CheckPaths(const std::vector<std::string>& files, const char* command) {
  for (const std::string& path : files) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
      std::cerr << command << ": InvalidArgument: " << spmd::EscapeForText(path)
                << ": is a directory\n";
      return false;
    }
    std::ifstream in(path);
    if (!in) {
      std::cerr << command << ": InvalidArgument: " << spmd::EscapeForText(path)
                << ": cannot open: " << std::strerror(errno) << "\n";
      return false;
    }
  }
  return true;
}

int Infer(const std::vector<std::string>& files) {
  if (files.empty()) {
    spmd::io::InferStream(std::cin, std::cout);
    return 0;
  }
  if (!CheckPaths(files, "spmd infer")) return 2;
  for (const std::string& path : files) {
    std::ifstream in(path, std::ios::binary);
    spmd::io::InferStream(in, std::cout);
  }
  return 0;
}

// `spmd infer --check`: one row per file (cases, passed, failed: the answer differs,
// invalid: the line is not a golden case) and a total; every failed or invalid case is
// named on stderr with what differs or the typed error, and the run goes on. Exit 0: all
// passed; 1: some answer differs; 2: some case is not a golden case (or a FILE is bad).
int Check(const std::vector<std::string>& files) {
  if (files.empty()) return Usage(std::cerr, 2);
  if (!CheckPaths(files, "spmd infer --check")) return 2;
  int total = 0, failed = 0, invalid = 0;
  std::printf("%-40s %7s %7s %7s %7s\n", "file", "cases", "passed", "failed", "invalid");
  for (const std::string& path : files) {
    std::ifstream in(path, std::ios::binary);
    spmd::io::LineReader reader(in);
    int cases = 0, bad = 0, broken = 0, number = 0;
    std::string line;
    for (;;) {
      const spmd::io::LineReader::Status status = reader.Next(line);
      if (status == spmd::io::LineReader::Status::kEnd) break;
      ++number;
      if (status == spmd::io::LineReader::Status::kLine && Blank(line)) continue;
      ++cases;
      std::string name, problem;
      try {
        if (status == spmd::io::LineReader::Status::kTooLong) throw spmd::io::TooLongLineError();
        const std::string mismatch = spmd::io::CheckGoldenLine(line, &name);
        if (!mismatch.empty()) {
          ++bad;
          problem = mismatch;
        }
      } catch (const spmd::SpmdError& e) {
        ++broken;
        problem = std::string(ToString(e.type())) + ": " + e.what();
      } catch (const std::exception& e) {  // a guard: CheckGoldenLine throws SpmdError only
        ++broken;
        problem = "InvalidArgument: line: " + spmd::EscapeForText(e.what());
      }
      if (!problem.empty()) {
        std::cerr << spmd::EscapeForText(path) << ":" << number << " "
                  << spmd::EscapeForText(name) << ": " << problem << "\n";
      }
    }
    std::printf("%-40s %7d %7d %7d %7d\n", spmd::EscapeForText(path).c_str(), cases,
                cases - bad - broken, bad, broken);
    total += cases;
    failed += bad;
    invalid += broken;
  }
  std::printf("checked %d golden rule cases: %d passed, %d failed, %d invalid\n", total,
              total - failed - invalid, failed, invalid);
  if (invalid > 0) return 2;
  return failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::ios::sync_with_stdio(false);
  if (argc < 2) return Usage(std::cerr, 2);
  const std::string command = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (command == "check") return spmd::cli::Check(args);
  if (command == "explain") return spmd::cli::Explain(args);
  if (command == "plan") return spmd::cli::Plan(args);
  if (command == "audit") return spmd::cli::Audit(args);
  if (command == "hangs") return spmd::cli::Hangs(args);
  if (command == "ops") return spmd::cli::Ops(args);
  if (command == "infer") {
    if (!args.empty() && args[0] == "--check") return Check({args.begin() + 1, args.end()});
    return Infer(args);
  }
  if (command == "--help" || command == "-h" || command == "help") return Usage(std::cout, 0);
  std::cerr << "spmd: unknown command '" << command << "'\n";
  return Usage(std::cerr, 2);
}
