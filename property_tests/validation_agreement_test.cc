// The rule, the reference and the CPU kernel validate a request once, the same way (the
// shared helpers of rules/engine/shape_util.h and the op plans of rules/ops/*_plan.h): on
// every einsum equation below, and on every example of every registered op with its attrs
// and shapes mutated (the planned families first, with their own edge cases), they all
// accept, or all refuse with the same error type and field. Without the shared parser the
// rule accepted "ij, jk->ik" that the others refused, and called "i.j" InvalidArgument
// where the reference said Unsupported; without the plans the rule refused a 0-d concat
// naming inputs[0].shape where the others named attrs.axis, squeeze's rule refused a
// repeated axis the others accepted, and layer_norm's rule refused a negative
// begin_norm_axis the others normalised. Where the build has the CUDA backend and a device
// is present, the CUDA kernel is a fourth party (run as the CPU kernel is, on device copies
// of the same inputs); elsewhere ValidationAgreement.CudaKernelParty says why it did not run.
#include <algorithm>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/kernels.h"
#include "kernels/sim/op_inputs_test_util.h"
#include "property_tests/verdict.h"
#include "reference/reference.h"
#include "rules/model/error.h"
#include "rules/engine/notation.h"
#include "rules/engine/registry.h"
#include "rules/engine/shape_util.h"

#ifdef SPMD_HAVE_CUDA
#include "kernels/cuda/cuda.h"
#include "kernels/cuda/registry.h"
#endif

