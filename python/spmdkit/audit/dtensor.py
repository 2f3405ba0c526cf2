"""The DTensor adapter of `spmd audit`: PyTorch's DTensor sharding propagation on a fake
process group.

Each case becomes DTensorSpecs (placements per mesh axis: Shard(d), Partial(op) or
Replicate()) on a DeviceMesh over ranks 0..n-1 of a fake process group of 64 ranks (every
generated mesh has at most 4^3 ranks), and one aten op's OpSchema goes to
`DTensor._op_dispatcher.sharding_propagator.propagate_op_sharding`. Its answer is the output
spec and, when it asks for a redistribution, the input specs it requires (else the inputs as
given). DTensor's uneven shards are torch.chunk's, the ceil-sized chunks of spmdkit's
layouts (docs/SEMANTICS.md section 2.2), so the claims mean the same thing.

Only ops whose aten call has spmdkit's semantics are driven (DTENSOR_OPS); a case the aten
call cannot express (matmul with a transpose or batch dims: aten.mm takes 2-D operands)
raises NotExpressible and is drawn again.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence

from spmdkit.audit.cases import Request
from spmdkit.audit.core import Answer, FrameworkMissing, NotExpressible, Unrepresentable

WORLD_SIZE = 64


def _only(cond: bool, why: str):
    if not cond:
        raise NotExpressible(why)


def _unary(name):
    return lambda aten, t, a: (getattr(aten, name).default, (t[0],))


def _binary(overload):
    return lambda aten, t, a: (overload(aten), (t[0], t[1]))


def _mm(aten, t, a):
    _only(not a.get("trans_x") and not a.get("trans_y"), "aten.mm has no transposes")
    _only(len(t[0].tensor_meta.shape) == 2 and len(t[1].tensor_meta.shape) == 2, "aten.mm takes 2-D operands")
    return aten.mm.default, (t[0], t[1])


def _reduce(overload):
    def build(aten, t, a):
        # reduce_all or an empty axis list reduce every dim (Paddle's meaning): named
        # explicitly, since DTensor's strategy does not take an empty dim list.
        dims = list(a["axis"])
        if a.get("reduce_all") or not dims:
            dims = list(range(len(t[0].tensor_meta.shape)))
        return overload(aten), (t[0], dims, bool(a.get("keep_dim", False)))
    return build


def _prod(aten, t, a):
    _only(len(a["axis"]) == 1, "aten.prod.dim_int reduces one dim")
    return aten.prod.dim_int, (t[0], a["axis"][0], bool(a.get("keep_dim", False)))


def _softmax(name):
    return lambda aten, t, a: (getattr(aten, name).default, (t[0], a["axis"], False))


def _cumsum(aten, t, a):
    _only(not a["flatten"] and not a["exclusive"] and not a["reverse"], "aten.cumsum has no flags")
    return aten.cumsum.default, (t[0], a["axis"])


def _unsqueeze(aten, t, a):
    _only(len(a["axis"]) == 1, "aten.unsqueeze adds one dim")
    return aten.unsqueeze.default, (t[0], a["axis"][0])


def _slice(aten, t, a):
    _only(len(a["axes"]) == 1 and not a["decrease_axis"], "aten.slice cuts one dim")
    return aten.slice.Tensor, (t[0], a["axes"][0], a["starts"][0], a["ends"][0], 1)


def _gelu(aten, t, a):
    return aten.gelu.default, (t[0],), {"approximate": "tanh" if a.get("approximate") else "none"}


def _squeeze(aten, t, a):
    _only(bool(a["axis"]), "an empty list squeezes every size-1 dim in spmdkit, none in aten.squeeze.dims")
    return aten.squeeze.dims, (t[0], list(a["axis"]))


def _flatten(aten, t, a):
    shape = list(t[0].tensor_meta.shape)
    lo, hi = a["start_axis"] % max(len(shape), 1), a["stop_axis"] % max(len(shape), 1)
    n = 1
    for d in shape[lo:hi + 1]:
        n *= d
    return aten.view.default, (t[0], shape[:lo] + [n] + shape[hi + 1:])


# spmdkit op -> (aten module) -> (overload, args[, kwargs]) from the specs and spmdkit's attrs.
DTENSOR_OPS: Dict[str, Callable] = {
    **{n: _unary(n) for n in ["relu", "silu", "exp", "log", "tanh", "sigmoid", "sqrt", "abs"]},
    "gelu": _gelu,
    "add": _binary(lambda aten: aten.add.Tensor),
    "subtract": _binary(lambda aten: aten.sub.Tensor),
    "multiply": _binary(lambda aten: aten.mul.Tensor),
    "divide": _binary(lambda aten: aten.div.Tensor),
    "maximum": _binary(lambda aten: aten.maximum.default),
    "minimum": _binary(lambda aten: aten.minimum.default),
    "greater_than": _binary(lambda aten: aten.gt.Tensor),
    "less_than": _binary(lambda aten: aten.lt.Tensor),
    "where": lambda aten, t, a: (aten.where.self, (t[0], t[1], t[2])),
    "matmul": _mm,
    "bmm": lambda aten, t, a: (aten.bmm.default, (t[0], t[1])),
    "sum": _reduce(lambda aten: aten.sum.dim_IntList),
    "max": _reduce(lambda aten: aten.amax.default),
    "min": _reduce(lambda aten: aten.amin.default),
    "prod": _prod,
    "mean": _reduce(lambda aten: aten.mean.dim),
    "squeeze": _squeeze,
    "flatten": _flatten,
    "mean_all": lambda aten, t, a: (aten.mean.default, (t[0],)),
    "logsumexp": lambda aten, t, a: (aten.logsumexp.default, (t[0], list(a["axis"]), bool(a["keepdim"]))),
    "softmax": _softmax("_softmax"),
    "log_softmax": _softmax("_log_softmax"),
    "cumsum": _cumsum,
    "transpose": lambda aten, t, a: (aten.permute.default, (t[0], list(a["perm"]))),
    "reshape": lambda aten, t, a: (aten.view.default, (t[0], list(a["shape"]))),
    "unsqueeze": _unsqueeze,
    "stack": lambda aten, t, a: (aten.stack.default, (list(t), a["axis"])),
    "slice": _slice,
    "expand": lambda aten, t, a: (aten.expand.default, (t[0], list(a["shape"]))),
    "triu": lambda aten, t, a: (aten.triu.default, (t[0], a["diagonal"])),
}

def candidates(op: str) -> List[tuple]:
    """(rule name, argument list index) pairs to probe: the op's aten call, if it has one."""
    return [(op, 0)] if op in DTENSOR_OPS else []


