// spmd-train --plot (cli/loss_plot.h) on generated curves: every finite point is drawn
// once, inside the frame, in order; the uniform baseline is a dashed line at its value.
#include "cli/loss_plot.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace spmd::cli {
namespace {

std::vector<std::pair<double, double>> Points(const std::string& attribute) {
  std::vector<std::pair<double, double>> out;
  std::istringstream in(attribute);
  std::string pair;
  while (in >> pair) {
    const size_t comma = pair.find(',');
    out.push_back({std::stod(pair.substr(0, comma)), std::stod(pair.substr(comma + 1))});
  }
  return out;
}

TEST(LossPlotTest, DrawsEveryFinitePointInsideTheFrame) {
  std::mt19937 gen(4);
  for (int trial = 0; trial < 50; ++trial) {
    LossCurve curve;
    curve.title = "a <title> & more";
    curve.baseline = std::log(2 + gen() % 300);
    const int steps = 1 + gen() % 400;
    size_t finite = 0;
    for (int s = 0; s < steps; ++s) {
      const double loss = trial % 5 == 0 && s == steps / 2 ? std::numeric_limits<double>::quiet_NaN()
                                                            : 0.1 + (curve.baseline - 0.1) * std::exp(-0.01 * (s + 1));
      curve.train.push_back({static_cast<double>(s), loss});
      finite += std::isfinite(loss);
      if (s % 10 == 9) curve.validation.push_back({static_cast<double>(s), loss + 0.05});
    }
    const std::string svg = LossPlotSvg(curve);
    EXPECT_NE(svg.find("a &lt;title&gt; &amp; more"), std::string::npos);
    EXPECT_NE(svg.find(">step</text>"), std::string::npos);
    EXPECT_NE(svg.find(">loss (nats per token)</text>"), std::string::npos);
    const std::regex polyline("<polyline [^>]*points=\"([^\"]*)\"");
    std::vector<std::vector<std::pair<double, double>>> lines;
    for (auto it = std::sregex_iterator(svg.begin(), svg.end(), polyline); it != std::sregex_iterator(); ++it) {
      lines.push_back(Points((*it)[1].str()));
    }
    ASSERT_EQ(lines.size(), curve.validation.empty() ? 1u : 2u);
    EXPECT_EQ(lines[0].size(), finite);
    if (!curve.validation.empty()) {
      EXPECT_EQ(lines[1].size(), curve.validation.size());
    }
    for (const auto& line : lines) {
      for (size_t i = 0; i < line.size(); ++i) {
        EXPECT_GE(line[i].first, 64 - 1e-9);
        EXPECT_LE(line[i].first, 640 - 16 + 1e-9);
        EXPECT_GE(line[i].second, 36 - 1e-9);
        EXPECT_LE(line[i].second, 400 - 48 + 1e-9);
        if (i > 0) {
          EXPECT_GT(line[i].first, line[i - 1].first);  // steps in order
        }
      }
    }
    // The baseline: a dashed horizontal line, above every training point (losses below it).
    std::smatch dashed;
    ASSERT_TRUE(std::regex_search(svg, dashed, std::regex("<line x1=\"[^\"]*\" y1=\"([^\"]*)\" x2=\"[^\"]*\" y2=\"([^\"]*)\" stroke=\"#888\" stroke-dasharray")));
    EXPECT_EQ(dashed[1].str(), dashed[2].str());
    const double baseline_y = std::stod(dashed[1].str());
    for (const auto& point : lines[0]) EXPECT_GT(point.second, baseline_y - 1e-9);
  }
}

}  // namespace
}  // namespace spmd::cli
