"""Data parallelism under torchrun: ranks, the process group, FSDP2 sharding, and the few collectives.

`python -m repro.train` is the same program with one process or N: under `torchrun --standalone
--nproc-per-node N` it joins a process group (gloo on CPU, NCCL on CUDA), shards every parameter
and so every optimizer state along dim 0 with FSDP2's `fully_shard` (one unit per block, then the
root), and splits each global batch into N equal row blocks. Everything here is a no-op with one
process, so the model and the loop never branch on it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as tdist

_OPS = {"sum": tdist.ReduceOp.SUM, "max": tdist.ReduceOp.MAX, "min": tdist.ReduceOp.MIN}


@dataclass(frozen=True)
class Ranks:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        """Rank 0 alone logs and prints."""
        return self.rank == 0


def from_env() -> Ranks:
    """What torchrun set (RANK, WORLD_SIZE, LOCAL_RANK); one process otherwise."""
    return Ranks(int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("LOCAL_RANK", 0)))


def active() -> bool:
    return tdist.is_available() and tdist.is_initialized()


def init(ranks: Ranks, device: str) -> None:
    if ranks.world > 1 and not active():
        if device.startswith("cuda"):
            torch.cuda.set_device(ranks.local_rank)
        tdist.init_process_group("nccl" if device.startswith("cuda") else "gloo")


def finish(*, clean: bool) -> None:
    """Leave the process group. After a clean run every rank first meets at a barrier: a rank that
    tore its group down while another still used it (rank 0 finishing its W&B record) died at exit
    with "terminate called without an active exception" in about one 2-rank run in 20."""
    if active():
        if clean:
            tdist.barrier()
        tdist.destroy_process_group()


def all_reduce(t: torch.Tensor, op: str = "sum") -> torch.Tensor:
    """In place across ranks ("sum", "max", "min"); returns t. Identity with one process."""
    if active() and tdist.get_world_size() > 1:
        tdist.all_reduce(t, _OPS[op])
    return t


def local(t: torch.Tensor) -> torch.Tensor:
    """This rank's shard of an FSDP2 parameter (a DTensor), or the tensor itself."""
    return t.to_local() if hasattr(t, "to_local") else t


def is_row_sharded(p: torch.Tensor) -> bool:
    """A 2-D DTensor split by rows across ranks: its matrix is whole only after a gather. (3-D expert
    stacks are split between experts, so each rank holds whole matrices.)"""
    return hasattr(p, "to_local") and p.ndim == 2 and tdist.get_world_size() > 1


def gather_rows(local_t: torch.Tensor, full_rows: int) -> torch.Tensor:
    """The full (rows, cols) matrix from each rank's row block (torch.chunk layout, as FSDP2 shards)."""
    world = tdist.get_world_size()
    chunk = -(-full_rows // world)
    padded = local_t.new_zeros(chunk, *local_t.shape[1:])
    padded[: local_t.shape[0]] = local_t
    parts = [torch.empty_like(padded) for _ in range(world)]
    tdist.all_gather(parts, padded)
    sizes = [max(0, min(chunk, full_rows - r * chunk)) for r in range(world)]
    return torch.cat([p[:n] for p, n in zip(parts, sizes)])


def my_rows(full: torch.Tensor) -> torch.Tensor:
    """This rank's row block of a full matrix (torch.chunk layout)."""
    world, rank = tdist.get_world_size(), tdist.get_rank()
    chunk = -(-full.shape[0] // world)
    return full[rank * chunk:(rank + 1) * chunk]


def shard(model: torch.nn.Module, device: str) -> torch.nn.Module:
    """FSDP2: one unit per block, then the root (embeddings, lm_head, final norms)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cuda" if device.startswith("cuda") else "cpu", (tdist.get_world_size(),))
    for block in model.stacked_blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model
