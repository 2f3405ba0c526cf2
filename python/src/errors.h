// The Python side of SpmdError: spmdkit.SpmdError and one subclass per ErrorType
// (InvalidArgument is also a ValueError, UnknownOp a LookupError), each with the C++
// error's message (field first) and the attributes `field` and `type`.
#pragma once

#include <nanobind/nanobind.h>

namespace spmd::python {

// Creates the exception classes in `m` and registers the translator of spmd::SpmdError
// (and of any other std::exception a request can provoke: InvalidArgument naming `line`).
void RegisterErrors(nanobind::module_& m);

}  // namespace spmd::python
