// `spmd audit paddle|dtensor|paddle-tests`: another framework's sharding rules judged by spmdkit's
// checker and priced by its planner. The audit itself is Python (spmdkit.audit, it drives the
// framework's own rule objects); this command finds a Python that can import it and runs it.
#pragma once

#include <string>
#include <vector>

namespace spmd::cli {
// The Python the audit runs with: $SPMD_PYTHON, else the package's virtual environment
// next to this binary (build/bin/spmd -> build/python-venv/bin/python) or under the
// working directory (build/python-venv/bin/python), else python3 from PATH.
std::string FindAuditPython(const std::string& self_exe);
// Runs `python -m spmdkit.audit ARGS...` and returns its exit status. Exit 2 with
// `InvalidArgument` for a bad framework name; exit 3 with `Unsupported` when spmdkit or the
// framework is not importable (the message names which, and the Python tried).
int Audit(const std::vector<std::string>& args);
}  // namespace spmd::cli
