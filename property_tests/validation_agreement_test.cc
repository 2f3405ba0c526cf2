// The rule, the reference and the CPU kernel validate a request once, the same way (the
// shared helpers of rules/shape_util.h): on every einsum equation below they all accept,
// or all refuse with the same error type and field. Without the shared parser the rule
// accepted "ij, jk->ik" that the others refused, and called "i.j" InvalidArgument where
// the reference said Unsupported.
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/kernels.h"
#include "reference/reference.h"
#include "rules/error.h"
#include "rules/registry.h"

namespace spmd {
namespace {

struct Verdict {
  bool accepted = true;
  ErrorType type = ErrorType::kInvalidArgument;
  std::string field;
  std::string Describe() const {
    return accepted ? "accepted" : std::string(ToString(type)) + " " + field;
  }
  bool operator==(const Verdict& o) const {
    return accepted == o.accepted && (accepted || (type == o.type && field == o.field));
  }
};

template <typename Fn>
Verdict Run(Fn&& fn) {
  try {
    fn();
    return {};
  } catch (const SpmdError& e) {
    return {false, e.type(), e.field()};
  }
}

int64_t Numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

void ExpectAgreement(const std::string& equation, const std::vector<Shape>& shapes) {
  SCOPED_TRACE("equation '" + equation + "'");
  const OpDecl& op = *FindOp("einsum");
  const Attrs attrs = op.NormalizeAttrs(Attrs().With("equation", equation));
  std::vector<TensorArg> args;
  reference::Tensors ref_inputs;
  kernels::Tensors kernel_inputs;
  for (const Shape& shape : shapes) {
    args.push_back({shape, DistAttr::Replicated(static_cast<int>(shape.size()))});
    reference::Tensor t;
    t.shape = shape;
    t.data.assign(static_cast<size_t>(Numel(shape)), 0.5);
    ref_inputs.push_back(t);
    kernel_inputs.push_back(kernels::Tensor::FromVector(shape, t.data));
  }
  const Verdict rule = Run([&] { InferForward(op, Mesh({2}), args, attrs); });
  const Verdict ref = Run([&] { reference::FindReference("einsum")(ref_inputs, attrs); });
  const Verdict kernel = Run([&] {
    std::vector<const kernels::Tensor*> ptrs;
    for (const kernels::Tensor& t : kernel_inputs) ptrs.push_back(&t);
    kernels::RunCpuKernel("einsum", kernels::TensorArgs(std::move(ptrs)), attrs);
  });
  EXPECT_EQ(rule, ref) << "rule " << rule.Describe() << ", reference " << ref.Describe();
  EXPECT_EQ(rule, kernel) << "rule " << rule.Describe() << ", kernel " << kernel.Describe();
}

TEST(ValidationAgreement, EinsumEquations) {
  const std::vector<Shape> mk_kn = {{2, 3}, {3, 4}};
  for (const std::string eq :
       {"ij,jk->ik", "ij, jk->ik", " ij , jk -> ik ", "i j,j k->i k", "ij,jk", "ij, jk",
        "i.j,jk->ik", "...ij,jk->ik", "ij,jk->i.k", "ij,jk->ii", "ij,jk->iz", "ii,jk->ik",
        "ij,jk,kl->il", "ij->ik", "ij;jk->ik", "ij,jk->ik->i", "i-j,jk->ik", "ij,jk-ik",
        "IJ,JK->IK", "ij,jk->", "ij,kl->ik", "i1,jk->ik"}) {
    ExpectAgreement(eq, mk_kn);
  }
  ExpectAgreement("ij,jk->ik", {{2, 3}, {4, 4}});     // size mismatch
  ExpectAgreement("ijk,jk->ik", {{2, 3}, {3, 4}});    // rank mismatch
  ExpectAgreement(" i , i -> ", {{3}, {3}});
  // Ellipses and size-1 broadcasting (sizes equal or 1; `...` in the output when in an
  // operand; one `...` per term; enough dims for the letters).
  for (const std::string eq : {"...ij,...jk->...ik", "...ij,...jk", "...j,jk->...k", "...ij,jk->ik",
                               "ij,jk->...ik", "....ij,jk->ik", "...i...j,jk->ik", "..ij,jk->ik",
                               "...ijk,jk->...k"}) {
    ExpectAgreement(eq, mk_kn);
  }
  ExpectAgreement("...ij,...jk->...ik", {{2, 1, 2, 3}, {5, 3, 4}});
  ExpectAgreement("...ij,...jk->...ik", {{2, 2, 3}, {5, 3, 4}});  // ellipsis 2 vs 5
  ExpectAgreement("ij,jk->ik", {{2, 1}, {3, 4}});                   // j broadcasts
}

}  // namespace
}  // namespace spmd
