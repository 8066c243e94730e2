"""EHI under torch.distributed: 2 CPU processes (gloo) give the single-process loss, gradients and trained indexer."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

WORKER = textwrap.dedent(
    """
    import os
    import sys
    from pathlib import Path

    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp

    from rag_hier.index.ehi import EHIIndexer
    from rag_hier.training.ehi import EHIConfig, EHILoss, EHITrainer

    OUT = Path(sys.argv[1])
    WORLD, B, D = 2, 4, 8


    def batch():
        rng = np.random.default_rng(0)
        q = rng.standard_normal((WORLD * B, D)).astype(np.float32)
        p = (q + 0.5 * rng.standard_normal((WORLD * B, D))).astype(np.float32)
        n = rng.standard_normal((WORLD * B, D)).astype(np.float32)
        labels = np.array([[i // 2, 10 + i, 30 + i] for i in range(WORLD * B)])
        labels[5, 2] = -1  # a row without a mined negative
        return q, p, n, labels


    def loss_and_grads(rows):
        q, p, n, labels = batch()
        indexer = EHIIndexer(D, 3, 2, seed=0)
        loss = EHILoss(None, indexer, lambdas=(0.2, 0.8, 0.5))
        loss.set_relevance(100, [(i // 2, 10 + i) for i in range(WORLD * B)])
        qt, pt, nt = (torch.tensor(a[rows], requires_grad=True) for a in (q, p, n))
        total = sum(loss.compute_loss_from_embeddings([qt, pt, nt], torch.tensor(labels[rows])).values())
        total.backward()
        return float(total.item()), [t.grad.numpy() for t in (qt, pt, nt)] + [
            prm.grad.numpy() for prm in indexer.parameters()
        ]


    def corpus():
        rng = np.random.default_rng(1)
        docs = rng.standard_normal((40, D)).astype(np.float32)
        docs /= np.linalg.norm(docs, axis=1, keepdims=True)
        qv = {f"q{i}": (docs[i] + 0.3 * rng.standard_normal(D)).astype(np.float32) for i in range(32)}
        return docs, qv


    def train(batch_size):
        docs, qv = corpus()
        cfg = EHIConfig(branching=4, height=1, epochs=4, refresh_every=2, batch_size=batch_size, freeze_encoder=True)
        res = EHITrainer(cfg, model="unused", device="cpu", show_progress_bar=False).train(
            {f"d{i}": "x" for i in range(40)}, None, queries={q: q for q in qv},
            qrels={f"q{i}": {f"d{i}": 1} for i in range(32)}, corpus_embeddings=docs, query_embeddings=qv,
        )
        return res


    def worker(rank):
        os.environ.update(WORLD_SIZE=str(WORLD), RANK=str(rank))
        dist.init_process_group("gloo", init_method=f"file://{OUT / 'rendezvous'}", rank=rank, world_size=WORLD)
        value, grads = loss_and_grads(slice(rank * B, (rank + 1) * B))
        np.save(OUT / f"loss{rank}.npy", np.array([value]))
        for i, g in enumerate(grads):
            np.save(OUT / f"grad{rank}_{i}.npy", g)
        res = train(batch_size=4)  # 2 processes x 4 = the single process's batch of 8
        for name, t in res.indexer.tensors().items():
            np.save(OUT / f"indexer{rank}_{name}.npy", t.numpy())
        np.save(OUT / f"leaves{rank}.npy", res.leaves)
        dist.barrier()  # no rank tears gloo down while the other still talks to it
        dist.destroy_process_group()


    if __name__ == "__main__":
        ref_value, ref_grads = loss_and_grads(slice(0, WORLD * B))
        ref = train(batch_size=8)
        mp.spawn(worker, nprocs=WORLD, join=True)
        for rank in range(WORLD):
            assert abs(float(np.load(OUT / f"loss{rank}.npy")[0]) - ref_value) < 1e-5
            for i in range(3):  # embeddings: W x the global gradient of the rank's own rows (DDP then averages)
                got = np.load(OUT / f"grad{rank}_{i}.npy") / WORLD
                np.testing.assert_allclose(got, ref_grads[i][rank * B : (rank + 1) * B], rtol=1e-4, atol=1e-6)
            for i in range(3, len(ref_grads)):  # the indexer: the full gradient on every process
                np.testing.assert_allclose(np.load(OUT / f"grad{rank}_{i}.npy"), ref_grads[i], rtol=1e-4, atol=1e-6)
            for name, t in ref.indexer.tensors().items():  # indexer-only training: the same indexer as 1 process
                np.testing.assert_allclose(np.load(OUT / f"indexer{rank}_{name}.npy"), t.numpy(), rtol=1e-4, atol=1e-5)
            assert np.array_equal(np.load(OUT / f"leaves{rank}.npy"), ref.leaves)
        print("OK", ref_value, ref.steps)
    """
)


def test_two_gloo_processes_match_one(tmp_path: Path) -> None:
    script = tmp_path / "ddp_worker.py"
    script.write_text(WORKER, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path)],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert "OK" in proc.stdout
