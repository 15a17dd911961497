"""SYNTHETIC whole projects for project-scale tests: many short runs, and isoFLOP sweeps whose optimum
is known in closed form. Never real data: every run is built by tests/fakes/synth.py (tag
"synthetic", display name ending "(synthetic)").

The isoFLOP sweep follows a Chinchilla-shaped loss surface L(N, D) = E + A/N^a + B/D^b with
C = 6·N·D (Hoffmann et al. 2022, eq. 2 and approach 2). At a fixed C the optimum is
N*(C) = G·(C/6)^(b/(a+b)), D*(C) = (C/6)/N*, G = (a·A / (b·B))^(1/(a+b)), and the loss there is
L*(C) = E + K·C^(−a·b/(a+b)): the exponents a method must recover are b/(a+b) for N*, a/(a+b) for
D* and a·b/(a+b) for L(C), whose asymptote is E.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .synth import SynthRun, marin_run

ENTITY = "synthetic-lab"


def short_runs(n: int, *, project: str, steps: int = 30, keys: tuple[str, ...] | None = None,
               state: str = "finished", prefix: str = "short", group: str = "sweep-synthetic") -> list[SynthRun]:
    """`n` short SYNTHETIC runs (one layer), optionally cut down to `keys` (plus W&B's time keys)."""
    runs = []
    for i in range(n):
        run = marin_run(f"{prefix}-{i:03d}-synthetic", steps=steps, layers=1, experts=2, norm_every=10,
                        eval_every=10, entity=ENTITY, project=project, group=group, seed=i, state=state)
        if keys is not None:
            for key in [k for k in run.series if k not in keys and k not in ("_timestamp", "_runtime")]:
                run.drop_key(key)
        runs.append(run)
    return runs


@dataclass(frozen=True)
class Surface:
    """L(N, D) = E + A/N^a + B/D^b, C = 6ND (Chinchilla's fitted values by default)."""

    E: float = 1.69
    A: float = 406.4
    B: float = 410.7
    a: float = 0.34
    b: float = 0.28

    @property
    def G(self) -> float:
        return (self.a * self.A / (self.b * self.B)) ** (1 / (self.a + self.b))

    def optimum(self, c: float) -> tuple[float, float, float]:
        """(N*, D*, L*) at compute c."""
        n = self.G * (c / 6) ** (self.b / (self.a + self.b))
        d = (c / 6) / n
        return n, d, self.loss(n, d)

    def loss(self, n: float, d: float) -> float:
        return self.E + self.A / n ** self.a + self.B / d ** self.b

    @property
    def tokens_exponent(self) -> float:
        return self.a / (self.a + self.b)

    @property
    def params_exponent(self) -> float:
        return self.b / (self.a + self.b)

    @property
    def loss_exponent(self) -> float:
        return self.a * self.b / (self.a + self.b)

    def tokens_coef(self) -> float:
        return 6 ** (-self.tokens_exponent) / self.G

    def params_coef(self) -> float:
        return self.G * 6 ** (-self.params_exponent)


def isoflop_sweep(surface: Surface, budgets: dict[float, tuple[float, float]], *, project: str, runs_per_budget: int = 5,
                  noise: float = 0.0, steps: int = 20, seed: int = 0, tag: str = "") -> list[SynthRun]:
    """One short SYNTHETIC run per (budget, tokens) point, named as Marin names its sweeps
    (`isoflop-1e+18-N8.3e+07-synthetic`). `budgets`: compute → (lowest, highest) tokens as multiples
    of that budget's optimal D*. Each run logs `throughput/total_tokens` rising to its D and
    `eval/paloma/macro_loss` every 5 steps falling to L(N, D) (+ Gaussian `noise` at the last eval),
    and its summary holds `parameter_count` N. `tag` goes into every run's name (a second sweep's
    runs apart from the first's)."""
    rng = np.random.default_rng(seed)
    runs = []
    for c, (lo, hi) in budgets.items():
        _, d_star, _ = surface.optimum(c)
        for k, f in enumerate(np.geomspace(lo, hi, runs_per_budget)):
            d = d_star * f
            n = c / (6 * d)
            final = surface.loss(n, d) + (rng.normal(0.0, noise) if noise else 0.0)
            run = marin_run(f"isoflop-{c:.0e}-N{n:.2e}-{tag + '-' if tag else ''}synthetic", steps=steps, layers=1, experts=2, norm_every=1000,
                            eval_every=1000, entity=ENTITY, project=project, group="isoflop-synthetic", seed=k,
                            tags=["isoflop"])
            for key in [x for x in run.series if x not in ("_timestamp", "_runtime", "train/loss")]:
                run.drop_key(key)
            s = np.arange(steps)
            run.set_values("throughput/total_tokens", s, d * (s + 1) / steps)
            evals = s[s % 5 == 4]
            run.set_values("eval/paloma/macro_loss", evals, final + 0.3 * (evals[-1] - evals) / steps)
            run.summary_extra["parameter_count"] = n
            run.set_values("train/loss", [0], [final + 1.0])   # a mutation refreshes the summary
            runs.append(run)
    return runs
