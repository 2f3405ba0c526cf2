#include "python/src/convert.h"

#include <cstdint>
#include <string>

#include "io/placements.h"
#include "rules/model/error.h"

namespace spmd::python {
namespace {

namespace nb = nanobind;

std::string At(const std::string& field, size_t i) { return field + "[" + std::to_string(i) + "]"; }

bool IsSequence(nb::handle h) { return PyList_Check(h.ptr()) || PyTuple_Check(h.ptr()); }
bool IsInt(nb::handle h) { return PyLong_Check(h.ptr()) && !PyBool_Check(h.ptr()); }

// The items of a list or tuple (borrowed), checked to be one.
struct Items {
  Items(nb::handle h, const std::string& field, const char* expected) : seq(h.ptr()) {
    if (!IsSequence(h)) ThrowInvalid(field, std::string("expected ") + expected);
  }
  size_t size() const { return static_cast<size_t>(PySequence_Fast_GET_SIZE(seq)); }
  nb::handle operator[](size_t i) const { return PySequence_Fast_GET_ITEM(seq, static_cast<Py_ssize_t>(i)); }
  PyObject* seq;
};

int ToAxis(nb::handle value, const std::string& field) {
  const int64_t axis = ToInt(value, field);
  if (axis < 0 || axis >= kMaxMeshAxes) {
    ThrowInvalid(field, "mesh axis " + std::to_string(axis) + " is out of range");
  }
  return static_cast<int>(axis);
}

// A Python str as UTF-8; `field` names it if it cannot be encoded.
std::string Str(nb::handle h, const std::string& field) {
  Py_ssize_t size = 0;
  const char* text = PyUnicode_AsUTF8AndSize(h.ptr(), &size);
  if (text == nullptr) {  // a lone surrogate: not encodable; say so without the bytes
    PyErr_Clear();
    ThrowInvalid(field, "not valid Unicode (a lone surrogate)");
  }
  return std::string(text, static_cast<size_t>(size));
}

// Fast paths of the hot call (infer with lists): convert without building field names;
// false on anything unusual, and then the checking conversion names the field and throws.
bool TryInts(nb::handle h, std::vector<int64_t>* out) {
  if (!IsSequence(h)) return false;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(h.ptr());
  out->resize(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item = PySequence_Fast_GET_ITEM(h.ptr(), i);
    if (!PyLong_Check(item) || PyBool_Check(item)) return false;
    int overflow = 0;
    (*out)[static_cast<size_t>(i)] = PyLong_AsLongLongAndOverflow(item, &overflow);
    if (overflow != 0) return false;
  }
  return true;
}

bool TryAxis(PyObject* item, int* axis) {
  if (!PyLong_Check(item) || PyBool_Check(item)) return false;
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(item, &overflow);
  if (overflow != 0 || v < -1 || v >= kMaxMeshAxes) return false;
  *axis = static_cast<int>(v);
  return true;
}

bool TryDimsMapping(nb::handle h, std::vector<AxisList>* out) {
  if (!IsSequence(h)) return false;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(h.ptr());
  out->assign(static_cast<size_t>(n), AxisList());
  for (Py_ssize_t d = 0; d < n; ++d) {
    PyObject* entry = PySequence_Fast_GET_ITEM(h.ptr(), d);
    AxisList& axes = (*out)[static_cast<size_t>(d)];
    int axis = -1;
    if (IsSequence(entry)) {
      const Py_ssize_t k = PySequence_Fast_GET_SIZE(entry);
      for (Py_ssize_t j = 0; j < k; ++j) {
        if (!TryAxis(PySequence_Fast_GET_ITEM(entry, j), &axis) || axis < 0) return false;
        axes.push_back(axis);
      }
    } else if (!TryAxis(entry, &axis)) {
      return false;
    } else if (axis >= 0) {
      axes.push_back(axis);
    }
  }
  return true;
}

}  // namespace

void RefuseUnknownKeys(nb::handle dict, const std::string& field,
                       std::initializer_list<const char*> keys) {
  PyObject *key = nullptr, *value = nullptr;
  Py_ssize_t pos = 0;
  while (PyDict_Next(dict.ptr(), &pos, &key, &value)) {
    std::string name;
    if (PyUnicode_Check(key)) {
      name = Str(key, field);
      bool known = false;
      for (const char* k : keys) known = known || name == k;
      if (known) continue;
    } else {
      name = nb::cast<std::string>(nb::repr(key));
    }
    std::string expected;
    for (const char* k : keys) expected += (expected.empty() ? "" : ", ") + std::string(k);
    ThrowInvalid(field + "." + name, "unknown key (expected " + expected + ")");
  }
}

int64_t ToInt(nb::handle value, const std::string& field) {
  if (!IsInt(value)) ThrowInvalid(field, "expected an integer");
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
  if (overflow != 0) {
    ThrowInvalid(field, "integer " + nb::cast<std::string>(nb::str(value)) +
                            " is out of range (int64: -2^63 to 2^63-1)");
  }
  return static_cast<int64_t>(v);
}

std::vector<int64_t> ToInts(nb::handle value, const std::string& field) {
  const Items items(value, field, "a list of integers");
  std::vector<int64_t> result(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    // The common case without building the field's name; ToInt names it on failure.
    nb::handle item = items[i];
    int overflow = 1;
    const long long v = IsInt(item) ? PyLong_AsLongLongAndOverflow(item.ptr(), &overflow) : 0;
    result[i] = overflow == 0 ? static_cast<int64_t>(v) : ToInt(item, At(field, i));
  }
  return result;
}

Mesh ToMesh(nb::handle mesh) {
  if (nb::isinstance<Mesh>(mesh)) return nb::cast<const Mesh&>(mesh);
  if (!IsSequence(mesh)) ThrowInvalid("mesh_shape", "expected a spmdkit.Mesh or a list of axis sizes");
  return Mesh(ToInts(mesh, "mesh_shape"));
}

std::vector<AxisList> ToDimsMapping(nb::handle value, const std::string& field) {
  const Items items(value, field, "a list");
  std::vector<AxisList> dims(items.size());
  for (size_t d = 0; d < items.size(); ++d) {
    nb::handle entry = items[d];
    if (IsSequence(entry)) {
      const Items axes(entry, At(field, d), "a list");
      for (size_t k = 0; k < axes.size(); ++k) dims[d].push_back(ToAxis(axes[k], At(At(field, d), k)));
    } else if (!IsInt(entry)) {
      ThrowInvalid(At(field, d), "expected an integer");
    } else if (PyLong_AsLongLong(entry.ptr()) != -1 || PyErr_Occurred()) {
      PyErr_Clear();
      dims[d].push_back(ToAxis(entry, At(field, d)));
    }
  }
  return dims;
}

PartialMap ToPartial(nb::handle value, const std::string& field) {
  PartialMap partial;
  if (value.is_none()) return partial;
  if (!PyDict_Check(value.ptr())) ThrowInvalid(field, "expected a dict {mesh axis: reduce op}");
  PyObject *key = nullptr, *op = nullptr;
  Py_ssize_t pos = 0;
  while (PyDict_Next(value.ptr(), &pos, &key, &op)) {
    int axis = -1;
    std::string key_text;
    if (IsInt(key)) {
      key_text = nb::cast<std::string>(nb::str(key));
      int overflow = 0;
      const long long v = PyLong_AsLongLongAndOverflow(key, &overflow);
      if (overflow == 0 && v >= 0 && v < kMaxMeshAxes) axis = static_cast<int>(v);
    } else if (PyUnicode_Check(key)) {
      key_text = EscapeForText(Str(key, field));
      const bool digits = !key_text.empty() && key_text.size() <= 2 &&
                          key_text.find_first_not_of("0123456789") == std::string::npos;
      if (digits) axis = std::stoi(key_text);
      if (axis >= kMaxMeshAxes) axis = -1;
    }
    const std::string at = field + "." + (key_text.empty() ? "?" : key_text);
    if (axis < 0) ThrowInvalid(at, "not a mesh axis");
    const std::optional<ReduceOp> reduce =
        PyUnicode_Check(op) ? ParseReduceOp(Str(op, at)) : std::nullopt;
    if (!reduce) ThrowInvalid(at, "expected a reduce op (sum, avg, max, min, prod, any, all)");
    partial[axis] = *reduce;
  }
  return partial;
}

DistAttr Placements(const std::string& text, int rank, const std::string& field, int mesh_ndim) {
  if (mesh_ndim < 0) return ParsePlacementString(text, rank, field);
  return io::ParsePlacementsOnMesh(text, mesh_ndim, rank, field);
}

DistAttr ToDistAttr(nb::handle dist, int rank, const std::string& field, int mesh_ndim) {
  if (dist.is_none()) return DistAttr::Replicated(rank);
  if (PyUnicode_Check(dist.ptr())) {
    return Placements(Str(dist, field + ".placements"), rank, field + ".placements", mesh_ndim);
  }
  if (nb::isinstance<DistAttr>(dist)) return nb::cast<const DistAttr&>(dist);
  if (IsSequence(dist)) return DistAttr{ToDimsMapping(dist, field + ".dims_mapping"), {}};
  ThrowInvalid(field, "expected a dims_mapping list, a placements string, a spmdkit.DistAttr or None");
}

TensorArg ToTensor(nb::handle item, const char* key, size_t index, bool with_dist, int mesh_ndim) {
  TensorArg arg;
  if (PyDict_Check(item.ptr())) {
    const std::string field = At(key, index);
    RefuseUnknownKeys(item, field, {"shape", "dims_mapping", "placements", "partial_dims", "partial"});
    PyObject* shape = PyDict_GetItemString(item.ptr(), "shape");
    if (shape == nullptr) ThrowInvalid(field + ".shape", "is missing");
    arg.shape = ToInts(shape, field + ".shape");
    if (!with_dist) return arg;
    PyObject* mapping = PyDict_GetItemString(item.ptr(), "dims_mapping");
    PyObject* placements = PyDict_GetItemString(item.ptr(), "placements");
    if (mapping != nullptr && placements != nullptr) {
      ThrowInvalid(field, "give dims_mapping or placements, not both");
    }
    const int rank = static_cast<int>(arg.shape.size());
    if (mapping != nullptr) {
      arg.dist.dims = ToDimsMapping(mapping, field + ".dims_mapping");
    } else if (placements != nullptr) {
      if (!PyUnicode_Check(placements)) ThrowInvalid(field + ".placements", "expected a string");
      arg.dist = Placements(Str(placements, field + ".placements"), rank, field + ".placements", mesh_ndim);
    } else {
      arg.dist.dims.resize(arg.shape.size());
    }
    if (PyObject* dims = PyDict_GetItemString(item.ptr(), "partial_dims")) {
      const std::string at = field + ".partial_dims";
      const std::vector<int64_t> axes = ToInts(dims, at);
      for (size_t i = 0; i < axes.size(); ++i) {
        if (axes[i] < 0 || axes[i] >= kMaxMeshAxes) {
          ThrowInvalid(at, "mesh axis " + std::to_string(axes[i]) + " is out of range");
        }
        arg.dist.partial.emplace(static_cast<int>(axes[i]), ReduceOp::kSum);
      }
    }
    if (PyObject* partial = PyDict_GetItemString(item.ptr(), "partial")) {
      for (const auto& [axis, op] : ToPartial(partial, field + ".partial")) {
        auto [it, added] = arg.dist.partial.emplace(axis, op);
        if (!added && it->second != op) {
          ThrowInvalid(field + ".partial." + std::to_string(axis), "disagrees with partial_dims");
        }
      }
    }
    return arg;
  }
  if (!IsSequence(item)) {
    ThrowInvalid(At(key, index), "expected a dict, a (shape, dist) pair or a shape");
  }
  const Items parts(item, "", "a list");
  // A bare shape: empty (a scalar) or integers.
  if (parts.size() == 0 || IsInt(parts[0])) {
    if (!TryInts(item, &arg.shape)) arg.shape = ToInts(item, At(key, index) + ".shape");
    arg.dist = DistAttr::Replicated(static_cast<int>(arg.shape.size()));
    return arg;
  }
  if (parts.size() != 2) ThrowInvalid(At(key, index), "expected a (shape, dist) pair");
  if (!TryInts(parts[0], &arg.shape)) arg.shape = ToInts(parts[0], At(key, index) + ".shape");
  if (with_dist && !TryDimsMapping(parts[1], &arg.dist.dims)) {
    arg.dist = ToDistAttr(parts[1], static_cast<int>(arg.shape.size()), At(key, index), mesh_ndim);
  }
  return arg;
}

std::vector<TensorArg> ToTensors(nb::handle list, const char* key, bool with_dist, int mesh_ndim) {
  if (list.is_none()) return {};
  const Items items(list, key, "a list");
  std::vector<TensorArg> result;
  result.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) result.push_back(ToTensor(items[i], key, i, with_dist, mesh_ndim));
  return result;
}

