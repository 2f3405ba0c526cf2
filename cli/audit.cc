#include "cli/audit.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "rules/model/error.h"

namespace spmd::cli {
namespace {

constexpr int kExitUsage = 2;
constexpr int kExitUnavailable = 3;

int Usage(std::ostream& out, int code) {
  out << "usage: spmd audit paddle|dtensor [--cases N] [--op NAME]... [--seed S] [--json]\n"
         "       spmd audit paddle-tests --tests DIR [--json]\n"
         "  runs the framework's own SPMD rules on generated cases (meshes of 1 to 3 axes,\n"
         "  uneven and size-1 dims, partial inputs), judges every answer with spmdkit's\n"
         "  checker and prices the sound ones against spmdkit's rule with the planner;\n"
         "  prints a table per op and one replayable counterexample per op with UNSOUND\n"
         "  answers (docs/AUDIT.md). Needs a Python that imports spmdkit and the framework:\n"
         "  $SPMD_PYTHON, else build/python-venv/bin/python, else python3.\n"
         "  paddle-tests runs Paddle's own rule unit tests (test_*_rule.py in DIR) with every\n"
         "  rule call recorded and judges spmdkit's answer to each against Paddle's.\n"
         "  exit 0: audited; 2: bad arguments; 3: spmdkit or the framework not importable\n";
  return code;
}

bool Executable(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// Runs argv (argv[0] looked up in PATH when it has no slash) and returns its exit status;
// its stderr's last line goes to `last_line`. 127 when it cannot be started.
int RunCapturingStderr(const std::vector<std::string>& argv, std::string& last_line) {
  int fds[2];
  if (::pipe(fds) != 0) return 127;
  const pid_t pid = ::fork();
  if (pid < 0) return 127;
  if (pid == 0) {
    ::dup2(fds[1], 2);
    ::close(fds[0]);
    ::close(fds[1]);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  std::string text;
  char buffer[4096];
  ssize_t n = 0;
  while ((n = ::read(fds[0], buffer, sizeof buffer)) > 0) text.append(buffer, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  const size_t cut = text.rfind('\n');
  last_line = cut == std::string::npos ? text : text.substr(cut + 1);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int Report(ErrorType type, const std::string& field, const std::string& message, int code) {
  const SpmdError e(type, field, message);
  std::cerr << "spmd audit: " << ToString(e.type()) << ": " << e.what() << "\n";
  return code;
}

}  // namespace

std::string FindAuditPython(const std::string& self_exe) {
  if (const char* env = std::getenv("SPMD_PYTHON"); env != nullptr && *env != '\0') return env;
  const size_t slash = self_exe.rfind('/');
  if (slash != std::string::npos) {
    const std::string beside = self_exe.substr(0, slash) + "/../python-venv/bin/python";
    if (Executable(beside)) return beside;
  }
  if (Executable("build/python-venv/bin/python")) return "build/python-venv/bin/python";
  return "python3";
}

int Audit(const std::vector<std::string>& args) {
  if (args.empty()) return Usage(std::cerr, kExitUsage);
  if (args[0] == "--help" || args[0] == "-h") return Usage(std::cout, 0);
  if (args[0] != "paddle" && args[0] != "dtensor" && args[0] != "paddle-tests") {
    return Report(ErrorType::kInvalidArgument, "framework",
                  "expected paddle, dtensor or paddle-tests, got '" + args[0] + "'", kExitUsage);
  }
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  const std::string python = FindAuditPython(n > 0 ? std::string(self, static_cast<size_t>(n)) : "");
  std::string last_line;
  const int probe = RunCapturingStderr({python, "-c", "import spmdkit.audit"}, last_line);
  if (probe != 0) {
    return Report(ErrorType::kUnsupported, "python",
                  "spmdkit is not importable by " + python +
                      (probe == 127 ? " (it cannot be run)" : " (" + last_line + ")") +
                      "; build it with ci/python-check.sh or set SPMD_PYTHON",
                  kExitUnavailable);
  }
  std::cout.flush();
  std::vector<std::string> argv = {python, "-m", "spmdkit.audit"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> raw;
  for (const std::string& a : argv) raw.push_back(const_cast<char*>(a.c_str()));
  raw.push_back(nullptr);
  ::execvp(raw[0], raw.data());
  return Report(ErrorType::kUnsupported, "python", "cannot run " + python, kExitUnavailable);
}

}  // namespace spmd::cli
