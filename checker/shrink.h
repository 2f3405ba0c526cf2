// Shrinking a case for the simulated check (docs/CHECKER.md, "Shrinking a large case"): a
// claim on a model-sized shape is checked on small sizes that lay out on the mesh the same
// way, so that the verdict is the same and the check takes about a second.
#pragma once

#include <string>
#include <vector>

#include "checker/simulate.h"

namespace spmd::checker {

struct Shrunk {
  std::vector<Shape> shapes;  // the input shapes to check (the given ones if none shrank)
  bool shrunk = false;        // some size is smaller than given
  std::string why_not;        // why the sizes were kept ("" when shrunk)
};

// Returns input shapes, each dim no larger than given, on which the claim `required` ->
// `claimed` for `c` has the verdict it has on c.shapes. Einsum ops only: each factor's size
// s becomes the smallest s' = s (mod L), L the lcm over the factor's dims of the product of
// the mesh axes sharding it, whose layout has the same structure: the chunk boundaries of
// every dim of the factor in the same order with the same coincidences, the same empty
// chunks, and every piece between boundaries of size 1 in both or at least 2 in both.
// A DimTrans op, an op with size-bearing attrs (positions, sections, target shapes),
// argmax (its output, a position, ranges over the reduced size), or a shrunk request the
// declaration refuses or gives other output sizes keeps the given shapes. `required` and `claimed` must be valid for c (as CheckClaim validates them).
Shrunk ShrinkCase(const Case& c, const std::vector<DistAttr>& required, const std::vector<DistAttr>& claimed);

// Returns the number of elements the simulation of `shapes` holds: every input and output
// counted once per rank (saturating at kMaxSimulatedElements + 1).
int64_t SimulatedElements(const Case& c, const std::vector<Shape>& shapes);

}  // namespace spmd::checker
