#include "cli/loss_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "rules/model/error.h"

namespace spmd::cli {
namespace {

constexpr double kWidth = 640, kHeight = 400, kLeft = 64, kRight = 16, kTop = 36, kBottom = 48;

// A tick spacing of 1, 2 or 5 x 10^k giving about `count` ticks over [0, top].
double TickStep(double top, int count) {
  const double raw = top / count;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (const double m : {1.0, 2.0, 5.0}) {
    if (m * power >= raw) return m * power;
  }
  return 10 * power;
}

std::string Number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", v);
  return text;
}

std::string Escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else out += c;
  }
  return out;
}

}  // namespace

std::string LossPlotSvg(const LossCurve& curve) {
  double max_step = 1, max_loss = std::isfinite(curve.baseline) ? curve.baseline : 0;
  for (const auto* series : {&curve.train, &curve.validation}) {
    for (const auto& [x, y] : *series) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      max_step = std::max(max_step, x);
      max_loss = std::max(max_loss, y);
    }
  }
  const double y_step = TickStep(max_loss > 0 ? max_loss : 1, 6);
  const double y_top = y_step * std::ceil(max_loss / y_step + 1e-9);
  const double x_step = TickStep(max_step, 8);
  const double x_top = x_step * std::ceil(max_step / x_step - 1e-9);
  const double plot_w = kWidth - kLeft - kRight, plot_h = kHeight - kTop - kBottom;
  auto px = [&](double x) { return kLeft + plot_w * x / x_top; };
  auto py = [&](double y) { return kTop + plot_h * (1 - y / y_top); };

  std::ostringstream svg;
  svg << std::fixed << std::setprecision(1);  // a tenth of a pixel
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << kHeight
      << "\" viewBox=\"0 0 " << kWidth << " " << kHeight << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg << "<text x=\"" << kWidth / 2 << "\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">"
      << Escape(curve.title) << "</text>\n";
  // Grid and ticks.
  for (double y = 0; y <= y_top + y_step / 2; y += y_step) {
    svg << "<line x1=\"" << kLeft << "\" y1=\"" << py(y) << "\" x2=\"" << kWidth - kRight << "\" y2=\"" << py(y)
        << "\" stroke=\"#e0e0e0\"/>\n<text x=\"" << kLeft - 6 << "\" y=\"" << py(y) + 4
        << "\" text-anchor=\"end\">" << Number(y) << "</text>\n";
  }
  for (double x = 0; x <= x_top + x_step / 2; x += x_step) {
    svg << "<line x1=\"" << px(x) << "\" y1=\"" << py(0) << "\" x2=\"" << px(x) << "\" y2=\"" << py(0) + 5
        << "\" stroke=\"black\"/>\n<text x=\"" << px(x) << "\" y=\"" << py(0) + 18
        << "\" text-anchor=\"middle\">" << Number(x) << "</text>\n";
  }
  svg << "<line x1=\"" << kLeft << "\" y1=\"" << py(0) << "\" x2=\"" << kWidth - kRight << "\" y2=\"" << py(0)
      << "\" stroke=\"black\"/>\n<line x1=\"" << kLeft << "\" y1=\"" << kTop << "\" x2=\"" << kLeft << "\" y2=\""
      << py(0) << "\" stroke=\"black\"/>\n";
  svg << "<text x=\"" << kLeft + plot_w / 2 << "\" y=\"" << kHeight - 10 << "\" text-anchor=\"middle\">step</text>\n";
  svg << "<text transform=\"translate(16 " << kTop + plot_h / 2
      << ") rotate(-90)\" text-anchor=\"middle\">loss (nats per token)</text>\n";
  // The uniform prediction.
  if (std::isfinite(curve.baseline) && curve.baseline > 0) {
    svg << "<line x1=\"" << kLeft << "\" y1=\"" << py(curve.baseline) << "\" x2=\"" << kWidth - kRight
        << "\" y2=\"" << py(curve.baseline) << "\" stroke=\"#888\" stroke-dasharray=\"6 4\"/>\n";
    svg << "<text x=\"" << kWidth - kRight - 4 << "\" y=\"" << py(curve.baseline) - 5
        << "\" text-anchor=\"end\" fill=\"#555\">uniform: ln(vocab) = " << Number(std::round(curve.baseline * 100) / 100)
        << "</text>\n";
  }
  auto polyline = [&](const std::vector<std::pair<double, double>>& series, const char* colour, bool dots) {
    std::ostringstream points;
    points << std::fixed << std::setprecision(1);
    for (const auto& [x, y] : series) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      points << px(x) << "," << py(y) << " ";
      if (dots) svg << "<circle cx=\"" << px(x) << "\" cy=\"" << py(y) << "\" r=\"3\" fill=\"" << colour << "\"/>\n";
    }
    svg << "<polyline fill=\"none\" stroke=\"" << colour << "\" stroke-width=\"1.5\" points=\"" << points.str()
        << "\"/>\n";
  };
  polyline(curve.train, "#1f77b4", false);
  if (!curve.validation.empty()) polyline(curve.validation, "#d62728", true);
  // Legend, bottom left: a falling curve leaves that corner empty.
  const double lx = kLeft + 12, ly = py(0) - 32;
  svg << "<line x1=\"" << lx << "\" y1=\"" << ly << "\" x2=\"" << lx + 20 << "\" y2=\"" << ly
      << "\" stroke=\"#1f77b4\" stroke-width=\"1.5\"/><text x=\"" << lx + 26 << "\" y=\"" << ly + 4
      << "\">training loss</text>\n";
  if (!curve.validation.empty()) {
    svg << "<line x1=\"" << lx << "\" y1=\"" << ly + 16 << "\" x2=\"" << lx + 20 << "\" y2=\"" << ly + 16
        << "\" stroke=\"#d62728\" stroke-width=\"1.5\"/><text x=\"" << lx + 26 << "\" y=\"" << ly + 20
        << "\">validation loss</text>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

void WriteLossPlot(const LossCurve& curve, const std::string& path, const std::string& field) {
  std::ofstream out(path);
  out << LossPlotSvg(curve);
  out.close();
  if (!out) ThrowInvalid(field, "cannot write '" + path + "'");
}

}  // namespace spmd::cli
