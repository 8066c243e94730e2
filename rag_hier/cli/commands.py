"""What the ``rag-hier`` sub-commands do (``index``, ``search``, ``eval``, ``compare``, ``info``, ``migrate``, ...).

:mod:`rag_hier.cli.main` parses the command line and runs one of these; this module is imported only then, so that
``--help`` does not pay for it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from rag_hier.cli._base import CliError

__all__ = [
    "cmd_compare",
    "cmd_eval",
    "cmd_index",
    "cmd_info",
    "cmd_migrate",
    "cmd_search",
    "cmd_train",
    "cmd_tune",
]


def _encoder_for(args: argparse.Namespace, model: str) -> Any:
    from rag_hier.encoders.dense import DenseEncoder

    kwargs: dict[str, Any] = {"device": args.device, "show_progress_bar": not args.no_progress}
    if args.batch_size:
        kwargs["batch_size"] = args.batch_size
    return DenseEncoder(model, **kwargs)


def _milvus_options() -> dict[str, Any]:
    """Milvus connection options from the environment (``RAG_HIER_MILVUS_TOKEN``, ``RAG_HIER_MILVUS_DB``)."""
    import os

    out: dict[str, Any] = {}
    if os.environ.get("RAG_HIER_MILVUS_TOKEN"):
        out["token"] = os.environ["RAG_HIER_MILVUS_TOKEN"]
    if os.environ.get("RAG_HIER_MILVUS_DB"):
        out["db_name"] = os.environ["RAG_HIER_MILVUS_DB"]
    return out


def _is_uri(location: str) -> bool:
    from rag_hier.store.milvus.client import is_milvus_uri

    return is_milvus_uri(location)


def _open_location(location: str, *, read_only: bool, device: str | None = None, verify: bool = True) -> Any:
    """A local store directory, or a Milvus collection (``URI`` / ``URI#collection``)."""
    from rag_hier.store.store import HierStore

    if _is_uri(location):
        return HierStore.open(uri=location, device=device, read_only=read_only, **_milvus_options())
    return HierStore.open(location, device=device, read_only=read_only, verify_checksums=verify)


def _milvus_exists(location: str) -> bool:
    from rag_hier.store.milvus.store import MilvusStore

    return MilvusStore.exists(location, **_milvus_options())


def _open_store(args: argparse.Namespace, *, read_only: bool) -> Any:
    store = _open_location(args.store, read_only=read_only, device=args.device)
    if store.encoder is not None:
        store.encoder.show_progress_bar = not getattr(args, "no_progress", True)
        if getattr(args, "batch_size", None):
            store.encoder.batch_size = args.batch_size
    return store


@contextlib.contextmanager
def _one_connection(location: str) -> Iterator[None]:
    """Hold one connection to a Milvus ``location`` for the block, so that every handle opened inside shares it.

    Handles on one URI share a client while one of them holds it (:class:`~rag_hier.store.milvus.client.Connection`):
    a command that asks whether a collection exists and then opens or creates it connects once, not twice.
    """
    held = None
    if _is_uri(location):
        from rag_hier.store.milvus.client import Connection, split_uri

        uri, _ = split_uri(location)
        if not (uri.endswith(".db") and not Path(uri).exists()):  # a Lite file not there yet: creating connects
            held = Connection(uri, **_milvus_options())
    try:
        yield
    finally:
        if held is not None:
            held.close()


def cmd_index(args: argparse.Namespace, *, commit_documents: int) -> int:
    """``rag-hier index``, committing every ``commit_documents`` documents (``main.INDEX_COMMIT_DOCUMENTS``).

    One connection for the whole command when the store is a Milvus collection.
    """
    with _one_connection(args.store):
        return _cmd_index(args, commit_documents)


def _cmd_index(args: argparse.Namespace, commit_documents: int) -> int:
    from rag_hier.corpus.readers import detect_format, read_corpus
    from rag_hier.encoders.dense import DEFAULT_MODEL
    from rag_hier.index.dense import IndexConfig
    from rag_hier.store.store import MANIFEST, HierStore

    corpus_path = Path(args.corpus)
    if not corpus_path.exists():
        raise CliError(f"corpus {corpus_path} does not exist")
    fmt = args.format or detect_format(corpus_path)
    t0 = time.perf_counter()
    documents = read_corpus(corpus_path, fmt)
    t_read = time.perf_counter() - t0
    store_dir = Path(args.store)
    model = args.model
    if model and Path(model).exists():
        # a local model is recorded by its absolute path, so the store works from any directory
        model = str(Path(model).absolute())
    milvus = _is_uri(args.store)
    if (milvus and _milvus_exists(args.store)) or (not milvus and (store_dir / MANIFEST).exists()):
        store = _open_store(args, read_only=False)
        recorded = (store.manifest.get("encoder") or {}).get("model")
        if model and recorded and model != recorded:
            store.close()
            raise CliError(f"store {store_dir} was built with model {recorded!r}; got --model {args.model!r}")
        if args.index and args.index != store.index_config.kind:
            store.close()
            raise CliError(f"store {store_dir} uses a {store.index_config.kind!r} index; got --index {args.index}")
        max_words = args.max_passage_words
        if max_words is None:
            max_words = int(store.corpus_info.get("max_passage_words", 100))
        created = False
    else:
        max_words = args.max_passage_words
        if max_words is None:
            max_words = 0 if fmt in ("beir", "qa-docs") else 100
        if max_words < 0:
            raise CliError(f"--max-passage-words must be >= 0, got {max_words}")
        options: dict[str, Any] = {"kind": args.index or "flat"}
        if args.nlist is not None:
            options["nlist"] = args.nlist
        if args.nprobe is not None:
            options["nprobe"] = args.nprobe
        no_dense = bool(getattr(args, "no_dense", False))  # SVDR plugin: a store with no dense vectors
        location: dict[str, Any] = {"uri": args.store, **_milvus_options()} if milvus else {"path": store_dir}
        store = HierStore.create(
            **location,
            model=None,
            encoder=None if no_dense else _encoder_for(args, model or DEFAULT_MODEL),
            index=IndexConfig(**options),
            corpus={"format": fmt, "max_passage_words": max_words, "source": str(corpus_path)}
            | ({"dense": False} if no_dense else {}),
        )
        created = True
    try:
        t1 = time.perf_counter()
        summary = _add_in_commits(store, documents, max_words, commit_documents, show_progress_bar=not args.no_progress)
        with store.batch():
            if store.corpus_info.get("max_passage_words") != max_words:
                store.update_corpus_info(max_passage_words=max_words)
            pruned = 0
            if args.prune:
                wanted = {d.doc_id for d in documents}
                stale = [d for d in store.document_ids() if d not in wanted]
                pruned = len(stale)
                store.delete_documents(stale)
            from rag_hier.cli.plugins import plugins

            extra_lines = [
                line for mod in plugins() if hasattr(mod, "after_index") and (line := mod.after_index(store, args))
            ]
        t_write = time.perf_counter() - t1
        counts = store.manifest["counts"]
    finally:
        store.close()
    if summary.documents_empty:  # the reader has warned already, naming each document and its file or line
        noun = "document" if summary.documents_empty == 1 else "documents"
        extra_lines.append(f"warning: {summary.documents_empty} {noun} without text, stored with no passages")
    print(
        f"{'created' if created else 'updated'} store {store_dir} from {len(documents)} {fmt} documents "
        f"(read {t_read:.1f}s, encode+write {t_write:.1f}s)\n"
        f"  documents: {summary.documents_added} added, {summary.documents_updated} updated, "
        f"{summary.documents_unchanged} unchanged" + (f", {pruned} pruned" if args.prune else "") + "\n"
        f"  passages:  {summary.passages_added} encoded and written, {summary.passages_unchanged} unchanged, "
        f"{summary.passages_removed} removed\n"
        f"  store now holds {counts['documents']} documents, {counts['passages']} passages, "
        f"{counts['vectors']} vectors" + "".join(f"\n  {line}" for line in extra_lines)
    )
    return 0


def _add_in_commits(
    store: Any, documents: Sequence[Any], max_words: int, commit_documents: int, *, show_progress_bar: bool
) -> Any:
    """``add_documents`` in commits of ``commit_documents`` documents; the summaries added up."""
    from dataclasses import fields

    from rag_hier.store.records import WriteSummary

    total = {f.name: 0 for f in fields(WriteSummary)}
    encode = store.corpus_info.get("dense", True) is not False
    for start in range(0, max(len(documents), 1), commit_documents):
        with store.batch():
            part = store.add_documents(
                documents[start : start + commit_documents],
                max_passage_words=max_words,
                show_progress_bar=show_progress_bar,
                encode=encode,
            )
        for name in total:
            total[name] += getattr(part, name)
    return WriteSummary(**total)


def _default_aggregate(store: Any, requested: str | None) -> str:
    if requested:
        return requested
    return "doc" if store.corpus_info.get("format") == "beir" else "passage"


def _parse_filters(text: str | None) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(f"--filters is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise CliError("--filters nests lists or objects too deeply (at most 100 levels are allowed)") from exc
    if not isinstance(value, dict):
        raise CliError("--filters must be a JSON object")
    return value


def _search(store: Any, args: argparse.Namespace, queries: list[str], top_k: int, aggregate: Any) -> list[Any]:
    """One :class:`~rag_hier.retrieval.hit.QueryResult` per query, from ``--strategy`` and its flags."""
    from rag_hier.cli.strategies import run_strategy

    if top_k < 1:
        raise CliError(f"--top-k must be >= 1, got {top_k}")
    return run_strategy(store, args, queries, top_k, _parse_filters(args.filters), aggregate)


def cmd_search(args: argparse.Namespace) -> int:
    """``rag-hier search``."""
    from rag_hier.corpus.readers import read_queries
    from rag_hier.eval.trec import hits_to_run, write_run

    queries = read_queries(args.queries) if args.queries else None
    if queries is None and args.query is not None:
        bad = next((c for c in args.query if "\ud800" <= c <= "\udfff"), None)
        if bad is not None:  # bytes the shell passed that are not UTF-8 (Python keeps them as lone surrogates)
            byte = f" (byte 0x{ord(bad) - 0xDC00:02x})" if "\udc80" <= bad <= "\udcff" else ""
            raise CliError(f"--query is not valid UTF-8 text{byte}: pass the query in UTF-8")
    store = _open_store(args, read_only=True)
    try:
        aggregate = _default_aggregate(store, args.aggregate)
        if queries is None:
            (result,) = _search(store, args, [args.query], args.top_k, aggregate)
            hits = result.hits
            if args.output:
                write_run(hits_to_run(["query"], [hits], level=aggregate), args.output)
                return 0
            if not hits:
                print("no results")
            for h in hits:
                path = " > ".join(h.title_path)
                snippet = h.text if len(h.text) <= 200 else h.text[:197] + "..."
                shown = h.doc_id if aggregate == "doc" else h.passage_id
                print(f"{h.rank:>3}. {h.score:.4f}  {shown}  [{path}]\n     {snippet}")
            return 0
        if not queries:
            raise CliError(f"{args.queries} holds no queries")
        qids = list(queries)
        results = [r.hits for r in _search(store, args, [queries[q] for q in qids], args.top_k, aggregate)]
    finally:
        store.close()
    run = hits_to_run(qids, results, level=aggregate)
    if args.output:
        write_run(run, args.output)
        print(
            f"wrote {sum(len(r) for r in run.values())} results for {len(qids)} queries to {args.output}",
            file=sys.stderr,
        )
    else:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "run.trec"
            write_run(run, out)
            sys.stdout.write(out.read_text(encoding="utf-8"))
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    """``rag-hier eval`` (in :mod:`rag_hier.cli.evaluate`)."""
    from rag_hier.cli.evaluate import run_eval

    return run_eval(args, open_store=_open_store, search=_search, default_aggregate=_default_aggregate)


def cmd_compare(args: argparse.Namespace) -> int:
    """``rag-hier compare`` (in :mod:`rag_hier.cli.compare`)."""
    from rag_hier.cli.compare import run_compare

    return run_compare(args)


def cmd_migrate(args: argparse.Namespace) -> int:
    """``rag-hier migrate``."""
    from rag_hier.store.milvus.migrate import local_to_milvus, milvus_to_local

    src_uri, dst_uri = _is_uri(args.store), _is_uri(args.to)
    t0 = time.perf_counter()
    if not src_uri and dst_uri:
        target: Any = local_to_milvus(args.store, args.to, **_milvus_options())
    elif src_uri and not dst_uri:
        target = milvus_to_local(args.store, args.to, **_milvus_options())
    else:
        raise CliError("migrate copies between a store directory and a Milvus URI: give one of each")
    try:
        counts = target.info()["counts"]
        extensions = sorted(target.extensions)
    finally:
        target.close()
    print(
        f"copied {args.store} to {args.to} in {time.perf_counter() - t0:.1f}s: {counts['documents']} documents, "
        f"{counts['passages']} passages, {counts['vectors']} vectors, extensions: {', '.join(extensions) or 'none'}"
    )
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    """``rag-hier info``."""
    store = _open_location(args.store, read_only=True, verify=not args.no_verify)
    try:
        with store.reading():  # every figure from one generation (on Milvus: one read of its state)
            info = store.info()
    finally:
        store.close()
    if args.json:
        print(json.dumps(info, indent=2, sort_keys=True))
        return 0
    if info.get("backend") == "milvus":
        enc = info.get("encoder") or {}
        counts = info["counts"]
        milvus_index = info["indexes"]["dense"].get("milvus", {})
        print(f"store      {info['path']}  (Milvus, format v{info['format_version']}, {_generation(info)})")
        print(
            f"encoder    {enc.get('model', '(none: vectors come from outside)')}  dim={info.get('dimension')}"
            f"  normalized={enc.get('normalize_embeddings')}"
        )
        _print_model_source(enc)
        print(f"index      {milvus_index.get('index_type')} {milvus_index.get('params') or {}} (metric IP)")
        print(f"corpus     {info.get('corpus') or {}}")
        print(f"counts     {counts['documents']} documents, {counts['passages']} passages, {counts['vectors']} vectors")
        for name, desc in sorted(info.get("extensions_state", {}).items()):
            print(f"extension  {name}  {desc}")
        return 0
    enc = info.get("encoder") or {}
    counts = info["counts"]
    idx = info.get("index_state") or {"kind": info["indexes"]["dense"]["config"]["kind"], "ntotal": 0}
    print(f"store      {info['path']}  (format v{info['format_version']}, {_generation(info)})")
    no_model = (
        "(none: built with --no-dense: token or BM25 index only)"
        if (info.get("corpus") or {}).get("dense") is False
        else "(none: vectors come from outside)"
    )
    print(
        f"encoder    {enc.get('model', no_model)}  dim={info.get('dimension')}"
        f"  normalized={enc.get('normalize_embeddings')}"
    )
    if enc.get("stored"):
        tuned = enc.get("adopted") or {}
        line = f"model      kept in the store (sha256 {str(enc.get('sha256'))[:16]}…)"
        if isinstance(tuned.get("base"), float) and isinstance(tuned.get("candidate"), float):
            line += (
                f", tuned from {tuned.get('base_model')} by {tuned.get('method')}: dev {tuned.get('metric')} "
                f"{tuned['base']:.4f} -> {tuned['candidate']:.4f}"
            )
            if tuned.get("forced"):
                line += " (forced with --force: the adoption rule did not adopt it)"
        print(line)
    else:
        _print_model_source(enc)
    previous = info.get("encoder_previous")
    if previous:
        print(f"previous   {previous.get('model')}  (rag-hier tune --rollback returns to it)")
    original = info.get("encoder_original")
    if original and original.get("model") not in (enc.get("model"), (previous or {}).get("model")):
        print(f"original   {original.get('model')}  (rag-hier tune --rollback original returns to it)")
    print(f"index      {idx}")
    print(f"corpus     {info.get('corpus') or {}}")
    print(f"counts     {counts['documents']} documents, {counts['passages']} passages, {counts['vectors']} vectors")
    for name, f in sorted(info["files"].items()):
        print(f"file       {name}  {f['bytes']} bytes  sha256 {f['sha256'][:16]}…")
    return 0


GENERATION_NOTE = "its count of commits: each write batch and each model switch adds one"
"""What a store's generation counts, said where it is shown: a new local store is not at 1 (``rag-hier index``
commits at least three times: the empty store, the passages, the corpus settings)."""


def _generation(info: dict[str, Any]) -> str:
    """``generation N (what it counts)`` for ``rag-hier info``."""
    return f"generation {info['generation']}, {GENERATION_NOTE}"


def _print_model_source(enc: dict[str, Any]) -> None:
    """Where a store's model (outside the store) loads from, and whether its weights are the recorded ones."""
    if not enc.get("model"):
        return
    from rag_hier.encoders.identity import weights_digest

    recorded = enc.get("weights_sha256")
    directory, digest, _ = weights_digest(str(enc["model"]))  # reads the files; loads nothing
    where = f"loads from {directory}" if directory is not None else "loads by name (not on disk yet)"
    if not recorded:
        check = "no weights digest recorded: not checked"
    elif digest is None:
        check = f"weights sha256 {recorded[:16]}…, checked when they are on disk"
    elif digest == recorded:
        check = f"weights sha256 {recorded[:16]}…, as recorded"
    else:
        check = f"weights sha256 {digest[:16]}…, NOT the recorded {recorded[:16]}…: it will be refused"
    print(f"model      {where}; {check}")


def cmd_train(args: argparse.Namespace) -> int:
    """``rag-hier train <method>``: dispatch to the method's plugin."""
    func = getattr(args, "func", None)
    if func is None:  # pragma: no cover - argparse requires a method
        raise CliError("no training method given")
    return int(func(args))


def cmd_tune(args: argparse.Namespace) -> int:
    """``rag-hier tune``."""
    from rag_hier.cli.tune import run_tune

    return run_tune(args, open_store=_open_store)
