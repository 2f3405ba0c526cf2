#include "cli/check.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <map>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "checker/completeness.h"
#include "checker/grad_check.h"
#include "checker/shrink.h"
#include "checker/simulate.h"
#include "checker/sweep.h"
#include "rules/model/error.h"
#include "io/case_json.h"
#include "io/infer_io.h"

namespace spmd::cli {
namespace {

using nlohmann::json;

int Usage(std::ostream& out, int code) {
  out << "usage: spmd check [--op NAME]... [--mesh 2x3]... [--exhaustive | --random N]\n"
         "                  [--seed S] [--jobs J] [--json] [--no-reverse] [--max-combinations N]\n"
         "                  [--grad | --no-grad] [--grad-families N] [--grad-layouts N]\n"
         "       the soundness sweep, then the sharded gradient check of every op with a VJP\n"
         "       (--grad: the gradient check alone; --no-grad: the sweep alone)\n"
         "       spmd check --grad-case JSON replay one gradient case (a request plus\n"
         "                                   \"cotangents\", \"seed\", \"shard_seed\")\n"
         "       spmd check --case JSON      replay one case (the rule's answer, checked)\n"
         "       spmd check --claim JSON     check a claimed output dist attr (\"claim_outputs\")\n"
         "       spmd check --completeness [--op NAME]... [--mesh 2]...   missed no-reshard answers\n"
         "  JSON is a request as for `spmd infer` (op, mesh_shape, process_ids, attrs, inputs)\n"
         "  plus \"seed\"; `-` reads it from stdin.\n";
  return code;
}

std::vector<int64_t> ParseMesh(const std::string& text) {
  std::vector<int64_t> shape;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, 'x')) {
    try {
      shape.push_back(std::stoll(part));
    } catch (const std::exception&) {
      ThrowInvalid("--mesh", "expected sizes like 2x3, got '" + text + "'");
    }
  }
  Mesh check(shape);  // validates
  return shape;
}

json ReadJsonArg(const std::string& text) {
  std::string body = text;
  if (text == "-") body.assign(std::istreambuf_iterator<char>(std::cin), {});
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) ThrowInvalid("JSON", "expected one JSON object");
  return j;
}

void PrintOutcome(const checker::Case& c, const checker::Outcome& outcome, const char* sound, const char* unsound) {
  std::printf("op %s on mesh %s\n", c.op->name.c_str(), ToString(c.mesh).c_str());
  for (size_t i = 0; i < outcome.required.size(); ++i) {
    std::printf("  input %zu  %s\n", i, ToPlacementString(outcome.required[i], c.mesh.ndim()).c_str());
  }
  for (size_t o = 0; o < outcome.outputs.size(); ++o) {
    std::printf("  output %zu %s\n", o, ToPlacementString(outcome.outputs[o], c.mesh.ndim()).c_str());
  }
  switch (outcome.verdict) {
    case checker::Verdict::kSound: std::printf("%s\n", sound); break;
    case checker::Verdict::kUnsound: {
      const auto& ce = *outcome.counterexample;
      std::printf("%s: %s\n", unsound, ce.message.c_str());
      break;
    }
    case checker::Verdict::kNotApplicable: std::printf("NOT APPLICABLE: %s\n", outcome.note.c_str()); break;
  }
}

// A case holding more than this many elements over all ranks is checked shrunk.
constexpr int64_t kShrinkAbove = int64_t{1} << 16;

std::string ShapeText(const Shape& shape) {
  std::string text = "[";
  for (size_t d = 0; d < shape.size(); ++d) text += (d ? "," : "") + std::to_string(shape[d]);
  return text + "]";
}

// Checks a large case on shrunk sizes with the same layout (docs/CHECKER.md, "Shrinking a
// large case") and says so: the original and the checked shapes.
void ShrinkLargeCase(checker::Case& c, const std::vector<DistAttr>& required, const std::vector<DistAttr>& claimed) {
  if (checker::SimulatedElements(c, c.shapes) <= kShrinkAbove) return;
  const checker::Shrunk shrunk = checker::ShrinkCase(c, required, claimed);
  if (!shrunk.shrunk) {
    std::printf("not shrunk (%s)\n", shrunk.why_not.c_str());
    return;
  }
  std::printf("checked on shrunk sizes with the same layout on the mesh (same residues, same chunk structure):\n");
  for (size_t i = 0; i < c.shapes.size(); ++i) {
    std::printf("  input %zu  %s -> %s\n", i, ShapeText(c.shapes[i]).c_str(), ShapeText(shrunk.shapes[i]).c_str());
  }
  c.shapes = shrunk.shapes;
}

