// The `spmd` command: a thin layer over the library.
//   spmd infer [FILE...]          JSONL requests -> JSONL answers (SEMANTICS.md §10)
//   spmd check ...                the soundness sweep (cli/check.cc)
//   spmd explain JSON             one case in words (cli/explain.cc)
//   spmd plan --mesh ... --from ... --to ...   a reshard plan (cli/plan.cc)
//   spmd audit paddle|dtensor ...  another framework's rules, judged (cli/audit.cc)
//   spmd hangs DIR                the ranks' flight records: where a job hung (cli/hangs.cc)
//   spmd infer --check FILE...    golden cases: answer each, compare with its "expect",
//                                 print a table and a total; exit 1 on any mismatch
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/audit.h"
#include "cli/check.h"
#include "cli/explain.h"
#include "cli/hangs.h"
#include "cli/plan.h"
#include "io/infer_io.h"

namespace {

using nlohmann::json;

int Usage(std::ostream& out, int code) {
  out << "usage: spmd infer [FILE...]\n"
         "       spmd infer --check FILE...\n"
         "       spmd check [--op NAME]... [--mesh 2x3]... [--exhaustive | --random N] ...\n"
         "                  (spmd check --help for more)\n"
         "       spmd explain JSON\n"
         "       spmd plan --mesh 2x4 --shape 1024,512 --from '[S(0), P(sum)]' --to '[R, S(1)]'\n"
         "                 [--dtype float32] [--json] (spmd plan --help for more)\n"
         "       spmd audit paddle|dtensor [--cases N] [--op NAME]... [--json]\n"
         "                 (spmd audit --help for more)\n"
         "       spmd hangs DIR (the flight records of a job that hung or failed)\n"
         "  infer          answer SPMD rule requests, one JSON object per line; reads stdin\n"
         "                 when no FILE is given; empty lines are skipped\n"
         "  infer --check  answer golden cases (requests with \"name\" and \"expect\") and\n"
         "                 report every case whose answer differs\n";
  return code;
}

bool Blank(const std::string& line) { return line.find_first_not_of(" \t\r") == std::string::npos; }

int Infer(const std::vector<std::string>& files) {
  if (files.empty()) {
    spmd::io::InferStream(std::cin, std::cout);
    return 0;
  }
  for (const std::string& path : files) {
    std::ifstream in(path);
    if (!in) {
      std::cerr << "spmd infer: cannot open " << path << "\n";
      return 2;
    }
    spmd::io::InferStream(in, std::cout);
  }
  return 0;
}

int Check(const std::vector<std::string>& files) {
  if (files.empty()) return Usage(std::cerr, 2);
  int total = 0, failed = 0;
  std::printf("%-40s %7s %7s %7s\n", "file", "cases", "passed", "failed");
  for (const std::string& path : files) {
    std::ifstream in(path);
    if (!in) {
      std::cerr << "spmd infer --check: cannot open " << path << "\n";
      return 2;
    }
    int cases = 0, bad = 0, number = 0;
    std::string line;
    while (std::getline(in, line)) {
      ++number;
      if (Blank(line)) continue;
      ++cases;
      const json golden = json::parse(line, nullptr, /*allow_exceptions=*/false);
      std::string mismatch;
      if (golden.is_discarded() || !golden.is_object() || !golden.contains("expect")) {
        mismatch = "not a golden case (a JSON object with \"expect\")";
      } else {
        const json answer = json::parse(spmd::io::InferLine(spmd::io::StripGoldenFields(golden).dump()));
        mismatch = spmd::io::CompareWithExpect(answer, golden["expect"]);
      }
      if (!mismatch.empty()) {
        ++bad;
        std::cerr << path << ":" << number << " "
                  << (golden.is_object() ? golden.value("name", "") : "") << ": " << mismatch
                  << "\n";
      }
    }
    std::printf("%-40s %7d %7d %7d\n", path.c_str(), cases, cases - bad, bad);
    total += cases;
    failed += bad;
  }
  std::printf("checked %d golden rule cases: %d passed, %d failed\n", total, total - failed, failed);
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
  if (command == "infer") {
    if (!args.empty() && args[0] == "--check") return Check({args.begin() + 1, args.end()});
    return Infer(args);
  }
  if (command == "--help" || command == "-h" || command == "help") return Usage(std::cout, 0);
  std::cerr << "spmd: unknown command '" << command << "'\n";
  return Usage(std::cerr, 2);
}
