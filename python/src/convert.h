// Python values -> spmdkit's C++ arguments, with the field names and checks of the JSON
// path (io/infer_io.cc): `inputs[1].dims_mapping[0]`, `attrs.perm`, `mesh_shape`. Every
// bad value is a SpmdError(kInvalidArgument) naming its field; integers outside int64 are
// rejected, never wrapped.
//
// Accepted forms (docs in python/spmdkit/__init__.py):
// - mesh: a spmdkit.Mesh, or a list of axis sizes;
// - a tensor: a dict {"shape", "dims_mapping" | "placements", "partial_dims", "partial"}
//   (the JSON request's form), or a (shape, dist) pair, or a bare shape (replicated);
//   dist: a dims_mapping list (-1, an axis, or a list of axes per dim), a placements
//   string "[S(0), R]", a spmdkit.DistAttr, or None (replicated);
// - attrs: a dict of bool, int, float, str, or lists of numbers.
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

#include <nanobind/nanobind.h>

#include "rules/model/attrs.h"
#include "rules/model/dist_attr.h"
#include "rules/model/mesh.h"
#include "rules/engine/op_decl.h"

namespace spmd::python {

// A key of the dict that is not one of `keys`: InvalidArgument naming it (`field.key`), so
// that a misspelt key is never silently ignored.
void RefuseUnknownKeys(nanobind::handle dict, const std::string& field,
                       std::initializer_list<const char*> keys);

int64_t ToInt(nanobind::handle value, const std::string& field);
std::vector<int64_t> ToInts(nanobind::handle value, const std::string& field);

// A Mesh from a spmdkit.Mesh (copied) or a list of axis sizes.
Mesh ToMesh(nanobind::handle mesh);

// A dist attr for a tensor of `rank` dims: a dims_mapping list, a placements string, a
// DistAttr or None. `field` names the tensor (e.g. "inputs[0]"). `mesh_ndim` >= 0: a
// placements string must have one entry per mesh axis (as `spmd plan` insists), else
// InvalidArgument on `field.placements`; -1: no mesh to check against.
DistAttr ToDistAttr(nanobind::handle dist, int rank, const std::string& field, int mesh_ndim);
// The dims_mapping list form only (-1, an axis, or a list of axes per dim).
std::vector<AxisList> ToDimsMapping(nanobind::handle value, const std::string& field);
// {axis: reduce op}; keys are ints or decimal strings.
PartialMap ToPartial(nanobind::handle value, const std::string& field);

// One tensor of a list `key` ("inputs", "outputs") at `index`. With `with_dist` false only
// the shape is read (reverse inputs). A dict with a key other than shape, dims_mapping,
// placements, partial_dims, partial is InvalidArgument naming it (`inputs[0].partail`);
// placements strings are checked against `mesh_ndim` as in ToDistAttr.
TensorArg ToTensor(nanobind::handle item, const char* key, size_t index, bool with_dist, int mesh_ndim);
std::vector<TensorArg> ToTensors(nanobind::handle list, const char* key, bool with_dist, int mesh_ndim);

Attrs ToAttrs(nanobind::handle attrs);

}  // namespace spmd::python
