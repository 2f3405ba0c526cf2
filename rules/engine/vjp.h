// An op's vector-Jacobian product as data: a small graph of calls to registered ops.
//
// Given the forward inputs x, the forward outputs y and one cotangent g per output (same
// shape as the output), the graph computes each input's gradient sum_o g_o . dy_o/dx_i as
// calls to registered ops (by name, with attrs), each call reading forward inputs,
// forward outputs, cotangents or results of earlier calls. Because it is data, the same
// graph can be run by the float64 references (checker/vjp_eval.h, checked against finite
// differences), planned by the rules (every call has a sharding rule) and run by any
// backend that runs the forward ops; nothing per op is hand-written for the backward.
//
// Example, y = x @ w:
//   call 0: matmul_grad(x, w, g0) -> (x_grad, w_grad)
//   input_grads: x <- call 0 result 0, w <- call 0 result 1
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "rules/model/attrs.h"

namespace spmd {

// Where a call's operand (or an input's gradient) comes from.
struct VjpRef {
  enum class Kind { kInput, kOutput, kOutputGrad, kCall };
  Kind kind = Kind::kInput;
  size_t index = 0;   // which forward input / forward output / cotangent / earlier call
  size_t result = 0;  // kCall: which output of that call

  static VjpRef Input(size_t i) { return {Kind::kInput, i, 0}; }
  static VjpRef Output(size_t o) { return {Kind::kOutput, o, 0}; }
  static VjpRef OutputGrad(size_t o) { return {Kind::kOutputGrad, o, 0}; }
  static VjpRef Call(size_t k, size_t result = 0) { return {Kind::kCall, k, result}; }
  bool operator==(const VjpRef&) const = default;
};

struct VjpCall {
  std::string op;  // a registered op (rules/engine/op_list.h)
  std::vector<VjpRef> operands;
  Attrs attrs;     // as a caller gives them; normalised by the op's declaration
};

struct VjpGraph {
  std::vector<VjpCall> calls;  // in order; a call reads only earlier calls
  // One entry per forward input: where its gradient is, or nothing where the input has no
  // gradient (ids, labels, bool conditions).
  std::vector<std::optional<VjpRef>> input_grads;

  // Appends a call and returns a reference to its result `result`.
  VjpRef Add(std::string op, std::vector<VjpRef> operands, Attrs attrs = {}) {
    calls.push_back({std::move(op), std::move(operands), std::move(attrs)});
    return VjpRef::Call(calls.size() - 1);
  }
};

}  // namespace spmd
