"""``rag-hier tune``: fine-tune a store's model on judged queries, adopt it only when it measures better.

Queries are read as ``rag-hier eval`` reads them (``--beir DIR [--split train]``, or ``--queries`` with
``--qrels``; QA ``questions.jsonl`` needs no qrels). A dev part is held back, a candidate trained on the rest,
base and candidate scored on the dev part with the store's own search, and the candidate adopted (one
commit) when the paired bootstrap interval of the dev nDCG@10 difference lies above 0. ``--rollback`` returns
to the previous model (``--rollback original``: to the model the store was built with). The report goes to
stdout, ``--report FILE`` (JSON), and ``tune.md`` with a plot (``tune.svg``) inside the store directory. Every
output path is checked before training; once the switch is committed the run exits 0. See docs/tuning.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rag_hier.errors import RagHierError

if TYPE_CHECKING:
    from rag_hier.cli._train import ConfigFlags

__all__ = ["add_tune_parser", "config_flags", "run_tune"]


def add_tune_parser(subparsers: Any, help_line: str) -> argparse.ArgumentParser:
    """Add the ``tune`` sub-command (``help_line``: its line in ``rag-hier --help``).

    The settings' flags are generated from :class:`~rag_hier.tuning.TuneConfig`'s field metadata
    (:func:`~rag_hier.cli._train.add_config_arguments`), with its defaults and its choices (``--method``: the
    registered recipes); the data, output and run flags are written here.
    """
    from rag_hier.tuning.config import TuneConfig

    d = TuneConfig()
    p: argparse.ArgumentParser = subparsers.add_parser(
        "tune",
        help=help_line,
        description="Hold back a dev part of the judged queries, train a candidate from the store's model on the "
        "rest, score base and candidate on the dev part with the store's search, and switch the store's model "
        f"(one commit, re-encoding every passage) only when the paired bootstrap interval of the dev {d.metric} "
        "difference lies above 0 and the candidate is not shown worse on dev queries about documents no training "
        "query is about. Below a few hundred judged queries every query is scored once by a candidate trained on the "
        "others (--cross-fit) and the adopted model trains on all. --rollback returns to the previous model. See "
        "docs/tuning.md.",
    )
    p.add_argument("--store", required=True, help="the store directory")
    p.add_argument("--queries", default=None, help="judged queries: BEIR queries.jsonl or QA questions.jsonl")
    p.add_argument("--qrels", default=None, help="qrels (BEIR TSV or TREC); optional for QA questions.jsonl")
    p.add_argument("--beir", default=None, metavar="DIR", help="a BEIR folder: DIR/queries.jsonl, DIR/qrels/SPLIT.tsv")
    p.add_argument("--split", default="train", help="qrels split of --beir (default train)")
    p.add_argument(
        "--generator",
        default=None,
        metavar="MODULE:FUNCTION",
        help="without judged queries: a Python callable (passage text -> list of questions) that writes questions; "
        "each judges its own passage; they are kept in the store and never asked twice",
    )
    p.add_argument(
        "--generate-passages",
        type=int,
        default=1000,
        metavar="N",
        help="passages sampled for generated questions (default 1000)",
    )
    p.add_argument(
        "--aggregate",
        choices=("passage", "doc"),
        default=None,
        help="what the judgements' ids name: doc (document ids; a document ranks by its best passage) or passage "
        "(default: doc for BEIR-built stores, else passage; Python: store.tune(..., level=...))",
    )
    p.add_argument("--report", default=None, metavar="FILE", help="write the report as JSON here")
    p.add_argument("--dry-run", action="store_true", help="measure two training steps, estimate the run, stop")
    p.add_argument(
        "--resume",
        action="store_true",
        help="finish an adoption a crash interrupted: encode the passages its saved parts lack, then switch (the "
        "candidate, measured by that run, waits in STORE/adoption-pending); takes only --store",
    )
    p.add_argument(
        "--rollback",
        nargs="?",
        const="previous",
        choices=("previous", "original"),
        default=None,
        help="return the store to its previous model (or, with 'original', to the model it was built with) and stop",
    )
    config_flags(p)
    p.add_argument("--no-refit", dest="refit", action="store_const", const="off", help="the same as --refit off")
    return p


def config_flags(parser: argparse.ArgumentParser | None = None) -> ConfigFlags:
    """:class:`~rag_hier.tuning.TuneConfig`'s flags, added to ``parser`` (by default a parser of their own).

    ``rag-hier tune`` runs with the parser of the generated tables, so :func:`run_tune` builds the table again
    here rather than reading it from the parsed arguments.
    """
    from rag_hier.cli._train import add_config_arguments
    from rag_hier.tuning.config import TuneConfig

    return add_config_arguments(
        parser if parser is not None else argparse.ArgumentParser(add_help=False),
        TuneConfig,
        title="tuning settings (TuneConfig; Python: store.tune(..., field=value))",
        dest_from_flag=True,
        set_default=False,
    )


def _settings(args: argparse.Namespace) -> Any:
    """The :class:`~rag_hier.tuning.TuneConfig` of the parsed flags.

    Raises:
        RagHierError: A value the configuration refuses, naming its flag and its Python field
            (``--folds must be an integer >= 2, got 1 (in Python: TuneConfig.folds)``).

    """
    table = config_flags()
    try:
        return table.config(**table.values(args))
    except ValueError as exc:
        field = re.search(rf"\b{table.config.__name__}\.\w+", str(exc))
        python = f" (in Python: {field.group(0)})" if field else ""
        raise RagHierError(table.message(str(exc)) + python) from exc


def _load_generator(spec: str) -> Any:
    """The callable named ``MODULE:FUNCTION`` (``pkg.mod:obj.attr`` also works)."""
    import importlib

    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise RagHierError(f"--generator must be MODULE:FUNCTION, got {spec!r}")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise RagHierError(f"--generator: cannot import {module_name!r} ({exc})") from exc
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise RagHierError(f"--generator: {module_name!r} has no {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise RagHierError(f"--generator: {spec} is not callable")
    return obj


def run_tune(args: argparse.Namespace, *, open_store: Callable[..., Any]) -> int:
    """``rag-hier tune`` (``main`` passes its store opener)."""
    from rag_hier.eval.judged import default_level, judged_files, load_judged
    from rag_hier.tuning.workflow import tune

    def say(line: str) -> None:
        print(f"rag-hier tune: {line}" if line.startswith("warning:") else line, file=sys.stderr, flush=True)

    if args.rollback:
        if args.queries or args.beir or args.generator or args.force or args.dry_run or args.report or args.resume:
            raise RagHierError("--rollback takes only --store")
        return _rollback(args, open_store)
    if args.resume:
        if args.queries or args.beir or args.generator or args.force or args.dry_run:
            raise RagHierError("--resume takes only --store (and --report): the interrupted run's settings are kept")
        return _resume(args, open_store, say)
    report_path = _check_outputs(args)
    generator = _load_generator(args.generator) if args.generator else None
    if generator is not None and (args.queries or args.beir):
        raise RagHierError("--generator writes the questions: drop --queries/--qrels/--beir, or drop --generator")
    if generator is None and not (args.queries or args.beir):
        raise RagHierError(
            "give judged queries (--queries, with --qrels unless they are QA questions; or --beir DIR), or a "
            "question generator (--generator MODULE:FUNCTION)"
        )
    if args.generate_passages < 1:
        raise RagHierError(f"--generate-passages must be >= 1, got {args.generate_passages}")
    config = _settings(args)
    store = open_store(args, read_only=False)
    before = _current(store)
    report = None
    try:
        try:
            level = default_level(store, args.aggregate)
            if generator is not None:
                report = tune(
                    store,
                    config=config,
                    level=level,
                    dry_run=args.dry_run,
                    say=say,
                    generator=generator,
                    generator_name=args.generator,
                    max_generated_passages=args.generate_passages,
                )
            else:
                queries_path, qrels_path = judged_files(args.queries, args.qrels, args.beir, args.split)
                judged = load_judged(store, queries_path, qrels_path, level)
                report = tune(store, judged, config=config, dry_run=args.dry_run, say=say)
        finally:
            store.close()
        print(report.summary())
        _write_reports(report, args, report_path, say)
    except (KeyboardInterrupt, RagHierError, OSError) as exc:
        # after the commit point the store is adopted: say so, and exit 0 (a retry would tune the tuned model)
        now = report.model if report is not None and report.adopted else _switched_to(args, open_store, before)
        if now is None:
            raise
        if not isinstance(exc, KeyboardInterrupt):
            say(f"warning: after the switch was committed: {str(exc).strip().splitlines()[0] if str(exc) else exc!r}")
        print(
            f"adopted: the store encodes with {now} (interrupted after the switch was committed; "
            f"`rag-hier tune --store {args.store} --rollback` returns to {(before or {}).get('model')})"
        )
    return 0


def _resume(args: argparse.Namespace, open_store: Callable[..., Any], say: Callable[[str], None]) -> int:
    """``rag-hier tune --resume``: finish the interrupted adoption, print and write its report."""
    report_path = _check_outputs(args)
    store = open_store(args, read_only=False)
    try:
        report = store.tune(resume=True, say=say, show_progress_bar=not args.no_progress)
    finally:
        store.close()
    print(report.summary())
    _write_reports(report, args, report_path, say)
    return 0


def _current(store: Any) -> dict[str, Any] | None:
    """The store's recorded encoder (``None`` for a store without :class:`ModelSwitching`, which cannot say)."""
    from rag_hier.store.capabilities import ModelSwitching, supports

    return store.model_info["current"] if supports(store, ModelSwitching) else None


