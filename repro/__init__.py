"""repro: rerun Marin's MoE ladder rungs in PyTorch, standing alone (`python -m repro.train RUNG`).

Nothing here imports marinctl; marinctl's `repro`/`demo` commands launch `repro.train` as a
process and read what it logs. Importing this package imports nothing (marinctl reads
`rungs.json` from it as package data).
"""