// A claim is checked on several seeds; the first counterexample found is reported.
int Claim(const std::string& text) {
  std::vector<DistAttr> claims;
  checker::Case c = io::CaseFromJson(ReadJsonArg(text), &claims);
  ShrinkLargeCase(c, c.inputs, claims);
  checker::Outcome outcome;
  for (int k = 0; k < 4; ++k) {
    outcome = checker::CheckClaim(c, c.inputs, claims);
    if (outcome.verdict != checker::Verdict::kSound) break;
    ++c.seed;
  }
  PrintOutcome(c, outcome, "SOUND", "UNSOUND");
  return outcome.verdict == checker::Verdict::kSound ? 0 : 1;
}

int Replay(const std::string& text) {
  checker::Case c = io::CaseFromJson(ReadJsonArg(text), nullptr);
  std::vector<TensorArg> args;
  for (size_t i = 0; i < c.shapes.size(); ++i) args.push_back({c.shapes[i], c.inputs[i]});
  checker::Outcome outcome;
  InferResult rule;
  try {
    rule = InferForward(*c.op, c.mesh, args, c.attrs);
  } catch (const SpmdError& e) {  // as CheckForward: the rule refusing is not applicable
    outcome.note = std::string("the rule refuses: ") + e.what();
    PrintOutcome(c, outcome, "PASSED", "FAILED");
    return 0;
  }
  ShrinkLargeCase(c, rule.inputs, rule.outputs);  // the rule's answer for the given sizes
  outcome = checker::CheckClaim(c, rule.inputs, rule.outputs);
  PrintOutcome(c, outcome, "PASSED", "FAILED");
  return outcome.verdict == checker::Verdict::kUnsound ? 1 : 0;
}

// The JSON form of a gradient case: a request as for `spmd infer` (op, mesh_shape,
// process_ids, attrs, inputs) plus "cotangents" (dist attrs, one per output), "seed" (the
// values) and "shard_seed" (the partial addends).
std::string GradCaseToJson(const checker::GradCase& c) {
  checker::Case forward{c.op, c.mesh, c.shapes, c.inputs, c.attrs, c.seed};
  json j = json::parse(io::CaseToJson(forward));
  j["cotangents"] = json::array();
  for (const DistAttr& g : c.cotangents) j["cotangents"].push_back(io::DistAttrToJson(g));
  j["shard_seed"] = c.shard_seed;
  return j.dump();
}

std::string GradReplay(const checker::GradCase& c) {
  return "build/bin/spmd check --grad-case '" + GradCaseToJson(c) + "'";
}

checker::GradCase GradCaseFromJson(const json& j) {
  const checker::Case forward = io::CaseFromJson(j, nullptr);
  checker::GradCase c;
  c.op = forward.op;
  c.mesh = forward.mesh;
  c.shapes = forward.shapes;
  c.inputs = forward.inputs;
  c.attrs = forward.attrs;
  c.seed = forward.seed;
  if (j.contains("shard_seed")) {
    if (!j["shard_seed"].is_number_unsigned() && !j["shard_seed"].is_number_integer()) {
      ThrowInvalid("shard_seed", "expected an integer");
    }
    c.shard_seed = j["shard_seed"].get<uint64_t>();
  }
  const std::vector<Shape> out_shapes = InferOutputShapes(*c.op, c.shapes, c.op->NormalizeAttrs(c.attrs));
  if (!j.contains("cotangents")) {  // absent: every cotangent replicated
    for (const Shape& s : out_shapes) c.cotangents.push_back(DistAttr::Replicated(static_cast<int>(s.size())));
    return c;
  }
  json list = j["cotangents"];
  if (!list.is_array()) ThrowInvalid("cotangents", "expected a list");
  if (list.size() != out_shapes.size()) {
    ThrowInvalid("cotangents", "has " + std::to_string(list.size()) + " entries, " + c.op->name + " has " +
                                   std::to_string(out_shapes.size()) + " outputs here");
  }
  for (size_t o = 0; o < list.size(); ++o) {
    if (!list[o].is_object()) ThrowInvalid("cotangents[" + std::to_string(o) + "]", "expected an object");
    list[o]["shape"] = out_shapes[o];
  }
  for (const TensorArg& t : io::ParseTensorList(json{{"cotangents", list}}, "cotangents")) {
    c.cotangents.push_back(t.dist);
  }
  return c;
}

