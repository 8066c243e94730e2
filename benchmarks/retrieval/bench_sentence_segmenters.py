"""Sentence segmenters for the passage splitter: speed, hand-checked boundaries, and text preservation.

Usage (each segmenter that is not installed is skipped; only ``sentencex`` is a rag-hier dependency)::

    pip install pysbd blingfire syntok       # to compare; all install offline from PyPI, no model downloads
    python -m benchmarks.retrieval.bench_sentence_segmenters [--data ../shared/data] [--docs 2000]

For each segmenter: how many of 10 hand-written cases (abbreviations, decimals, "et al.", "e.g.", quotes,
"i.v.") it segments right; words per second on the first ``--docs`` SciFact abstracts (median of 3);
and on how many abstracts joining its sentences with single spaces does *not* give back the text with
whitespace collapsed (a cut inside a word such as "H2A.X", or a character dropped). rag-hier keeps only
boundaries that fall on whitespace (``rag_hier.corpus.sentences.split_sentences``), so for it that count
is 0 by construction; the raw segmenters are measured as they come.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import time
from collections.abc import Callable

from benchmarks.common.data import add_data_argument, scifact_dir

CASES = [
    ("Dr. Smith went to Washington. He arrived on Jan. 5 at 3 p.m. and left.", 2),
    ("The effect was significant (p < 0.05, n = 3.5 million). See Fig. 2 for details.", 2),
    ("Smith et al. reported a 2.5-fold increase. This was confirmed in vitro, e.g. in HeLa cells.", 2),
    ("The U.S. economy grew. Mr. Jones disagreed!", 2),
    ("Is it true? Yes. It is.", 3),
    ('He said "Stop." Then he left.', 2),
    ("Values were 1.2, 3.4 and 5.6 mg/kg i.v. in mice. No toxicity was seen.", 2),
    ("Section 3.1 describes the method.\nThe results follow in Sect. 4.", 2),
    ("Beyoncé's debut album, Dangerously in Love (2003), sold 11 million copies. It won five Grammy Awards.", 2),
    ("approx. 10 patients (vs. 20 controls) were enrolled. The trial ended.", 2),
]


def segmenters() -> dict[str, Callable[[str], list[str]]]:
    found: dict[str, Callable[[str], list[str]]] = {}
    try:
        import sentencex

        found["sentencex"] = lambda t: list(sentencex.segment("en", t))
    except ImportError:
        pass
    try:
        from rag_hier.corpus.sentences import split_sentences

        found["rag-hier split_sentences (sentencex, whitespace cuts only)"] = split_sentences
    except ImportError:
        pass
    try:
        import pysbd

        seg = pysbd.Segmenter(language="en", clean=False)
        found["pysbd"] = seg.segment
    except ImportError:
        pass
    try:
        import blingfire

        found["blingfire"] = lambda t: blingfire.text_to_sentences(t).split("\n") if t.strip() else []
    except ImportError:
        pass
    try:
        from syntok import segmenter as syntok_segmenter

        def syntok_split(text: str) -> list[str]:
            return [
                "".join(tok.spacing + tok.value for tok in sentence).strip()
                for paragraph in syntok_segmenter.analyze(text)
                for sentence in paragraph
            ]

        found["syntok"] = syntok_split
    except ImportError:
        pass
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_data_argument(parser)
    parser.add_argument("--docs", type=int, default=2000)
    args = parser.parse_args(argv)
    with gzip.open(scifact_dir(args.data) / "corpus.jsonl.gz", "rt", encoding="utf-8") as handle:
        docs = [json.loads(line)["text"] for _, line in zip(range(args.docs), handle, strict=False)]
    words = sum(len(d.split()) for d in docs)
    print(f"{len(docs)} SciFact abstracts, {words} words\n")
    print("| segmenter | hand cases right | words/s | abstracts not preserved |")
    print("|---|---|---|---|")
    for name, segment in segmenters().items():
        right = sum(len([s for s in segment(text) if s.strip()]) == n for text, n in CASES)
        times, lost = [], 0
        for _ in range(3):
            t0 = time.perf_counter()
            out = [segment(d) for d in docs]
            times.append(time.perf_counter() - t0)
        for d, sentences in zip(docs, out, strict=True):
            if " ".join(" ".join(s.split()) for s in sentences if s.strip()) != " ".join(d.split()):
                lost += 1
        print(f"| {name} | {right}/{len(CASES)} | {words / statistics.median(times):,.0f} | {lost} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
