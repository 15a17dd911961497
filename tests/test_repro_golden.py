"""rung1's CPU proxy trains to the golden losses (tests/golden_losses.py): the first 20 steps'
losses at a fixed seed, on a fixed corpus, each within RTOL of the file's."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from tests.golden_losses import LOSSES, RTOL, STEPS, losses  # noqa: E402


def test_the_rung1_proxy_trains_to_its_golden_losses():
    golden = json.loads(LOSSES.read_text())["losses"]
    got = losses()
    assert len(got) == len(golden) == STEPS
    off = [(step, g, want) for step, (g, want) in enumerate(zip(got, golden)) if abs(g - want) > RTOL * abs(want)]
    assert off == [], ("losses moved from the golden file (step, now, golden): " + repr(off[:5])
                       + "; after a deliberate change: .venv/bin/python -m tests.golden_losses --write")
