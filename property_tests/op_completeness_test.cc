// Every op of rules/engine/op_list.h has every piece an op needs, and a test failure names the
// op and the piece. The pieces (README "Adding an op"):
//   declaration        rules/ops/<family>.cc, under its own name, with examples
//   tolerance class    `.Tolerance(...)` in the declaration
//   reference          reference/ops_*.cc, answering the declaration's first example
//   CPU kernel         kernels/cpu/*.cc, answering the same example
//   CUDA kernel        kernels/cuda/<family>.cu (or staged.cc), `const CudaKernel ops::NAME`,
//                      read from the sources, so a machine without nvcc names it too
//   exchange phases    Phase::kStats / kFinish (rules/engine/phase.h) for an op declaring an
//                      exchange: listed in rules/ops/exchange_ops.h, with their reference, CPU
//                      and CUDA kernels (ops::<op>_stats / ops::<op>_finish)
//   numeric goldens    a case with "op": NAME in golden/numeric/*.jsonl
//   rule goldens       a case with "op": NAME in golden/rules/*.jsonl
//   OPS.md entry       a table row of docs/OPS.md whose first cell lists NAME
// A declaration, reference or kernel that is missing altogether does not link (their tables
// are generated from op_list.h; the CUDA ones where nvcc builds them); this test catches the
// rest.
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checker/input_values.h"
#include "kernels/cpu/kernels.h"
#include "reference/reference.h"
#include "rules/model/error.h"
#include "rules/ops/exchange_ops.h"
#include "rules/model/half.h"
#include "rules/engine/op_list.h"
#include "rules/engine/phase.h"
#include "rules/engine/registry.h"

namespace spmd {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string>& ListedOps() {
  static const std::vector<std::string> kNames = {
#define SPMD_OP_NAME(name) #name,
      SPMD_FOR_EACH_OP(SPMD_OP_NAME)
#undef SPMD_OP_NAME
  };
  return kNames;
}

const std::set<std::string>& ExchangeOps() {
  static const std::set<std::string> kNames = {
#define SPMD_EXCHANGE_OP_NAME(name) #name,
      SPMD_FOR_EACH_EXCHANGE_OP(SPMD_EXCHANGE_OP_NAME)
#undef SPMD_EXCHANGE_OP_NAME
  };
  return kNames;
}

// The CUDA kernels kernels/cuda defines, by their name in kernels/cuda/registry.h's `ops`
// (an op's name, or `<op>_stats` / `<op>_finish` for a phase), with how many definitions
// each has: one `const CudaKernel ops::NAME{...};` line per kernel, read from the sources,
// because on a machine without nvcc nothing compiles them (with nvcc a missing one also
// fails to link). A family generated from its list (rules/<family>_list.h, the X-macro
// SPMD_FOR_EACH_<FAMILY>_OP) defines its kernels with a macro whose body is such a line
// (`const CudaKernel ops::name{...}`) applied to the list: each name of the list counts.
std::map<std::string, int> CudaKernelDefinitions(const fs::path& dir) {
  static const std::regex kDefinition(R"(^\s*const\s+CudaKernel\s+ops::(\w+)\s*\{)");
  static const std::regex kMacro(R"(^\s*#define\s+(\w+)\(name\).*const\s+CudaKernel\s+ops::name\s*\{)");
  static const std::regex kApplied(R"(^\s*SPMD_FOR_EACH_(\w+)_OP\((\w+)\))");
  static const std::regex kListed(R"(X\((\w+)\))");
  std::map<std::string, int> defined;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string file = entry.path().filename().string();
    const std::string ext = entry.path().extension().string();
    if ((ext != ".cu" && ext != ".cc") || file.ends_with("_test.cc")) continue;
    std::ifstream in(entry.path());
    std::string line;
    std::smatch m;
    std::set<std::string> macros;
    while (std::getline(in, line)) {
      if (std::regex_search(line, m, kDefinition)) ++defined[m[1].str()];
      if (std::regex_search(line, m, kMacro)) macros.insert(m[1].str());
      if (std::regex_search(line, m, kApplied) && macros.count(m[2].str())) {
        std::string family = m[1].str();
        for (char& c : family) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        std::ifstream list(dir.parent_path().parent_path() / "rules" / "engine" / (family + "_list.h"));
        if (!list) ADD_FAILURE() << file << " applies SPMD_FOR_EACH_" << m[1].str() << "_OP, but rules/engine/" << family << "_list.h is missing";
        std::string text((std::istreambuf_iterator<char>(list)), std::istreambuf_iterator<char>());
        for (auto it = std::sregex_iterator(text.begin(), text.end(), kListed); it != std::sregex_iterator(); ++it) {
          ++defined[(*it)[1].str()];
        }
      }
    }
  }
  return defined;
}

