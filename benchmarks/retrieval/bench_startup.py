"""How fast the command line starts: `rag-hier --version` and each `--help`, against `python -c pass`.

Every command runs in a fresh interpreter, the commands interleaved round after round (the machine is shared),
and each is reported as its median wall time and the ratio to the median of `python -c pass` of the same run,
with the number of modules it imported and whether NumPy was among them.

    python -m benchmarks.retrieval.bench_startup [--rounds 15] [--anchor-tree DIR]

``--anchor-tree``: also time a checkout of another version (its ``rag_hier`` first on ``PYTHONPATH``), the
two versions' commands interleaved in the same rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from rag_hier.cli._base import COMMAND_HELP
from rag_hier.cli._tables import TRAIN_METHODS

COMMANDS: dict[str, list[str]] = {
    "--version": ["--version"],
    "--help": ["--help"],
    **{f"{name} --help": [name, "--help"] for name in COMMAND_HELP},
    **{f"train {method} --help": ["train", method, "--help"] for method in TRAIN_METHODS},
}
"""Every sub-command's ``--help`` and every ``train`` method's (this checkout's list: the anchor runs the same)."""

NEUTRAL = "/"
"""The working directory of every run: not a checkout, so ``python -m rag_hier`` imports the version asked for."""

PROBE = (
    "import contextlib, io, json, sys\n"
    "from rag_hier.cli.main import main\n"
    "with contextlib.redirect_stdout(io.StringIO()):\n"
    "    try:\n        main(json.loads(sys.argv[1]))\n    except SystemExit:\n        pass\n"
    "print(json.dumps([len(sys.modules), 'numpy' in sys.modules]))\n"
)


def _env(tree: str | None) -> dict[str, str] | None:
    return None if tree is None else {**os.environ, "PYTHONPATH": tree}


def _modules(argv: list[str], tree: str | None) -> tuple[int, bool]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(argv)],
        capture_output=True,
        text=True,
        check=True,
        env=_env(tree),
        cwd=NEUTRAL,
    )
    count, numpy = json.loads(out.stdout.strip().splitlines()[-1])
    return int(count), bool(numpy)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--anchor-tree", default=None, help="a checkout of another version to time beside this one")
    ap.add_argument(
        "--commands",
        default=",".join(COMMANDS),
        help="the commands timed, comma-separated (e.g. --commands=--version; default: all)",
    )
    args = ap.parse_args(argv)
    commands = [c for c in args.commands.split(",") if c]
    if unknown := [c for c in commands if c not in COMMANDS]:
        ap.error(f"--commands: unknown {unknown}; known: {', '.join(COMMANDS)}")
    trees: list[tuple[str, str | None]] = [("this", None)]
    if args.anchor_tree:
        trees.append(("anchor", str(Path(args.anchor_tree).resolve())))
    runs: dict[tuple[str, str], tuple[list[str], str | None]] = {
        ("", "python -c pass"): ([sys.executable, "-c", "pass"], None)
    }
    for label, tree in trees:
        for name in commands:
            runs[(label, name)] = ([sys.executable, "-m", "rag_hier", *COMMANDS[name]], tree)
    times: dict[tuple[str, str], list[float]] = {key: [] for key in runs}
    for _ in range(args.rounds):
        for key, (cmd, tree) in runs.items():
            t0 = time.perf_counter()
            subprocess.run(
                cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=_env(tree), cwd=NEUTRAL
            )
            times[key].append(time.perf_counter() - t0)
    anchor = statistics.median(times[("", "python -c pass")])
    cache = "off (PYTHONDONTWRITEBYTECODE: rag_hier compiles at every start)" if sys.dont_write_bytecode else "on"
    print(f"# Python {sys.version.split()[0]}, {args.rounds} rounds, bytecode cache {cache}")
    print(f"{'version':7s} {'command':26s} {'median ms':>9s} {'x pass':>7s} {'modules':>8s} numpy")
    for (label, name), values in times.items():
        count, numpy = _modules(COMMANDS[name], runs[(label, name)][1]) if name in COMMANDS else (0, False)
        median = statistics.median(values)
        print(
            f"{label:7s} {name:26s} {median * 1000:9.1f} {median / anchor:7.2f} {count or '':>8} "
            f"{'yes' if numpy else 'no'}"
        )


if __name__ == "__main__":
    main()
