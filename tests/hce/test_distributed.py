"""In-batch negatives gathered across 2 CPU processes (gloo) give the single-process loss and gradients."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

WORKER = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp

    from rag_hier.index.tree import ClusterTree
    from rag_hier.training.hce import HierarchicalContrastiveLoss

    OUT = Path(sys.argv[1])
    WORLD, B, D = 2, 4, 8


    def data():
        rng = np.random.default_rng(0)
        corpus = rng.standard_normal((60, D)).astype(np.float32)
        tree = ClusterTree.build(corpus, branching=4)
        q = rng.standard_normal((WORLD * B, D)).astype(np.float32)
        pos = rng.choice(60, WORLD * B, replace=False)
        neg = rng.choice(60, WORLD * B)
        neg[1] = pos[5]  # a negative of rank 0 is the positive of a row on rank 1: masked in both settings
        labels = np.stack([pos, neg], axis=1)
        return tree, q, corpus[pos], corpus[neg], labels


    def run(rows, tree, q, p, n, labels):
        loss = HierarchicalContrastiveLoss(torch.nn.Linear(1, 1), tree, levels_m=2, temperature=0.05)
        qt, pt, nt = (torch.tensor(a[rows], requires_grad=True) for a in (q, p, n))
        out = loss.compute_loss_from_embeddings([qt, pt, nt], torch.tensor(labels[rows]))
        total = sum(out.values())
        total.backward()
        grads = [t.grad.numpy() for t in (qt, pt, nt)] + [c.grad.numpy() for c in loss.centroids]
        return float(total.item()), grads


    def worker(rank):
        dist.init_process_group("gloo", init_method=f"file://{OUT / 'rendezvous'}", rank=rank, world_size=WORLD)
        tree, q, p, n, labels = data()
        value, grads = run(slice(rank * B, (rank + 1) * B), tree, q, p, n, labels)
        np.save(OUT / f"loss{rank}.npy", np.array([value]))
        for i, g in enumerate(grads):
            np.save(OUT / f"grad{rank}_{i}.npy", g)
        dist.barrier()  # no rank tears gloo down while the other still talks to it
        dist.destroy_process_group()


    if __name__ == "__main__":
        tree, q, p, n, labels = data()
        ref_value, ref_grads = run(slice(0, WORLD * B), tree, q, p, n, labels)
        mp.spawn(worker, nprocs=WORLD, join=True)
        for rank in range(WORLD):
            value = float(np.load(OUT / f"loss{rank}.npy")[0])
            assert abs(value - ref_value) < 1e-5, (rank, value, ref_value)
            for i in range(3):  # embeddings: W x the global gradient of the rank's own rows (DDP then averages)
                got = np.load(OUT / f"grad{rank}_{i}.npy") / WORLD
                np.testing.assert_allclose(got, ref_grads[i][rank * B : (rank + 1) * B], rtol=1e-4, atol=1e-6)
            for i in range(3, len(ref_grads)):  # trainable centroids: the full gradient on every rank
                np.testing.assert_allclose(np.load(OUT / f"grad{rank}_{i}.npy"), ref_grads[i], rtol=1e-4, atol=1e-6)
        print("OK", ref_value)
    """
)


def test_gathered_loss_equals_single_process_loss(tmp_path: Path) -> None:
    script = tmp_path / "ddp_worker.py"
    script.write_text(WORKER, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path)],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert "OK" in proc.stdout