// "" when `name` has exactly one CUDA kernel among `defined`; else what is wrong.
std::string OneCudaKernel(const std::map<std::string, int>& defined, const std::string& name,
                          const std::string& what) {
  const auto it = defined.find(name);
  if (it == defined.end()) {
    return "CUDA kernel of " + what + " (`const CudaKernel ops::" + name +
           "{...};` in kernels/cuda/<family>.cu, or staged.cc to run the CPU kernel)";
  }
  if (it->second != 1) {
    return "one CUDA kernel of " + what + ": ops::" + name + " is defined " + std::to_string(it->second) + " times";
  }
  return "";
}

// The "op" of every case in `dir`/*.jsonl, with how many cases name it.
std::map<std::string, int> GoldenOps(const fs::path& dir) {
  std::map<std::string, int> ops;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".jsonl") continue;
    std::ifstream in(entry.path());
    std::string line;
    while (std::getline(in, line)) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const nlohmann::json j = nlohmann::json::parse(line);
      if (j.contains("op") && j["op"].is_string()) ++ops[j["op"].get<std::string>()];
    }
  }
  return ops;
}

// The names in the first cell of every table row of docs/OPS.md ("| max, min | ...").
std::set<std::string> DocumentedOps(const fs::path& file) {
  std::set<std::string> names;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("|", 0) != 0) continue;
    const std::string cell = line.substr(1, line.find('|', 1) - 1);
    std::stringstream ss(cell);
    std::string name;
    while (std::getline(ss, name, ',')) {
      const size_t begin = name.find_first_not_of(" `");
      const size_t end = name.find_last_not_of(" `");
      if (begin != std::string::npos) names.insert(name.substr(begin, end - begin + 1));
    }
  }
  return names;
}

// Inputs for an example: generated values of each input's value kind.
reference::Tensors MakeInputs(const OpDecl& op, const Example& example) {
  const Attrs attrs = op.NormalizeAttrs(example.attrs);
  const std::vector<InputValues> kinds = op.InputValueKinds(RuleContext{example.shapes, attrs});
  std::mt19937_64 rng(1);
  reference::Tensors inputs;
  for (size_t i = 0; i < example.shapes.size(); ++i) {
    inputs.push_back(checker::MakeInputValues(example.shapes[i], kinds[i], rng));
  }
  return inputs;
}

kernels::Tensor ToKernel(const reference::Tensor& t) {
  kernels::Tensor k(t.shape, t.dtype);
  for (size_t i = 0; i < t.data.size(); ++i) {
    switch (t.dtype) {
      case DType::kFloat64: k.data<double>()[i] = t.data[i]; break;
      case DType::kFloat32: k.data<float>()[i] = static_cast<float>(t.data[i]); break;
      case DType::kInt64: k.data<int64_t>()[i] = static_cast<int64_t>(t.data[i]); break;
      case DType::kBool: k.data<bool>()[i] = t.data[i] != 0; break;
      case DType::kBFloat16: k.data<BFloat16>()[i] = BFloat16::FromBits(DoubleToBFloat16Bits(t.data[i])); break;
      case DType::kFloat16: k.data<Float16>()[i] = Float16::FromBits(DoubleToFloat16Bits(t.data[i])); break;
    }
  }
  return k;
}

