#include "rules/reshard/reshard_print.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

namespace spmd {
namespace {

std::string Join(const std::vector<int64_t>& values) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) {
    out += (i > 0 ? ", " : "") + std::to_string(values[i]);
  }
  return out;
}

std::string RatioText(const ReshardPlan& plan) {
  const double ratio = plan.Ratio();
  if (ratio == std::numeric_limits<double>::infinity()) return "n/a (the bound is 0)";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", ratio);
  return buf;
}

std::string Micros(int64_t picoseconds) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", static_cast<double>(picoseconds) * 1e-6);
  return buf;
}

}  // namespace

std::string ToString(const ReshardPlan& plan) {
  const bool move = !SameMesh(plan.from_mesh, plan.to_mesh);
  std::string out = "reshard [" + Join(plan.shape) + "] " + std::string(ToString(plan.dtype));
  out += move ? " from " + ToString(plan.from_mesh) + " to " + ToString(plan.to_mesh)
              : " on " + ToString(plan.from_mesh);
  out += "\nfrom " + ToPlacementString(plan.from, plan.from_mesh.ndim()) + " to " +
         ToPlacementString(plan.to, plan.to_mesh.ndim()) + "\n";
  // Columns sized to their widest cell.
  std::vector<std::vector<std::string>> rows = {
      {"#", "group", "collective", "after", "bytes/rank", "msgs", "time/us"}};
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const ReshardStep& step = plan.steps[i];
    rows.push_back({std::to_string(i + 1), GroupText(step), CollectiveText(step),
                    ToPlacementString(step.after, step.to_mesh.ndim()),
                    std::to_string(step.bytes_per_rank), std::to_string(step.messages),
                    Micros(step.picoseconds)});
  }
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  for (const auto& row : rows) {
    std::string line = " ";
    for (size_t c = 0; c < row.size(); ++c) {
      const size_t pad = width[c] - row[c].size();
      // Numbers right-aligned, text left-aligned.
      if (c == 0 || c >= 4) {
        line += " " + std::string(pad, ' ') + row[c];
      } else {
        line += " " + row[c] + std::string(pad, ' ');
      }
      if (c + 1 < row.size()) line += " ";
    }
    out += line + "\n";
  }
  if (plan.steps.empty()) out += "  (no steps: the tensor already has the target dist attr)\n";
  out += "total " + std::to_string(plan.bytes_per_rank) + " bytes per rank; lower bound " +
         std::to_string(plan.lower_bound_bytes) + " bytes; ratio " + RatioText(plan) + "\n";
  out += "modelled time " + Micros(plan.picoseconds) + " us (alpha-beta; planned for least " +
         std::string(ToString(plan.objective)) + ")\n";
  return out;
}

}  // namespace spmd
