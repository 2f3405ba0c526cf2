#include "rules/notation.h"

#include <algorithm>

#include "rules/error.h"

namespace spmd::notation {

std::string Letters(int n, char first) {
  std::string s;
  for (int i = 0; i < n; ++i) s.push_back(static_cast<char>(first + i));
  return s;
}

char Fresh(int i) { return static_cast<char>(128 + i); }

int NormalizeAxis(int64_t axis, int rank, const std::string& field) {
  if (axis < -rank || axis >= rank) {
    ThrowInvalid(field, "axis " + std::to_string(axis) + " is out of range for rank " +
                            std::to_string(rank));
  }
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

int NormalizeAxisOrScalar(int64_t axis, int rank, const std::string& field) {
  if (rank == 0 && (axis == 0 || axis == -1)) return -1;
  return NormalizeAxis(axis, rank, field);
}

std::vector<int> NormalizeAxes(const std::vector<int64_t>& axes, int rank,
                               const std::string& field) {
  std::vector<int> result;
  for (int64_t a : axes) {
    const int axis = NormalizeAxisOrScalar(a, rank, field);
    if (axis < 0) continue;
    if (std::find(result.begin(), result.end(), axis) != result.end()) {
      ThrowInvalid(field, "axis " + std::to_string(a) + " is listed twice");
    }
    result.push_back(axis);
  }
  return result;
}

Shape BroadcastShapes(const std::vector<Shape>& shapes) {
  size_t rank = 0;
  for (const Shape& s : shapes) rank = std::max(rank, s.size());
  Shape out(rank, 1);
  for (size_t i = 0; i < shapes.size(); ++i) {
    const size_t offset = rank - shapes[i].size();
    for (size_t d = 0; d < shapes[i].size(); ++d) {
      int64_t& o = out[offset + d];
      const int64_t s = shapes[i][d];
      if (s == o || s == 1) continue;
      if (o != 1) {
        ThrowInvalid("inputs[" + std::to_string(i) + "].shape",
                     "dim " + std::to_string(d) + " of size " + std::to_string(s) +
                         " does not broadcast with size " + std::to_string(o));
      }
      o = s;
    }
  }
  return out;
}

EinsumSpec Elementwise(const std::vector<Shape>& shapes) {
  const Shape out_shape = BroadcastShapes(shapes);
  const int rank = static_cast<int>(out_shape.size());
  EinsumSpec spec;
  for (const Shape& s : shapes) {
    std::string letters;
    const int offset = rank - static_cast<int>(s.size());
    for (size_t d = 0; d < s.size(); ++d) {
      letters.push_back(s[d] == 1 ? '1' : static_cast<char>('a' + offset + d));
    }
    spec.inputs.push_back(letters);
  }
  std::string out;
  for (int p = 0; p < rank; ++p) out.push_back(out_shape[p] == 1 ? '1' : static_cast<char>('a' + p));
  spec.outputs.push_back(out);
  return spec;
}

std::vector<Shape> ShapesOf(const std::vector<std::string>& patterns, const SizePalette& palette) {
  std::string seen;
  std::vector<Shape> shapes;
  for (const std::string& pattern : patterns) {
    Shape shape;
    for (char letter : pattern) {
      if (letter == '1') {
        shape.push_back(1);
        continue;
      }
      size_t k = seen.find(letter);
      if (k == std::string::npos) {
        k = seen.size();
        seen.push_back(letter);
      }
      shape.push_back(palette[k]);
    }
    shapes.push_back(shape);
  }
  return shapes;
}

ExampleBuilder FromSignatures(std::vector<Signature> signatures) {
  return [signatures = std::move(signatures)](const SizePalette& palette) {
    std::vector<Example> examples;
    for (const Signature& s : signatures) examples.push_back({ShapesOf(s.patterns, palette), s.attrs});
    return examples;
  };
}

Attrs MakeAttrs(std::initializer_list<std::pair<std::string, AttrValue>> values) {
  Attrs attrs;
  for (const auto& [name, value] : values) attrs.Set(name, value);
  return attrs;
}

}  // namespace spmd::notation
