"""Running an adapter in a worker process: `IsolatedRules` starts `python -m spmdkit.audit
--worker FRAMEWORK` and sends it one case per JSON line; the worker runs the framework's
adapter (`spmdkit.audit.paddle`, `spmdkit.audit.dtensor`) in-process. A rule that crashes
its process (Paddle 3.3.1 segfaults on some inputs) costs that case only, and so does one
that does not answer within CASE_TIMEOUT_S seconds (the worker is killed and restarted)."""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import sys
from dataclasses import asdict
from typing import List

from spmdkit.audit.cases import Request
from spmdkit.audit.core import (EXIT_NOT_IMPORTABLE, EXIT_OK, Answer, FrameworkCrash, FrameworkError,
                                FrameworkMissing, NotExpressible, Unrepresentable, one_line,
                                restore_fatal_signals)

# Each framework's adapter module: `candidates(op)`, `describe(op, name, index)` (static
# tables, no framework import) and `Rules` (the in-process adapter, which imports it).
ADAPTERS = {"paddle": "spmdkit.audit.paddle", "dtensor": "spmdkit.audit.dtensor"}

# Seconds a worker may take to start (the framework's import) or to answer one case before
# it is killed: a rule that never returns costs its case, never the audit.
CASE_TIMEOUT_S = float(os.environ.get("SPMD_AUDIT_CASE_TIMEOUT", "120"))


def adapter_module(framework: str):
    return importlib.import_module(ADAPTERS[framework])


def make_in_process(framework: str):
    return adapter_module(framework).Rules()


class IsolatedRules:
    """Runs an in-process adapter in a worker process (`python -m spmdkit.audit --worker
    FRAMEWORK`), one JSON line per case each way: a rule that crashes its process (Paddle
    3.3.1 segfaults on some inputs) costs that case only; the worker is restarted. The
    worker points its stdout at stderr (Paddle prints C++ tracebacks on stdout) and answers
    on the original stdout."""

    def __init__(self, framework: str):
        import subprocess
        self._subprocess = subprocess
        self._framework = framework
        self._proc = None
        hello = self._start()
        if "missing" in hello:
            self.close()
            raise FrameworkMissing(hello["missing"])
        self.framework, self.version = framework, hello["version"]
        self._adapter = adapter_module(framework)

    def _start(self) -> dict:
        self._proc = self._subprocess.Popen(
            [sys.executable, "-m", "spmdkit.audit", "--worker", self._framework],
            stdin=self._subprocess.PIPE, stdout=self._subprocess.PIPE,
            stderr=self._subprocess.DEVNULL, text=True, bufsize=1, start_new_session=True)
        line = self._read_line()
        if line is None:
            return {"missing": f"the {self._framework} worker did not start within {CASE_TIMEOUT_S:g} s"}
        if not line:
            return {"missing": f"the {self._framework} worker exited at start "
                               f"(status {self._proc.wait()})"}
        return json.loads(line)

    def _read_line(self):
        """The worker's next line ("" when it exited), or None when it wrote none within
        CASE_TIMEOUT_S (then it is killed)."""
        ready, _, _ = select.select([self._proc.stdout], [], [], CASE_TIMEOUT_S)
        if not ready:
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)  # with any helper it started
            except ProcessLookupError:
                pass
            self._proc.wait()
            return None
        return self._proc.stdout.readline()

    def close(self):
        if self._proc is not None:
            self._proc.stdin.close()
            self._proc.wait()
            self._proc = None

    def candidates(self, op: str) -> List[tuple]:
        return self._adapter.candidates(op)

    def describe(self, op: str, name: str, index: int) -> str:
        return self._adapter.describe(op, name, index)

    def answer(self, op: str, name: str, index: int, req: Request) -> Answer:
        if self._proc is None:
            self._start()
        msg = {"rule": name, "signature": index, "request": asdict(req)}
        try:
            self._proc.stdin.write(json.dumps(msg) + "\n")
            self._proc.stdin.flush()
            line = self._read_line()
        except BrokenPipeError:
            line = ""
        if line is None:
            self._proc = None
            raise FrameworkCrash(f"the rule did not answer within {CASE_TIMEOUT_S:g} s (its process was killed)")
        if not line:
            status = self._proc.wait()
            self._proc = None
            raise FrameworkCrash(f"the rule killed its process (status {status})")
        reply = json.loads(line)
        if "error" in reply:
            raise FrameworkError(reply["error"])
        if "skip" in reply:
            raise NotExpressible(reply["skip"])
        if "unrepresentable" in reply:
            raise Unrepresentable(reply["unrepresentable"])
        return Answer(**{k: [{"dims_mapping": l["dims_mapping"],
                              "partial": {int(a): o for a, o in l["partial"].items()}}
                             for l in reply["answer"][k]] for k in ("inputs", "outputs")})


def worker(framework: str) -> int:
    out = open(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    try:
        rules = make_in_process(framework)
    except FrameworkMissing as e:
        out.write(json.dumps({"missing": str(e)}) + "\n")
        return EXIT_NOT_IMPORTABLE
    restore_fatal_signals()
    out.write(json.dumps({"version": rules.version}) + "\n")
    for line in sys.stdin:
        msg = json.loads(line)
        req = Request(**msg["request"])
        # JSON object keys are strings: the partial axes back to ints.
        req.layouts = [{"dims_mapping": l["dims_mapping"], "partial": {int(a): o for a, o in l["partial"].items()}}
                       for l in req.layouts]
        try:
            a = rules.answer(req.op, msg["rule"], msg["signature"], req)
            out.write(json.dumps({"answer": a.to_json()}) + "\n")
        except NotExpressible as e:
            out.write(json.dumps({"skip": str(e)}) + "\n")
        except Unrepresentable as e:
            out.write(json.dumps({"unrepresentable": str(e)}) + "\n")
        except Exception as e:
            out.write(json.dumps({"error": f"{type(e).__name__}: {one_line(e)}"}) + "\n")
    return EXIT_OK


