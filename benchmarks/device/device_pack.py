"""Pack a sentence-transformers BERT model small enough to travel to a lent GPU machine, and unpack it there.

The device tool sends at most 64 MiB with the working tree; all-MiniLM-L6-v2's ``model.safetensors`` alone is
91 MB. ``pack`` keeps the word-embedding rows of the tokens that occur in the given texts (e.g. SciFact's
corpus and queries: 14,777 of 30,522) and stores the large matrices in float16 (biases, LayerNorms and other
small tensors stay float32); ``unpack`` rebuilds a float32 model directory of the original shapes, with zeros in
the rows left out. Exact for those texts up to float16 rounding of the weights (a relative 2^-11): measure any
comparison with vectors encoded from the unpacked model on both sides, never mixed with the original's.

Usage::

    python -m benchmarks.device.device_pack pack MODEL_DIR OUT_DIR --texts corpus.jsonl.gz queries.jsonl documents.jsonl
    python -m benchmarks.device.device_pack unpack OUT_DIR MODEL_DIR          # on the device machine
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

WORD_EMBEDDINGS = "embeddings.word_embeddings.weight"
SMALL = 65_536  # tensors with fewer values stay float32
SKIP = {"model.safetensors", "README.md", ".gitattributes"}


def _texts(path: Path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    out = []
    with opener(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():  # BEIR corpus/queries (title, text) or QA documents/questions (paragraphs, question)
                rec = json.loads(line)
                parts = [rec.get("title", ""), rec.get("text", ""), rec.get("question", ""), *rec.get("paragraphs", [])]
                out.append(", ".join(str(x) for x in parts if x))
    return out


def pack(src: Path, dst: Path, texts: list[Path]) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(src))
    used: set[int] = set(tok.all_special_ids)
    for path in texts:
        items = _texts(path)
        for i in range(0, len(items), 512):
            for ids in tok(items[i : i + 512])["input_ids"]:
                used.update(ids)
    rows = np.array(sorted(used), dtype=np.int64)
    weights = load_file(str(src / "model.safetensors"))
    packed: dict[str, np.ndarray] = {}
    shapes: dict[str, list[int]] = {}
    for name, w in weights.items():
        shapes[name] = list(w.shape)
        if name == WORD_EMBEDDINGS:
            w = w[rows]
            packed["__rows__"] = rows
        if w.dtype == np.float32 and w.size >= SMALL:
            w = w.astype(np.float16)
        packed[name] = np.ascontiguousarray(w)
    dst.mkdir(parents=True, exist_ok=True)
    save_file(packed, str(dst / "packed.safetensors"), metadata={"shapes": json.dumps(shapes)})
    for f in src.rglob("*"):
        if f.is_file() and f.name not in SKIP:
            (dst / "files" / f.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, dst / "files" / f.relative_to(src))
    print(f"{len(rows)} of {shapes[WORD_EMBEDDINGS][0]} word rows; {(dst / 'packed.safetensors').stat().st_size} bytes")


def unpack(src: Path, dst: Path) -> None:
    from safetensors import safe_open

    with safe_open(str(src / "packed.safetensors"), "np") as fh:
        shapes = json.loads((fh.metadata() or {})["shapes"])
    packed = load_file(str(src / "packed.safetensors"))
    rows = packed.pop("__rows__")
    out: dict[str, np.ndarray] = {}
    for name, w in packed.items():
        w = w.astype(np.float32) if w.dtype == np.float16 else w
        if name == WORD_EMBEDDINGS:
            full = np.zeros(shapes[name], np.float32)
            full[rows] = w
            w = full
        if list(w.shape) != shapes[name]:
            raise ValueError(f"{src / 'packed.safetensors'}: {name} has shape {list(w.shape)}, expected {shapes[name]}")
        out[name] = w
    shutil.copytree(src / "files", dst, dirs_exist_ok=True)
    save_file(out, str(dst / "model.safetensors"), metadata={"format": "pt"})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=["pack", "unpack"])
    p.add_argument("src", type=Path)
    p.add_argument("dst", type=Path)
    p.add_argument(
        "--texts",
        type=Path,
        nargs="*",
        default=[],
        help="pack: JSONL (.gz) files of title/text or QA (paragraphs, question) records",
    )
    args = p.parse_args(argv)
    if args.action == "pack":
        pack(args.src, args.dst, args.texts)
    else:
        unpack(args.src, args.dst)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
