"""`agent replay --report DIR`: results.json, report.md and matplotlib plots (Agg backend).

results.json          the replay's result dict (`opd.replay.summary.summarise`)
error_timeline.png    prediction error over the run, the replayed threshold, the switch points
horizon_errors.png    histogram of the prediction error per horizon
gates.png             would-have-intervened rate against each counterfactual gate's mean threshold
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from opd.replay.bags.reader import dumps
from policies.files import write_atomic

PLOTS = ("error_timeline.png", "horizon_errors.png", "gates.png")


def write_report(result: dict[str, Any], timeline: dict[str, Any], out: str | Path) -> Path:
    """Write the report directory; returns report.md."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "results.json", dumps(result) + "\n")

    fig, ax = plt.subplots(figsize=(10, 3.5))
    t, err = timeline["t"], timeline["error"]
    ax.plot(t, err, lw=0.8, label="prediction error")
    ax.plot(t, timeline["threshold"], lw=1.0, ls="--", label="threshold")
    switch = np.flatnonzero(np.diff(timeline["teacher"].astype(int)) != 0) + 1
    for i in switch:
        ax.axvline(t[i], color="red" if timeline["teacher"][i] else "green", lw=0.6, alpha=0.6)
    ax.set(xlabel="time since the first decision, s", ylabel="error, teacher-state stds",
           title="prediction error, threshold, switches (red: to teacher, green: to student)")  # fmt: skip
    ax.legend(loc="upper right")
    _save(fig, out / PLOTS[0])

    fig, ax = plt.subplots(figsize=(7, 3.5))
    for h, e in result["prediction_error"].items():
        hist = e.get("histogram")
        if hist:
            edges = np.array(hist["edges"])
            ax.stairs(hist["counts"], edges, label=f"{h}: mean {e['mean']:.3f}")
    ax.set(xlabel="RMS error, teacher-state stds", ylabel="frames", title="prediction error per horizon")
    ax.legend()
    _save(fig, out / PLOTS[1])

    fig, ax = plt.subplots(figsize=(7, 3.5))
    for g in result["gates"][1:]:
        if g["teacher_rate"] is not None and g.get("threshold_mean") is not None:
            ax.scatter(g["threshold_mean"], g["teacher_rate"])
            ax.annotate(g["name"], (g["threshold_mean"], g["teacher_rate"]), fontsize=7)
    ax.set(xlabel="mean threshold, stds", ylabel="would-have-intervened rate", title="counterfactual gates")
    _save(fig, out / PLOTS[2])

    md = out / "report.md"
    write_atomic(md, markdown(result))
    return md


def _save(fig: Any, path: Path) -> None:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def markdown(r: dict[str, Any]) -> str:
    bag, live = r["bag"], r["live_match"]
    lines = [
        "# Offline OPD replay",
        "",
        f"Bag `{bag['path']}` ({bag['duration_s']:.1f} s), artifact `{r['artifact']['path']}` "
        f"({r['artifact']['manifest_sha256'][:12]}), mode {r['mode']}; {r['decisions']} decisions on "
        f"{r['frames']['built']} frames.",
        "",
    ]
    if r["missing_topics"]:
        absent = ", ".join(f"{role} (`{topic}`)" for role, topic in r["missing_topics"].items())
        lines += [f"Not in the bag: {absent}.", ""]
    if live["compared"]:
        lines += [f"Live decisions reproduced: gate {live['gate_equal']}/{live['compared']}, executed "
                  f"actions {live['actions_equal']}/{live['actions_compared']}.", ""]  # fmt: skip
    lines += ["## Gates (counterfactual: same evidence, recorded path)", "",
              "| gate | teacher rate | switches/min | mean threshold |", "|---|---|---|---|"]  # fmt: skip
    for g in r["gates"]:
        th = g.get("threshold_mean")
        lines.append(f"| {g['name']} | {_pct(g['teacher_rate'])} | {g['switches_per_min']:.1f} | "
                     f"{'-' if th is None else f'{th:.3f}'} |")  # fmt: skip
    lines += ["", "## Prediction error per horizon (teacher-state stds)", "",
              "| horizon | n | mean | p50 | p90 |", "|---|---|---|---|---|"]  # fmt: skip
    for h, e in r["prediction_error"].items():
        if e.get("n"):
            lines.append(f"| {h} | {e['n']} | {e['mean']:.3f} | {e['p50']:.3f} | {e['p90']:.3f} |")
    a = r["agreement"]
    if a.get("pairs"):
        lines += [
            "",
            f"Student/teacher agreement over {a['pairs']} paired frames: skill "
            f"{_pct(a['skill_accuracy'])}, parameter error {a['param_abs_error_mean'] or 0:.3f}.",
        ]
    lines += ["", "## Topics", "",
              "| topic | messages | rate Hz | latency p50/p99 ms | gaps | missing | duplicates | backwards |",
              "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for name, s in bag["topics"].items():
        lat = s.get("latency_ms", {})
        lines.append(f"| {name} | {s['messages']} | {s.get('rate_hz', '-')} | {lat.get('p50', '-')}/"
                     f"{lat.get('p99', '-')} | {s.get('gaps', 0)} | {s.get('missing', 0)} | "
                     f"{s.get('duplicates', 0)} | {s.get('backwards', 0)} |")  # fmt: skip
    if r["paired_latency_ms"]:
        lines += ["", "## Paired streams (ms)", "", "| pair | p50 | p99 | n |", "|---|---|---|---|"]
        for name, v in r["paired_latency_ms"].items():
            lines.append(f"| {name} | {v['p50']} | {v['p99']} | {v['n']} |")
    if r["skipped"]:
        lines += ["", "## Skipped", "", "| topic | reason | count | first s | last s | first detail |",
                  "|---|---|---|---|---|---|"]  # fmt: skip
        for s in r["skipped"]:
            lines.append(f"| {s['topic']} | {s['reason']} | {s['count']} | {s['first_s']:.3f} | "
                         f"{s['last_s']:.3f} | {s['detail'][:80]} |")  # fmt: skip
    lines += ["", *(f"![{p}]({p})" for p in PLOTS), ""]
    return "\n".join(lines)