def describe(op: str, name: str, index: int) -> str:
    return f"aten call of {name}"


# Inputs the generated cases hold as integers or booleans.
_BOOL_INPUTS = {"where": (0,)}


def to_placements(torch_types, layout: dict, ndim: int) -> tuple:
    """A spmdkit layout (flat dims mapping, partial map) -> DTensor placements per mesh axis."""
    Shard, Replicate, Partial = torch_types
    out: List = [Replicate()] * ndim
    for d, a in enumerate(layout["dims_mapping"]):
        for axis in (a if isinstance(a, list) else [a]):
            if axis >= 0:
                out[axis] = Shard(d)
    for axis, op in layout["partial"].items():
        out[int(axis)] = Partial(op)
    return tuple(out)


_REDUCE_OPS = {"product": "prod"}


def from_placements(placements: Sequence, rank: int) -> dict:
    """DTensor placements -> a spmdkit layout. Several mesh axes on one dim become a list
    in mesh-axis order (DTensor's default shard order)."""
    dims: List[List[int]] = [[] for _ in range(rank)]
    partial = {}
    for axis, p in enumerate(placements):
        kind = type(p).__name__
        if kind == "Shard":
            dims[p.dim].append(axis)
        elif kind == "Partial":
            op = str(p.reduce_op)
            partial[axis] = _REDUCE_OPS.get(op, op)
        elif kind != "Replicate":
            # _StridedShard and the like: no spmdkit layout says the same.
            raise Unrepresentable(f"DTensor answered a {p} placement")
    flat = all(len(d) <= 1 for d in dims)
    return {"dims_mapping": [d[0] if d else -1 for d in dims] if flat else dims, "partial": partial}


