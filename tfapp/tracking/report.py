"""One self-contained HTML report of one or more runs (what tensorboard.dev used to share).

Everything is inline: charts are SVG drawn by matplotlib, images are data: URIs, there is
no script and no request to any other host, so the file opens from disk, from an e-mail
attachment or from a CI artifact. Per run: summary (status, final metrics, validation report), the
resolved config, metric curves (train vs validation per epoch, examples/s), the confusion
matrix, generator samples and the profile summary; with several runs (or a tuner search
directory) a comparison table and overlaid curves come first.
"""

from __future__ import annotations

import base64
import html
import io
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfapp.atomic import read_state, write_text
from tfapp.config import ConfigError
from tfapp.run_layout import RunLayout, is_worker_scratch
from tfapp.run_status import read_status
from tfapp.tracking import profiler

log = logging.getLogger("tfapp")

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
          "#17becf", "#7f7f7f", "#bcbd22")


@dataclass
class RunData:
    """What the report shows of one run directory."""

    path: Path
    name: str
    params: str = ""
    status: dict = field(default_factory=dict)
    # run ("train"/"validation") -> tag (without "epoch_") -> [(step, value)]
    scalars: dict[str, dict[str, list[tuple[int, float]]]] = field(default_factory=dict)
    samples: list[tuple[int, str]] = field(default_factory=list)
    report: dict | None = None
    test_report: dict | None = None
    # split -> the exported model's confusion matrix (PNG), as in its report
    confusion_png: dict[str, bytes] = field(default_factory=dict)
    profile: str = ""
    wandb: str = ""

    @property
    def metrics(self) -> dict[str, float]:
        return {k: float(v) for k, v in (self.status.get("metrics") or {}).items()
                if isinstance(v, int | float)}


def find_runs(paths: list[str | Path]) -> list[Path]:
    """Run directories (folders holding params.yaml) at or under each path, in order."""
    runs: list[Path] = []
    for p in map(Path, paths):
        if not p.is_dir():
            raise ConfigError(f"'{p}' is not a directory; give run directories "
                              "(output_dir/name) or a tuner search directory")
        params = RunLayout(p).params.name
        found = [p] if RunLayout(p).params.is_file() else sorted(
            q.parent for q in p.rglob(params) if not is_worker_scratch(q))
        if not found:
            raise ConfigError(f"'{p}' holds no tfapp run (no params.yaml at or under it)")
        runs += [r for r in found if r not in runs]
    return runs


def _label(run: Path, runs: list[Path]) -> str:
    """Shortest distinguishing name: the folder, with its parent for tuner trials
    (``trial_N`` alone for a trial's only run, ``run_0``)."""
    names = [r.name for r in runs]
    if run.parent.name.startswith("trial_") and run.name == "run_0" and not any(
            r.parent == run.parent and r != run for r in runs):
        return run.parent.name
    return run.name if names.count(run.name) == 1 else f"{run.parent.name}/{run.name}"


@dataclass
class SearchData:
    """A tuner search folder: how it searched and every trial's values and score."""

    path: Path
    name: str
    tuner: str
    objective: str
    direction: str  # max | min
    trials: list[dict]  # results.json's rows, best first
    best_params: Path | None = None
    link: str = ""  # best_params.yaml relative to the report

    @property
    def keys(self) -> list[str]:
        return sorted({k for t in self.trials for k in t.get("values", {})})

    def ranked(self) -> list[dict]:
        """Scored trials best first (the direction's way), then the others."""
        scored = [t for t in self.trials if isinstance(t.get("objective"), int | float)]
        scored.sort(key=lambda t: t["objective"], reverse=self.direction == "max")
        return scored + [t for t in self.trials if t not in scored]


def load_search(path: Path) -> SearchData | None:
    """The search in ``path`` (``tfapp.tune``'s results.json and search.yaml), or None."""
    results = read_state(path / "results.json", "search results")
    if not results or "trials" not in results:
        return None
    import yaml

    spec = path / "search.yaml"
    config = (yaml.safe_load(spec.read_text()) or {}) if spec.is_file() else {}
    best = path / "best_params.yaml"
    return SearchData(path=path, name=str(config.get("name") or path.name),
                      tuner=str((config.get("tune") or {}).get("tuner", "?")),
                      objective=str(results.get("objective", "?")),
                      direction=str(results.get("direction", "max")),
                      trials=list(results["trials"]),
                      best_params=best if best.is_file() else None)


