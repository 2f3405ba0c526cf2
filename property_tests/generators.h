// RapidCheck generators for rule requests, derived from the op declarations only.
//
// Two families:
// - "arbitrary" generators (GenArbitrary*) produce requests that may be invalid in every
//   way a caller can get wrong: wrong input counts, mappings of the wrong length, mesh axes
//   out of range or used twice, an axis both sharded and partial, attrs of the wrong kind,
//   undeclared attr names. They feed the "never crashes" property.
// - "valid" generators produce well-formed requests: a valid mesh, the declared input
//   count, valid dist attrs, attrs of the declared kinds. The rule may still reject them
//   (shapes that do not fit the notation, an axis out of range in an attr); GenAccepted
//   retries until the rule accepts one, so that the properties over answers are not
//   vacuous.
//
// Nothing here knows about a particular op: shapes of later inputs are drawn "related" to
// earlier ones (equal, a suffix, size-1 dims, the last two swapped, the product of a
// suffix, ...) so that the common notations (broadcasting, matmul, normalisation
// parameters, labels) fit often enough.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <rapidcheck.h>

#include "rules/model/attrs.h"
#include "rules/model/dist_attr.h"
#include "rules/model/mesh.h"
#include "rules/engine/op_decl.h"

namespace spmd::prop {

// A forward request, as `spmd infer` takes it.
struct ForwardRequest {
  const OpDecl* op = nullptr;
  Mesh mesh;
  std::vector<TensorArg> inputs;
  Attrs attrs;
};

// A reverse request: the inputs' shapes and the outputs' shapes and dist attrs.
struct ReverseRequest {
  const OpDecl* op = nullptr;
  Mesh mesh;
  std::vector<Shape> input_shapes;
  std::vector<TensorArg> outputs;
  Attrs attrs;
};

// The request as one `spmd infer` JSON line (SEMANTICS.md §10), so that a counterexample
// can be replayed with `echo '<line>' | spmd infer`. Dims mappings are written in the
// list form; invalid values (axis -1 inside a list, ...) are written as they are.
std::string ToJsonLine(const ForwardRequest& request);
std::string ToJsonLine(const ReverseRequest& request);
std::string ToString(const Attrs& attrs);
std::string ToString(const InferResult& result);

// RapidCheck's printers (found by argument-dependent lookup).
void showValue(const ForwardRequest& request, std::ostream& os);
void showValue(const ReverseRequest& request, std::ostream& os);
void showValue(const std::optional<ForwardRequest>& request, std::ostream& os);

// ---- Building blocks ----------------------------------------------------------------------

// 1 to 4 axes of sizes 1 to 4, at most 16 ranks; process ids sometimes permuted (0..n-1
// shuffled, or n distinct ids from a larger world).
rc::Gen<Mesh> GenMesh();
// A dim size in 0..7, biased toward 1..6.
rc::Gen<int64_t> GenDimSize();
// Rank 0 to 4.
rc::Gen<Shape> GenShape();
// A shape related to `base`: equal, a right-aligned suffix, some dims set to 1, the last
// two swapped, the last dim dropped or set to 1, a dim prepended or appended, starting
// with base's last dim, the product of a suffix as one dim, or unrelated.
rc::Gen<Shape> GenRelatedShape(const Shape& base);
// `count` shapes: the first random, each later one related to a random earlier one.
rc::Gen<std::vector<Shape>> GenShapes(size_t count);

// A valid dist attr of `rank` dims on `mesh`: each mesh axis (in random order, so co-shard
// orders are random) replicated, appended to a dim's list, or (when `allow_partial`)
// partial with a random reduce op.
rc::Gen<DistAttr> GenDistAttr(const Mesh& mesh, int rank, bool allow_partial = true);
// Usually a valid dist attr; sometimes one broken in one or two ways: mapping length !=
// rank, an axis out of range (in a dim or in the partial map), an axis used twice, an
// axis both sharded and partial.
rc::Gen<DistAttr> GenArbitraryDistAttr(const Mesh& mesh, int rank);

// A value of `kind`: ints in [-4, 6], lists of length 0 to 4 (int lists are sometimes a
// permutation of 0..n-1), floats from a small set with 0.0, strings from a small set.
rc::Gen<AttrValue> GenAttrValue(AttrKind kind);
// A value of any kind but `kind`.
rc::Gen<AttrValue> GenWrongKindValue(AttrKind kind);

// Attrs with declared names (sometimes an alias) and declared kinds; each attr with a
// default is sometimes omitted; required attrs are always given.
rc::Gen<Attrs> GenAttrs(const OpDecl& op);
// As GenAttrs, plus: required attrs sometimes omitted, values of the wrong kind, non-finite
// floats, huge ints (3^30, INT64_MAX, INT64_MIN, also inside lists), a name given twice
// (name and alias), undeclared names.
rc::Gen<Attrs> GenArbitraryAttrs(const OpDecl& op);

// The declared input count (variadic: 1 to 3).
rc::Gen<size_t> GenInputCount(const OpDecl& op);
// Usually the declared count, sometimes 0 or one more / one fewer.
rc::Gen<size_t> GenArbitraryInputCount(const OpDecl& op);

// ---- Requests ------------------------------------------------------------------------------

// Arbitrary requests: a valid mesh; usually the declared input count; shapes related as in
// GenShapes, sometimes with one size negative or huge (2^31, 2^40, 2^62); arbitrary dist
// attrs; arbitrary attrs. Reverse outputs: usually the count and shapes the declaration
// gives for these inputs (the declared shapes; sometimes the right ranks with other sizes), sometimes any.
rc::Gen<ForwardRequest> GenArbitraryForward(const OpDecl& op);
rc::Gen<ReverseRequest> GenArbitraryReverse(const OpDecl& op);

enum class DistMode {
  kAny,         // valid dist attrs, partial axes included (sometimes the same partial
                //   axes and reduce op on every input)
  kReplicated,  // every input replicated, no partial
};

// The first of up to `tries` well-formed candidates that InferForward accepts, or nothing.
// The mesh is drawn once; each candidate is, half the time when the op declares examples,
// one of its examples (SizePalette from random sizes), else the declared input count,
// GenShapes and GenAttrs; dist attrs per `mode`.
rc::Gen<std::optional<ForwardRequest>> GenAccepted(const OpDecl& op, DistMode mode,
                                                   int tries = 40);

// ---- What the declarations say about outputs --------------------------------------------

// The rank of each output for these input shapes and normalised attrs (of OutputShapes).
// Throws SpmdError as the rule builders do.
std::vector<int> OutputRanks(const OpDecl& op, const std::vector<Shape>& input_shapes,
                             const Attrs& normalized_attrs);

// The shape of each output: the declaration's (InferOutputShapes). Throws SpmdError as the
// rule builders do.
std::vector<Shape> OutputShapes(const OpDecl& op, const std::vector<Shape>& input_shapes,
                                const Attrs& normalized_attrs);

// ---- Crashes ----------------------------------------------------------------------------------
//
// A crash fails a test by itself, but RapidCheck can then neither shrink it nor print the
// request. Two helps:
// - NoteRequest keeps the request about to run where a fatal-signal handler (installed for
//   the whole binary) prints it: the unshrunk request that crashed;
// - with SPMD_PROP_FORK=1 (ForkMode), rule calls run first in a child process: the test
//   turns a crash into an ordinary failure that RapidCheck shrinks (one fork per call).

void NoteRequest(std::string line);
bool ForkMode();
// Runs `call` in a child process; returns how the child died ("a crash (signal 11)", or a
// non-zero exit as a sanitizer's), or "" when it returned or threw.
std::string CrashInChild(const std::function<void()>& call);

// The ops under test: every registered op, or those the environment variable
// SPMD_PROP_OPS selects (comma separated; `name` keeps only the named ops, `-name` drops
// one), to replay one op alone.
const std::vector<const OpDecl*>& OpsUnderTest();

}  // namespace spmd::prop
