"""The transfer benchmark's report directory: results.json, report.md and matplotlib plots (Agg backend).

Files (each written atomically: a temporary file, then rename):
    results.json      the report dict of `opd.benchmark.transfer.build_report`
    report.md         tables of every figure, the targets with pass/fail, the command and the config
    success.png       success rate with 95% intervals per method, the teacher as a line (with several
                      training seeds: the mean over runs with its t interval, each run as a dot)
    training.png      teacher-executed share of decisions and the gate threshold over training
    pred_error.png    the predictor's error per horizon over training
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import yaml

from opd.benchmark.transfer import RIVALS, last_share, points
from opd.runs import write_json
from policies.files import write_atomic

PLOTS = ("success.png", "training.png", "pred_error.png")
COLORS = {
    "sim_only": "tab:gray",
    "sim_only_dr": "tab:brown",
    "dagger": "tab:orange",
    "novelty": "tab:green",
    "opd": "tab:blue",
    "opd_novelty": "tab:purple",
}
TEACHER_COLOR = "tab:red"


def write_report(report: dict[str, Any], histories: dict[str, list[dict]], out_dir: Path) -> Path:
    """Write results.json, report.md and the plots into `out_dir`; return report.md's path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(out_dir / "results.json", report)
    plot_success(report, out_dir / "success.png")
    plot_training(histories, out_dir / "training.png")
    plot_pred_error(histories, out_dir / "pred_error.png")
    write_atomic(out_dir / "report.md", markdown(report))
    return out_dir / "report.md"


def pct(value: float | None, digits: int = 1) -> str:
    """A fraction as a percentage; n/a for None."""
    return "n/a" if value is None else f"{value:.{digits}%}"


def ci(bounds: list[float]) -> str:
    """A 95% interval as percentages."""
    return f"{bounds[0]:.1%}-{bounds[1]:.1%}"


def duration(seconds: float | None) -> str:
    """Seconds in the unit that reads best."""
    if seconds is None:
        return "n/a"
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def number(value: float | None, fmt: str = ",") -> str:
    """A number, or n/a for None."""
    return "n/a" if value is None else format(value, fmt)


def target_value(row: dict[str, Any]) -> str:
    """A target row's measured value: a difference of success rates in points (goal "> rival"), otherwise
    a percentage."""
    if row["value"] is None:
        return "n/a"
    return f"{row['value'] * 100:+.1f} points" if row["goal"].startswith("> rival") else pct(row["value"])


def _gap_split_lines(split: dict[str, Any] | None) -> list[str]:
    """The Derived section's lines on the gap's split (`opd.benchmark.transfer.gap_split`)."""
    if split is None:
        return ["- Gap split: n/a (no clean-sim evaluation of the sim-only student and the teacher)."]
    line = (
        f"- Gap split (the same seeds in the clean sim): the sim-only student succeeds on "
        f"{pct(split['sim_only_clean'])} there, the teacher on {pct(split['teacher_clean'])}. The proxy "
        f"costs the sim-only student {split['transfer'] * 100:+.1f} points (the transfer gap, what adapting "
        f"on the proxy can win back); the teacher leads it by {split['imitation'] * 100:+.1f} points even in "
        "the clean sim (the imitation gap)."
    )
    if split["transfer"] <= 0:
        return [line + " With no transfer gap, adapting has nothing to win back."]
    won = ", ".join(f"{m} {pct(v)}" for m, v in split["transfer_won_back"].items())
    line += f" Share of the transfer gap won back on the proxy ((method - sim_only) / transfer): {won}."
    beyond = [m for m, v in split["transfer_won_back"].items() if v is not None and v > 1]
    if beyond:  # the share then says more about sim_only's own training than about transfer
        line += (
            f" Over 100% ({', '.join(beyond)}): the method ends above the sim-only student's own clean-sim "
            "figure, so not all of its lead over sim_only is transfer won back."
        )
    return [line]