namespace spmd {
namespace {

using agreement::Numel;
using agreement::Run;
using agreement::Verdict;

// The CUDA kernel as a party: available where this build has the CUDA backend and a CUDA
// device is present at run time; else the reason it is not.
struct CudaParty {
  bool available = false;
  std::string why;
};
const CudaParty& Cuda() {
  static const CudaParty party = [] {
    CudaParty p;
#ifdef SPMD_HAVE_CUDA
    std::string reason;
    if (kernels::cuda::DeviceCount(&reason) > 0) {
      kernels::cuda::EnableCuda();
      p.available = true;
    } else {
      p.why = "no CUDA device: " + reason;
    }
#else
    p.why = "this build has no CUDA backend (no nvcc when configured, or SPMD_WITH_CUDA=OFF)";
#endif
    return p;
  }();
  return party;
}

enum class KernelParty { kCpu, kCuda };

// Runs the op's kernel of `party` on `inputs` (host tensors): the CPU kernel on them, the CUDA
// kernel on device copies of them (its outputs copied back, so that a failed launch shows).
// One path for both parties; only where the tensors live and which table runs differ.
Verdict RunKernelParty(KernelParty party, const std::string& op, const kernels::Tensors& inputs,
                       const Attrs& attrs) {
  return Run([&] {
    kernels::Tensors placed;
    if (party == KernelParty::kCuda) {
#ifdef SPMD_HAVE_CUDA
      for (const kernels::Tensor& t : inputs) placed.push_back(kernels::cuda::ToDevice(t, kernels::Device::Cuda(0)));
#else
      throw std::logic_error("the CUDA party runs only where the build has the CUDA backend");
#endif
    }
    const kernels::Tensors& args = party == KernelParty::kCuda ? placed : inputs;
    std::vector<const kernels::Tensor*> ptrs;
    for (const kernels::Tensor& t : args) ptrs.push_back(&t);
    if (party == KernelParty::kCpu) {
      kernels::RunCpuKernel(op, kernels::TensorArgs(std::move(ptrs)), attrs);
      return;
    }
#ifdef SPMD_HAVE_CUDA
    for (const kernels::Tensor& out : kernels::cuda::RunCudaKernel(op, kernels::TensorArgs(std::move(ptrs)), attrs)) {
      (void)kernels::cuda::ToHost(out);
    }
#endif
  });
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
  const Verdict kernel = RunKernelParty(KernelParty::kCpu, "einsum", kernel_inputs, attrs);
  EXPECT_EQ(rule, ref) << "rule " << rule.Describe() << ", reference " << ref.Describe();
  EXPECT_EQ(rule, kernel) << "rule " << rule.Describe() << ", kernel " << kernel.Describe();
  if (Cuda().available) {
    const Verdict cuda = RunKernelParty(KernelParty::kCuda, "einsum", kernel_inputs, attrs);
    EXPECT_EQ(rule, cuda) << "rule " << rule.Describe() << ", CUDA kernel " << cuda.Describe();
  }
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

// ---- the ops with plans: examples, then their attrs and shapes mutated ----

// Every input filled with 0 (an id in range wherever the addressed dim is not empty).
struct Request {
  std::vector<Shape> shapes;
  Attrs attrs;
  std::string what;  // the mutation
  std::string Describe() const {
    std::string s;
    for (const Shape& shape : shapes) s += shape::ShapeString(shape) + " ";
    return s + what;
  }
};

std::string Print(const std::vector<int64_t>& v) { return shape::ShapeString(v); }

// A refusal that names the values of an input: the rule never sees values.
bool NamesData(const Verdict& v) {
  return !v.accepted && v.field.size() >= 5 && v.field.compare(v.field.size() - 5, 5, ".data") == 0;
}

// The inputs' dtypes as the checker gives them (checker/input_values.cc): int64 for an
// input the declaration fills with ids, bool for one it fills with 0 / 1, else float64.
// A request whose shapes the value builder cannot read keeps float64 (the op refuses it).
std::vector<DType> InputDTypes(const OpDecl& op, const Request& request) {
  std::vector<DType> dtypes(request.shapes.size(), DType::kFloat64);
  if (!op.values) return dtypes;
  std::vector<InputValues> kinds;
  try {
    kinds = op.values(RuleContext{request.shapes, request.attrs});
  } catch (const SpmdError&) {
    return dtypes;
  } catch (const std::out_of_range&) {
    return dtypes;
  }
  for (size_t i = 0; i < kinds.size() && i < dtypes.size(); ++i) {
    if (IsIntegerKind(kinds[i].kind)) dtypes[i] = DType::kInt64;
    if (kinds[i].kind == ValueKind::kBool) dtypes[i] = DType::kBool;
  }
  return dtypes;
}

// Returns how many requests all the parties accepted.
int ExpectOpAgreement(const OpDecl& op, const Request& request) {
  SCOPED_TRACE(op.name + " " + request.Describe());
  std::vector<TensorArg> args;
  reference::Tensors ref_inputs;
  kernels::Tensors kernel_inputs;
  const std::vector<DType> dtypes = InputDTypes(op, request);
  for (size_t i = 0; i < request.shapes.size(); ++i) {
    const Shape& shape = request.shapes[i];
    args.push_back({shape, DistAttr::Replicated(static_cast<int>(shape.size()))});
    reference::Tensor t;
    t.shape = shape;
    t.dtype = dtypes[i];
    t.data.assign(static_cast<size_t>(Numel(shape)), 0.0);
    ref_inputs.push_back(t);
    kernels::Tensor k = kernels::Tensor::Uninitialized(shape, dtypes[i]);
    if (k.nbytes() > 0) std::memset(k.bytes(), 0, k.nbytes());  // 0 in every dtype
    kernel_inputs.push_back(std::move(k));
  }
  const Verdict rule = Run([&] { InferForward(op, Mesh({2}), args, request.attrs); });
  const Verdict ref = Run([&] { reference::FindReference(op.name)(ref_inputs, request.attrs); });
  const Verdict kernel = RunKernelParty(KernelParty::kCpu, op.name, kernel_inputs, request.attrs);
  EXPECT_EQ(ref, kernel) << "reference " << ref.Describe() << ", kernel " << kernel.Describe();
  if (!NamesData(ref) && !NamesData(kernel)) {
    EXPECT_EQ(rule, ref) << "rule " << rule.Describe() << ", reference " << ref.Describe();
  }
  bool cuda_accepted = true;
  if (Cuda().available) {
    // A CUDA kernel reads no values on the host (kernels/cuda/registry.h), so a refusal
    // naming the data is the CPU's alone.
    const Verdict cuda = RunKernelParty(KernelParty::kCuda, op.name, kernel_inputs, request.attrs);
    if (!NamesData(kernel)) {
      EXPECT_EQ(kernel, cuda) << "CPU kernel " << kernel.Describe() << ", CUDA kernel " << cuda.Describe();
    }
    cuda_accepted = cuda.accepted;
  }
  return rule.accepted && ref.accepted && kernel.accepted && cuda_accepted ? 1 : 0;
}

// The example, then one attr or one shape changed at a time: attrs to values around the
// edges of their ranges, shapes with a dim dropped, added, grown or emptied.
std::vector<Request> Mutations(const OpDecl& op, const Example& example) {
  const Attrs base = op.NormalizeAttrs(example.attrs);
  std::vector<Request> out = {{example.shapes, base, "the example"}};
  for (const AttrSpec& spec : op.attrs) {
    auto with = [&](AttrValue v) {
      const std::string what =
          "attrs." + spec.name + " = " +
          std::visit([](const auto& x) {
            using X = std::decay_t<decltype(x)>;
            if constexpr (std::is_same_v<X, std::vector<int64_t>>) {
              return Print(x);
            } else if constexpr (std::is_arithmetic_v<X>) {
              return std::to_string(x);
            } else {
              return std::string("...");
            }
          }, v);
      out.push_back({example.shapes, base.With(spec.name, std::move(v)), what});
    };
    switch (spec.kind) {
      case AttrKind::kInt:
        for (int64_t v : {-4, -2, -1, 0, 1, 2, 3, 7}) with(v);
        break;
      case AttrKind::kInts:
        for (const std::vector<int64_t>& v : std::vector<std::vector<int64_t>>{
                 {}, {-1}, {0}, {1}, {-5}, {7}, {2, -1}, {-1, -1}, {0, 0}, {1, 1}, {0, -1, 1}, {3, 0, 2},
                 {1, 2, 3, 4}}) {
          with(v);
        }
        break;
      case AttrKind::kBool:
        with(!base.GetBool(spec.name));
        break;
      case AttrKind::kFloat:
        for (double v : {-1.0, 0.5, 1.0, 2.0, 1e19}) with(v);
        break;
      default:
        break;
    }
  }
  for (size_t i = 0; i < example.shapes.size(); ++i) {
    auto with = [&](Shape shape) {
      std::vector<Shape> shapes = example.shapes;
      shapes[i] = std::move(shape);
      out.push_back({shapes, base, "inputs[" + std::to_string(i) + "].shape changed"});
    };
    const Shape& s = example.shapes[i];
    if (!s.empty()) with(Shape(s.begin(), s.end() - 1));
    Shape longer = s;
    longer.push_back(1);
    with(longer);
    for (size_t d = 0; d < s.size(); ++d) {
      Shape grown = s, emptied = s;
      grown[d] += 1;
      emptied[d] = 0;
      with(grown);
      with(emptied);
    }
  }
  return out;
}

TEST(ValidationAgreement, PlannedOpsUnderMutation) {
  const std::vector<SizePalette> palettes = {{{4, 6, 3, 5}}, {{2, 1, 3, 2}}};
  for (const char* name : {"reshape", "flatten", "squeeze", "unsqueeze", "transpose", "split", "split_with_num",
                           "unbind", "concat", "stack", "slice", "tile", "expand", "expand_as", "triu", "tril",
                           "tril_triu", "one_hot", "roll", "pad", "swiglu", "index_select", "gather",
                           "gather_nd", "scatter", "scatter_nd_add", "argsort", "topk", "nonzero", "unique", "dropout",
                           "fused_dropout_add", "sum", "mean", "softmax_grad", "layer_norm", "rms_norm",
                           "layer_norm_grad", "rms_norm_grad", "lookup_table_v2", "embedding_grad",
                           "c_embedding", "c_embedding_grad", "cross_entropy_with_softmax",
                           "cross_entropy_with_softmax_grad"}) {
    const OpDecl* op = FindOp(name);
    ASSERT_NE(op, nullptr) << name;
    int requests = 0, accepted = 0;
    for (const SizePalette& palette : palettes) {
      for (const Example& example : op->examples(palette)) {
        for (const Request& request : Mutations(*op, example)) {
          ++requests;
          accepted += ExpectOpAgreement(*op, request);
        }
      }
    }
    // The mutations reach both sides of the plan: some accepted, some refused.
    EXPECT_GT(accepted, 0) << name;
    EXPECT_LT(accepted, requests) << name;
  }
}

// The normalisations' shapes for begin_norm_axis `begin` (any int): x of `x`, the
// parameters [prod(x[b:])] and the statistics x[:b] for b = begin normalised into
// [0, rank), so that a negative begin in range is a request every side should accept;
// outside the range the shapes stay those of begin 0.
std::vector<Shape> NormShapes(const Shape& x, int64_t begin, size_t params, size_t statistics, bool grad) {
  const auto rank = static_cast<int64_t>(x.size());
  const int64_t b = begin < -rank || begin >= rank ? 0 : (begin < 0 ? begin + rank : begin);
  std::vector<Shape> shapes{x};
  shapes.insert(shapes.end(), params, Shape{Numel(Shape(x.begin() + b, x.end()))});
  if (grad) {
    shapes.insert(shapes.end(), statistics, Shape(x.begin(), x.begin() + b));
    shapes.push_back(x);
  }
  return shapes;
}

// layer_norm, rms_norm and their grads over begin_norm_axis in [-rank-1, rank] and epsilon
// at and past the edges of its range, on x of rank 1 to 4: the rule (which reads both
// through the plan), the reference and the CPU kernel agree. Before the rule took the
// plan, it refused every negative begin_norm_axis that the others normalised.
TEST(ValidationAgreement, NormBeginAxisAndEpsilon) {
  struct NormOp {
    const char* name;
    size_t params, statistics;
    bool grad;
  };
  for (const NormOp& n : {NormOp{"layer_norm", 2, 2, false}, NormOp{"rms_norm", 1, 1, false},
                          NormOp{"layer_norm_grad", 2, 2, true}, NormOp{"rms_norm_grad", 1, 1, true}}) {
    const OpDecl& op = *FindOp(n.name);
    int requests = 0, accepted = 0, negative_accepted = 0;
    for (const Shape& x : {Shape{5}, Shape{3, 4}, Shape{2, 3, 4}, Shape{2, 1, 3, 2}, Shape{2, 0, 3}}) {
      const auto rank = static_cast<int64_t>(x.size());
      for (int64_t begin = -rank - 1; begin <= rank; ++begin) {
        for (double epsilon : {1e-5, 0.0, -1.0, 1e19}) {
          Request request{NormShapes(x, begin, n.params, n.statistics, n.grad),
                          op.NormalizeAttrs(notation::MakeAttrs({{"begin_norm_axis", begin}, {"epsilon", epsilon}})),
                          "begin_norm_axis " + std::to_string(begin) + ", epsilon " + std::to_string(epsilon)};
          ++requests;
          const int ok = ExpectOpAgreement(op, request);
          accepted += ok;
          if (begin < 0) negative_accepted += ok;
        }
      }
    }
    EXPECT_GT(negative_accepted, 0) << n.name;
    EXPECT_LT(accepted, requests) << n.name;
  }
}

// Every registered op with examples (the plans' ops above and all the others: elementwise,
// unary and binary math, contractions, attention, conv, optimizer, ...), its examples
// mutated the same way: rule, reference and CPU kernel agree on every request. Found the
// CPU einsum reading a dropped broadcast dim's size as a kept letter's (a heap overflow on
// "...j,...jk->...k" with an empty dim) and c_softmax's rule accepting a negative ring_id.
TEST(ValidationAgreement, EveryOpUnderMutation) {
  const std::vector<SizePalette> palettes = {{{4, 6, 3, 5}}, {{2, 1, 3, 2}}};
  int ops = 0, accepted = 0;
  for (const OpDecl& op : AllOps()) {
    if (!op.examples) continue;
    ++ops;
    for (const SizePalette& palette : palettes) {
      for (const Example& example : op.examples(palette)) {
        for (const Request& request : Mutations(op, example)) accepted += ExpectOpAgreement(op, request);
      }
    }
  }
  EXPECT_EQ(ops, static_cast<int>(AllOps().size())) << "every op declares examples";
  EXPECT_GT(accepted, 0);
  RecordProperty("cuda_party", Cuda().available ? "ran" : "not run: " + Cuda().why);
}

// The fourth party of the tests above, on its own: skipped, with the reason, where the build
// has no CUDA backend or no device is present; else the CUDA kernel accepts a request the
// CPU kernel accepts and refuses one the CPU kernel refuses, naming the same field.
TEST(ValidationAgreement, CudaKernelParty) {
  if (!Cuda().available) GTEST_SKIP() << "the CUDA kernel is not a party here: " << Cuda().why;
  const OpDecl& op = *FindOp("matmul");
  const Attrs attrs = op.NormalizeAttrs(Attrs());
  for (const std::vector<Shape>& shapes : {std::vector<Shape>{{2, 3}, {3, 4}}, std::vector<Shape>{{2, 3}, {4, 4}}}) {
    kernels::Tensors inputs;
    for (const Shape& shape : shapes) {
      inputs.push_back(kernels::Tensor::FromVector(shape, std::vector<double>(static_cast<size_t>(Numel(shape)), 0.5)));
    }
    const Verdict cpu = RunKernelParty(KernelParty::kCpu, op.name, inputs, attrs);
    const Verdict cuda = RunKernelParty(KernelParty::kCuda, op.name, inputs, attrs);
    EXPECT_EQ(cpu, cuda) << "CPU kernel " << cpu.Describe() << ", CUDA kernel " << cuda.Describe();
  }
}

// ---- the localized part: an op reads only the fields it declares ----

// A value of `field` for a run whose first input has shape `x` (offset 1 in every dim of a
// global shape 2 larger: a consistent block).
Localized OneField(LocalField field, const Shape& x) {
  Localized local;
  switch (field) {
    case LocalField::kCount: local.count = 7; break;
    case LocalField::kVocabStart: local.vocab_start = 1; break;
    case LocalField::kExact: local.exact = true; break;
    case LocalField::kOffset: local.offset = std::vector<int64_t>(x.size(), 1); break;
    case LocalField::kGlobalShape: {
      Shape global = x;
      for (int64_t& d : global) d += 2;
      local.global_shape = global;
      break;
    }
  }
  return local;
}

// What the reference and the CPU kernel give for one request: their verdicts and outputs.
struct Outcome {
  Verdict reference, kernel;
  std::vector<reference::Tensor> reference_out;
  std::vector<std::vector<double>> kernel_out;
  // Equal verdicts, shapes and values bit for bit (a NaN equals the same NaN).
  bool operator==(const Outcome& o) const {
    auto same = [](const std::vector<double>& a, const std::vector<double>& b) {
      return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
    };
    if (!(reference == o.reference && kernel == o.kernel)) return false;
    if (reference_out.size() != o.reference_out.size() || kernel_out.size() != o.kernel_out.size()) return false;
    for (size_t i = 0; i < reference_out.size(); ++i) {
      if (reference_out[i].shape != o.reference_out[i].shape || !same(reference_out[i].data, o.reference_out[i].data)) {
        return false;
      }
    }
    for (size_t i = 0; i < kernel_out.size(); ++i) {
      if (!same(kernel_out[i], o.kernel_out[i])) return false;
    }
    return true;
  }
};

Outcome RunOnce(const OpDecl& op, const kernels::Tensors& inputs, const Attrs& attrs) {
  Outcome out;
  reference::Tensors ref_inputs;
  for (const kernels::Tensor& t : inputs) {
    reference::Tensor r;
    r.shape = t.shape();
    r.dtype = t.dtype();
    for (int64_t i = 0; i < t.numel(); ++i) {
      switch (t.dtype()) {
        case DType::kInt64: r.data.push_back(static_cast<double>(t.data<int64_t>()[i])); break;
        case DType::kBool: r.data.push_back(t.data<bool>()[i] ? 1.0 : 0.0); break;
        default: r.data.push_back(t.data<double>()[i]); break;
      }
    }
    ref_inputs.push_back(std::move(r));
  }
  out.reference = Run([&] { out.reference_out = reference::FindReference(op.name)(ref_inputs, attrs); });
  out.kernel = Run([&] {
    std::vector<const kernels::Tensor*> ptrs;
    for (const kernels::Tensor& t : inputs) ptrs.push_back(&t);
    for (const kernels::Tensor& t : kernels::RunCpuKernel(op.name, kernels::TensorArgs(std::move(ptrs)), attrs)) {
      std::vector<double> values;
      if (t.dtype() == DType::kFloat64) values.assign(t.data<double>(), t.data<double>() + t.numel());
      out.kernel_out.push_back(std::move(values));
    }
  });
  return out;
}

// Every op on its examples (random values of each input's kind): setting a localized field
// the op does not declare (OpDecl::localized) changes neither the reference's nor the CPU
// kernel's answer. So an op whose plan, reference or kernel reads a field declares it, and
// the localizer (which may set only declared fields) is the one place a shard's run gets it.
TEST(ValidationAgreement, UndeclaredLocalFieldsAreIgnored) {
  int runs = 0;
  for (const OpDecl& op : AllOps()) {
    if (!op.examples) continue;
    for (const Example& example : op.examples(SizePalette{{4, 6, 3, 5}})) {
      Attrs attrs;
      try {
        attrs = op.NormalizeAttrs(example.attrs);
      } catch (const SpmdError&) {
        continue;
      }
      const kernels::Tensors inputs =
          kernels::sim::testing::MakeInputs(op, example.shapes, attrs, DType::kFloat64, /*seed=*/7);
      const Outcome whole = RunOnce(op, inputs, attrs);
      const Shape x = example.shapes.empty() ? Shape{} : example.shapes[0];
      for (LocalField field : kAllLocalFields) {
        if (std::find(op.localized.begin(), op.localized.end(), field) != op.localized.end()) continue;
        SCOPED_TRACE(op.name + " with " + LocalFieldName(field) + " set, undeclared");
        ++runs;
        EXPECT_TRUE(RunOnce(op, inputs, attrs.WithLocal(OneField(field, x))) == whole);
      }
    }
  }
  EXPECT_GT(runs, 0);
}

// The localizer of a declaration sets only the fields it lists: one that sets another is a
// declaration bug, refused at the first shard it localizes.
TEST(ValidationAgreement, LocalizerSetsOnlyDeclaredFields) {
  const Localizer checked = CheckedLocalizer("mean", {LocalField::kOffset}, [](const LocalContext& c) {
    return c.attrs.WithLocal({.count = 3});
  });
  const Attrs none;
  const std::vector<Shape> shapes = {{4}};
  const LocalContext context{none, shapes, shapes, shapes, shapes, shapes};
  EXPECT_THROW(checked(context), std::logic_error);
  const Localizer declared = CheckedLocalizer("mean", {LocalField::kCount}, [](const LocalContext& c) {
    return c.attrs.WithLocal({.count = 3});
  });
  EXPECT_EQ(declared(context).local().count, std::optional<int64_t>(3));
}

}  // namespace
}  // namespace spmd
