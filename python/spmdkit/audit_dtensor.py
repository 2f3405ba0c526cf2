"""The DTensor side of `spmd audit`: not built yet.

PyTorch's DTensor sharding propagation needs torch (a large install, absent from CI) and a
fake process group per mesh size. Until an adapter exists, `spmd audit dtensor` says so
with the same typed error as a missing framework (exit 3), naming what is missing, rather
than reporting an empty audit.
"""

from __future__ import annotations

from spmdkit.audit import FrameworkMissing


class DTensorRules:
    framework = "dtensor"

    def __init__(self):
        try:
            import torch  # noqa: F401
        except Exception as e:
            raise FrameworkMissing(f"torch is not importable ({type(e).__name__}: {e}); "
                                   "the DTensor audit needs PyTorch") from e
        raise FrameworkMissing(f"torch {torch.__version__} is importable, but this spmdkit has no "
                               "DTensor adapter yet (docs/AUDIT.md, 'What is not audited')")
