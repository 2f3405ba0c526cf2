"""Shared helpers of the spmdkit Python tests (run: pytest python/tests)."""

import json
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
GOLDEN_RULES = sorted((ROOT / "golden" / "rules").glob("*.jsonl"))


def golden_lines():
    """Every rule golden line as (file:line id, parsed object or None, raw text)."""
    cases = []
    for path in GOLDEN_RULES:
        for n, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except ValueError:
                obj = None
            cases.append((f"{path.name}:{n}", obj, text))
    return cases


@pytest.fixture(scope="session")
def golden():
    cases = golden_lines()
    assert len(cases) > 300, "the rule goldens are missing"
    return cases