// "" when the reference and the CPU kernel both answer the op's first example at sizes
// {2, 3, 4}; else the piece at fault and why.
std::string RunFirstExample(const OpDecl& op) {
  const std::vector<Example> examples = op.examples(SizePalette{{2, 3, 4}});
  if (examples.empty()) return "declaration: no examples";
  const Example& example = examples.front();
  const Attrs attrs = op.NormalizeAttrs(example.attrs);
  const reference::Tensors inputs = MakeInputs(op, example);
  try {
    reference::FindReference(op.name)(inputs, attrs);
  } catch (const std::exception& e) {
    return std::string("reference: refuses its first example: ") + e.what();
  }
  try {
    kernels::Tensors k_inputs;
    for (const reference::Tensor& t : inputs) k_inputs.push_back(ToKernel(t));
    kernels::RunCpuKernel(op.name, kernels::TensorArgs(k_inputs), attrs);
  } catch (const std::exception& e) {
    return std::string("CPU kernel: refuses its first example: ") + e.what();
  }
  return "";
}

TEST(OpCompleteness, EveryRegisteredOpHasEveryPiece) {
  const fs::path root = SPMD_SOURCE_DIR;
  const std::map<std::string, int> numeric = GoldenOps(root / "golden" / "numeric");
  const std::map<std::string, int> rules = GoldenOps(root / "golden" / "rules");
  const std::set<std::string> documented = DocumentedOps(root / "docs" / "OPS.md");
  const std::map<std::string, int> cuda = CudaKernelDefinitions(root / "kernels" / "cuda");
  std::set<std::string> expected_cuda;
  const std::vector<OpDecl>& decls = AllOps();
  ASSERT_EQ(decls.size(), ListedOps().size());
  for (size_t k = 0; k < ListedOps().size(); ++k) {
    const std::string& name = ListedOps()[k];
    const OpDecl& op = decls[k];
    std::vector<std::string> missing;
    if (op.name != name) missing.push_back("declaration: declare::" + name + "() declares '" + op.name + "'");
    if (!op.einsum && !op.dimtrans) missing.push_back("declaration: neither an einsum nor a DimTrans rule");
    if (!op.examples) missing.push_back("declaration: no examples (.Examples)");
    if (!op.tolerance) missing.push_back("tolerance class (.Tolerance in rules/ops/<family>.cc)");
    if (reference::FindReference(name) == nullptr) missing.push_back("reference (reference/ops_*.cc)");
    if (kernels::FindCpuKernel(name) == nullptr) missing.push_back("CPU kernel (kernels/cpu)");
    expected_cuda.insert(name);
    if (const std::string e = OneCudaKernel(cuda, name, "the op"); !e.empty()) missing.push_back(e);
    if (op.exchange.has_value() != (ExchangeOps().count(name) > 0)) {
      missing.push_back(op.exchange ? "exchange phases: declares an exchange, not listed in rules/ops/exchange_ops.h"
                                    : "declaration: listed in rules/ops/exchange_ops.h, declares no exchange");
    }
    if (ExchangeOps().count(name)) {
      for (const Phase phase : kPhases) {
        const KernelRef kernel(name, phase);
        const std::string at = ToString(kernel);
        const std::string cuda_name = name + "_" + std::string(ToString(phase));
        if (reference::FindReference(kernel) == nullptr) missing.push_back("reference of " + at);
        if (kernels::FindCpuKernel(kernel) == nullptr) missing.push_back("CPU kernel of " + at);
        expected_cuda.insert(cuda_name);
        if (const std::string e = OneCudaKernel(cuda, cuda_name, at); !e.empty()) missing.push_back(e);
      }

    }
    if (op.examples && op.name == name) {
      const std::string error = RunFirstExample(op);
      if (!error.empty()) missing.push_back(error);
    }
    if (!numeric.count(name)) missing.push_back("numeric goldens (golden/numeric/*.jsonl, from gen_numeric.py)");
    if (!rules.count(name)) missing.push_back("rule goldens (golden/rules/*.jsonl)");
    if (!documented.count(name)) missing.push_back("docs/OPS.md entry (a table row naming it)");
    for (const std::string& piece : missing) ADD_FAILURE() << "op " << name << " lacks: " << piece;
  }
  for (const auto& [name, count] : cuda) {
    if (!expected_cuda.count(name)) {
      ADD_FAILURE() << "kernels/cuda defines ops::" << name << ", which is no op of rules/engine/op_list.h "
                    << "nor a phase of rules/ops/exchange_ops.h";
    }
  }
}

