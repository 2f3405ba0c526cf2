"""Audits another framework's SPMD rules with spmdkit's checker and planner.

    python -m spmdkit.audit paddle|dtensor [--cases N] [--op NAME]... [--seed S] [--json]

Exit status: 0 audited; 1 spmdkit's own answer was judged UNSOUND on some case (a spmdkit
defect); 2 bad arguments; 3 the framework (or, from the CLI, spmdkit) is not importable.

For each op spmdkit declares that the framework registers a rule for, generated cases (the
declaration's examples on random size palettes, with uneven and size-1 dims; meshes of 1 to
3 axes of sizes 1 to 4; random dims mappings; partial(sum) inputs) go to the framework's
rule. Its answer (the input layouts it requires, the output
layouts and partial status) becomes a spmdkit claim, judged numerically by
spmdkit.check_claim: the inputs laid out as the rule requires, each output checked against
the float64 reference. spmdkit's own rule answers the same request; where both answers are
sound the planner prices each (the bytes per rank to reshard the given inputs to what the
rule requires) and the audit counts which moves more.

The package, one concern per module, imported in this order (no module imports one after
it; the worker finds an adapter by name):
    cases     the cases, from the op declarations' examples (`spmdkit._core.examples`)
    core      answers, the judging and pricing, the loop over an op's cases, the adapter
              interface
    paddle    the Paddle adapter (its rule names and argument lists per op)
    dtensor   the DTensor adapter (its aten call per op)
    worker    an adapter in a worker process (`IsolatedRules`)
    report    the table, the errors by kind, the counterexamples
    cli       the command line
The framework is reached through its adapter run in a worker process; tests put an
in-process stand-in in its place. A rule that raises, or returns something that is not an answer, counts as an
error; an answer that names no valid layout (a wrong rank, an axis off the mesh) counts as
UNSOUND with the checker's error as the reason.
"""

from spmdkit.audit.cases import Request, generate, random_layout, random_mesh
from spmdkit.audit.core import (Answer, FrameworkCrash, FrameworkError, FrameworkMissing, NotExpressible,
                                OpReport, Unrepresentable, Verdict, audit, audit_op, claim_json, judge)
from spmdkit.audit.report import byte_examples, counterexamples, error_summary, table
from spmdkit.audit.worker import IsolatedRules
from spmdkit.audit.cli import main

__all__ = ["Answer", "FrameworkCrash", "FrameworkError", "FrameworkMissing", "IsolatedRules", "NotExpressible",
           "OpReport", "Request", "Unrepresentable", "Verdict", "audit", "audit_op", "byte_examples",
           "claim_json", "counterexamples", "error_summary", "generate", "judge", "main", "random_layout", "random_mesh",
           "table"]
