#include "cli/plan.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "rules/model/dist_attr.h"
#include "rules/model/dtype.h"
#include "rules/model/error.h"
#include "rules/model/mesh.h"
#include "io/placements.h"
#include "io/cost_model_json.h"
#include "io/plan_json.h"
#include "rules/reshard/reshard.h"
#include "rules/reshard/reshard_print.h"

namespace spmd::cli {
namespace {

int Usage(std::ostream& out, int code) {
  out << "usage: spmd plan --mesh 2x4 --shape 1024,512 --from '[S(0), P(sum)]' --to '[R, S(1)]'\n"
         "                 [--dtype float32] [--process-ids 0,1,...] [--json]\n"
         "                 [--to-mesh 4] [--to-process-ids 4,5,6,7]\n"
         "                 [--objective time|bytes] [--cost-model FILE]\n"
         "  prints the reshard plan with the fewest bytes per rank (or the least modelled\n"
         "  time, alpha-beta): its steps (group of mesh axes, collective, bytes per rank,\n"
         "  messages, modelled time), the total, the lower bound, their ratio and the time.\n"
         "  --mesh          mesh shape, sizes joined by x\n"
         "  --shape         global tensor shape, comma-separated ('' for a scalar)\n"
         "  --from, --to    placements, one per mesh axis: R, S(d), S(d)#k (co-shard), P(op)\n"
         "  --dtype         float64, float32 (default), int64, bool, bfloat16, float16\n"
         "  --process-ids   the mesh's process ids, row-major (default 0..n-1)\n"
         "  --to-mesh, --to-process-ids\n"
         "                  move the tensor to another mesh (--to is then on that mesh)\n"
         "  --objective     bytes (default): fewest bytes per rank; time: least modelled time\n"
         "  --cost-model    a JSON file of alpha and beta per step kind (docs/RESHARD.md \"Time\";\n"
         "                  default: the measured values built in)\n"
         "  --json          one JSON object with steps, bytes_per_rank, lower_bound_bytes, seconds\n";
  return code;
}

// Parses `text` as integers separated by `sep` (optional surrounding brackets).
std::vector<int64_t> ParseInts(std::string text, char sep, const std::string& flag,
                               const std::string& expected) {
  if (text.size() >= 2 && text.front() == '[' && text.back() == ']') {
    text = text.substr(1, text.size() - 2);
  }
  std::vector<int64_t> values;
  if (text.find_first_not_of(" ") == std::string::npos) return values;
  size_t start = 0;
  while (true) {
    const size_t end = text.find(sep, start);
    std::string part =
        text.substr(start, end == std::string::npos ? std::string::npos : end - start);
    const size_t first = part.find_first_not_of(' ');
    const size_t last = part.find_last_not_of(' ');
    part = first == std::string::npos ? "" : part.substr(first, last - first + 1);
    char* stop = nullptr;
    const long long value = part.empty() ? 0 : std::strtoll(part.c_str(), &stop, 10);
    if (part.empty() || *stop != '\0' || value < 0 || part.size() > 15) {
      ThrowInvalid(flag, "expected " + expected + ", got '" + text + "'");
    }
    values.push_back(value);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return values;
}

// Rethrows a library error under the flag the user typed.
[[noreturn]] void Rename(const SpmdError& e, const std::map<std::string, std::string>& flags) {
  std::string message = e.what();
  if (!e.field().empty() && message.rfind(e.field() + ": ", 0) == 0) {
    message = message.substr(e.field().size() + 2);
  }
  for (const auto& [prefix, flag] : flags) {
    if (e.field().rfind(prefix, 0) == 0) {
      throw SpmdError(e.type(), flag + e.field().substr(prefix.size()), message);
    }
  }
  throw e;
}

Mesh MakeMesh(const std::string& shape_text, const std::optional<std::string>& ids_text,
              const std::string& mesh_flag, const std::string& ids_flag) {
  const std::vector<int64_t> shape = ParseInts(shape_text, 'x', mesh_flag, "sizes like 2x4");
  std::vector<int64_t> ids;
  if (ids_text) ids = ParseInts(*ids_text, ',', ids_flag, "process ids like 0,1,2,3");
  try {
    return Mesh(shape, ids);
  } catch (const SpmdError& e) {
    Rename(e, {{"mesh_shape", mesh_flag}, {"process_ids", ids_flag}, {"axis_names", mesh_flag}});
  }
}

DistAttr ParsePlacements(const std::string& text, const Mesh& mesh, int rank,
                         const std::string& flag) {
  const DistAttr attr = io::ParsePlacementsOnMesh(text, mesh.ndim(), rank, flag);
  Validate(attr, mesh, rank, flag);
  return attr;
}

// One JSON line. Error texts are escaped already (SpmdError, EscapeForText); the replace
// handler makes sure dumping never throws.
std::string DumpLine(const nlohmann::json& value) {
  return value.dump(-1, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace) +
         "\n";
}

// Reports a refused request: on stderr, and on stdout as {"error": ...} with --json.
int ReportError(ErrorType type, const std::string& what, bool json_out) {
  const std::string message = EscapeForText(what);
  std::cerr << "spmd plan: " << ToString(type) << ": " << message << "\n";
  if (json_out) {
    std::cout << DumpLine(nlohmann::json{
        {"error", {{"type", std::string(ToString(type))}, {"message", message}}}});
  }
  return 2;
}

int PlanOrThrow(const std::vector<std::string>& args, bool& json_out) {
  std::map<std::string, std::string> values;
  {
    const std::vector<std::string> known = {"--mesh",    "--process-ids",   "--shape",
                                            "--dtype",   "--from",          "--to",
                                            "--to-mesh", "--to-process-ids",
                                            "--objective", "--cost-model"};
    for (size_t i = 0; i < args.size(); ++i) {
      std::string flag = args[i];
      if (flag == "--help" || flag == "-h") return Usage(std::cout, 0);
      if (flag == "--json") {
        json_out = true;
        continue;
      }
      std::optional<std::string> value;
      if (const size_t eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
        value = flag.substr(eq + 1);
        flag = flag.substr(0, eq);
      }
      if (std::find(known.begin(), known.end(), flag) == known.end()) {
        ThrowInvalid(flag, "unknown argument (spmd plan --help lists the flags)");
      }
      if (!value) {
        if (i + 1 >= args.size()) ThrowInvalid(flag, "needs a value");
        value = args[++i];
      }
      values[flag] = *value;
    }
    for (const char* required : {"--mesh", "--shape", "--from", "--to"}) {
      if (!values.count(required)) ThrowInvalid(required, "is required");
    }
    auto get = [&](const std::string& flag) -> std::optional<std::string> {
      const auto it = values.find(flag);
      return it == values.end() ? std::nullopt : std::optional<std::string>(it->second);
    };
    const Mesh mesh = MakeMesh(values["--mesh"], get("--process-ids"), "--mesh", "--process-ids");
    Mesh to_mesh = mesh;
    if (get("--to-mesh") || get("--to-process-ids")) {
      to_mesh = MakeMesh(get("--to-mesh").value_or(values["--mesh"]), get("--to-process-ids"),
                         get("--to-mesh") ? "--to-mesh" : "--mesh", "--to-process-ids");
    }
    const std::vector<int64_t> shape =
        ParseInts(values["--shape"], ',', "--shape", "non-negative sizes like 1024,512");
    DType dtype = DType::kFloat32;
    if (const auto text = get("--dtype")) {
      const std::optional<DType> parsed = ParseDType(*text);
      if (!parsed)
        ThrowInvalid("--dtype", "unknown dtype '" + *text + "' (float64, float32, int64, bool, bfloat16, float16)");
      dtype = *parsed;
    }
    const int rank = static_cast<int>(shape.size());
    const DistAttr from = ParsePlacements(values["--from"], mesh, rank, "--from");
    const DistAttr to = ParsePlacements(values["--to"], to_mesh, rank, "--to");
    ReshardOptions options;
    if (const auto text = get("--objective")) {
      if (*text == "time") {
        options.objective = ReshardObjective::kTime;
      } else if (*text == "bytes") {
        options.objective = ReshardObjective::kBytes;
      } else {
        ThrowInvalid("--objective", "expected time or bytes, got '" + *text + "'");
      }
    }
    if (const auto path = get("--cost-model")) options.model = io::LoadCostModel(*path, "--cost-model");
    ReshardPlan plan;
    try {
      plan = PlanReshard(mesh, from, to_mesh, to, shape, dtype, options);
    } catch (const SpmdError& e) {
      Rename(e, {{"shape", "--shape"}, {"from", "--from"}, {"to", "--to"}});
    }
    // Formatted in full before anything is printed: a failure prints no partial plan.
    std::cout << (json_out ? DumpLine(io::ToJson(plan)) : ToString(plan));
    return 0;
  }
}

}  // namespace

int Plan(const std::vector<std::string>& args) {
  bool json_out = false;
  try {
    return PlanOrThrow(args, json_out);
  } catch (const SpmdError& e) {
    return ReportError(e.type(), e.what(), json_out);
  } catch (const std::exception& e) {
    return ReportError(ErrorType::kInvalidArgument, e.what(), json_out);
  }
}

}  // namespace spmd::cli
