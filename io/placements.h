// DTensor-style placement strings checked against a mesh: one placement per mesh axis.
#pragma once

#include <string>
#include <string_view>

#include "rules/model/dist_attr.h"

namespace spmd::io {

// The number of top-level entries of a placement list `[a, b(c), ...]` (0 for `[]`).
int CountPlacements(std::string_view text);

// ParsePlacementString(text, rank, field) for a mesh of `mesh_ndim` axes: a list with
// another number of entries is an InvalidArgument naming `field` (`'[S(0)]' has 1
// placement(s) for a mesh of 2 axis/axes; ...`), never padded with R or cut short.
DistAttr ParsePlacementsOnMesh(std::string_view text, int mesh_ndim, int rank,
                               const std::string& field);

}  // namespace spmd::io
