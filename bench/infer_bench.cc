// Forward rule inference timings, one benchmark per op family (docs/BENCHMARKS.md).
//
// Every benchmark but the last calls spmd::InferForward directly (the library path): the
// op is looked up once, the mesh, inputs and attrs are built once, and the loop times one
// InferForward call (validation, attr normalisation, building the rule, running it). The
// last one times spmd::io::InferLine on a matmul request line (JSON parse + infer + print).
//
// Each case is run once before timing; a case that throws is reported as an error rather
// than timed. The default minimum time is 0.1 s per run (see main); repetitions come from
// the command line, e.g.
//   ./build-bench/bin/infer_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true

#include <benchmark/benchmark.h>

#include <cstdint>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "rules/model/attrs.h"
#include "rules/model/dist_attr.h"
#include "io/infer_io.h"
#include "rules/model/mesh.h"
#include "rules/engine/op_decl.h"
#include "rules/engine/registry.h"
#include "rules/reshard/reshard.h"

namespace {

using spmd::AttrValue;
using spmd::Attrs;
using spmd::DistAttr;
using spmd::Mesh;
using spmd::Shape;
using spmd::TensorArg;

// A tensor with Paddle's flat dims mapping (-1 or one mesh axis per dim).
TensorArg Flat(Shape shape, std::vector<int64_t> dims_mapping) {
  return TensorArg{std::move(shape), spmd::FromFlatDimsMapping(dims_mapping)};
}

// A tensor with the co-shard form (a list of mesh axes per dim, major to minor).
TensorArg CoShard(Shape shape, std::vector<spmd::AxisList> dims) {
  return TensorArg{std::move(shape), DistAttr{std::move(dims), {}}};
}

Attrs MakeAttrs(std::vector<std::pair<std::string, AttrValue>> values) {
  Attrs attrs;
  for (auto& [name, value] : values) attrs.Set(name, std::move(value));
  return attrs;
}

struct Case {
  const char* op;
  Mesh mesh;
  std::vector<TensorArg> inputs;
  Attrs attrs;
};

// Times InferForward on one case. The op is looked up and the case checked before the loop.
void RunCase(benchmark::State& state, const Case& c) {
  const spmd::OpDecl* op = spmd::FindOp(c.op);
  if (op == nullptr) {
    state.SkipWithError((std::string("no op ") + c.op).c_str());
    return;
  }
  try {
    spmd::InferResult check = spmd::InferForward(*op, c.mesh, c.inputs, c.attrs);
    benchmark::DoNotOptimize(check);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  for (auto _ : state) {
    spmd::InferResult result = spmd::InferForward(*op, c.mesh, c.inputs, c.attrs);
    benchmark::DoNotOptimize(result);
  }
}

const Mesh& Mesh2x4() {
  static const Mesh mesh({2, 4});
  return mesh;
}

// ---- Contractions -----------------------------------------------------------------------

// The headline: matmul on a 2-d mesh, x [1024, 512] sharded [1, 0], y replicated.
void BM_Matmul_Mesh2x4(benchmark::State& state) {
  static const Case c{"matmul", Mesh2x4(),
                      {Flat({1024, 512}, {1, 0}), Flat({512, 256}, {-1, -1})},
                      MakeAttrs({{"trans_x", false}, {"trans_y", false}})};
  RunCase(state, c);
}

// Batch dims (x has one more than y: broadcast) and trans_y.
void BM_Matmul_BatchTransY(benchmark::State& state) {
  static const Case c{"matmul", Mesh2x4(),
                      {Flat({4, 8, 1024, 512}, {0, -1, 1, -1}), Flat({8, 256, 512}, {-1, -1, 1})},
                      MakeAttrs({{"trans_x", false}, {"trans_y", true}})};
  RunCase(state, c);
}

void BM_Bmm(benchmark::State& state) {
  static const Case c{"bmm", Mesh2x4(),
                      {Flat({16, 512, 64}, {0, 1, -1}), Flat({16, 64, 512}, {0, -1, -1})},
                      Attrs{}};
  RunCase(state, c);
}

void BM_Einsum_bij_bjk(benchmark::State& state) {
  static const Case c{"einsum", Mesh2x4(),
                      {Flat({16, 512, 64}, {0, 1, -1}), Flat({16, 64, 512}, {0, -1, -1})},
                      MakeAttrs({{"equation", std::string("bij,bjk->bik")}})};
  RunCase(state, c);
}

void BM_MatmulGrad(benchmark::State& state) {
  static const Case c{"matmul_grad", Mesh2x4(),
                      {Flat({1024, 512}, {1, 0}), Flat({512, 256}, {0, -1}),
                       Flat({1024, 256}, {1, -1})},
                      MakeAttrs({{"trans_x", false}, {"trans_y", false}})};
  RunCase(state, c);
}

// ---- Elementwise ------------------------------------------------------------------------

void BM_Add_Broadcast(benchmark::State& state) {
  static const Case c{"add", Mesh2x4(),
                      {Flat({8, 1024, 512}, {0, 1, -1}), Flat({512}, {-1})}, Attrs{}};
  RunCase(state, c);
}

void BM_Relu(benchmark::State& state) {
  static const Case c{"relu", Mesh2x4(), {Flat({8, 1024, 512}, {0, 1, -1})}, Attrs{}};
  RunCase(state, c);
}

// ---- Normalisation, reductions, losses --------------------------------------------------

void BM_Softmax(benchmark::State& state) {
  static const Case c{"softmax", Mesh2x4(), {Flat({8, 1024, 512}, {0, -1, 1})},
                      MakeAttrs({{"axis", int64_t{-1}}})};
  RunCase(state, c);
}

void BM_LayerNorm(benchmark::State& state) {
  static const Case c{"layer_norm", Mesh2x4(),
                      {Flat({8, 1024, 512}, {0, 1, -1}), Flat({512}, {-1}), Flat({512}, {-1})},
                      MakeAttrs({{"epsilon", 1e-5}, {"begin_norm_axis", int64_t{2}}})};
  RunCase(state, c);
}

void BM_Sum_Axis(benchmark::State& state) {
  static const Case c{"sum", Mesh2x4(), {Flat({8, 1024, 512}, {0, 1, -1})},
                      MakeAttrs({{"axis", std::vector<int64_t>{1}}, {"keep_dim", false}})};
  RunCase(state, c);
}

void BM_Argmax(benchmark::State& state) {
  static const Case c{"argmax", Mesh2x4(), {Flat({1024, 512}, {0, 1})},
                      MakeAttrs({{"axis", int64_t{-1}}, {"keepdims", false}})};
  RunCase(state, c);
}

// Row-sharded embedding table: the output is partial(sum).
void BM_LookupTableV2(benchmark::State& state) {
  static const Case c{"lookup_table_v2", Mesh2x4(),
                      {Flat({8, 1024}, {0, -1}), Flat({32000, 512}, {1, -1})}, Attrs{}};
  RunCase(state, c);
}

void BM_CrossEntropyWithSoftmax(benchmark::State& state) {
  static const Case c{"cross_entropy_with_softmax", Mesh2x4(),
                      {Flat({8, 1024, 32000}, {0, -1, 1}), Flat({8, 1024, 1}, {0, -1, -1})},
                      MakeAttrs({{"soft_label", false}, {"axis", int64_t{-1}}})};
  RunCase(state, c);
}

// ---- Shape ops --------------------------------------------------------------------------

// Split one co-sharded dim: [8192, 512] dims [[0, 1], []] -> [8, 1024, 512] (piece 0 of
// size 8 divides by 2 * 4, so it keeps the co-shard).
void BM_Reshape_SplitCoShard(benchmark::State& state) {
  static const Case c{"reshape", Mesh2x4(), {CoShard({8192, 512}, {{0, 1}, {}})},
                      MakeAttrs({{"shape", std::vector<int64_t>{8, 1024, 512}}})};
  RunCase(state, c);
}

// Flatten with a co-sharded leading dim: [64, 128, 512] dims [[0, 1], [], []] -> [8192, 512].
void BM_Reshape_FlattenCoShard(benchmark::State& state) {
  static const Case c{"reshape", Mesh2x4(), {CoShard({64, 128, 512}, {{0, 1}, {}, {}})},
                      MakeAttrs({{"shape", std::vector<int64_t>{-1, 512}}})};
  RunCase(state, c);
}

void BM_Transpose(benchmark::State& state) {
  static const Case c{"transpose", Mesh2x4(), {Flat({8, 1024, 512}, {0, 1, -1})},
                      MakeAttrs({{"perm", std::vector<int64_t>{2, 0, 1}}})};
  RunCase(state, c);
}

// Three inputs with different mappings: the cost rule picks one.
void BM_Concat3(benchmark::State& state) {
  static const Case c{"concat", Mesh2x4(),
                      {Flat({8, 1024, 512}, {0, -1, 1}), Flat({8, 512, 512}, {0, 1, -1}),
                       Flat({8, 256, 512}, {-1, -1, 1})},
                      MakeAttrs({{"axis", int64_t{1}}})};
  RunCase(state, c);
}

void BM_Split(benchmark::State& state) {
  static const Case c{"split", Mesh2x4(), {Flat({8, 1024, 512}, {0, 1, -1})},
                      MakeAttrs({{"sections", std::vector<int64_t>{256, 256, 512}},
                                 {"axis", int64_t{1}}})};
  RunCase(state, c);
}

void BM_Slice(benchmark::State& state) {
  static const Case c{"slice", Mesh2x4(), {Flat({8, 1024, 512}, {0, 1, -1})},
                      MakeAttrs({{"axes", std::vector<int64_t>{1}},
                                 {"starts", std::vector<int64_t>{0}},
                                 {"ends", std::vector<int64_t>{512}}})};
  RunCase(state, c);
}

// ---- The JSON path ----------------------------------------------------------------------

// The same matmul as BM_Matmul_Mesh2x4, as one `spmd infer` request line.
// The BM_Matmul_Mesh2x4 request as `spmd infer` reads it. InferLine reads such a line
// without nlohmann (its quick reader); BM_InferLine_Matmul_FullPath times the same request
// through nlohmann's parser (one escape in the op name sends it there), as a line the
// quick reader leaves alone (a reverse request, a float attr, an escape) is answered.
std::string MatmulLine(const std::string& op) {
  return R"({"op": ")" + op + R"(", "attrs": {"trans_x": false, "trans_y": false}, )"
         R"("mesh_shape": [2, 4], "process_ids": [0, 1, 2, 3, 4, 5, 6, 7], )"
         R"("direction": "forward", )"
         R"("inputs": [{"shape": [1024, 512], "dims_mapping": [1, 0], "partial_dims": []}, )"
         R"({"shape": [512, 256], "dims_mapping": [-1, -1]}], "outputs": []})";
}

void BM_InferLine_Matmul_FullPath(benchmark::State& state) {
  static const std::string line = MatmulLine(R"(mat\u006dul)");
  const std::string answer = spmd::io::InferLine(line);
  if (answer != spmd::io::InferLine(MatmulLine("matmul"))) {
    state.SkipWithError(answer.c_str());
    return;
  }
  for (auto _ : state) {
    std::string result = spmd::io::InferLine(line);
    benchmark::DoNotOptimize(result);
  }
}

void BM_InferLine_Matmul(benchmark::State& state) {
  static const std::string line =
      R"({"op": "matmul", "attrs": {"trans_x": false, "trans_y": false}, )"
      R"("mesh_shape": [2, 4], "process_ids": [0, 1, 2, 3, 4, 5, 6, 7], )"
      R"("direction": "forward", )"
      R"("inputs": [{"shape": [1024, 512], "dims_mapping": [1, 0], "partial_dims": []}, )"
      R"({"shape": [512, 256], "dims_mapping": [-1, -1]}], "outputs": []})";
  const std::string answer = spmd::io::InferLine(line);
  if (answer.find("\"error\"") != std::string::npos) {
    state.SkipWithError(answer.c_str());
    return;
  }
  for (auto _ : state) {
    std::string result = spmd::io::InferLine(line);
    benchmark::DoNotOptimize(result);
  }
}

// Hostile and largest-allowed requests: how long a refusal or an answer takes (the tests
// check only what the answer is; io/infer_io_test.cc, cli/plan_hostile_test.sh).
void RunLine(benchmark::State& state, const std::string& line, bool expect_error) {
  const std::string answer = spmd::io::InferLine(line);
  if ((answer.find("\"error\"") != std::string::npos) != expect_error) {
    state.SkipWithError(answer.substr(0, 200).c_str());
    return;
  }
  for (auto _ : state) {
    std::string result = spmd::io::InferLine(line);
    benchmark::DoNotOptimize(result);
  }
}

std::string Repeat(const std::string& item, size_t count) {
  std::string out;
  for (size_t i = 0; i < count; ++i) out += (i ? "," : "") + item;
  return out;
}

// 400,001 split sections (an 800 KB line, under spmd infer's 1 MiB line limit): refused
// (Unsupported, attrs.sections) after parsing the line.
void BM_InferLine_HostileSections(benchmark::State& state) {
  static const std::string line = R"({"op":"split","attrs":{"sections":[)" +
                                  Repeat("0", 400'000) +
                                  R"(,4]},"mesh_shape":[2],"inputs":[{"shape":[4]}]})";
  RunLine(state, line, true);
}

// A mesh of 2^20 ranks: refused (InvalidArgument, mesh_shape).
void BM_InferLine_HostileMesh(benchmark::State& state) {
  RunLine(state, R"({"op":"relu","mesh_shape":[1024,1024],"inputs":[{"shape":[4]}]})", true);
}

// The largest mesh allowed (65,536 ranks): answered.
void BM_InferLine_LargestMesh(benchmark::State& state) {
  RunLine(state,
          R"({"op":"matmul","mesh_shape":[256,256],"inputs":[{"shape":[512,64],"dims_mapping":[0,1]},)"
          R"({"shape":[64,512],"dims_mapping":[1,-1]}]})",
          false);
}

// Plans on the largest mesh allowed (the lower bound toward a partial target was once
// quadratic in the number of ranks).
void RunPlan(benchmark::State& state, std::vector<int64_t> mesh_shape, Shape shape,
             const char* from, const char* to) {
  const Mesh mesh(mesh_shape);
  const int rank = static_cast<int>(shape.size());
  const DistAttr source = spmd::ParsePlacementString(from, rank, "from");
  const DistAttr target = spmd::ParsePlacementString(to, rank, "to");
  for (auto _ : state) {
    spmd::ReshardPlan plan =
        spmd::PlanReshard(mesh, shape, spmd::DType::kFloat32, source, target);
    benchmark::DoNotOptimize(plan);
  }
}

void BM_Plan_65536Ranks_ToPartial(benchmark::State& state) {
  RunPlan(state, {32768, 2}, {32768, 2}, "[S(0), S(1)]", "[S(0), P(sum)]");
}

void BM_Plan_65536Ranks_ReplicateToPartial(benchmark::State& state) {
  RunPlan(state, {2, 32768}, {65536}, "[R, S(0)]", "[P(sum), R]");
}

#define SPMD_BENCH(fn) BENCHMARK(fn)->Unit(benchmark::kNanosecond)

SPMD_BENCH(BM_Matmul_Mesh2x4);
SPMD_BENCH(BM_Matmul_BatchTransY);
SPMD_BENCH(BM_Bmm);
SPMD_BENCH(BM_Einsum_bij_bjk);
SPMD_BENCH(BM_MatmulGrad);
SPMD_BENCH(BM_Add_Broadcast);
SPMD_BENCH(BM_Relu);
SPMD_BENCH(BM_Softmax);
SPMD_BENCH(BM_LayerNorm);
SPMD_BENCH(BM_Sum_Axis);
SPMD_BENCH(BM_Argmax);
SPMD_BENCH(BM_LookupTableV2);
SPMD_BENCH(BM_CrossEntropyWithSoftmax);
SPMD_BENCH(BM_Reshape_SplitCoShard);
SPMD_BENCH(BM_Reshape_FlattenCoShard);
SPMD_BENCH(BM_Transpose);
SPMD_BENCH(BM_Concat3);
SPMD_BENCH(BM_Split);
SPMD_BENCH(BM_Slice);
SPMD_BENCH(BM_InferLine_Matmul);
SPMD_BENCH(BM_InferLine_Matmul_FullPath);
SPMD_BENCH(BM_InferLine_HostileSections)->Unit(benchmark::kMillisecond);
SPMD_BENCH(BM_InferLine_HostileMesh);
SPMD_BENCH(BM_InferLine_LargestMesh);
SPMD_BENCH(BM_Plan_65536Ranks_ToPartial)->Unit(benchmark::kMillisecond);
SPMD_BENCH(BM_Plan_65536Ranks_ReplicateToPartial)->Unit(benchmark::kMillisecond);

}  // namespace

// BENCHMARK_MAIN, except that the default --benchmark_min_time is 0.1 s instead of 0.5 s:
// 26 benchmarks x 5 repetitions then take about 20 s. A --benchmark_min_time on the
// command line wins (it comes later in argv).
int main(int argc, char** argv) {
  std::vector<char*> args(argv, argv + argc);
  static char default_min_time[] = "--benchmark_min_time=0.1";
  args.insert(args.begin() + (argc > 0 ? 1 : 0), default_min_time);
  int count = static_cast<int>(args.size());
  args.push_back(nullptr);
  benchmark::Initialize(&count, args.data());
  if (benchmark::ReportUnrecognizedArguments(count, args.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
