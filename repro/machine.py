"""What this machine can do: measured matmul peak (cached), CUDA presence and memory."""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch


def measure_matmul_peak(dtype_name: str = "bfloat16", n: int = 2048, seconds: float = 0.5) -> float:
    """Matmul FLOP/s with torch at its current thread count (a big square matmul, repeated)."""
    dtype = getattr(torch, dtype_name)
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b
    iters, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a @ b
        iters += 1
    return 2 * n**3 * iters / (time.perf_counter() - t0)


def cached_peak_flops(cache: Path, dtype_name: str = "float32") -> float:
    """The fp32 peak, measured once per thread count (half a second) and kept in `cache`."""
    key = f"{dtype_name}-{torch.get_num_threads()}"
    try:
        known = json.loads(cache.read_text())
    except (OSError, ValueError):
        known = {}
    if key not in known:
        known[key] = measure_matmul_peak(dtype_name, n=1024, seconds=0.5)
        cache.write_text(json.dumps(known))
    return float(known[key])


def cuda_memory_bytes() -> int | None:
    """Total memory of GPU 0, or None without CUDA."""
    if not torch.cuda.is_available():
        return None
    return int(torch.cuda.get_device_properties(0).total_memory)