int GradReplayCase(const std::string& text) {
  const checker::GradCase c = GradCaseFromJson(ReadJsonArg(text));
  if (!c.op->vjp) ThrowUnsupported("op", c.op->name + " has no VJP (its declaration in rules/ops/ attaches none): no gradient to check");
  const checker::GradOutcome outcome = checker::CheckGrad(c);
  std::printf("gradient of %s on mesh %s\n", c.op->name.c_str(), ToString(c.mesh).c_str());
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    std::printf("  input %zu     %s %s\n", i, ShapeText(c.shapes[i]).c_str(),
                ToPlacementString(c.inputs[i], c.mesh.ndim()).c_str());
  }
  for (size_t o = 0; o < c.cotangents.size(); ++o) {
    std::printf("  cotangent %zu %s\n", o, ToPlacementString(c.cotangents[o], c.mesh.ndim()).c_str());
  }
  switch (outcome.verdict) {
    case checker::GradVerdict::kPassed: std::printf("PASSED (%d calls)\n", outcome.calls); return 0;
    case checker::GradVerdict::kFailed:
      std::printf("FAILED %s: %s\n", outcome.what.c_str(), outcome.message.c_str());
      return 1;
    case checker::GradVerdict::kNotApplicable:
      std::printf("NOT APPLICABLE: %s\n", outcome.note.c_str());
      return 0;
  }
  return 0;
}

// Totals of a run, for the last line.
struct Totals {
  int64_t cases = 0, passed = 0, failed = 0, skipped = 0;
  std::map<std::string, bool> ops;
};

// The gradient part: its table and failures (text), or its rows (JSON); adds to `totals`.
json GradPart(const checker::GradOptions& options, bool as_json, Totals& totals) {
  const bool tty = isatty(fileno(stderr));
  const auto start = std::chrono::steady_clock::now();
  const auto rows = checker::RunGradCheck(options, [&](const checker::GradRow& row, size_t done, size_t total) {
    if (tty) {
      std::fprintf(stderr, "\r[%zu/%zu] gradient %-28s %8lld cases", done, total, row.op.c_str(),
                   static_cast<long long>(row.cases));
    } else if (done % 20 == 0 || done == total) {
      std::fprintf(stderr, "[%zu/%zu] gradients checked through %s\n", done, total, row.op.c_str());
    }
  });
  if (tty && !rows.empty()) std::fprintf(stderr, "\n");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Totals grad;
  for (const auto& r : rows) {
    grad.cases += r.cases;
    grad.passed += r.passed;
    grad.failed += r.failed;
    grad.skipped += r.skipped;
    grad.ops[r.op] = true;
    totals.ops[r.op] = true;
  }
  totals.cases += grad.cases;
  totals.passed += grad.passed;
  totals.failed += grad.failed;
  totals.skipped += grad.skipped;
  json out = {{"cases", grad.cases}, {"passed", grad.passed}, {"failed", grad.failed}, {"skipped", grad.skipped},
              {"ops", grad.ops.size()}, {"seconds", seconds}, {"rows", json::array()}};
  if (as_json) {
    for (const auto& r : rows) {
      out["rows"].push_back({{"op", r.op}, {"cases", r.cases}, {"passed", r.passed}, {"failed", r.failed},
                             {"skipped", r.skipped}, {"calls", r.calls}, {"reshards", r.reshards},
                             {"partial_operands", r.partial_operands}, {"seconds", r.seconds},
                             {"failure", r.failure}});
    }
    return out;
  }
  std::printf("%-28s %8s %8s %8s %9s %9s %7s %8s %8s\n", "gradient of", "calls", "reshards", "partial", "cases",
              "passed", "failed", "skipped", "seconds");
  for (const auto& r : rows) {
    std::printf("%-28s %8lld %8lld %8lld %9lld %9lld %7lld %8lld %8.2f\n", r.op.c_str(),
                static_cast<long long>(r.calls), static_cast<long long>(r.reshards),
                static_cast<long long>(r.partial_operands), static_cast<long long>(r.cases), static_cast<long long>(r.passed), static_cast<long long>(r.failed),
                static_cast<long long>(r.skipped), r.seconds);
  }
  for (const auto& r : rows) {
    if (!r.failure.empty()) std::printf("FAIL gradient of %s: %s\n", r.op.c_str(), r.failure.c_str());
  }
  std::printf("gradients: %.1f s, %lld cases over %zu ops with a VJP: %lld passed, %lld failed (%lld not applicable: "
              "the forward refused)\n",
              seconds, static_cast<long long>(grad.cases), grad.ops.size(), static_cast<long long>(grad.passed),
              static_cast<long long>(grad.failed), static_cast<long long>(grad.skipped));
  return out;
}

