// What the training properties under mpirun compare: the losses of every step and the
// parameters after the last, of a parallel run and of the same model trained alone.
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/comm/communicator.h"
#include "train/trainer.h"

namespace spmd::train {

struct History {
  std::vector<double> losses;
  // By parameter name; a pipeline stage holds only its own.
  std::map<std::string, std::vector<double>> params;
};

// Trains `steps` steps of `batch` and records the history (every rank's parameters
// gathered whole).
inline History TrainHistory(Trainer& trainer, const BatchSpec& batch, int steps,
                            runtime::Communicator& comm) {
  History h;
  for (int s = 0; s < steps; ++s) h.losses.push_back(trainer.Step(batch, s, comm).loss);
  const auto values = trainer.GatherParams(comm);
  for (size_t i = 0; i < values.size(); ++i) h.params[trainer.model().params()[i].name] = values[i];
  return h;
}

// "" when `got` equals `want` within `tolerance`, relative: each loss to its own
// magnitude, each parameter to its own largest magnitude or (`model_scale`) to the model's
// (every parameter of `want`); else the first difference. Every parameter of `got` must be
// one of `want`'s, of the same size.
inline std::string CompareHistories(const History& got, const History& want, double tolerance,
                                    bool model_scale = false) {
  std::ostringstream os;
  if (got.losses.size() != want.losses.size()) {
    os << got.losses.size() << " losses vs " << want.losses.size();
    return os.str();
  }
  for (size_t s = 0; s < want.losses.size(); ++s) {
    if (!(std::abs(got.losses[s] - want.losses[s]) <= tolerance * std::abs(want.losses[s]))) {
      os << "step " << s << " loss " << got.losses[s] << " vs " << want.losses[s];
      return os.str();
    }
  }
  double model = 1e-3;
  for (const auto& [name, values] : want.params) {
    for (double v : values) model = std::max(model, std::abs(v));
  }
  for (const auto& [name, values] : got.params) {
    const auto it = want.params.find(name);
    if (it == want.params.end() || it->second.size() != values.size()) {
      os << "parameter " << name << " is not the model's";
      return os.str();
    }
    double scale = 1e-3;
    for (double v : it->second) scale = std::max(scale, std::abs(v));
    if (model_scale) scale = model;
    for (size_t k = 0; k < values.size(); ++k) {
      if (!(std::abs(values[k] - it->second[k]) <= tolerance * scale)) {
        os << "parameter " << name << " element " << k << ": " << values[k] << " vs "
           << it->second[k];
        return os.str();
      }
    }
  }
  return "";
}

}  // namespace spmd::train
