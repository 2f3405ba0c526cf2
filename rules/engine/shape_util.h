// Shape arithmetic and validation shared by the rules, the references and the CPU kernels:
// axis normalisation, numpy broadcasting, reduced dims, the shapes of the normalisations'
// backward ops and einsum equations. Header-only
// so that reference/ and kernels/ use it without linking the rules library; it holds no
// value arithmetic, so the references stay an independent oracle for the kernels' values
// while all three agree on which requests are valid and on the error (type and field)
// for the others.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "rules/model/error.h"

namespace spmd::shape {

// "inputs[i]" or "inputs[i].what".
inline std::string InputField(size_t i, const std::string& what = "") {
  std::string field = "inputs[" + std::to_string(i) + "]";
  return what.empty() ? field : field + "." + what;
}

inline std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Returns axis + rank for a negative axis; throws SpmdError(kInvalidArgument, field) when
// it is outside [-rank, rank).
inline int NormalizeAxis(int64_t axis, int64_t rank, const std::string& field) {
  if (axis < -rank || axis >= rank) {
    ThrowInvalid(field, "axis " + std::to_string(axis) + " is out of range for rank " +
                            std::to_string(rank));
  }
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

// As NormalizeAxis, but a 0-d tensor accepts 0 and -1 (Paddle's scalar case) and gets -1:
// the op then has no dim to act on.
inline int NormalizeAxisOrScalar(int64_t axis, int64_t rank, const std::string& field) {
  if (rank == 0 && (axis == 0 || axis == -1)) return -1;
  return NormalizeAxis(axis, rank, field);
}

// Normalises a list of axes, rejecting duplicates; on a 0-d tensor 0 and -1 are accepted
// and dropped.
inline std::vector<int> NormalizeAxes(const std::vector<int64_t>& axes, int64_t rank,
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

// Returns the numpy broadcast of `shapes` (right-aligned; each dim equal or 1). Throws
// SpmdError(kInvalidArgument, "inputs[i].shape") for the first input that does not
// broadcast with the ones before it.
inline std::vector<int64_t> BroadcastShapes(const std::vector<std::vector<int64_t>>& shapes) {
  size_t rank = 0;
  for (const auto& s : shapes) rank = std::max(rank, s.size());
  std::vector<int64_t> out(rank, 1);
  for (size_t i = 0; i < shapes.size(); ++i) {
    const size_t offset = rank - shapes[i].size();
    for (size_t d = 0; d < shapes[i].size(); ++d) {
      int64_t& o = out[offset + d];
      const int64_t s = shapes[i][d];
      if (s == o || s == 1) continue;
      if (o != 1) {
        ThrowInvalid(InputField(i, "shape"), "dim " + std::to_string(d) + " of size " +
                                                 std::to_string(s) +
                                                 " does not broadcast with size " +
                                                 std::to_string(o));
      }
      o = s;
    }
  }
  return out;
}

// Which dims a reduction over `axis` reduces: every dim when `all` or the list is empty.
// Throws as NormalizeAxes.
inline std::vector<bool> ReducedDims(const std::vector<int64_t>& axis, bool all, int64_t rank,
                                     const std::string& field) {
  std::vector<bool> reduced(static_cast<size_t>(rank), all || axis.empty());
  for (int a : NormalizeAxes(axis, rank, field)) reduced[a] = true;
  return reduced;
}

// The shape a reduction leaves: reduced dims dropped, or kept as 1 with `keep_dim`.
inline std::vector<int64_t> ReducedShape(const std::vector<int64_t>& shape,
                                         const std::vector<bool>& reduced, bool keep_dim) {
  std::vector<int64_t> out;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (!reduced[d]) {
      out.push_back(shape[d]);
    } else if (keep_dim) {
      out.push_back(1);
    }
  }
  return out;
}

// ---- layer_norm_grad / rms_norm_grad ----

// The shapes of a normalisation's backward around x = shapes[0] split at `begin` (already
// normalised): shapes [1, 1 + params) are [prod(x[begin:])] (scale, bias), the next
// `statistics` are x[:begin] (the forward's mean, variance or invvar), the last is x's
// (out_grad). With `optional_params` (layer_norm_grad) a 0-d parameter is absent and
// accepted. Throws SpmdError(kInvalidArgument, "inputs[i].shape") for the first that
// differs; the caller has checked the count.
inline void CheckNormGradShapes(const std::vector<std::vector<int64_t>>& shapes, int64_t begin,
                                size_t params, size_t statistics, bool optional_params = false) {
  const std::vector<int64_t>& x = shapes[0];
  int64_t n = 1;
  for (size_t d = static_cast<size_t>(begin); d < x.size(); ++d) n *= x[d];
  const std::vector<int64_t> param{n};
  const std::vector<int64_t> stats(x.begin(), x.begin() + begin);
  for (size_t i = 1; i < shapes.size(); ++i) {
    const bool is_param = i <= params;
    const bool is_stat = !is_param && i <= params + statistics;
    const std::vector<int64_t>& want = is_param ? param : is_stat ? stats : x;
    if (is_param && optional_params && shapes[i].empty()) continue;  // 0-d: absent
    if (shapes[i] != want) {
      ThrowInvalid(InputField(i, "shape"),
                   std::string(is_param ? "a parameter" : is_stat ? "a statistic" : "out_grad") +
                       " must be " + ShapeString(want) + (is_param && optional_params ? " or 0-d (absent)" : "") +
                       ", got " + ShapeString(shapes[i]));
    }
  }
}

// ---- einsum equations ----

// An einsum equation: one letter string per operand and the output's. In a parsed
// equation (ParseEinsumEquation) '.' stands for an ellipsis (`...`), at most one per term;
// in a planned one (PlanEinsum) every ellipsis dim has a letter of its own.
struct EinsumEquation {
  std::vector<std::string> operands;
  std::string output;
};

inline bool IsEinsumLetter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// Names a character of an equation for an error message: `'x'` for printable ASCII, else
// its byte value (`byte 0xC3`: one byte of a multi-byte character is not text on its own).
inline std::string DescribeEquationChar(char c) {
  const auto byte = static_cast<unsigned char>(c);
  if (byte >= 0x20 && byte < 0x7F) return std::string("'") + c + "'";
  const char* digits = "0123456789ABCDEF";
  return std::string("byte 0x") + digits[byte >> 4] + digits[byte & 15];
}

// Parses Paddle's (and numpy's) equation forms: explicit `ij,jk->ik`, implicit `ij,jk`
// (output: the letters seen once, in ASCII order, after the ellipsis dims when an operand
// has `...`), and `...` for broadcast batch dims (`...ij,...jk->...ik`). Spaces anywhere
// are ignored. Each `...` becomes one '.' in the result. Throws SpmdError naming
// "attrs.equation": Unsupported for a letter repeated within one operand (a diagonal);
// InvalidArgument for any other character (a '.' outside an ellipsis included), two
// ellipses in one term, an operand count other than `operand_count`, an output letter that
// repeats or is in no operand, or an explicit output without `...` when an operand has
// one (Paddle: "missing ellipsis in output labels").
inline EinsumEquation ParseEinsumEquation(const std::string& equation, size_t operand_count) {
  const std::string field = "attrs.equation";
  std::string text;
  for (char c : equation) {
    if (c != ' ') text.push_back(c);
  }
  // Collapses each `...` of a term to '.'; a '.' outside an ellipsis, or a second
  // ellipsis, is InvalidArgument.
  auto collapse = [&](const std::string& term, const std::string& where) {
    std::string out;
    for (size_t k = 0; k < term.size(); ++k) {
      if (term[k] != '.') {
        out.push_back(term[k]);
        continue;
      }
      if (term.compare(k, 3, "...") != 0) {
        ThrowInvalid(field, "'.' outside an ellipsis in " + where + " of '" + equation + "'");
      }
      if (out.find('.') != std::string::npos) {
        ThrowInvalid(field, "two ellipses in " + where + " of '" + equation + "'");
      }
      out.push_back('.');
      k += 2;
    }
    return out;
  };
  EinsumEquation eq;
  std::string lhs = text;
  const size_t arrow = text.find("->");
  const bool explicit_output = arrow != std::string::npos;
  if (explicit_output) {
    lhs = text.substr(0, arrow);
    eq.output = text.substr(arrow + 2);
  }
  for (char c : lhs) {
    if (!IsEinsumLetter(c) && c != ',' && c != '.') {
      ThrowInvalid(field,
                   "unexpected character " + DescribeEquationChar(c) + " in '" + equation + "'");
    }
  }
  for (char c : eq.output) {
    if (!IsEinsumLetter(c) && c != '.') {
      ThrowInvalid(field, "unexpected character " + DescribeEquationChar(c) +
                              " in the output of '" + equation + "'");
    }
  }
  eq.output = collapse(eq.output, "the output");
  std::string term;
  for (size_t i = 0; i <= lhs.size(); ++i) {
    if (i == lhs.size() || lhs[i] == ',') {
      eq.operands.push_back(collapse(term, "operand " + std::to_string(eq.operands.size())));
      term.clear();
    } else {
      term.push_back(lhs[i]);
    }
  }
  if (eq.operands.size() != operand_count) {
    ThrowInvalid(field, "'" + equation + "' has " + std::to_string(eq.operands.size()) +
                            " operands, " + std::to_string(operand_count) + " inputs given");
  }
  int count[128] = {0};
  bool ellipsis = false;
  for (const std::string& t : eq.operands) {
    for (size_t d = 0; d < t.size(); ++d) {
      if (t[d] == '.') {
        ellipsis = true;
        continue;
      }
      if (t.find(t[d], d + 1) != std::string::npos) {
        ThrowUnsupported(field, std::string("letter '") + t[d] +
                                    "' repeats within one operand (diagonals are not "
                                    "supported) in '" + equation + "'");
      }
      ++count[static_cast<unsigned char>(t[d])];
    }
  }
  if (!explicit_output) {
    if (ellipsis) eq.output.push_back('.');
    for (int c = 0; c < 128; ++c) {
      if (count[c] == 1) eq.output.push_back(static_cast<char>(c));
    }
  } else if (ellipsis && eq.output.find('.') == std::string::npos) {
    ThrowInvalid(field, "an operand has '...' but the output of '" + equation + "' does not");
  }
  for (size_t d = 0; d < eq.output.size(); ++d) {
    const char c = eq.output[d];
    if (c == '.') continue;
    if (count[static_cast<unsigned char>(c)] == 0) {
      ThrowInvalid(field, std::string("output letter '") + c + "' is in no operand of '" +
                              equation + "'");
    }
    if (eq.output.find(c, d + 1) != std::string::npos) {
      ThrowInvalid(field, std::string("output letter '") + c + "' repeats in '" + equation + "'");
    }
  }
  return eq;
}

// A parsed equation bound to its operands' shapes: every ellipsis replaced by letters of
// its own (unused by the equation, right-aligned: an operand with fewer ellipsis dims has
// the last ones), the size of every letter, and which operand dims broadcast (size 1 where
// the letter is larger elsewhere; numpy and Paddle broadcast size-1 dims of any letter).
//
// Example: `...ij,jk` with [2, 1, 5, 3] and [1, 4]: the ellipsis dims are `AB`, x is
// `ABij`, y `jk`, out `ABik`; A = 2, B = 1, i = 5, j = 3 (y's j broadcasts), k = 4.
struct EinsumPlan {
  EinsumEquation eq;                      // letters only
  std::vector<int64_t> size;              // per letter (ASCII code), -1 when absent
  std::vector<std::vector<bool>> broadcast;  // per operand, per dim
  std::vector<int64_t> SizesOf(const std::string& letters) const {
    std::vector<int64_t> s;
    for (char c : letters) s.push_back(size[static_cast<unsigned char>(c)]);
    return s;
  }
};

// Plans `equation` over `shapes` (one per operand). Throws as ParseEinsumEquation, and
// SpmdError(kInvalidArgument, "inputs[i].shape") when an operand's rank does not fit its
// term (fewer dims than letters with `...`, another count without) or a letter has two
// sizes other than 1; Unsupported ("attrs.equation") when the ellipsis needs more letters
// than the equation leaves unused.
inline EinsumPlan PlanEinsum(const std::string& equation,
                             const std::vector<std::vector<int64_t>>& shapes) {
  const EinsumEquation parsed = ParseEinsumEquation(equation, shapes.size());
  // Ellipsis dims per operand, and the broadcast ellipsis rank.
  size_t ellipsis_rank = 0;
  std::vector<size_t> ellipsis_dims(shapes.size(), 0);
  for (size_t i = 0; i < shapes.size(); ++i) {
    const std::string& t = parsed.operands[i];
    const bool has = t.find('.') != std::string::npos;
    const size_t letters = t.size() - (has ? 1 : 0);
    if (has ? shapes[i].size() < letters : shapes[i].size() != letters) {
      ThrowInvalid(InputField(i, "shape"),
                   "operand '" + t + "' has " + std::to_string(letters) + " letters" +
                       (has ? " and '...'" : "") + ", shape " + ShapeString(shapes[i]));
    }
    if (has) ellipsis_dims[i] = shapes[i].size() - letters;
    ellipsis_rank = std::max(ellipsis_rank, ellipsis_dims[i]);
  }
  std::string fresh;
  for (char c = 'A'; c <= 'z' && fresh.size() < ellipsis_rank; ++c) {
    if (!IsEinsumLetter(c)) continue;
    bool used = parsed.output.find(c) != std::string::npos;
    for (const std::string& t : parsed.operands) used = used || t.find(c) != std::string::npos;
    if (!used) fresh.push_back(c);
  }
  if (fresh.size() < ellipsis_rank) {
    ThrowUnsupported("attrs.equation", "'...' covers " + std::to_string(ellipsis_rank) +
                                           " dims, more than the letters '" + equation +
                                           "' leaves unused");
  }
  EinsumPlan plan;
  auto expand = [&](const std::string& t, size_t dims) {
    std::string out;
    for (char c : t) out += c == '.' ? fresh.substr(ellipsis_rank - dims) : std::string(1, c);
    return out;
  };
  for (size_t i = 0; i < shapes.size(); ++i) {
    plan.eq.operands.push_back(expand(parsed.operands[i], ellipsis_dims[i]));
  }
  plan.eq.output = expand(parsed.output, ellipsis_rank);
  plan.size.assign(128, -1);
  for (size_t i = 0; i < shapes.size(); ++i) {
    const std::string& t = plan.eq.operands[i];
    for (size_t d = 0; d < t.size(); ++d) {
      int64_t& known = plan.size[static_cast<unsigned char>(t[d])];
      const int64_t s = shapes[i][d];
      if (known >= 0 && known != s && known != 1 && s != 1) {
        const bool ellipsis_dim = fresh.find(t[d]) != std::string::npos;
        ThrowInvalid(InputField(i, "shape"),
                     (ellipsis_dim ? std::string("a dim of '...'") : std::string("letter '") + t[d] + "'") +
                         " has size " + std::to_string(s) + ", elsewhere " + std::to_string(known) +
                         " (sizes must be equal or 1)");
      }
      if (known < 0 || known == 1) known = s;
    }
  }
  for (size_t i = 0; i < shapes.size(); ++i) {
    const std::string& t = plan.eq.operands[i];
    std::vector<bool> b(t.size(), false);
    for (size_t d = 0; d < t.size(); ++d) {
      b[d] = shapes[i][d] == 1 && plan.size[static_cast<unsigned char>(t[d])] != 1;
    }
    plan.broadcast.push_back(std::move(b));
  }
  return plan;
}

}  // namespace spmd::shape
