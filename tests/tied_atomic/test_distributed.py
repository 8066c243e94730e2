"""Data-parallel Tied-Atomic training: two CPU processes on gloo (as torchrun would start them)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

WORKER = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path

    import numpy as np
    import torch

    from rag_hier.training.tied_atomic import TiedAtomicConfig, TiedAtomicTrainer

    base, out = sys.argv[1], Path(sys.argv[2])
    words = "apple banana cherry river mountain ocean forest desert city village music painting".split()
    rng = np.random.default_rng(0)
    corpus = {f"d{i}": " ".join(rng.choice(words, 16)) for i in range(24)}
    queries = {f"q{i}": " ".join(corpus[f"d{i}"].split()[:4]) for i in range(16)}
    qrels = {f"q{i}": {f"d{i}": 1} for i in range(16)}
    cfg = TiedAtomicConfig(base_model=base, max_steps=2, batch_size=4, device="cpu", bm25_depth=3, logging_steps=1)
    trainer = TiedAtomicTrainer(cfg)
    result = trainer.train(corpus, out / "model", queries=queries, qrels=qrels)
    rank = torch.distributed.get_rank()
    params = torch.cat([p.detach().flatten() for p in trainer.model.parameters()]).numpy()
    np.save(out / f"params{rank}.npy", params)
    (out / f"result{rank}.json").write_text(json.dumps(
        {"world": result.world_size, "steps": result.steps, "gathered": result.gathered_negatives}
    ))
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_two_gloo_processes_train_one_model(tmp_path: Path, tiny_t5_path: str) -> None:
    script = tmp_path / "worker.py"
    script.write_text(WORKER, encoding="utf-8")
    port = _free_port()
    procs = []
    for rank in range(2):
        env = {
            **os.environ,
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": "2",
            "LOCAL_WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "OMP_NUM_THREADS": "1",
            "CUDA_VISIBLE_DEVICES": "",
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, str(script), tiny_t5_path, str(tmp_path)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    outputs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, out[-2000:] + err[-4000:]
    results = [json.loads((tmp_path / f"result{r}.json").read_text()) for r in range(2)]
    assert all(r == {"world": 2, "steps": 2, "gathered": True} for r in results)
    # DDP kept the replicas identical, and rank 0 wrote the one model
    np.testing.assert_array_equal(np.load(tmp_path / "params0.npy"), np.load(tmp_path / "params1.npy"))
    assert (tmp_path / "model" / "modules.json").is_file()
    assert json.loads((tmp_path / "model" / "tied_atomic_training.json").read_text())["world_size"] == 2
