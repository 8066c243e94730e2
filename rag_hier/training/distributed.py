"""torch.distributed helpers shared by the trainers: who is running, gather in-batch negatives, share arrays.

HCE and EHI gather in-batch negatives and share their tree or indexer from rank 0; Tied-Atomic and SVDR use the
rank and world size (rank 0 writes the model, data loading is sharded by sentence-transformers' trainer).

Gathering follows the "every rank computes the global loss" scheme: each process all-gathers the
embeddings of every process (no gradient through the copies it receives) and puts its own, gradient
carrying, embeddings back in its slot. Every process then computes the same loss value, the loss of
the concatenated global batch. The gradient reaching a process's own embeddings is the part of the
global gradient that flows through them; because data-parallel training *averages* parameter gradients
over the ``W`` processes, :func:`gather_with_local_grad` scales that gradient by ``W`` (the forward value
is untouched), so the averaged update equals the single-process update on the global batch. Parameters
of the loss itself (HCE's trainable centroids) receive the full global gradient on every process, so
they stay identical everywhere without being synchronised.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["broadcast_arrays", "gather_with_local_grad", "is_distributed", "rank", "world_size"]


def is_distributed() -> bool:
    """True inside an initialised torch.distributed process group of more than one process."""
    return bool(
        torch.distributed.is_available()
        and torch.distributed.is_initialized()
        and torch.distributed.get_world_size() > 1
    )


def rank() -> int:
    """Rank of the current process (0 outside torch.distributed)."""
    return torch.distributed.get_rank() if is_distributed() else 0


def world_size() -> int:
    """Number of processes (1 outside torch.distributed)."""
    return torch.distributed.get_world_size() if is_distributed() else 1


class _ScaleGrad(torch.autograd.Function):
    """Identity in the forward pass; multiplies the gradient by a constant in the backward pass."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, factor: float) -> torch.Tensor:
        ctx.factor = factor
        return tensor.view_as(tensor)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad * ctx.factor, None


def gather_with_local_grad(tensor: torch.Tensor) -> torch.Tensor:
    """All-gather ``tensor`` (same shape on every process) along dim 0; only the local slot keeps its gradient.

    Outside torch.distributed (or with one process) ``tensor`` is returned unchanged. See the module
    docstring for why the local gradient is scaled by the world size.
    """
    if not is_distributed():
        return tensor
    size = torch.distributed.get_world_size()
    parts = [torch.empty_like(tensor) for _ in range(size)]
    torch.distributed.all_gather(parts, tensor.detach().contiguous())
    parts[torch.distributed.get_rank()] = _ScaleGrad.apply(tensor, float(size))
    return torch.cat(parts, dim=0)


def broadcast_arrays(arrays: list[np.ndarray] | None, *, src: int = 0) -> list[np.ndarray]:
    """Send numpy arrays from rank ``src`` to every process (tensors only: no pickling).

    Rank ``src`` passes the arrays; the others pass ``None`` and receive copies. Outside
    torch.distributed the arrays are returned as they are.
    """
    if not is_distributed():
        if arrays is None:
            raise ValueError("broadcast_arrays() needs the arrays outside torch.distributed")
        return arrays
    backend_device = (
        torch.device("cuda", torch.cuda.current_device()) if torch.distributed.get_backend() == "nccl" else None
    )
    device = backend_device or torch.device("cpu")
    me = torch.distributed.get_rank()
    codes = {np.dtype(np.float32): 0, np.dtype(np.int64): 1}
    dtypes = {0: (np.float32, torch.float32), 1: (np.int64, torch.int64)}
    if me == src:
        if arrays is None:
            raise ValueError("the source rank must pass the arrays")
        header = [len(arrays)]
        for a in arrays:
            if np.dtype(a.dtype) not in codes:
                raise TypeError(f"broadcast_arrays() sends float32 and int64 arrays, got {a.dtype}")
            header += [codes[np.dtype(a.dtype)], a.ndim, *a.shape]
        n_header = torch.tensor([len(header)], dtype=torch.int64, device=device)
    else:
        n_header = torch.zeros(1, dtype=torch.int64, device=device)
    torch.distributed.broadcast(n_header, src)
    header_t = (
        torch.tensor(header, dtype=torch.int64, device=device)
        if me == src
        else torch.zeros(int(n_header.item()), dtype=torch.int64, device=device)
    )
    torch.distributed.broadcast(header_t, src)
    spec = header_t.tolist()
    out: list[np.ndarray] = []
    pos = 1
    for i in range(spec[0]):
        code, ndim = spec[pos], spec[pos + 1]
        shape = tuple(spec[pos + 2 : pos + 2 + ndim])
        pos += 2 + ndim
        np_dtype, t_dtype = dtypes[code]
        if me == src and arrays is not None:
            t = torch.from_numpy(np.ascontiguousarray(arrays[i])).to(device)
        else:
            t = torch.empty(shape, dtype=t_dtype, device=device)
        torch.distributed.broadcast(t, src)
        out.append(t.cpu().numpy().astype(np_dtype, copy=False))
    return out
