"""What this machine can do: its compute dtype, its matmul peak (measured, kept), its memory.

Compute dtype: Marin computes in bf16 with fp32 weights. On CUDA, and on CPUs with native bf16
matmuls (AVX512-BF16 or AMX), repro does the same through autocast. On a CPU without them, bf16
matmuls are emulated and many times slower than fp32 (bench/NOTES.md, "repro"), so `auto`
computes in fp32 there and says so in the run config (`trainer.mp`).

Peak: MFU is analytic FLOPs over the peak of the dtype the run computes in (so it can never exceed
100% because of a dtype mismatch). The peak is the best of several timed square matmuls at two
sizes, and the cache keeps the best ever measured for (device, dtype, threads): a measurement taken
while the machine is busy can only lower a reading, never the kept peak. If a step ever does more
FLOP/s than the kept peak, the trainer raises the peak to it and logs that it did.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import torch


def cpu_has_native_bf16() -> bool:
    checks = (getattr(torch.cpu, "_is_avx512_bf16_supported", None), getattr(torch.cpu, "_is_amx_tile_supported", None))
    return any(bool(check()) for check in checks if check is not None)


def compute_dtype(device: str, requested: str = "auto") -> str:
    """"bfloat16" or "float32": the request, or for `auto` what this device runs fast."""
    if requested != "auto":
        return requested
    if device.startswith("cuda") or cpu_has_native_bf16():
        return "bfloat16"
    return "float32"


def measure_matmul_peak(dtype_name: str = "float32", device: str = "cpu", sizes=(1024, 2048), repeats: int = 5,
                        seconds: float = 0.2) -> float:
    """Best FLOP/s of `repeats` timed runs of square matmuls at each size."""
    dtype = getattr(torch, dtype_name)
    best = 0.0
    for n in sizes:
        a = torch.randn(n, n, dtype=dtype, device=device)
        b = torch.randn(n, n, dtype=dtype, device=device)
        a @ b
        for _ in range(repeats):
            _sync(device)
            iters, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                a @ b
                iters += 1
            _sync(device)
            best = max(best, 2 * n**3 * iters / (time.perf_counter() - t0))
    return best


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def device_name(device: str) -> str:
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(0)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu"


def kept_peak(cache: Path, dtype_name: str, device: str = "cpu") -> float:
    """The best peak ever measured here for (device, dtype, threads), measuring now and keeping the max."""
    key = peak_key(device, dtype_name)
    try:
        known = json.loads(cache.read_text())
    except (OSError, ValueError):
        known = {}
    kept = float(known.get(key, 0.0))
    # the first time, the full measurement (seconds); then a short one that can only raise the kept best
    now = measure_matmul_peak(dtype_name, device, sizes=(1024,), repeats=3, seconds=0.1) if kept else \
        measure_matmul_peak(dtype_name, device)
    peak = max(kept, now)
    record_peak(cache, key, peak, known)
    return peak


def record_peak(cache: Path, key: str, peak: float, known: dict | None = None) -> None:
    if known is None:
        try:
            known = json.loads(cache.read_text())
        except (OSError, ValueError):
            known = {}
    known[key] = max(peak, float(known.get(key, 0.0)))
    try:
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(known, indent=1))
        tmp.replace(cache)
    except OSError:
        pass  # a read-only home only costs a re-measurement next time


def peak_key(device: str, dtype_name: str) -> str:
    return f"{device_name(device)}|{dtype_name}|{torch.get_num_threads()}"


def threads_for_load() -> int:
    """CPU threads to use: the cores not already busy (at least 1). On a shared 2-core machine two OpenMP
    threads that keep losing their core to other processes run slower than one (their barriers spin:
    bench/NOTES.md, "repro"); on a free machine every core is used."""
    cores = os.cpu_count() or 1
    try:
        busy = os.getloadavg()[0]
    except OSError:
        busy = 0.0
    return max(1, min(cores, int(cores - busy + 0.5)))


def cuda_memory_bytes() -> int | None:
    """Total memory of GPU 0, or None without CUDA."""
    if not torch.cuda.is_available():
        return None
    return int(torch.cuda.get_device_properties(0).total_memory)


def host_memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def keep_freed_memory() -> bool:
    """Ask glibc to serve large tensors from its heap and keep freed blocks, instead of mmap/munmap per
    tensor: every fresh >32 MB activation or Newton–Schulz buffer otherwise costs page faults on first
    touch, about as long as the Newton–Schulz arithmetic itself (bench/NOTES.md, "repro").
    Linux/glibc only; elsewhere a no-op. Returns whether it applied."""
    import ctypes
    import ctypes.util
    import sys

    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        return bool(libc.mallopt(m_mmap_threshold, 512 << 20)) and bool(libc.mallopt(m_trim_threshold, 2**31 - 1))
    except (OSError, AttributeError):
        return False
