// spmd-train --plot: the loss curve as a self-contained SVG (no plotting library).
//
// Training loss per step (a line), validation loss where it was measured (a line with a
// dot per point), and the loss of the uniform prediction, ln(vocab) nats per token, as a
// dashed line: a model that learns nothing stays there. Axes from step 0 and loss 0, ticks
// at 1, 2 or 5 times a power of ten, labelled "step" and "loss (nats per token)".
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace spmd::cli {

struct LossCurve {
  std::string title;
  std::vector<std::pair<double, double>> train;       // (step, loss)
  std::vector<std::pair<double, double>> validation;  // (step, loss); may be empty
  double baseline = 0;                                // ln(vocab)
};

// The SVG document (640 x 400). Non-finite points are left out.
std::string LossPlotSvg(const LossCurve& curve);

// Writes LossPlotSvg(curve) to `path`; InvalidArgument (`field`) when it cannot.
void WriteLossPlot(const LossCurve& curve, const std::string& path, const std::string& field);

}  // namespace spmd::cli
