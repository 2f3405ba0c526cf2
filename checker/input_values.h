// The values of a generated input: the one generator the checker's simulation, the VJP
// test, the completeness test and the runtime properties share.
#pragma once

#include <random>

#include "reference/tensor.h"
#include "rules/engine/op_decl.h"

namespace spmd::checker {

// Returns a tensor of `shape` holding values of `values`' kind: distinct (so that max and
// argmax have one answer) and spread over the kind's range (reals in (-2, 2), positives in
// (0.1, 2), non-zeros with |v| in (0.5, 2) and random signs, near-ones with |ln|v|| in
// (0.01, 0.06) and random signs); bool tensors hold 0/1 (1 with probability values.ones) and
// int64 tensors indices in [0, max(bound, 1)), one of
// them in [hit_begin, hit_end) when that range is not empty; kSmallInt gives integers in
// [-bound, bound] (repeats and zeros common) in a float dtype. Float values come as float64.
reference::Tensor MakeInputValues(const Shape& shape, InputValues values, std::mt19937_64& rng);

}  // namespace spmd::checker
