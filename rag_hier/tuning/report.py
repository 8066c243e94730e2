"""TuneReport: what a tuning run did and measured, as JSON, a console summary and Markdown with a small plot."""

from __future__ import annotations

import html
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["QUERY_MODEL_NOTE", "TuneReport"]


QUERY_MODEL_NOTE = (
    "queries: rag-hier's retrievers, and its embedders given the store (RagHierTextEmbedder(document_store=...), "
    "RagHierEmbedding(vector_store=...)), encode with the adopted model from now on; an embedder from outside "
    "rag-hier hands the store plain vectors it cannot check: it keeps its own model (docs/tuning.md)"
)
"""Said with every adoption: which query encoders follow the store, and which the store cannot see."""


@dataclass
class TuneReport:
    """The outcome of ``rag-hier tune`` / ``store.tune()``.

    Attributes:
        store: The store's location.
        method: The training method used.
        adopted: Whether the store now encodes with the candidate.
        reason: Why it was adopted or not, in one sentence.
        rule: The adoption rule.
        dry_run: A dry run (estimate only: nothing trained to the end, nothing adopted).
        train_queries: Judged queries trained on.
        dev_queries: Judged queries held back to decide.
        dev_query_ids: The ids of those queries (the dev part), in the order of the queries file.
        level: ``"doc"`` or ``"passage"``: what the judgements name.
        steps: Optimizer steps done (planned: ``planned_steps``).
        planned_steps: Steps the settings asked for.
        seconds: Wall time of each part (``train``, ``encode``, ``score``, ``adopt``, ``total``).
        estimate_seconds: The estimate printed before training (measured seconds per step x steps, plus
            the re-encoding of the passages).
        peak_memory_mb: Peak resident memory of the process.
        base: The base model's dev means, per metric.
        candidate: The candidate's dev means.
        difference: Per metric: ``delta`` (candidate − base), ``ci_low``, ``ci_high``, ``p_value``, ``wins``,
            ``losses``, ``ties``.
        generation: The store's generation after the run: its count of commits (each write batch and each model
            switch adds one), not of tunings.
        model: The model the store encodes with after the run.
        config: The settings.
        details: Method-specific facts (pairs, negative pools, ...).
        warnings: Warnings about the judgements (qrels hygiene) and the run.
        evaluation_only: A trainer's before/after evaluation, not a tuning run (nothing to adopt).
        dev_subsets: The decision metric's difference on dev queries about documents training saw and on the others.
        resolution: What the scored queries could resolve (:func:`rag_hier.tuning.workflow.resolution`): the
            smallest detectable gain, the judged queries the observed difference needs, and advice.

    """

    store: str
    method: str
    adopted: bool = False
    reason: str = ""
    rule: str = ""
    dry_run: bool = False
    train_queries: int = 0
    dev_queries: int = 0
    level: str = "passage"
    steps: int = 0
    planned_steps: int = 0
    seconds: dict[str, float] = field(default_factory=dict)
    estimate_seconds: float | None = None
    peak_memory_mb: float | None = None
    base: dict[str, float] = field(default_factory=dict)
    candidate: dict[str, float] = field(default_factory=dict)
    difference: dict[str, dict[str, float]] = field(default_factory=dict)
    generation: int | None = None
    model: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    evaluation_only: bool = False
    dev_subsets: dict[str, dict[str, float]] = field(default_factory=dict)
    resolution: dict[str, Any] = field(default_factory=dict)
    dev_query_ids: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return json.loads(json.dumps(asdict(self), default=str))

    def write_json(self, path: str | Path) -> None:
        """Write :meth:`to_dict` as JSON (to a temporary file renamed onto ``path``: a link there is replaced)."""
        from rag_hier.store.files import atomic_write_bytes

        atomic_write_bytes(Path(path), (json.dumps(self.to_dict(), indent=2) + "\n").encode("utf-8"))

    def summary(self) -> str:
        """A few lines for a terminal: base and candidate side by side, the difference, the verdict."""
        lines = []
        if self.base:
            width = max(len(m) for m in self.base)
            crossed = str(self.details.get("evaluation", "")).startswith("cross-fitted")
            kind = "held out" if self.evaluation_only else ("cross-fitted" if crossed else "dev")
            title = f"{kind} ({self.dev_queries} queries)"
            other = "  trained" if self.evaluation_only else "candidate"
            lines.append(f"{title:<{width + 2}}      base  {other}     delta  interval")
            for m, b in self.base.items():
                c = self.candidate.get(m)
                d = self.difference.get(m, {})
                cell = f"{c:9.4f}" if c is not None else f"{'-':>9}"
                diff = f"{d['delta']:+9.4f}  [{d['ci_low']:+.4f}, {d['ci_high']:+.4f}]" if d else ""
                lines.append(f"  {m:<{width}}  {b:9.4f}  {cell}  {diff}")
            key = self.config.get("metric")
            d = self.difference.get(str(key), {})
            if d:
                lines.append(f"  wins / losses / ties on {key}: {d['wins']:.0f} / {d['losses']:.0f} / {d['ties']:.0f}")
            for name, sub in self.dev_subsets.items():
                what = "about documents training saw" if name == "seen_documents" else "about other documents"
                lines.append(
                    f"  {key} on the {sub['queries']:.0f} {kind} queries {what}: {sub['delta']:+.4f} "
                    f"[{sub['ci_low']:+.4f}, {sub['ci_high']:+.4f}]"
                )
        if self.evaluation_only:
            lines.append(self.reason)
        else:
            lines.append(self._verdict("ADOPTED", "not adopted"))
        if self.dry_run:
            lines.append(self._estimate_line())
        if self.adopted:
            lines.append(QUERY_MODEL_NOTE)
        return "\n".join(lines)

    def _verdict(self, adopted: str, rejected: str) -> str:
        """``<verdict>: <reason>`` (a dry run's reason says it is one: not said twice)."""
        if self.dry_run:
            return self.reason if self.reason.startswith("dry run") else f"dry run: {self.reason}"
        return f"{adopted if self.adopted else rejected}: {self.reason}"

    def _estimate_line(self) -> str:
        """What a dry run is for: the estimate of the whole run, from the steps it measured."""
        if not self.estimate_seconds:
            return "estimate: none (no training step could be measured)"
        return (
            f"estimate: about {self.estimate_seconds / 60:.1f} min for the whole run ({self.planned_steps} steps, "
            f"encoding and scoring; {self.estimate_seconds:.0f} s, measured on this machine now)"
        )

    def to_markdown(self, plot: str | None = None) -> str:
        """A Markdown report (``plot``: the file name of :meth:`svg_plot`'s output, shown at the top)."""
        out = [f"# Tuning report: `{self.store}`", ""]
        out.append(self._verdict("**adopted**", "**not adopted**"))
        if self.adopted:
            out += ["", QUERY_MODEL_NOTE]
        out.append("")
        if plot:
            out += [f"![base vs candidate on the dev queries]({plot})", ""]
        out.append(f"Rule: {self.rule}")
        out.append("")
        out.append("| setting | value |")
        out.append("|---|---|")
        rows = {
            "method": self.method,
            "training queries / dev queries": f"{self.train_queries} / {self.dev_queries} ({self.level} level)",
            "evaluation": str(self.details.get("evaluation", "held out")),
            "steps (planned)": f"{self.steps} ({self.planned_steps})",
            "estimate before training": f"{self.estimate_seconds:.0f} s" if self.estimate_seconds else "-",
            "seconds": ", ".join(f"{k} {v:.1f}" for k, v in self.seconds.items()),
            "peak memory": f"{self.peak_memory_mb:.0f} MB" if self.peak_memory_mb else "-",
            "store generation after (its count of commits)": str(self.generation),
            "model after": f"`{self.model}`",
        }
        out += [f"| {k} | {v} |" for k, v in rows.items()]
        if self.base:
            out += ["", "| metric (dev) | base | candidate | delta | 95 % interval | p | wins / losses / ties |"]
            out.append("|---|---:|---:|---:|---|---:|---|")
            for m, b in self.base.items():
                c = self.candidate.get(m)
                d = self.difference.get(m)
                if d is None or c is None:
                    out.append(f"| {m} | {b:.4f} | - | - | - | - | - |")
                    continue
                out.append(
                    f"| {m} | {b:.4f} | {c:.4f} | {d['delta']:+.4f} | [{d['ci_low']:+.4f}, {d['ci_high']:+.4f}] "
                    f"| {d['p_value']:.3g} | {d['wins']:.0f} / {d['losses']:.0f} / {d['ties']:.0f} |"
                )
        for name, sub in self.dev_subsets.items():
            what = "about documents training saw" if name == "seen_documents" else "about other documents"
            out.append(
                f"\n{self.config.get('metric')} on the {sub['queries']:.0f} dev queries {what}: {sub['delta']:+.4f} "
                f"[{sub['ci_low']:+.4f}, {sub['ci_high']:+.4f}]"
            )
        if self.dev_query_ids:
            ids = ", ".join(f"`{q}`" for q in self.dev_query_ids)
            out += [
                "",
                f"Held back (the {len(self.dev_query_ids)} dev queries, never trained on before the decision): {ids}",
            ]
        if self.warnings:
            out += ["", "Warnings:", ""] + [f"- {w}" for w in self.warnings]
        return "\n".join(out) + "\n"

    def svg_plot(self) -> str:
        """A small bar chart (SVG) of base vs candidate per metric."""
        metrics = [m for m in self.base if m in self.candidate]
        bar, gap, group, height, left, top = 22, 6, 70, 160, 40, 20
        width = left + len(metrics) * (2 * bar + gap + group - 2 * bar) + 20
        parts = [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + top + 50}" '
            'font-family="sans-serif" font-size="11">',
            f'<line x1="{left}" y1="{top + height}" x2="{width - 10}" y2="{top + height}" stroke="#444"/>',
        ]
        for i, m in enumerate(metrics):
            x = left + 10 + i * (group + gap)
            for j, (value, color) in enumerate(((self.base[m], "#9aa5b1"), (self.candidate[m], "#2f7ed8"))):
                h = max(0.0, min(1.0, value)) * height
                parts.append(
                    f'<rect x="{x + j * (bar + 2)}" y="{top + height - h:.1f}" width="{bar}" height="{h:.1f}" '
                    f'fill="{color}"><title>{html.escape(m)}: {value:.4f}</title></rect>'
                )
                parts.append(
                    f'<text x="{x + j * (bar + 2) + bar / 2}" y="{top + height - h - 3:.1f}" '
                    f'text-anchor="middle" font-size="9">{value:.3f}</text>'
                )
            parts.append(f'<text x="{x + bar}" y="{top + height + 14}" text-anchor="middle">{html.escape(m)}</text>')
        parts.append(f'<rect x="{left}" y="{top + height + 26}" width="10" height="10" fill="#9aa5b1"/>')
        parts.append(f'<text x="{left + 14}" y="{top + height + 35}">base</text>')
        parts.append(f'<rect x="{left + 60}" y="{top + height + 26}" width="10" height="10" fill="#2f7ed8"/>')
        parts.append(f'<text x="{left + 74}" y="{top + height + 35}">candidate</text>')
        parts.append("</svg>")
        return "\n".join(parts) + "\n"
