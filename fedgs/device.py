"""Which torch device a process computes on.

``auto`` takes a GPU when this process can see one: under Ray, a client actor sees a GPU only if
it asked for a share of one (run-config ``client-num-gpus``), so ``auto`` puts clients without a
share on the CPU and the server, which sees every GPU of its machine, on the GPU. torch is
imported by the functions only: the run config validates names without it (fast ``--help``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

DEVICES = ("auto", "cpu", "cuda")


def resolve_device(name: str) -> torch.device:
    """The device for a run-config ``device`` value; ``cuda`` without a visible GPU is an error."""
    import torch

    if name not in DEVICES:
        raise ValueError(f"unknown device {name!r} (known: {', '.join(DEVICES)})")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' requested but this process sees no GPU")
    return torch.device(name)
