"""SVDR under torch.distributed: 2 CPU processes (gloo) share the batches, end with the same weights, rank 0 saves."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

from .conftest import TEXTS

WORKER = textwrap.dedent(
    """
    import json
    import os
    import sys
    from pathlib import Path

    import numpy as np
    import torch.distributed as dist
    import torch.multiprocessing as mp

    OUT, MODEL, PORT = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    WORLD = 2


    def worker(rank):
        os.environ.update(
            WORLD_SIZE=str(WORLD), RANK=str(rank), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=PORT
        )
        dist.init_process_group("gloo", init_method=f"file://{OUT / 'rendezvous'}", rank=rank, world_size=WORLD)
        from rag_hier import Document
        from rag_hier.encoders.vocab import VocabEncoder
        from rag_hier.training.svdr import SvdrTrainer, SvdrTrainingConfig

        texts = json.loads((OUT / "texts.json").read_text())
        docs = [Document(f"d{i}", f"T{i}", (t,)) for i, t in enumerate(texts)]
        queries = {f"q{i}": " ".join(t.split()[1:3]) for i, t in enumerate(texts)}
        qrels = {f"q{i}": {f"d{i}": 1} for i in range(len(texts))}
        encoder = VocabEncoder(MODEL, device="cpu")
        before = encoder.fingerprint
        config = SvdrTrainingConfig(
            batch_size=2, learning_rate=1e-3, negative_schedule="beta", max_seconds=600, seed=0
        )
        trainer = SvdrTrainer.from_documents(encoder, docs, queries, qrels, config=config)
        seen = []
        step_inputs = trainer._step_inputs
        trainer._step_inputs = lambda batch, rng: seen.append([e.qid for e in batch]) or step_inputs(batch, rng)
        result = trainer.train()
        out = trainer.save(OUT / f"model{rank}")  # only rank 0 writes
        report = {
            "before": before,
            "after": encoder.fingerprint,
            "steps": result.steps,
            "losses": list(result.losses),
            "stopped_by": result.stopped_by,
            "seen": seen,
            "returned": str(out),
        }
        (OUT / f"rank{rank}.json").write_text(json.dumps(report))
        dist.barrier()  # no rank tears gloo down while the other still talks to it
        dist.destroy_process_group()


    if __name__ == "__main__":
        mp.spawn(worker, nprocs=WORLD, join=True)
        from rag_hier.encoders.vocab import VocabEncoder

        ranks = [json.loads((OUT / f"rank{r}.json").read_text()) for r in range(WORLD)]
        print("WRITTEN", json.dumps(sorted(p.name for p in OUT.glob("model*"))))
        print("SAVED", VocabEncoder(OUT / "model0", device="cpu").fingerprint)
        print("OK", json.dumps(ranks))
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_two_gloo_processes_train_one_model(tmp_path: Path, tiny_model_path: str) -> None:
    script = tmp_path / "ddp_worker.py"
    script.write_text(WORKER, encoding="utf-8")
    (tmp_path / "texts.json").write_text(json.dumps(TEXTS), encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path), tiny_model_path, str(_free_port())],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"},
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    lines = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in proc.stdout.splitlines() if " " in line}
    ranks = json.loads(lines["OK"])
    r0, r1 = ranks
    # 8 examples in batches of 2: 4 batches, 2 steps on each process, each on its own batches
    assert r0["steps"] == r1["steps"] == 2
    assert len(r0["seen"]) == len(r1["seen"]) == 2
    seen0 = {q for b in r0["seen"] for q in b}
    seen1 = {q for b in r1["seen"] for q in b}
    assert not seen0 & seen1 and seen0 | seen1 == {f"q{i}" for i in range(len(TEXTS))}
    # the gradients were averaged: both processes hold the same, trained, weights; rank 0 wrote them
    assert r0["after"] == r1["after"] != r0["before"] == r1["before"]
    assert all(x == x and abs(x) < 1e6 for r in ranks for x in r["losses"])  # finite
    assert r0["stopped_by"] == r1["stopped_by"] == "epochs"  # max_seconds is ignored under torch.distributed
    assert json.loads(lines["WRITTEN"]) == ["model0"] and r1["returned"].endswith("model1")
    assert lines["SAVED"] == r0["after"]
