// Named meshes as text: "dp=2,tp=2", the spelling of spmd-train's --mesh and of the
// launcher's mesh agreement (runtime/comm/launch.h).
#pragma once

#include <string>

#include "rules/model/mesh.h"

namespace spmd {

// Parses "dp=2,tp=2" into a mesh over ranks 0..n-1 with those axis names
// (InvalidArgument "mesh" on bad text; the Mesh constructor's errors for bad sizes).
Mesh ParseMeshSpec(const std::string& spec);

}  // namespace spmd
