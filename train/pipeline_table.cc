// Prints docs/PIPELINE.md's table: for each (p, m) and schedule, the simulated bubble
// (forward and backward one unit each, and backward two units) and the most micro-batch
// activations alive at once on stage 0 and on the last stage (forward done, backward not
// yet), from SimulateSchedule on the generated, checked schedules.
//
//   build/bin/pipeline_table > table.md
#include <cstdio>
#include <string>
#include <vector>

#include "train/pipeline.h"

int main() {
  using spmd::train::MakeSchedule;
  using spmd::train::ScheduleKind;
  using spmd::train::SimulateSchedule;
  std::printf(
      "| p | m | schedule | bubble (F=B=1) | (p-1)/(vm+p-1) | bubble (F=1, B=2) | peak live, stage "
      "0 | peak live, last stage | activations saved vs GPipe (stage 0) |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{2, 4}, {2, 8},  {4, 4},
                                                           {4, 8}, {4, 16}, {8, 16}};
  for (const auto& [p, m] : shapes) {
    int64_t gpipe_peak = 0;
    for (const auto& [kind, v] :
         std::vector<std::pair<ScheduleKind, int64_t>>{{ScheduleKind::kFillDrain, 1},
                                                       {ScheduleKind::kOneFOneB, 1},
                                                       {ScheduleKind::kInterleaved, 2},
                                                       {ScheduleKind::kInterleaved, 4}}) {
      const auto schedule = MakeSchedule(kind, p, m, v);
      const auto unit = SimulateSchedule(schedule, 1, 1);
      const auto two = SimulateSchedule(schedule, 1, 2);
      // An interleaved chunk holds 1/v of a stage's layers: its activations count 1/v.
      const double peak0 = static_cast<double>(unit.peak_live.front()) / static_cast<double>(v);
      const double peak_last = static_cast<double>(unit.peak_live.back()) / static_cast<double>(v);
      if (kind == ScheduleKind::kFillDrain) gpipe_peak = unit.peak_live.front();
      const std::string name = std::string(spmd::train::ToString(kind)) +
                               (v > 1 ? " v=" + std::to_string(v) : std::string());
      const double ideal = static_cast<double>(p - 1) / static_cast<double>(v * m + p - 1);
      std::printf(
          "| %lld | %lld | %s | %.4f | %.4f | %.4f | %lld (%.2f stage-layers) | %lld (%.2f) | "
          "%.0f%% |\n",
          static_cast<long long>(p), static_cast<long long>(m), name.c_str(), unit.bubble, ideal,
          two.bubble, static_cast<long long>(unit.peak_live.front()), peak0,
          static_cast<long long>(unit.peak_live.back()), peak_last,
          100.0 * (1.0 - peak0 / static_cast<double>(gpipe_peak)));
    }
  }
  return 0;
}
