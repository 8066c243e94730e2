"""Attention-probability dropout and PyTorch's fused CPU attention: time and activation memory of one training pass.

With dropout on the attention probabilities, PyTorch's scaled-dot-product attention on CPU cannot use its fused
kernel and materialises every attention matrix. This script embeds N texts of L tokens with the offline
all-MiniLM-L6-v2 in training mode and back-propagates, alternating the model's attention dropout (0.1) and 0,
and prints the median seconds per forward + backward and the peak growth of the resident set over each pass.

Usage::

    python -m benchmarks.training.bench_attention_dropout 32 256 3     # N texts, L tokens, repetitions
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("n", type=int, help="texts per pass")
    parser.add_argument("length", type=int, help="tokens per text")
    parser.add_argument("reps", type=int, help="repetitions (each: one pass with dropout 0.1, one with 0)")
    parser.add_argument("--model", default=None, help="the model (default: the offline all-MiniLM-L6-v2)")
    args = parser.parse_args(argv)
    import psutil
    import torch
    from sentence_transformers import SentenceTransformer

    from rag_hier.encoders.dense import DEFAULT_MODEL, resolve_model_path

    n, length, reps = args.n, args.length, args.reps
    torch.set_num_threads(2)
    model = SentenceTransformer(resolve_model_path(args.model or DEFAULT_MODEL), device="cpu")
    model.max_seq_length = length
    attention = [mod for name, mod in model.named_modules() if name.endswith("attention.self")]
    proc = psutil.Process()
    peak = {"v": 0}
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak["v"] = max(peak["v"], proc.memory_info().rss)
            time.sleep(0.02)

    threading.Thread(target=sample, daemon=True).start()
    model.train()
    prepare = getattr(model, "preprocess", None) or model.tokenize  # sentence-transformers 6 renamed it
    features = prepare(["word " * length for _ in range(n)])
    seconds: dict[str, list[float]] = {"p0.1": [], "p0.0": []}
    peaks = {"p0.1": 0, "p0.0": 0}
    for _ in range(reps):
        for key, p in (("p0.1", 0.1), ("p0.0", 0.0)):
            for a in attention:
                a.dropout.p = p
            base = proc.memory_info().rss
            peak["v"] = base
            t = time.perf_counter()
            out = model(dict(features))["sentence_embedding"]
            out.sum().backward()
            model.zero_grad(set_to_none=True)
            seconds[key].append(time.perf_counter() - t)
            peaks[key] = max(peaks[key], peak["v"] - base)
    stop.set()
    print(
        json.dumps(
            {
                k: {
                    "median_s": round(statistics.median(v), 2),
                    "all": [round(x, 1) for x in v],
                    "peak_delta_gb": round(peaks[k] / 2**30, 2),
                }
                for k, v in seconds.items()
            }
        )
    )


if __name__ == "__main__":
    main()