def load_run(run: Path, label: str, with_profile: bool = True) -> RunData:
    layout = RunLayout(run)
    data = RunData(path=run, name=label, params=layout.params.read_text())
    data.status = read_status(run)
    data.report = read_state(layout.validation_report, "validation report")
    data.test_report = read_state(layout.test_report, "test report")
    for split in ("validation", "test"):
        if layout.confusion_matrix_for(split).is_file():
            data.confusion_png[split] = layout.confusion_matrix_for(split).read_bytes()
    logs = layout.logs
    if logs.is_dir():
        data.scalars, data.samples = _read_events(logs)
    if with_profile:
        data.profile = _profile_text(run)
    offline = sorted(run.glob("wandb/offline-run-*"))
    if offline:
        data.wandb = f"offline W&B run; upload with: wandb sync {offline[-1]}"
    return data


def _read_events(logs: Path):
    from tensorboard.backend.event_processing import event_accumulator as ea
    from tensorboard.util import tensor_util

    logging.getLogger("tensorboard").setLevel(logging.WARNING)  # per-file watcher lines
    scalars: dict[str, dict[str, list[tuple[int, float]]]] = {}
    samples: list[tuple[int, str]] = []
    for sub in ("train", "validation", "test", "samples"):
        if not (logs / sub).is_dir():
            continue
        acc = ea.EventAccumulator(str(logs / sub), size_guidance={ea.TENSORS: 0})
        acc.Reload()
        for tag in acc.Tags().get("tensors", []):
            events = acc.Tensors(tag)
            if tag == "generated_text":
                samples = [(e.step, _text(tensor_util.make_ndarray(e.tensor_proto)))
                           for e in events]
            elif tag.startswith("epoch_"):
                values = [(e.step, float(tensor_util.make_ndarray(e.tensor_proto)))
                          for e in events]
                scalars.setdefault(sub, {})[tag.removeprefix("epoch_")] = values
    return scalars, samples


def _text(value) -> str:
    item = value.reshape(-1)[0] if getattr(value, "ndim", 0) else value
    item = item.item() if hasattr(item, "item") else item  # numpy bytes -> bytes
    return item.decode("utf-8") if isinstance(item, bytes) else str(item)


def _markdown_table(text: str) -> list[list[str]]:
    """Rows of a Markdown table (what TextSamples writes); the |---| line is dropped."""
    rows = [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in text.splitlines() if line.strip().startswith("|")]
    return [r for r in rows if not all(set(c) <= set("-: ") for c in r)]


def _profile_text(run: Path) -> str:

    sessions = profiler.find_sessions(run)
    if not sessions:
        return ""
    try:
        return profiler.format_summary(profiler.summarize(sessions[-1], top=8))
    except ConfigError as err:  # an unreadable capture must not sink the whole report
        return f"(profile capture {sessions[-1]} could not be read: {err})"


# --------------------------------------------------------------------------- charts


def svg_chart(title: str, series: list[tuple[str, list[tuple[int, float]]]],
              xlabel: str = "epoch", width: int = 420, height: int = 260) -> str:
    """A line chart drawn by matplotlib, as inline SVG: one line with markers per named
    series, round ticks, a legend; ``width`` x ``height`` CSS pixels."""
    # Colours follow the position in ``series`` (the same run keeps its colour in every
    # chart); empty series are skipped.
    series_k = [(k, n, pts) for k, (n, pts) in enumerate(series) if pts]
    if not series_k:
        return ""
    import matplotlib
    from matplotlib.figure import Figure  # no pyplot: no global figure state or backend
    from matplotlib.ticker import MaxNLocator

    # Text as <text> (not glyph paths): selectable, smaller, readable by tests; a fixed
    # hash salt keeps the ids (hence the file) the same for the same data.
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "tfapp",
                                "font.size": 8, "axes.formatter.useoffset": False}):
        fig = Figure(figsize=(width / 96, height / 96))  # SVG points are 1/72 inch
        ax = fig.add_subplot()
        for k, name, pts in series_k:
            ax.plot(*zip(*pts, strict=True), marker="o", markersize=4 if len(pts) > 1 else 7,
                    linewidth=1.5,
                    color=COLORS[k % len(COLORS)], label=name, gid=f"series-{k}")
        ax.set_title(title, fontsize=9, fontweight="bold")
        ax.set_xlabel(xlabel)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        xs = {x for _, _, pts in series_k for x, _ in pts}
        if len(xs) == 1:  # one epoch: the point in the middle of whole-number ticks, not
            (x,) = xs     # matplotlib's +-5% around it (0.945 ... 1.05)
            ax.set_xlim(x - 1, x + 1)
            ax.set_xticks([x - 1, x, x + 1])
        ax.grid(color="#eeeeee")
        ax.legend(frameon=False)
        fig.tight_layout(pad=0.4)
        buf = io.StringIO()
        fig.savefig(buf, format="svg",
                    metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]  # drop the XML prolog and its DTD URL: inline in HTML
    return svg.replace("<svg ", f'<svg class="chart" role="img" '
                       f'aria-label="{html.escape(title)}" ', 1)