def markdown(report: dict[str, Any]) -> str:
    """report.md: what was run, the results table, derived figures, targets, prediction error, config."""
    cfg, train = report["config"]["transfer"], report["config"]["train"]
    methods, teacher, extra = report["methods"], report["teacher"], report["derived"]
    runs = report.get("over_runs")
    first = cfg["seeds"][0]
    if runs is None:
        intervals = (
            "They are for one training run per method and leave out how far retraining moves a student "
            "(docs/opd_experiments.md measures it), so differences of a few points do not rank methods."
        )
    else:
        intervals = (
            f"The whole pipeline was trained {len(runs['seeds'])} times, once per training seed: the "
            "figures over runs have 95% t intervals over those runs, which include how far retraining "
            f"moves a student; the tables of seed {first}'s run below have Wilson intervals over its "
            "episodes only."
        )
    lines = [
        "# Sim-to-real transfer benchmark",
        "",
        f"Command: `{report['command']}`",
        "",
        f"Each student acts alone on the real-robot proxy (`{train['proxy_config']}` over "
        f"`{train['sim_config']}`) for {cfg['episodes']} held-out episodes (seeds {report['eval_seed']} "
        f"+ i), with 95% Wilson intervals over those episodes. {intervals} Every method trained for "
        f"{train['total_steps']:,} decisions (one teacher label per student frame: the same label budget), "
        f"training seed{'s' if len(cfg['seeds']) > 1 else ''} {', '.join(map(str, cfg['seeds']))}, from "
        f"`{cfg['train_config']}`.",
    ]
    start = report.get("pretrain")
    if start is not None:
        dr = (
            f" sim_only_dr in the randomised sim (`{train['dr_config']}`),"
            if "sim_only_dr" in methods
            else ""
        )
        lines[-1] += (
            " Every method started from one student trained in the clean sim"
            f" (`{cfg['pretrain']['train_config']}`, {start['decisions']:,} decisions, the `pretrained` row):"
            f" sim_only went on in the clean sim,{dr} the others adapted on the proxy."
        )
    if runs is not None:
        lines += _over_runs_lines(runs, teacher)
        lines += ["", f"## The run with training seed {first}"]
    lines += [
        "",
        "| policy | success | 95% CI | episodes | labels | teacher decisions | teacher share "
        "| teacher share, last 20% | switches/min | training wall clock |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    if start is not None:
        lines.append(
            f"| pretrained | {pct(start['success_rate'])} | {ci(start['ci95'])} | {start['episodes']} "
            f"| {number(start['labels'])} | - | 0% | 0% | 0 | {duration(start['wall_clock_s'])} |"
        )
    for name, m in methods.items():
        switches = number(m["switches_per_min"], ".2f")
        lines.append(
            f"| {name} | {pct(m['success_rate'])} | {ci(m['ci95'])} | {m['episodes']} "
            f"| {number(m['labels'])} | {number(m['teacher_decisions'])} | {pct(m['intervention_rate'])} "
            f"| {pct(m['intervention_rate_last20'])} | {switches} | {duration(m['wall_clock_s'])} |"
        )
    lines.append(
        f"| teacher | {pct(teacher['success_rate'])} | {ci(teacher['ci95'])} | {teacher['episodes']} "
        "| - | - | 100% | - | - | - |"
    )
    lines += ["", "## Derived" + ("" if runs is None else f" (seed {first}'s run)"), ""]
    lines.append(
        f"- OPD closes {pct(extra['opd_gap_closed'])} of the sim-only-to-teacher gap "
        "((opd - sim_only) / (teacher - sim_only); n/a when the teacher is no better than sim_only)."
    )
    lines += _gap_split_lines(extra.get("gap_split"))
    lines += [
        _versus_line("OPD", other, extra[f"opd_vs_{other}"])
        for other in RIVALS
        if extra.get(f"opd_vs_{other}") is not None
    ]
    for name, variant in extra.get("variants", {}).items():
        lines.append(f"- {name} (an OPD variant) closes {pct(variant['gap_closed'])} of the gap.")
        lines += [_versus_line(name, other, v) for other, v in variant["vs"].items() if v is not None]
    over = "" if runs is None else f" (over the {len(runs['seeds'])} runs: their means)"
    lines += [
        "",
        f"## Targets{over}",
        "",
        "| target | goal | measured | result | note |",
        "|---|---|---|---|---|",
    ]
    for t in report["targets"]:
        result = {True: "PASS", False: "FAIL", None: "n/a"}[t["pass"]]
        lines.append(f"| {t['target']} | {t['goal']} | {target_value(t)} | {result} | {t['note']} |")
    lines += _while_training_table(methods) + _reasons_table(methods)
    lines += _pred_error_table(methods) + _outcomes_table(methods, teacher)
    lines += ["", "## Plots", ""]
    if runs is not None:
        lines += [f"success.png: every run; training.png and pred_error.png: seed {first}'s run.", ""]
    lines += [f"![{p[:-4]}]({p})" for p in PLOTS]
    resolved = yaml.safe_dump(report["config"], sort_keys=False)
    lines += ["", "## Resolved configuration", "", "```yaml", resolved.rstrip(), "```", ""]
    return "\n".join(lines)


def _over_runs_lines(runs: dict[str, Any], teacher: dict[str, Any]) -> list[str]:
    """The section over training runs (`opd.benchmark.transfer.with_runs`): each policy's mean with its t
    interval and every run's figure, OPD against each rival run by run, and any run whose methods began
    from different sim-trained starts."""
    seeds = runs["seeds"]
    lines = [
        "",
        f"## Over {len(seeds)} training runs (seeds {', '.join(map(str, seeds))})",
        "",
        "Each run trained the whole pipeline with its own seed; every run's students played the same "
        "held-out episodes. Pooled: every run's episodes counted together (a Wilson interval: evaluation "
        "noise only).",
        "",
        "| policy | mean success | 95% CI over runs | "
        + " | ".join(f"seed {s}" for s in seeds)
        + " | pooled | pooled 95% CI | teacher share, last 20% (mean) |",
        "|---" * (len(seeds) + 6) + "|",
    ]
    for name, p in runs["policies"].items():
        per_run = " | ".join(pct(v) for v in p["values"])
        interval = ci(p["ci95"]) if p["ci95"] else "n/a"
        lines.append(
            f"| {name} | {pct(p['mean'])} | {interval} | {per_run} | {pct(p['pooled']['success_rate'])} "
            f"| {ci(p['pooled']['ci95'])} | {pct(p['intervention_rate_last20'])} |"
        )
    same = " | ".join("-" for _ in seeds)  # the teacher is not retrained
    lines.append(f"| teacher | {pct(teacher['success_rate'])} | - | {same} | - | - | - |")
    lines += [
        "",
        f"- OPD closes {pct(runs['opd_gap_closed'])} of the gap between the means (sim-only to teacher).",
    ]
    if split := runs.get("gap_split"):
        lines += [
            line.replace("- Gap split", "- Gap split between the means") for line in _gap_split_lines(split)
        ]
    lines += [_versus_runs_line("OPD", other, v) for other, v in runs["opd_vs"].items() if v is not None]
    for name, variant in runs.get("variants", {}).items():
        lines.append(
            f"- {name} (an OPD variant) closes {pct(variant['gap_closed'])} of the gap between the means."
        )
        lines += [_versus_runs_line(name, other, v) for other, v in variant["vs"].items() if v is not None]
    for seed, starts in runs["starts_per_run"].items():
        if starts > 1:
            lines.append(
                f"- **Seed {seed}'s methods began from {starts} different sim-trained starts** (the start "
                "was retrained between them, after its first training had been stopped and resumed or on "
                "another CPU): that run's methods are not paired."
            )
    return lines


def _versus_line(name: str, other: str, versus: dict[str, Any]) -> str:
    """One run's comparison of `name` with `other` (`opd.benchmark.transfer.versus`)."""
    separated = "separate" if versus["ci_separated"] else "overlap"
    line = f"- {name} vs {other}: {versus['difference'] * 100:+.1f} points; the 95% CIs {separated}."
    if pair := versus.get("paired"):
        line += (
            f" On the same {pair['episodes']} seeds, {name} alone succeeded on {pair['only_a']} and "
            f"{other} alone on {pair['only_b']}: paired 95% CI {points(pair['ci95'])}, McNemar's "
            f"exact p = {pair['p_value']:.3g}."
        )
    return line


def _versus_runs_line(name: str, other: str, v: dict[str, Any]) -> str:
    """The comparison of `name` with `other` over runs (`opd.benchmark.transfer.versus_over_runs`)."""
    diffs = ", ".join(f"{d * 100:+.1f}" for d in v["values"])
    line = (
        f"- {name} vs {other}: {v['mean'] * 100:+.1f} points on average (per run {diffs}; {name} ahead in "
        f"{v['ahead_in']} of {v['runs']})"
    )
    line += f", 95% t CI over runs {points(v['ci95'])}." if v["ci95"] else "."
    if pair := v.get("pooled_paired"):
        line += (
            f" Every run's episodes paired on their seeds: {name} alone succeeded on {pair['only_a']}, "
            f"{other} alone on {pair['only_b']}, McNemar's exact p = {pair['p_value']:.3g} (evaluation "
            "noise only)."
        )
    return line


def _pred_error_table(methods: dict[str, dict[str, Any]]) -> list[str]:
    horizons = sorted({h for m in methods.values() for h in m["pred_error"]})
    if not horizons:
        return ["", "No episode finished during training: no prediction error was logged."]
    lines = ["", "## Final prediction error (teacher-state stds, mean over the last 100 episodes)", ""]
    lines += ["| method | " + " | ".join(horizons) + " |", "|---" * (len(horizons) + 1) + "|"]
    for name, m in methods.items():
        cells = [number(m["pred_error"].get(h), ".3f") for h in horizons]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def _while_training_table(methods: dict[str, dict[str, Any]]) -> list[str]:
    """How each method's executed policy did on its training episodes: what the robot went through while
    the student learned (the gate's purpose), beside the final student's figures above."""
    rows = {name: m["training_episodes"] for name, m in methods.items() if m.get("training_episodes")}
    if not rows:
        return []
    kinds = sorted({k for t in rows.values() for k in (t["outcomes"] or {})})
    header = ["method", "success", "95% CI", "episodes", "counted over", *kinds]
    lines = [
        "",
        "## While training (the executed policy: the student, or the teacher where the gate chose it)",
        "",
        "| " + " | ".join(header) + " |",
        "|---" * len(header) + "|",
    ]
    for name, t in rows.items():
        over = "the whole run" if t["whole_run"] else f"the first {t['episodes']} episodes"
        counts = [str(t["outcomes"].get(k, 0)) if t["outcomes"] else "-" for k in kinds]
        cells = [name, pct(t["success_rate"]), ci(t["ci95"]), str(t["episodes"]), over, *counts]
        lines.append("| " + " | ".join(cells) + " |")
    if not all(t["whole_run"] for t in rows.values()):
        note = (
            "A history logged before the cumulative outcome counts holds only the mean over the newest "
            "100 episodes, exact while no more than 100 had finished: those are counted."
        )
        lines += ["", note]
    if "sim_only" in rows or "sim_only_dr" in rows:
        lines += [
            "",
            "sim_only trains in the clean sim and sim_only_dr in the randomised sim: their episodes "
            "are not the proxy's.",
        ]
    return lines


def _reasons_table(methods: dict[str, dict[str, Any]]) -> list[str]:
    """Why the gate chose the teacher over the last 20% of training (the target's window), per reason."""
    rows = {
        name: m["teacher_reasons_last20"] for name, m in methods.items() if m.get("teacher_reasons_last20")
    }
    if not rows:
        return []
    reasons = sorted({r for t in rows.values() for r in t})
    lines = [
        "",
        "## Why the teacher acted, last 20% of training (share of all decisions, by the gate's reason)",
        "",
        "| method | " + " | ".join(reasons) + " |",
        "|---" * (len(reasons) + 1) + "|",
    ]
    for name, t in rows.items():
        lines.append(f"| {name} | " + " | ".join(pct(t.get(r, 0.0)) for r in reasons) + " |")
    return lines


def _outcomes_table(methods: dict[str, dict[str, Any]], teacher: dict[str, Any]) -> list[str]:
    policies = {**methods, "teacher": teacher}
    kinds = sorted({k for p in policies.values() for k in p["outcomes"]})
    lines = ["", "## Episode outcomes", "", "| policy | " + " | ".join(kinds) + " |"]
    lines.append("|---" * (len(kinds) + 1) + "|")
    for name, p in policies.items():
        lines.append(f"| {name} | " + " | ".join(str(p["outcomes"].get(k, 0)) for k in kinds) + " |")
    return lines


def _figure(rows: int = 1, cols: int = 1, size: tuple[float, float] = (7.0, 4.0)) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a training machine
    import matplotlib.pyplot as plt

    return plt.subplots(rows, cols, figsize=size, squeeze=False)


def _save(fig: Any, path: Path) -> None:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    write_atomic(path, buf.getvalue())


def plot_success(report: dict[str, Any], path: Path) -> None:
    """Bars of each method's success rate with its 95% interval; the teacher as a line with its band."""
    fig, ax = _figure()
    ax = ax[0, 0]
    names = list(report["methods"])
    runs = report.get("over_runs")
    if runs is None:
        rates = [report["methods"][n]["success_rate"] for n in names]
        bounds = [report["methods"][n]["ci95"] for n in names]
        title = f"students acting alone, {report['teacher']['episodes']} episodes, 95% Wilson CI"
    else:  # the mean over runs with its t interval; each run's figure as a dot
        rates = [runs["policies"][n]["mean"] for n in names]
        bounds = [runs["policies"][n]["ci95"] for n in names]
        title = f"students acting alone: mean of {len(runs['seeds'])} training runs, 95% t CI"
        for i, n in enumerate(names):
            values = runs["policies"][n]["values"]
            ax.plot([i] * len(values), values, "o", color="black", markersize=4, zorder=3)
    lo = [r - b[0] for r, b in zip(rates, bounds, strict=True)]
    hi = [b[1] - r for r, b in zip(rates, bounds, strict=True)]
    ax.bar(names, rates, yerr=[lo, hi], capsize=6, color=[COLORS.get(n) for n in names], alpha=0.8)
    ax.set_xticks(range(len(names)), [f"{n}\n{pct(r)}" for n, r in zip(names, rates, strict=True)])
    teacher = report["teacher"]
    ax.axhline(teacher["success_rate"], color=TEACHER_COLOR, label=f"teacher {pct(teacher['success_rate'])}")
    ax.axhspan(*teacher["ci95"], color=TEACHER_COLOR, alpha=0.12)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("success rate on the proxy")
    ax.set_title(title)
    ax.legend(loc="lower right")
    _save(fig, path)


def plot_training(histories: dict[str, list[dict]], path: Path) -> None:
    """Teacher-executed share of decisions per log period and the gate threshold, one line per method."""
    fig, axes = _figure(2, 1, (7.0, 6.0))
    share_ax, thr_ax = axes[0, 0], axes[1, 0]
    for name, rows in histories.items():
        if not rows:
            continue
        steps = [r["step"] for r in rows]
        prev = [{"step": 0, "teacher_steps": 0}, *rows[:-1]]
        share = [
            (r["teacher_steps"] - p["teacher_steps"]) / max(r["step"] - p["step"], 1)
            for r, p in zip(rows, prev, strict=True)
        ]
        style = {"color": COLORS.get(name), "marker": ".", "label": name}
        share_ax.plot(steps, share, **{**style, "label": f"{name} (last 20%: {pct(last_share(rows))})"})
        threshold = [r.get("threshold", float("nan")) for r in rows]
        if any(math.isfinite(t) for t in threshold):  # NaN when the method has no gate
            thr_ax.plot(steps, threshold, **style)
    share_ax.set_ylabel("teacher share of decisions")
    share_ax.set_title("interventions per log period")
    thr_ax.set_ylabel("gate threshold")
    thr_ax.set_title("opd: predictor error, stds; novelty: ensemble disagreement")
    thr_ax.set_xlabel("decisions")
    for ax in (share_ax, thr_ax):
        if ax.lines:
            ax.legend(fontsize=8)
    _save(fig, path)


def plot_pred_error(histories: dict[str, list[dict]], path: Path) -> None:
    """The predictor's error per horizon over training (mean over recent episodes), one line per method."""
    keys = {k for rows in histories.values() for r in rows for k in r}
    horizons = sorted(k for k in keys if k.startswith("pred_error/"))
    fig, axes = _figure(1, max(len(horizons), 1), (4.0 * max(len(horizons), 1), 3.5))
    if not horizons:
        axes[0, 0].text(0.5, 0.5, "no episode finished during training", ha="center", va="center")
        axes[0, 0].set_axis_off()
    for ax, key in zip(axes[0], horizons, strict=False):
        for name, rows in histories.items():
            points = [(r["step"], r[key]) for r in rows if key in r]
            if points:
                ax.plot(*zip(*points, strict=True), color=COLORS.get(name), marker=".", label=name)
        ax.set_title(f"prediction error, {key.split('/')[1]}")
        ax.set_xlabel("decisions")
        ax.set_ylabel("teacher-state stds")
        ax.legend(fontsize=8)
    _save(fig, path)
