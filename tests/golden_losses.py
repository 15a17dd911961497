"""repro's golden losses: the first STEPS training losses of rung1's CPU proxy at seed SEED, on a
fixed corpus, kept in tests/golden/rung1_proxy_losses.json and checked by
tests/test_repro_golden.py to RTOL (as torchtitan checks its loss files): a changed model,
initialisation, optimizer or data path moves them past it, where the same code gives the same
losses to the bit on one CPU and any thread count.

The corpus is committed beside the file (tests/golden/prose.txt, code.txt: text of this
repository, frozen), so the losses depend on neither the Python build's stdlib nor anything
installed; the proxy is shrunk further (PROXY) so the 20 steps take seconds.

After a deliberate change, write the file again:

    .venv/bin/python -m tests.golden_losses --write
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

GOLDEN = Path(__file__).resolve().parent / "golden"
LOSSES = GOLDEN / "rung1_proxy_losses.json"
RUNG, STEPS, SEED = "rung1", 20, 0
PROXY = {"batch_size": 4, "seq_len": 64, "vocab": 512, "head_dim": 16}
# same code, same CPU: equal to the bit. A 2% change of MuonH's or Adam's learning rate moves a
# loss by 4e-4 of itself, a 2% wider initialisation by 9e-4, AdamW for MuonH by 0.18
RTOL = 5e-5


def config(change=None):
    """The proxy the losses come from (evals off: they change no training step); `change(cfg)`, a variant."""
    from repro.recipe import cpu_proxy, true_config

    cfg = replace(cpu_proxy(true_config(RUNG), steps=STEPS, **PROXY), eval_every=10**9)
    return change(cfg) if change is not None else cfg


def losses(change=None, cache_dir: Path | None = None) -> list[float]:
    """`train/loss` of each step, one CPU thread."""
    import torch

    from repro.data import corpus_from_domains
    from repro.loop import train

    torch.set_num_threads(1)
    cfg = config(change)
    with tempfile.TemporaryDirectory() as tmp:
        corpus = corpus_from_domains({name: (GOLDEN / f"{name}.txt").read_text() for name in ("prose", "code")},
                                     cfg.model.vocab_size, cfg.model.seq_len, "tests/golden", cache_dir or Path(tmp))
        got: dict[int, float] = {}
        train(cfg, corpus, seed=SEED, log=lambda row, step: got.update({step: row["train/loss"]}) if "train/loss" in row else None)
    return [got[step] for step in sorted(got)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help=f"write {LOSSES.relative_to(GOLDEN.parent.parent)}")
    args = ap.parse_args(argv)
    import torch

    now = losses()
    if args.write:
        LOSSES.write_text(json.dumps({"rung": RUNG, "proxy": PROXY, "seed": SEED, "steps": STEPS, "torch": torch.__version__,
                                      "losses": now}, indent=1) + "\n")
    print(json.dumps(now))
    return 0


if __name__ == "__main__":
    sys.exit(main())