// The sweep (unless grad_only), then the gradient check (when with_grad); one total line.
int Sweep(const checker::SweepOptions& options, const checker::GradOptions* grad, bool grad_only, bool as_json) {
  Totals totals;
  if (grad_only) {
    const json part = GradPart(*grad, as_json, totals);
    if (as_json) std::printf("%s\n", json{{"grad", part}}.dump(1).c_str());
    else {
      std::printf("checked %lld cases over %zu ops: %lld passed, %lld failed\n", static_cast<long long>(totals.cases),
                  totals.ops.size(), static_cast<long long>(totals.passed), static_cast<long long>(totals.failed));
    }
    return totals.failed == 0 ? 0 : 1;
  }
  const bool tty = isatty(fileno(stderr));
  const auto start = std::chrono::steady_clock::now();
  auto rows = checker::RunSweep(options, [&](const checker::SweepRow& row, size_t done, size_t total) {
    if (tty) {
      std::fprintf(stderr, "\r[%zu/%zu] %-28s %-6s %8lld cases", done, total, row.op.c_str(), row.mesh.c_str(),
                   static_cast<long long>(row.cases));
    } else if (done % 20 == 0 || done == total) {
      std::fprintf(stderr, "[%zu/%zu] checked through %s %s\n", done, total, row.op.c_str(), row.mesh.c_str());
    }
  });
  if (tty) std::fprintf(stderr, "\n");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int64_t cases = 0, passed = 0, failed = 0, skipped = 0, simulated = 0, reused = 0;
  for (const auto& r : rows) {
    simulated += r.simulated;
    reused += r.reused;
    cases += r.cases;
    passed += r.passed;
    failed += r.failed;
    skipped += r.skipped;
    totals.ops[r.op] = true;
  }
  totals.cases = cases;
  totals.passed = passed;
  totals.failed = failed;
  totals.skipped = skipped;
  if (as_json) {
    json out = {{"cases", cases}, {"passed", passed}, {"failed", failed}, {"skipped", skipped},
                {"ops", totals.ops.size()}, {"seconds", seconds}, {"simulated", simulated},
                {"reused", reused}, {"rows", json::array()}};
    for (const auto& r : rows) {
      out["rows"].push_back({{"op", r.op}, {"mesh", r.mesh}, {"cases", r.cases}, {"passed", r.passed},
                             {"failed", r.failed}, {"skipped", r.skipped}, {"seconds", r.seconds},
                             {"failures", r.failures}});
    }
    if (grad != nullptr) out["grad"] = GradPart(*grad, true, totals);
    out["total"] = {{"cases", totals.cases}, {"passed", totals.passed}, {"failed", totals.failed}};
    std::printf("%s\n", out.dump(1).c_str());
  } else {
    std::printf("%-28s %-7s %9s %9s %7s %8s %8s\n", "op", "mesh", "cases", "passed", "failed", "skipped", "seconds");
    for (const auto& r : rows) {
      std::printf("%-28s %-7s %9lld %9lld %7lld %8lld %8.2f\n", r.op.c_str(), r.mesh.c_str(),
                  static_cast<long long>(r.cases), static_cast<long long>(r.passed),
                  static_cast<long long>(r.failed), static_cast<long long>(r.skipped), r.seconds);
    }
    for (const auto& r : rows) {
      for (const std::string& f : r.failures) std::printf("FAIL %s %s: %s\n", r.op.c_str(), r.mesh.c_str(), f.c_str());
    }
    std::printf("%.1f s, %.0f cases per second (%lld not applicable: the rule refused)\n", seconds,
                seconds > 0 ? static_cast<double>(cases) / seconds : 0.0, static_cast<long long>(skipped));
    if (simulated + reused > 0) {
      std::printf("simulated %lld distinct (required, claimed) pairs; %lld checks reuse the outcome of the same pair "
                  "on the same values in their family (checker/simulate.h, SimulationCache)\n",
                  static_cast<long long>(simulated), static_cast<long long>(reused));
    }
    if (grad != nullptr) {
      std::printf("rules: %lld cases over %zu ops: %lld passed, %lld failed\n", static_cast<long long>(cases),
                  totals.ops.size(), static_cast<long long>(passed), static_cast<long long>(failed));
      GradPart(*grad, false, totals);
    }
    std::printf("checked %lld cases over %zu ops: %lld passed, %lld failed\n", static_cast<long long>(totals.cases),
                totals.ops.size(), static_cast<long long>(totals.passed), static_cast<long long>(totals.failed));
  }
  return totals.failed == 0 ? 0 : 1;
}