def _switched_to(args: argparse.Namespace, open_store: Callable[..., Any], before: dict[str, Any] | None) -> Any:
    """The model the store encodes with now, if a switch away from ``before`` was committed; else ``None``."""
    from rag_hier.store.encoder_switch import same_encoder

    if before is None:
        return None
    try:
        store = open_store(args, read_only=True)
        try:
            now = _current(store)
        finally:
            store.close()
    except Exception:  # only asked to tell an interrupt's outcome: then the interrupt is reported
        return None
    return None if now is None or same_encoder(now, before) else now.get("model")


def _rollback(args: argparse.Namespace, open_store: Callable[..., Any]) -> int:
    """``rag-hier tune --rollback [previous|original]``."""
    from rag_hier.store.capabilities import ModelSwitching, require

    store = open_store(args, read_only=False)
    try:
        switching = require(store, ModelSwitching, what="rag-hier tune --rollback")
        switch = switching.rollback_model(to=args.rollback, show_progress_bar=not args.no_progress)
    finally:
        store.close()
    print(switch)  # "rolled back|forward: the store encodes with X (was Y); generation N"
    return 0


def _check_outputs(args: argparse.Namespace) -> Path | None:
    """Check every file the run will write before anything is trained; the ``--report`` path (or ``None``).

    A path that cannot be written would otherwise fail after the store's model was switched.
    """
    if args.report is not None:
        report = Path(args.report)
        if not args.report or report.is_dir():
            raise RagHierError(f"--report {args.report!r} is a directory or empty; give a file name")
        if not report.parent.is_dir():
            raise RagHierError(f"--report {report}: the folder {report.parent} does not exist")
        if not os.access(report.parent, os.W_OK):
            raise RagHierError(f"--report {report}: the folder {report.parent} is not writable")
    else:
        report = None
    root = Path(args.store)
    if root.is_dir() and not args.dry_run and not os.access(root, os.W_OK):
        raise RagHierError(f"--store {root}: the directory is not writable (the report goes inside it)")
    return report


def _write_reports(report: Any, args: argparse.Namespace, report_path: Path | None, say: Callable[[str], None]) -> None:
    """Write the JSON report and the Markdown one; after a switch a failure here is a warning, never an error."""
    from rag_hier.store.files import atomic_write_bytes
    from rag_hier.tuning.workflow import report_files

    if report_path is not None:
        try:
            atomic_write_bytes(report_path, (json.dumps(report.to_dict(), indent=2) + "\n").encode("utf-8"))
        except OSError as exc:
            say(f"warning: cannot write the report to {report_path} ({exc})")
    if not args.dry_run and Path(args.store).is_dir():
        try:
            md, _svg = report_files(report, args.store)
            print(f"report: {md}")
        except OSError as exc:
            say(f"warning: cannot write the report into the store directory ({exc})")
