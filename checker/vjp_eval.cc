#include "checker/vjp_eval.h"

#include <string>

#include "reference/reference.h"
#include "rules/model/error.h"
#include "rules/engine/registry.h"

namespace spmd::checker {
namespace {

using reference::Tensor;
using reference::Tensors;

std::string ShapeText(const reference::Shape& shape) {
  std::string s = "[";
  for (size_t d = 0; d < shape.size(); ++d) s += (d ? ", " : "") + std::to_string(shape[d]);
  return s + "]";
}

}  // namespace

std::vector<std::optional<Tensor>> EvaluateVjp(const OpDecl& op, const Tensors& inputs,
                                               const Attrs& attrs, const Tensors& outputs,
                                               const Tensors& output_grads) {
  if (!op.vjp) ThrowUnsupported("vjp", op.name + " has no vector-Jacobian product yet");
  if (output_grads.size() != outputs.size()) {
    ThrowInvalid("output_grads", std::to_string(output_grads.size()) + " cotangents for " +
                                     std::to_string(outputs.size()) + " outputs");
  }
  std::vector<reference::Shape> shapes;
  for (const Tensor& t : inputs) shapes.push_back(t.shape);
  const Attrs normalized = op.NormalizeAttrs(attrs);
  const VjpGraph graph = op.vjp(RuleContext{shapes, normalized});

  std::vector<Tensors> results;
  // The tensor `ref` names, as seen from call `k` (k == calls.size(): the input grads).
  auto resolve = [&](const VjpRef& ref, size_t k, const std::string& field) -> const Tensor& {
    auto in_range = [&](size_t count) {
      if (ref.index >= count) {
        ThrowInvalid(field, "refers to #" + std::to_string(ref.index) + " of " +
                                std::to_string(count));
      }
    };
    switch (ref.kind) {
      case VjpRef::Kind::kInput: in_range(inputs.size()); return inputs[ref.index];
      case VjpRef::Kind::kOutput: in_range(outputs.size()); return outputs[ref.index];
      case VjpRef::Kind::kOutputGrad: in_range(output_grads.size()); return output_grads[ref.index];
      case VjpRef::Kind::kCall:
        if (ref.index >= k) {
          ThrowInvalid(field, "refers to call " + std::to_string(ref.index) +
                                  ", not an earlier one");
        }
        if (ref.result >= results[ref.index].size()) {
          ThrowInvalid(field, "refers to result " + std::to_string(ref.result) + " of call " +
                                  std::to_string(ref.index) + ", which has " +
                                  std::to_string(results[ref.index].size()));
        }
        return results[ref.index][ref.result];
    }
    ThrowInvalid(field, "unknown reference kind");
  };

  for (size_t k = 0; k < graph.calls.size(); ++k) {
    const VjpCall& call = graph.calls[k];
    const std::string field = "vjp.calls[" + std::to_string(k) + "]";
    const OpDecl* callee = FindOp(call.op);
    if (callee == nullptr) {
      throw SpmdError(ErrorType::kUnknownOp, field + ".op", "'" + call.op + "' is not a registered op");
    }
    Tensors operands;
    for (size_t j = 0; j < call.operands.size(); ++j) {
      operands.push_back(resolve(call.operands[j], k, field + ".operands[" + std::to_string(j) + "]"));
    }
    try {
      results.push_back(reference::FindReference(call.op)(operands, callee->NormalizeAttrs(call.attrs)));
    } catch (const SpmdError& e) {
      throw SpmdError(e.type(), field + " (" + call.op + ")" + (e.field().empty() ? "" : "." + e.field()),
                      e.what());
    }
  }

  if (graph.input_grads.size() != inputs.size()) {
    ThrowInvalid("vjp.input_grads", std::to_string(graph.input_grads.size()) + " entries for " +
                                        std::to_string(inputs.size()) + " inputs");
  }
  std::vector<std::optional<Tensor>> grads;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::optional<VjpRef>& ref = graph.input_grads[i];
    if (!ref) {
      grads.push_back(std::nullopt);
      continue;
    }
    const std::string field = "vjp.input_grads[" + std::to_string(i) + "]";
    const Tensor& grad = resolve(*ref, graph.calls.size(), field);
    if (grad.shape != inputs[i].shape) {
      ThrowInvalid(field, "gradient of shape " + ShapeText(grad.shape) + " for an input of shape " +
                              ShapeText(inputs[i].shape));
    }
    grads.push_back(grad);
  }
  return grads;
}

}  // namespace spmd::checker