int Completeness(const checker::CompletenessOptions& options) {
  const auto rows = checker::RunCompleteness(options);
  int64_t resharding = 0, missed = 0, unsearched = 0;
  std::printf("%-28s %-5s %10s %7s %10s\n", "op", "mesh", "resharding", "missed", "unsearched");
  for (const auto& r : rows) {
    std::printf("%-28s %-5s %10lld %7lld %10lld\n", r.op.c_str(), r.mesh.c_str(),
                static_cast<long long>(r.resharding), static_cast<long long>(r.missed),
                static_cast<long long>(r.unsearched));
    resharding += r.resharding;
    missed += r.missed;
    unsearched += r.unsearched;
  }
  for (const auto& r : rows) {
    if (!r.example.empty()) std::printf("missed %s %s: %s\n", r.op.c_str(), r.mesh.c_str(), r.example.c_str());
  }
  std::printf("completeness: %lld resharding cases, %lld with a sound answer needing no reshard, %lld not searched\n",
              static_cast<long long>(resharding), static_cast<long long>(missed), static_cast<long long>(unsearched));
  return 0;
}

}  // namespace

int Check(const std::vector<std::string>& args) {
  try {
    checker::SweepOptions options;
    options.jobs = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    options.replay = io::ReplayCommand;
    bool as_json = false, completeness = false, grad_only = false, with_grad = true;
    checker::GradOptions grad;
    grad.replay = GradReplay;
    for (size_t i = 0; i < args.size(); ++i) {
      const std::string& a = args[i];
      auto value = [&]() -> const std::string& {
        if (i + 1 >= args.size()) ThrowInvalid(a, "needs a value");
        return args[++i];
      };
      auto number = [&]() {
        const std::string& v = value();
        try {
          return std::stoll(v);
        } catch (const std::exception&) {
          ThrowInvalid(a, "expected a number, got '" + v + "'");
        }
      };
      if (a == "--op") options.ops.push_back(value());
      else if (a == "--mesh") options.meshes.push_back(ParseMesh(value()));
      else if (a == "--exhaustive") options.exhaustive = true;
      else if (a == "--random") { options.exhaustive = false; options.random_cases = number(); }
      else if (a == "--seed") options.seed = static_cast<uint64_t>(number());
      else if (a == "--jobs") options.jobs = static_cast<int>(number());
      else if (a == "--json") as_json = true;
      else if (a == "--no-reverse") options.reverse = false;
      else if (a == "--max-combinations") options.max_combinations = number();
      else if (a == "--completeness") completeness = true;
      else if (a == "--grad") grad_only = true;
      else if (a == "--no-grad") with_grad = false;
      else if (a == "--grad-families") grad.families = number();
      else if (a == "--grad-layouts") grad.layouts = number();
      else if (a == "--grad-case") return GradReplayCase(value());
      else if (a == "--case") return Replay(value());
      else if (a == "--claim") return Claim(value());
      else if (a == "--help" || a == "-h") return Usage(std::cout, 0);
      else {
        std::cerr << "spmd check: unknown argument '" << a << "'\n";
        return Usage(std::cerr, 2);
      }
    }
    if (completeness) {
      checker::CompletenessOptions c;
      c.ops = options.ops;
      c.meshes = options.meshes;
      c.jobs = options.jobs;
      return Completeness(c);
    }
    if (grad_only && !with_grad) ThrowInvalid("--grad", "--grad and --no-grad exclude each other");
    if (grad.families < 0) ThrowInvalid("--grad-families", "must be >= 0");
    if (grad.layouts < 0) ThrowInvalid("--grad-layouts", "must be >= 0");
    if (grad_only && !options.ops.empty()) {
      for (const OpDecl* op : checker::SelectOps(options.ops)) {
        if (!op->vjp) ThrowUnsupported("--op", op->name + " has no VJP (its declaration in rules/ops/ attaches none): no gradient to check");
      }
    }
    grad.ops = options.ops;
    grad.seed = options.seed;
    grad.jobs = options.jobs;
    return Sweep(options, with_grad ? &grad : nullptr, grad_only, as_json);
  } catch (const SpmdError& e) {
    std::cerr << "spmd check: " << ToString(e.type()) << ": " << e.what() << "\n";
    return 2;
  }
}

}  // namespace spmd::cli
