#include "python/src/errors.h"

#include <exception>
#include <string>

#include "rules/model/error.h"

namespace spmd::python {
namespace {

namespace nb = nanobind;

// One class per ErrorType, in the enum's order; the base first. Created once at import and
// kept for the process (a module's exception classes live as long as the interpreter).
PyObject* g_base = nullptr;
PyObject* g_classes[4] = {nullptr, nullptr, nullptr, nullptr};

PyObject* ClassOf(ErrorType type) {
  switch (type) {
    case ErrorType::kInvalidArgument: return g_classes[0];
    case ErrorType::kUnknownOp: return g_classes[1];
    case ErrorType::kUnsupported: return g_classes[2];
    case ErrorType::kConflict: return g_classes[3];
  }
  return g_base;
}

void Raise(ErrorType type, const std::string& field, const char* message) {
  PyObject* cls = ClassOf(type);
  PyObject* error = PyObject_CallFunction(cls, "s", message);
  if (error == nullptr) return;  // the call set its own error
  PyObject* field_text = PyUnicode_FromString(field.c_str());
  PyObject* type_text = PyUnicode_FromString(std::string(ToString(type)).c_str());
  if (field_text && type_text) {
    PyObject_SetAttrString(error, "field", field_text);
    PyObject_SetAttrString(error, "type", type_text);
  }
  Py_XDECREF(field_text);
  Py_XDECREF(type_text);
  PyErr_SetObject(cls, error);
  Py_DECREF(error);
}

PyObject* NewClass(nb::module_& m, const char* name, PyObject* bases, const char* doc) {
  const std::string qualified = std::string("spmdkit.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  if (cls == nullptr) throw nb::python_error();
  m.attr(name) = nb::handle(cls);
  return cls;
}

}  // namespace

void RegisterErrors(nb::module_& m) {
  g_base = NewClass(m, "SpmdError", PyExc_Exception,
                    "Every spmdkit error: `field` names the input at fault, `type` the error type; "
                    "the message starts with the field.");
  auto with = [](PyObject* second) { return Py_BuildValue("(OO)", g_base, second); };
  PyObject* invalid_bases = with(PyExc_ValueError);
  PyObject* unknown_bases = with(PyExc_LookupError);
  g_classes[0] = NewClass(m, "InvalidArgument", invalid_bases,
                          "Bad input: a wrong arity, mapping, attr, shape or type.");
  g_classes[1] = NewClass(m, "UnknownOp", unknown_bases, "An op name spmdkit does not have.");
  g_classes[2] = NewClass(m, "Unsupported", g_base, "A valid request the rule cannot satisfy.");
  g_classes[3] = NewClass(m, "Conflict", g_base,
                          "A reverse conflict (one mesh axis on two factors, ...).");
  Py_DECREF(invalid_bases);
  Py_DECREF(unknown_bases);
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const SpmdError& e) {
      Raise(e.type(), e.field(), e.what());
    } catch (const nb::python_error&) {
      throw;
    } catch (const nb::builtin_exception&) {
      throw;
    } catch (const std::bad_alloc&) {
      throw;
    } catch (const std::exception& e) {
      // A request the validation did not foresee is still bad input, never a crash.
      Raise(ErrorType::kInvalidArgument, "line", ("line: " + EscapeForText(e.what())).c_str());
    }
  });
}

}  // namespace spmd::python