def svg_scatter(title: str, points: list[tuple[Any, float]], best: tuple[Any, float] | None,
                xlabel: str, ylabel: str, width: int = 340, height: int = 240) -> str:
    """Score against one hyperparameter: a dot per trial, the best one ringed. Numbers
    spanning 100x or more are drawn as log10 (round ticks); others (choices) as categories."""
    if not points:
        return ""
    import matplotlib
    import numpy as np
    from matplotlib.figure import Figure

    xs = [x for x, _ in points]
    numeric = all(isinstance(x, int | float) and not isinstance(x, bool) for x in xs)
    log10 = numeric and min(xs) > 0 and max(xs) / min(xs) >= 100
    categories = [] if numeric else sorted({str(x) for x in xs})

    def place(x):
        if not numeric:
            return categories.index(str(x))
        return float(np.log10(x)) if log10 else float(x)

    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "tfapp",
                                "font.size": 8, "axes.formatter.useoffset": False}):
        fig = Figure(figsize=(width / 96, height / 96))
        ax = fig.add_subplot()
        ax.scatter([place(x) for x in xs], [y for _, y in points], s=40, color=COLORS[0],
                   gid="trials")
        if best is not None:
            ax.scatter([place(best[0])], [best[1]], s=120, facecolors="none",
                       edgecolors=COLORS[1], linewidths=2, label="best", gid="best")
            ax.legend(frameon=False)
        if categories:
            ax.set_xticks(range(len(categories)), categories)
            ax.set_xlim(-0.5, len(categories) - 0.5)
        ax.set_title(title, fontsize=9, fontweight="bold")
        ax.set_xlabel(f"log10({xlabel})" if log10 else xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(color="#eeeeee")
        fig.tight_layout(pad=0.4)
        buf = io.StringIO()
        fig.savefig(buf, format="svg",
                    metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]
    return svg.replace("<svg ", f'<svg class="chart" role="img" '
                       f'aria-label="{html.escape(title)}" ', 1)


def search_section(search: SearchData, labels: dict[str, str]) -> str:
    """The search: tuner, objective and direction, the trials ranked with their values
    (best marked), score against each hyperparameter, the link to best_params.yaml."""
    ranked = search.ranked()
    keys = search.keys
    best = ranked[0] if ranked and isinstance(ranked[0].get("objective"), int | float) else None
    done = sum(1 for t in ranked if isinstance(t.get("objective"), int | float))
    parts = [f"<h2>Search {html.escape(search.name)}</h2><p>tuner <b>"
             f"{html.escape(search.tuner)}</b>, objective <b>{html.escape(search.objective)}"
             f"</b> ({'higher' if search.direction == 'max' else 'lower'} is better: "
             f"{html.escape(search.direction)}), {len(ranked)} trials, {done} scored"]
    if best is not None:
        parts.append(f"; best: trial_{html.escape(str(best['trial']))}, "
                     f"{html.escape(search.objective)} {best['objective']:.4f}")
    if search.link:
        parts.append(f" &middot; best config: <a href='{html.escape(search.link)}'>"
                     "best_params.yaml</a> (train it with <code>python -m tfapp.train "
                     "--config best_params.yaml</code>)")
    parts.append("</p>")
    head = ["", "rank", "trial", "status", f"{search.objective} ({search.direction})",
            *keys, "seconds"]
    rows = []
    for rank, t in enumerate(ranked, 1):
        score = t.get("objective")
        mark = "&#9733; best" if t is best else ""
        cells = [mark, str(rank), html.escape(labels.get(str(t["trial"]),
                                                         f"trial_{t['trial']}")),
                 html.escape(str(t.get("status", "?"))),
                 f"{score:.4f}" if isinstance(score, int | float) else "-",
                 *(html.escape(_value(t.get("values", {}).get(k))) for k in keys),
                 f"{t['seconds']:.0f}" if isinstance(t.get("seconds"), int | float) else "-"]
        style = " class='best'" if t is best else ""
        rows.append(f"<tr{style}>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    parts.append("<div style='overflow-x:auto'><table class='trials'><tr>"
                 + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"
                 + "".join(rows) + "</table></div>")
    charts = []
    for key in keys:
        points = [(t["values"][key], float(t["objective"])) for t in ranked
                  if isinstance(t.get("objective"), int | float) and key in t.get("values", {})]
        charts.append(svg_scatter(
            f"{search.objective} vs {key}", points,
            (best["values"][key], float(best["objective"]))
            if best is not None and key in best.get("values", {}) else None,
            xlabel=key, ylabel=search.objective))
    charts = [c for c in charts if c]
    if charts:
        parts.append("<div class='charts'>" + "".join(charts) + "</div>")
    return "".join(parts)


def _value(v: Any) -> str:
    if v is None:
        return "-"
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _epoch_axis(points: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """Keras writes epoch scalars at step = epoch index; show epochs from 1."""
    return [(s + 1, v) for s, v in points]


def run_charts(run: RunData) -> list[str]:
    train, val = run.scalars.get("train", {}), run.scalars.get("validation", {})
    test = run.scalars.get("test", {})  # one point: the exported model, at its epoch
    charts = []
    for tag in sorted(set(train) | set(val)):
        if tag in ("examples_per_second", "step_time_ms", "learning_rate", "steps_per_second"):
            continue
        charts.append(svg_chart(tag, [("train", _epoch_axis(train.get(tag, []))),
                                      ("validation", _epoch_axis(val.get(tag, []))),
                                      ("test (exported model)",
                                       _epoch_axis(test.get(tag, [])))]))
    for tag in ("examples_per_second", "learning_rate"):
        if tag in train:
            charts.append(svg_chart(tag.replace("_", " "), [("train",
                                                              _epoch_axis(train[tag]))]))
    return [c for c in charts if c]


def comparison_charts(runs: list[RunData]) -> list[str]:
    """Validation curves (else train) of every run, one chart per metric."""
    tags = sorted({t for r in runs for t in r.scalars.get("validation", {})})
    charts = [svg_chart(f"validation {tag}",
                        [(r.name, _epoch_axis(r.scalars.get("validation", {}).get(tag, [])))
                         for r in runs]) for tag in tags]
    return [c for c in charts if c]


# --------------------------------------------------------------------------- HTML

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1180px;color:#222}
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ddd;padding-bottom:4px;
margin-top:32px}h3{font-size:15px}table{border-collapse:collapse;margin:8px 0}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}th{background:#f5f5f5}
td:first-child,th:first-child{text-align:left}pre{background:#f7f7f7;padding:8px;
overflow:auto;font-size:12px}.charts{display:flex;flex-wrap:wrap;gap:10px}
svg.chart{background:#fff;border:1px solid #e3e3e3}.muted{color:#777}
tr.best td{background:#fff4d6;font-weight:bold}
figure{margin:0;display:flex;flex-direction:column;align-items:center}
figure img{display:block}figcaption{margin-top:2px;font-size:13px;font-weight:bold}
"""


def _table(header: list[str], rows: list[list[Any]]) -> str:
    def cell(v: Any) -> str:
        return f"{v:.4f}" if isinstance(v, float) else html.escape(str(v))
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in row) + "</tr>"
                   for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def render(runs: list[RunData], title: str = "tfapp runs",
           searches: list[SearchData] | None = None) -> str:
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
             f"</title><style>{CSS}</style></head><body><h1>{html.escape(title)}</h1>"]
    for search in searches or []:
        labels = {r.path.parent.name.removeprefix("trial_"): r.name for r in runs
                  if r.path.parent.parent == search.path}
        parts.append(search_section(search, labels))
    if len(runs) > 1:
        keys = sorted({k for r in runs for k in r.metrics})
        parts.append("<h2>Comparison</h2>")
        parts.append("<div style='overflow-x:auto'>" + _table(
            ["run", "state"] + keys, [[r.name, r.status.get("state", "?")]
                                      + [r.metrics.get(k, "") for k in keys] for r in runs])
            + "</div>")
        parts.append('<div class="charts">' + "".join(comparison_charts(runs)) + "</div>")
    for r in runs:
        parts.append(f"<h2 id='{html.escape(r.name)}'>{html.escape(r.name)}</h2>")
        parts.append(f"<p class='muted'>{html.escape(str(r.path))} &middot; state "
                     f"{html.escape(str(r.status.get('state', '?')))} &middot; "
                     f"{html.escape(str(r.status.get('time', '')))}</p>")
        if r.status.get("error"):  # failed, interrupted or died: why, in the run's words
            parts.append(f"<p>{html.escape(str(r.status['error']))}</p>")
        if r.wandb:
            parts.append(f"<p class='muted'>{html.escape(r.wandb)}</p>")
        if r.metrics:
            parts.append(_table(["metric", "final"], [[k, v] for k, v in r.metrics.items()]))
        charts = run_charts(r)
        if charts:
            parts.append("<h3>Curves</h3><div class='charts'>" + "".join(charts) + "</div>")
        for title, report in (("Validation report", r.report), ("Test report", r.test_report)):
            if report:
                # a classifier's report has per_class; a tagger's (task ner) per_type
                per_class = report.get("per_class") or report.get("per_type", {})
                totals = ", ".join(f"{k} {report[k]:.4f}" for k in (
                    "accuracy", "macro_f1", "auc", "precision", "recall", "f1", "token_accuracy")
                    if isinstance(report.get(k), int | float))
                count = (f"{report['examples']} examples" if "examples" in report else
                         f"{report.get('sentences', '?')} sentences")
                auc = (f"<br><span class='muted'>auc: {html.escape(report['auc_method'])}; "
                       "the curves' auc is Keras's approximation over 200 thresholds, so the "
                       "two differ</span>" if report.get("auc_method") else "")
                default = report.get("default_mode") or {}
                mode = (f"<br><span class='muted'>entities: {html.escape(report['mode'])}; "
                        f"seqeval's default mode (Hugging Face run_ner's): f1 "
                        f"{default['f1']:.4f}</span>"
                        if report.get("mode") and isinstance(default.get("f1"), int | float)
                        else "")
                parts.append(f"<h3>{title} (exported model)</h3><p>{html.escape(totals)} "
                             f"({count}){auc}{mode}</p>" + _table(
                                 ["entity" if "per_type" in report else "class", "precision",
                                  "recall", "f1", "support"],
                                 [[c, m["precision"], m["recall"], m["f1"], m["support"]]
                                  for c, m in per_class.items()]))
        if r.confusion_png:
            parts.append("<h3>Confusion matrices (exported model, as in the reports)</h3>"
                         "<div class='charts'>" + "".join(
                             f"<figure><img alt='{split} confusion matrix' src='data:image/png;"
                             f"base64,{base64.b64encode(png).decode()}'><figcaption>{split}"
                             "</figcaption></figure>" for split, png in r.confusion_png.items())
                         + "</div>")
        if r.samples:
            step, text = r.samples[-1]
            rows = _markdown_table(text)
            body = _table(rows[0], rows[1:]) if len(rows) > 1 else \
                f"<pre>{html.escape(text)}</pre>"
            parts.append(f"<h3>Generated samples (epoch {step})</h3>{body}")
        if r.profile:
            parts.append(f"<h3>Profile</h3><pre>{html.escape(r.profile)}</pre>")
        parts.append(f"<details><summary>config (params.yaml)</summary><pre>"
                     f"{html.escape(r.params)}</pre></details>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(paths: list[str | Path], out: str | Path, with_profile: bool = True) -> Path:
    """Build the report of the runs at/under ``paths`` into ``out`` (written atomically);
    a tuner search folder among them gets its search section and names the report."""
    runs = find_runs(paths)
    data = [load_run(r, _label(r, runs), with_profile) for r in runs]
    searches = [s for s in (load_search(Path(p)) for p in paths) if s is not None]
    for search in searches:
        if search.best_params is not None:
            search.link = os.path.relpath(search.best_params.resolve(),
                                          Path(out).resolve().parent)
    if len(searches) == 1 and len(paths) == 1:
        s = searches[0]
        title = f"tfapp search {s.name}: {s.tuner}, {s.objective} ({s.direction})"
    else:
        title = "tfapp: " + ", ".join(d.name for d in data[:4]) + (
            " ..." if len(data) > 4 else "")
    return write_text(out, render(data, title, searches))
