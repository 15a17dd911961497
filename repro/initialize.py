"""How every matrix starts: std · truncated normal at ±3σ, std = 0.5/√hidden (levanter `_init_weight`)."""

from __future__ import annotations

import torch
import torch.nn as nn


def matrix(*shape: int, std: float) -> nn.Parameter:
    w = torch.empty(*shape)
    nn.init.trunc_normal_(w, std=std, a=-3 * std, b=3 * std)
    return nn.Parameter(w)
