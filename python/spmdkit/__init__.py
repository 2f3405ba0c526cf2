"""spmdkit: SPMD sharding rules checked against float64 references.

    import spmdkit
    mesh = spmdkit.Mesh([2, 2])
    r = spmdkit.infer("matmul", mesh, [([64, 32], "[S(0), S(1)]"), ([32, 48], [-1, -1])])
    r.outputs[0].placements(mesh)        # '[S(0), P(sum)]'
    r.inputs[1].dims_mapping             # [1, -1]: y must be resharded to this

Tensors: a dict as in `spmd infer` requests ({"shape": [..], "dims_mapping": [..] or
"placements": "[S(0), R]", "partial": {0: "sum"}}; any other key is an InvalidArgument
naming it, e.g. `inputs[0].dims_mappin`), a (shape, dist) pair where dist is a Paddle
dims_mapping list (-1, a mesh axis, or a list of axes per dim), a DTensor-style
placements string (one placement per mesh axis, as `spmd plan` insists: another count is
an InvalidArgument on `inputs[i].placements`) or a DistAttr, or a bare shape
(replicated). A mesh: a Mesh or a list of axis sizes. attrs: a dict with Paddle's attr
names (docs/OPS.md).

Errors are SpmdError subclasses (InvalidArgument, UnknownOp, Unsupported, Conflict) whose
message starts with the field at fault; `e.field` holds it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from spmdkit._core import (  # noqa: F401  (re-exported)
    Conflict,
    DistAttr,
    InferResult,
    InvalidArgument,
    Mesh,
    SpmdError,
    UnknownOp,
    Unsupported,
    infer,
    infer_json,
    ops,
)
from spmdkit import _core

__all__ = [
    "Mesh", "DistAttr", "InferResult", "infer", "infer_json", "check_claim", "ClaimResult",
    "plan", "Plan", "explain", "ops", "SpmdError", "InvalidArgument", "UnknownOp",
    "Unsupported", "Conflict",
]


@dataclass(frozen=True)
class ClaimResult:
    """check_claim's verdict: SOUND, UNSOUND (with a counterexample) or NOT_APPLICABLE."""

    verdict: str
    note: str
    counterexample: Optional[dict]
    replay: Optional[str]      # `spmd check --case '...'` reproducing the counterexample
    shapes: list               # the input shapes given
    checked_shapes: list       # those checked (smaller when a large case was shrunk)

    @property
    def sound(self) -> bool:
        return self.verdict == "SOUND"


def check_claim(op: str, mesh: Any, inputs: list, claim_outputs: list, attrs: Optional[dict] = None,
                seed: int = 1) -> ClaimResult:
    """Checks a claimed rule answer numerically (as `spmd check --claim`): the inputs laid
    out as given, each output claimed to be laid out as `claim_outputs` says (dims_mapping
    lists, placements strings, DistAttrs or {"dims_mapping", "partial"} dicts)."""
    return ClaimResult(**_core.check_claim(op, mesh, inputs, claim_outputs, attrs, seed))


@dataclass(frozen=True)
class Plan:
    """A reshard plan (as `spmd plan`): steps, bytes per rank, the lower bound."""

    steps: list
    bytes_per_rank: int
    lower_bound_bytes: int
    ratio: Optional[float]     # bytes_per_rank / lower_bound_bytes (None: bound 0, plan not)
    text: str                  # the table `spmd plan` prints
    json: dict                 # the whole `spmd plan --json` object

    def __str__(self) -> str:
        return self.text


def plan(mesh: Any, shape: list, src: Any, dst: Any, dtype: str = "float32",
         dst_mesh: Any = None) -> Plan:
    """Plans the reshard of a tensor of `shape` from `src` to `dst` (dims_mapping lists,
    placements strings like "[S(0), P(sum)]", one per axis of its mesh, or DistAttrs),
    optionally onto `dst_mesh`."""
    as_json, text = _core.plan(mesh, shape, src, dst, dtype, dst_mesh)
    return Plan(steps=as_json["steps"], bytes_per_rank=as_json["bytes_per_rank"],
                lower_bound_bytes=as_json["lower_bound_bytes"], ratio=as_json["ratio"], text=text,
                json=as_json)


def explain(op: str, mesh: Any, inputs: list, attrs: Optional[dict] = None, outputs: Optional[list] = None,
            direction: Optional[str] = None) -> str:
    """One rule case in words, as `spmd explain` prints it (same arguments as infer)."""
    return _core.explain(op, mesh, inputs, attrs, outputs, direction)
