"""What each part of reality costs a policy, Colosseum-style: `agent eval factors`.

A student and a teacher are evaluated acting alone in the clean sim, on each factor of a gap preset alone
(`sim.gap_factors`), and on the whole preset, over the same held-out seeds; each cost is the drop from the
clean sim in points with a 95% Wilson interval on each rate. Each evaluation is written as soon as it is
done, with the proxy config it ran on, so rerunning the command resumes (finished ones are read back, and
one run under another preset or artifact is refused).

Output directory:
    <policy>/<setting>.json   the evaluation report (`opd.evaluation`); setting: clean, a factor, all
    <policy>/<setting>.proxy.yaml  the resolved proxy config it ran on
    factors.json, factors.md, factors.png   the table and the bar chart
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

from opd.evaluation import wilson_interval
from policies.files import write_atomic
from sim.gap_factors import FACTORS, factor_config
from sim.real_robot_proxy import ProxyConfig

log = logging.getLogger(__name__)
SETTINGS = ("clean", *FACTORS, "all")
# policy -> run(proxy YAML or None for the clean sim, output report path); the runners own their models.
Runner = Callable[[Path | None], dict]


def measure(runners: dict[str, Runner], preset: ProxyConfig, out: Path) -> dict:
    """Every (policy, setting) not yet in `out`, then the table; returns factors.json's content."""
    results: dict[str, dict[str, dict]] = {}
    for policy, run in runners.items():
        results[policy] = {}
        for setting in ("clean", "all", *FACTORS):  # the preset's own figure first: it fixes the preset
            report_path = out / policy / f"{setting}.json"
            proxy = (
                None if setting == "clean" else preset if setting == "all" else factor_config(preset, setting)
            )
            proxy_path = report_path.with_suffix(".proxy.yaml")
            if report_path.is_file():
                _refuse_another(proxy_path, proxy)
                results[policy][setting] = json.loads(report_path.read_text())
                continue
            report_path.parent.mkdir(parents=True, exist_ok=True)
            if proxy is not None:
                proxy.to_yaml(proxy_path)
            log.info("factors: %s on %s", policy, setting)
            report = run(proxy_path if proxy is not None else None)
            write_atomic(report_path, json.dumps(report, indent=1))
            results[policy][setting] = report
    table = _table({p: {s: r[s] for s in SETTINGS} for p, r in results.items()})
    (out / "factors.json").write_text(json.dumps(table, indent=1))
    (out / "factors.md").write_text(markdown(table))
    plot(table, out / "factors.png")
    return table


def _refuse_another(proxy_path: Path, proxy: ProxyConfig | None) -> None:
    """A finished evaluation is kept only when it ran on the config this run would use."""
    if proxy is None:
        return
    if not proxy_path.is_file() or ProxyConfig.from_yaml(proxy_path) != proxy:
        raise ValueError(f"{proxy_path}: this evaluation ran on another proxy config than the preset gives "
                         "now; use another --out, or delete it to measure it again")  # fmt: skip


def _table(results: dict[str, dict[str, dict]]) -> dict:
    table: dict = {"settings": list(SETTINGS), "factors": {k: list(v) for k, v in FACTORS.items()}}
    for policy, by_setting in results.items():
        clean = by_setting["clean"]["success_rate"]
        rows = {}
        for setting, r in by_setting.items():
            n, rate = r["episodes"], r["success_rate"]
            ci = list(wilson_interval(round(rate * n), n))
            rows[setting] = {"success_rate": rate, "episodes": n, "ci95": ci,
                             "cost_points": round(100 * (clean - rate), 1)}  # fmt: skip
        table[policy] = rows
    return table


def markdown(table: dict) -> str:
    policies = [p for p in table if p not in ("settings", "factors")]
    head = "| setting | " + " | ".join(f"{p} success (95% CI) | {p} cost" for p in policies) + " |"
    lines = [head, "|---" * (1 + 2 * len(policies)) + "|"]
    for setting in table["settings"]:
        cells = []
        for p in policies:
            r = table[p][setting]
            lo, hi = r["ci95"]
            cells += [f"{r['success_rate']:.1%} ({lo:.1%}-{hi:.1%}), n={r['episodes']}",
                      "-" if setting == "clean" else f"{r['cost_points']:+.1f}"]  # fmt: skip
        lines.append(f"| {setting} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(table: dict, path: Path) -> None:
    """Success per setting and policy, with Wilson intervals: a bar chart like Colosseum's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    policies = [p for p in table if p not in ("settings", "factors")]
    settings = table["settings"]
    x, width = np.arange(len(settings)), 0.8 / max(1, len(policies))
    fig, ax = plt.subplots(figsize=(1.0 + 0.9 * len(settings), 3.6))
    for k, p in enumerate(policies):
        rates = np.array([table[p][s]["success_rate"] for s in settings])
        lo = rates - np.array([table[p][s]["ci95"][0] for s in settings])
        hi = np.array([table[p][s]["ci95"][1] for s in settings]) - rates
        ax.bar(x + (k - (len(policies) - 1) / 2) * width, 100 * rates, width, yerr=100 * np.stack([lo, hi]),
               capsize=2, label=p)  # fmt: skip
    ax.set_xticks(x, settings, rotation=30, ha="right")
    ax.set_ylabel("success, % (95% Wilson CI)")
    ax.set_ylim(0, 100)
    ax.set_title("each factor of the gap alone, and all together")
    ax.legend(loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
