// Training on the simulated device (kernels/sim/sim.h): registers its transfers with
// train/device.h. Library spmd_train_sim (test support, like the sim: not installed).
#pragma once

namespace spmd::train {

// Registers the sim Backend (kernels::sim::EnableSim) and its ToDevice / ToHost as the
// DeviceKind::kSim transfer. Idempotent.
void EnableSimTraining();

}  // namespace spmd::train