Attrs ToAttrs(nb::handle attrs) {
  Attrs result;
  if (attrs.is_none()) return result;
  if (!PyDict_Check(attrs.ptr())) ThrowInvalid("attrs", "expected a dict");
  PyObject *key = nullptr, *value = nullptr;
  Py_ssize_t pos = 0;
  while (PyDict_Next(attrs.ptr(), &pos, &key, &value)) {
    if (!PyUnicode_Check(key)) ThrowInvalid("attrs", "expected string keys");
    const std::string name = Str(key, "attrs");
    const std::string field = "attrs." + name;
    nb::handle v(value);
    if (PyBool_Check(value)) {
      result.Set(name, value == Py_True);
    } else if (IsInt(v)) {
      result.Set(name, ToInt(v, field));
    } else if (PyFloat_Check(value)) {
      result.Set(name, PyFloat_AS_DOUBLE(value));
    } else if (PyUnicode_Check(value)) {
      result.Set(name, Str(v, field));
    } else if (IsSequence(v)) {
      const Items items(v, field, "a list");
      bool all_int = true;
      for (size_t i = 0; i < items.size(); ++i) {
        if (!IsInt(items[i]) && !PyFloat_Check(items[i].ptr())) ThrowInvalid(field, "expected a list of numbers");
        all_int = all_int && IsInt(items[i]);
      }
      if (all_int) {
        result.Set(name, ToInts(v, field));
      } else {
        std::vector<double> values(items.size());
        for (size_t i = 0; i < items.size(); ++i) values[i] = PyFloat_AsDouble(items[i].ptr());
        result.Set(name, std::move(values));
      }
    } else {
      ThrowInvalid(field, "unsupported value");
    }
  }
  return result;
}

}  // namespace spmd::python
