"""marinctl: follow and reproduce open LLM training runs from the terminal.

Kept import-free on purpose: `marinctl --help` must stay fast, so nothing heavy
(textual, torch, wandb) is imported until a command needs it.
"""

__version__ = "0.1.0"
