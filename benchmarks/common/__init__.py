"""Parts every benchmark shares: the data folder and data sets, random vectors, timing, result files, smoke inputs.

* :mod:`benchmarks.common.data`: :func:`data_dir` (``--data`` > ``$RAG_HIER_DATA`` > ``../shared/data`` next to the
  repository), :func:`add_data_argument`, :func:`scifact_dir` / :func:`xquad_dir`, :func:`load_scifact`,
  :func:`load_xquad`, :func:`dev_split`, :func:`halves`;
* :mod:`benchmarks.common.vectors`: :func:`unit_vectors`, :func:`normalize`, :func:`mixture`;
* :mod:`benchmarks.common.timing`: :func:`interleaved` (every function on every item, the order rotating),
  :func:`summary` (median / p95 in ms), :func:`percentile`, :func:`loadavg`;
* :mod:`benchmarks.common.report`: :data:`OUT` (``benchmarks/out``), :func:`out_path`, :func:`write_json`,
  :func:`machine`;
* :mod:`benchmarks.common.smoke`: a tiny random model and generated SciFact- and XQuAD-shaped folders, the inputs
  of each script's smallest setting (the smoke tests in ``tests/benchmarks``).

Nothing heavy is imported here: NumPy and rag-hier are imported by the functions that need them, so that every
script answers ``--help`` at once.
"""

from __future__ import annotations

from benchmarks.common.data import (
    DATA_ENV,
    REPO,
    BeirData,
    QAData,
    add_data_argument,
    data_dir,
    dev_split,
    halves,
    load_scifact,
    load_xquad,
    scifact_dir,
    xquad_dir,
)
from benchmarks.common.report import OUT, machine, out_path, write_json
from benchmarks.common.smoke import smoke_beir, smoke_data, smoke_qa, tiny_model
from benchmarks.common.timing import Interleaved, interleaved, loadavg, percentile, summary
from benchmarks.common.vectors import mixture, normalize, unit_vectors

__all__ = [
    "DATA_ENV",
    "OUT",
    "REPO",
    "BeirData",
    "Interleaved",
    "QAData",
    "add_data_argument",
    "data_dir",
    "dev_split",
    "halves",
    "interleaved",
    "load_scifact",
    "load_xquad",
    "loadavg",
    "machine",
    "mixture",
    "normalize",
    "out_path",
    "percentile",
    "scifact_dir",
    "smoke_beir",
    "smoke_data",
    "smoke_qa",
    "summary",
    "tiny_model",
    "unit_vectors",
    "write_json",
    "xquad_dir",
]
