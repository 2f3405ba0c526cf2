// Training on CUDA devices (kernels/cuda/cuda.h): registers their transfers with
// train/device.h. Library spmd_train_cuda, built with CUDA only. Not yet run on a GPU.
#pragma once

namespace spmd::train {

// Registers the CUDA Backend (kernels::cuda::EnableCuda) and its ToDevice / ToHost as the
// DeviceKind::kCuda transfer. Idempotent.
void EnableCudaTraining();

}  // namespace spmd::train
