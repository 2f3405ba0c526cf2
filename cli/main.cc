// The `spmd` command: a thin layer over the library.
//   spmd infer [FILE...]   JSONL requests (stdin when no file) -> JSONL answers on stdout
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "rules/infer_io.h"

namespace {

int Usage(std::ostream& out, int code) {
  out << "usage: spmd infer [FILE...]\n"
         "  infer   answer SPMD rule requests, one JSON object per line (SEMANTICS.md §10);\n"
         "          reads stdin when no FILE is given; empty lines are skipped\n";
  return code;
}

void InferStream(std::istream& in, std::ostream& out) {
  std::string line;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    out << spmd::InferLine(line) << '\n';
  }
  out.flush();
}

int Infer(const std::vector<std::string>& files) {
  if (files.empty()) {
    InferStream(std::cin, std::cout);
    return 0;
  }
  for (const std::string& path : files) {
    std::ifstream in(path);
    if (!in) {
      std::cerr << "spmd infer: cannot open " << path << "\n";
      return 2;
    }
    InferStream(in, std::cout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::ios::sync_with_stdio(false);
  if (argc < 2) return Usage(std::cerr, 2);
  const std::string command = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (command == "infer") return Infer(args);
  if (command == "--help" || command == "-h" || command == "help") return Usage(std::cout, 0);
  std::cerr << "spmd: unknown command '" << command << "'\n";
  return Usage(std::cerr, 2);
}
