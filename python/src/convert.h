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

#include <string>
#include <vector>

#include <nanobind/nanobind.h>

#include "rules/attrs.h"
#include "rules/dist_attr.h"
#include "rules/mesh.h"
#include "rules/op_decl.h"

namespace spmd::python {

int64_t ToInt(nanobind::handle value, const std::string& field);
std::vector<int64_t> ToInts(nanobind::handle value, const std::string& field);

// A Mesh from a spmdkit.Mesh (copied) or a list of axis sizes.
Mesh ToMesh(nanobind::handle mesh);

// A dist attr for a tensor of `rank` dims: a dims_mapping list, a placements string, a
// DistAttr or None. `field` names the tensor (e.g. "inputs[0]").
DistAttr ToDistAttr(nanobind::handle dist, int rank, const std::string& field);
// The dims_mapping list form only (-1, an axis, or a list of axes per dim).
std::vector<AxisList> ToDimsMapping(nanobind::handle value, const std::string& field);
// {axis: reduce op}; keys are ints or decimal strings.
PartialMap ToPartial(nanobind::handle value, const std::string& field);

// One tensor of a list `key` ("inputs", "outputs") at `index`. With `with_dist` false only
// the shape is read (reverse inputs).
TensorArg ToTensor(nanobind::handle item, const char* key, size_t index, bool with_dist);
std::vector<TensorArg> ToTensors(nanobind::handle list, const char* key, bool with_dist);

Attrs ToAttrs(nanobind::handle attrs);

}  // namespace spmd::python
