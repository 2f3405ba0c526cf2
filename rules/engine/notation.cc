#include "rules/engine/notation.h"

#include <algorithm>
#include <array>
#include <stdexcept>

#include "rules/model/error.h"

namespace spmd::notation {

std::string Letters(int n, char first) {
  std::string s;
  for (int i = 0; i < n; ++i) s.push_back(static_cast<char>(first + i));
  return s;
}

EinsumSpec FromLetters(const std::vector<std::string>& inputs,
                       const std::vector<std::string>& outputs, const std::string& forced) {
  EinsumSpec spec;
  // ids[letter]: the letter's factor, or kNone before its first appearance.
  constexpr FactorId kNone = -2;
  std::array<FactorId, 256> ids;
  ids.fill(kNone);
  auto id_of = [&](char letter) -> FactorId& { return ids[static_cast<unsigned char>(letter)]; };
  auto notation = [&](const std::string& letters) {
    Notation n;
    n.reserve(letters.size());
    for (char letter : letters) {
      if (letter == '1') {
        n.push_back(kBroadcastDim);
        continue;
      }
      FactorId& id = id_of(letter);
      if (id == kNone) id = spec.AddFactor();
      n.push_back(id);
    }
    return n;
  };
  spec.inputs.reserve(inputs.size());
  spec.outputs.reserve(outputs.size());
  for (const std::string& in : inputs) spec.inputs.push_back(notation(in));
  for (const std::string& out : outputs) spec.outputs.push_back(notation(out));
  for (char letter : forced) {
    if (id_of(letter) == kNone) {
      throw std::logic_error(std::string("forced letter '") + letter + "' is in no operand");
    }
    spec.forced_replicated.push_back(id_of(letter));
  }
  return spec;
}

std::vector<std::string> ElementwiseLetters(const std::vector<Shape>& shapes) {
  const Shape out_shape = BroadcastShapes(shapes);
  const int rank = static_cast<int>(out_shape.size());
  std::vector<std::string> result;
  for (const Shape& s : shapes) {
    std::string letters;
    const int offset = rank - static_cast<int>(s.size());
    for (size_t d = 0; d < s.size(); ++d) {
      // Size 1 broadcasts (`1`) only where the output is larger; where every operand has
      // 1 it is an ordinary factor of size 1, which may stay sharded.
      const bool broadcast = s[d] == 1 && out_shape[offset + d] != 1;
      letters.push_back(broadcast ? '1' : static_cast<char>('a' + offset + d));
    }
    result.push_back(letters);
  }
  std::string out;
  for (int p = 0; p < rank; ++p) out.push_back(static_cast<char>('a' + p));
  result.push_back(out);
  return result;
}

EinsumSpec Elementwise(const std::vector<Shape>& shapes) {
  std::vector<std::string> letters = ElementwiseLetters(shapes);
  const std::string out = letters.back();
  letters.pop_back();
  return FromLetters(letters, {out});
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
