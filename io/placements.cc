#include "io/placements.h"

#include "rules/model/error.h"

namespace spmd::io {

int CountPlacements(std::string_view text) {
  int depth = 0, commas = 0;
  bool any = false;
  for (char c : text) {
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (c == ',' && depth == 0) ++commas;
    if (c != '[' && c != ']' && c != ' ' && c != ',') any = true;
  }
  return any ? commas + 1 : 0;
}

DistAttr ParsePlacementsOnMesh(std::string_view text, int mesh_ndim, int rank,
                               const std::string& field) {
  DistAttr attr = ParsePlacementString(text, rank, field);
  const int count = CountPlacements(text);
  if (count != mesh_ndim) {
    ThrowInvalid(field, "'" + std::string(text) + "' has " + std::to_string(count) +
                            " placement(s) for a mesh of " + std::to_string(mesh_ndim) +
                            " axis/axes; give one placement per mesh axis");
  }
  return attr;
}

}  // namespace spmd::io