class DTensorRules:
    framework = "dtensor"

    def __init__(self):
        try:
            import torch
            import torch.distributed as dist
            from torch.distributed.device_mesh import DeviceMesh
            from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
            from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta
            from torch.distributed.tensor._op_schema import OpSchema
            from torch.testing._internal.distributed.fake_pg import FakeStore
        except Exception as e:
            raise FrameworkMissing(f"torch is not importable ({type(e).__name__}: {e}); "
                                   "the DTensor audit needs PyTorch") from e
        if not dist.is_initialized():
            dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=WORLD_SIZE)
        self.version = torch.__version__
        self._torch, self._mesh_type, self._spec_type, self._meta = torch, DeviceMesh, DTensorSpec, TensorMeta
        self._schema, self._types = OpSchema, (Shard, Replicate, Partial)
        self._propagator = DTensor._op_dispatcher.sharding_propagator
        self._meshes: Dict[tuple, object] = {}

    def close(self):
        pass

    def candidates(self, op: str) -> List[tuple]:
        return candidates(op)

    def describe(self, op: str, name: str, index: int) -> str:
        return describe(op, name, index)

    def _mesh(self, shape: Sequence[int]):
        key = tuple(shape)
        if key not in self._meshes:
            n = 1
            for s in shape:
                n *= s
            self._meshes[key] = self._mesh_type("cpu", self._torch.arange(n).reshape(key))
        return self._meshes[key]

    def _spec(self, mesh, shape, layout, dtype):
        t = self._torch.empty(shape, dtype=dtype)
        return self._spec_type(mesh, to_placements(self._types, layout, mesh.ndim),
                               tensor_meta=self._meta(t.shape, t.stride(), t.dtype))

    def answer(self, op: str, name: str, index: int, req: Request) -> Answer:
        build = DTENSOR_OPS[req.op]
        mesh = self._mesh(req.mesh)
        bools = _BOOL_INPUTS.get(req.op, ())
        specs = [self._spec(mesh, s, l, self._torch.bool if i in bools else self._torch.float32)
                 for i, (s, l) in enumerate(zip(req.shapes, req.layouts))]
        call = build(self._torch.ops.aten, specs, req.attrs)
        overload, args = call[0], call[1]
        kwargs = call[2] if len(call) > 2 else {}
        # The op's RuntimeSchemaInfo as the dispatcher passes it: without it a list argument
        # (stack's tensors) is not compared against the strategy, and nothing is redistributed.
        # Both registries: ops with a single-dim strategy keep theirs apart. Uncached: the
        # cache is keyed on the schema, and a schema without its info drops the non-tensor
        # args (keepdim) from the key.
        prop = self._propagator
        info = prop.op_to_schema_info.get(overload) or prop.op_to_schema_info_for_single_dim_strategy.get(overload)
        out = prop.propagate_op_sharding_non_cached(self._schema(overload, tuple(args), kwargs, schema_info=info))
        required = specs
        if out.needs_redistribute and out.redistribute_schema is not None:
            required = _specs_in(out.redistribute_schema.args_schema, self._spec_type)
        outputs = out.output_spec if isinstance(out.output_spec, (list, tuple)) else [out.output_spec]
        if len(required) != len(specs) or any(o is None for o in outputs):
            raise RuntimeError(f"the propagation answered {len(required)} inputs and outputs {outputs}")
        return Answer([from_placements(r.placements, len(s)) for r, s in zip(required, req.shapes)],
                      [from_placements(o.placements, len(o.tensor_meta.shape)) for o in outputs])


def _specs_in(args, spec_type) -> list:
    out = []
    for a in args:
        if isinstance(a, spec_type):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            out.extend(_specs_in(a, spec_type))
    return out


# The in-process adapter the worker runs (spmdkit.audit.worker).
Rules = DTensorRules
