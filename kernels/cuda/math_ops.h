// Device routines the contraction, reduction and norm files lend one another. Plain C++.
#pragma once

#include <vector>

#include "kernels/tensor.h"

namespace spmd::kernels::cuda {

// x (a floating dtype, on a CUDA device) summed over the dims flagged in `reduced` (kept as
// size 1 with keep_dim), computed as the sum kernel computes it (float32 and float64 in
// their own type, the 2-byte floats in float32 and rounded once); on x's device and
// stream, not synchronized. `reduced` has one flag per dim of x. The caller makes x's
// device current.
Tensor SumOnDevice(const Tensor& x, const std::vector<bool>& reduced, bool keep_dim);

}  // namespace spmd::kernels::cuda