// The scan itself sees what it should: a parse that found nothing would pass every op.
TEST(OpCompleteness, TheScansFindTheKnownOps) {
  const fs::path root = SPMD_SOURCE_DIR;
  EXPECT_GT(GoldenOps(root / "golden" / "numeric").count("matmul"), 0u);
  EXPECT_GT(GoldenOps(root / "golden" / "rules").count("matmul"), 0u);
  const std::set<std::string> documented = DocumentedOps(root / "docs" / "OPS.md");
  EXPECT_TRUE(documented.count("max") && documented.count("min") && documented.count("relu"));
  const std::map<std::string, int> cuda = CudaKernelDefinitions(root / "kernels" / "cuda");
  EXPECT_EQ(cuda.count("matmul"), 1u);         // a device kernel (contraction.cu)
  EXPECT_EQ(cuda.count("conv2d"), 1u);         // a host-staged one (staged.cc)
  EXPECT_EQ(cuda.count("softmax_stats"), 1u);  // a phase
  EXPECT_EQ(cuda.count("max"), 1u);            // a template instance (reduction.cu)
}

// The tables are keyed by (op, phase): an op declaring an exchange has two phase entries
// in the reference and CPU tables, distinct from each other and from its own kernel (a
// slip in a generated entry, both phases on one function, shows here); an op without one
// has none, and running one is an UnknownOp error naming the phase.
TEST(OpCompleteness, PhasesAreFoundUnderTheirOpAndPhaseOnly) {
  for (const std::string& name : ListedOps()) {
    const bool exchanges = ExchangeOps().count(name) > 0;
    const KernelRef stats(name, Phase::kStats), finish(name, Phase::kFinish);
    for (const KernelRef& kernel : {stats, finish}) {
      EXPECT_EQ(reference::FindReference(kernel) != nullptr, exchanges) << ToString(kernel);
      EXPECT_EQ(kernels::FindCpuKernel(kernel) != nullptr, exchanges) << ToString(kernel);
    }
    if (!exchanges) continue;
    EXPECT_NE(reference::FindReference(stats), reference::FindReference(finish)) << name;
    EXPECT_NE(reference::FindReference(stats), reference::FindReference(name)) << name;
    EXPECT_NE(reference::FindReference(finish), reference::FindReference(name)) << name;
    EXPECT_NE(kernels::FindCpuKernel(stats), kernels::FindCpuKernel(finish)) << name;
    EXPECT_NE(kernels::FindCpuKernel(stats), kernels::FindCpuKernel(name)) << name;
    EXPECT_NE(kernels::FindCpuKernel(finish), kernels::FindCpuKernel(name)) << name;
  }
  const kernels::Tensor x(Shape{2}, DType::kFloat32);
  try {
    kernels::RunCpuKernel(KernelRef("matmul", Phase::kStats), {x, x}, Attrs{});
    ADD_FAILURE() << "matmul's stats phase ran";
  } catch (const SpmdError& e) {
    EXPECT_EQ(e.type(), ErrorType::kUnknownOp);
    EXPECT_EQ(e.field(), "op");
    EXPECT_NE(std::string(e.what()).find("stats phase"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace spmd
