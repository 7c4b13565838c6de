"""The figures of one replay (`opd.replay.runner.Replay`): decisions, counterfactual gates, prediction error
per horizon, student/teacher agreement, latency and drops per topic, the match with the live decisions, and
every skip. Plain types only, deterministic for one bag (no timings: `agent bench replay` has those)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from opd.evaluation import project_path
from opd.replay.bags.reader import stamp_ns

HIST_BINS = 40  # per-horizon error histogram bins
PARAMS_ATOL = 1e-5  # executed parameters equal to the live ones within this (batched vs single encoding)


def summarise(replay: Any, bag: Any, rec: Any, out: dict[str, Any], frames: int) -> dict[str, Any]:
    rows, learner = out["rows"], out["learner"]
    t0 = rows[0]["now"] if rows else 0.0
    minutes = max((rows[-1]["now"] - t0) / 60.0, 1e-9) if rows else 1e-9
    sources = np.array([r["source"] == "teacher" for r in rows], bool)
    replay.timeline = {
        "t": np.array([r["now"] - t0 for r in rows]),
        "error": np.array([r["error"] for r in rows]),
        "threshold": np.array([r["threshold"] for r in rows]),
        "teacher": sources,
        "counterfactual": {n: np.array([u for _, u, _ in v], bool) for n, v in out["counterfactual"].items()},
    }
    switches = np.flatnonzero(np.diff(sources.astype(int)) != 0) + 1
    live_gate = {
        "name": "replayed (the recorded run's gate)",
        "teacher_rate": float(sources.mean()) if rows else None,
        "switches_per_min": float(switches.size / minutes),
        "switch_times_s": [round(rows[i]["now"] - t0, 3) for i in switches],
        "reasons": dict(sorted(Counter(f"{r['source']}/{r['reason']}" for r in rows).items())),
        "threshold_mean": _nanmean([r["threshold"] for r in rows]),
    }
    gates = [live_gate]
    for v in replay.cfg.gates:
        used = out["counterfactual"][v.name]
        use = np.array([u for _, u, _ in used], bool)
        sw = np.flatnonzero(np.diff(use.astype(int)) != 0) + 1
        gates.append({
            "name": v.name, "gate": v.gate,
            "teacher_rate": float(use.mean()) if use.size else None,
            "switches_per_min": float(sw.size / minutes),
            "switch_times_s": [round(used[i][0] - t0, 3) for i in sw],
            "threshold_mean": _nanmean([th for _, _, th in used]),
        })  # fmt: skip
    result = {
        "bag": {"path": str(replay.bag_path), "duration_s": round(bag.duration_s, 6),
                "topics": {t: s.summary(replay.cfg.gap_factor) for t, s in sorted(replay.stats.items())}},
        "artifact": {"path": project_path(replay.artifact.root), "manifest_sha256": replay.artifact_hash},
        "mode": "reuse_state" if replay.reuse_state else "reencode",
        "used": replay.used,
        "frames": {"decided": len(rows), "built": frames, **dict(sorted(replay.counts.items()))},
        "refused_by_buffer": dict(sorted(out["refusals"].items())),
        "decisions": len(rows),
        "gates": gates,
        "prediction_error": _horizon_errors(learner, out["preds"], rec.teacher_states, replay.teacher_seen),
        "agreement": _agreement(rows, out["teacher_actions"], learner.align.tolerance_s),
        "episodes": _episodes(out["episodes"]),
        "live_match": _live_match(rows, rec),
        "paired_latency_ms": _paired(replay, rec, rows),
        "skipped": bag.skips.rows(),
        "missing_topics": bag.missing(),  # role -> mapped topic absent from the bag
    }  # fmt: skip
    return result


def nearest(sorted_values: np.ndarray, x: float) -> int:
    """Index of the value nearest `x` in a non-empty sorted array (ties: the earlier)."""
    return int(nearest_all(sorted_values, np.asarray(x)))


def nearest_all(sorted_values: np.ndarray, x: np.ndarray) -> np.ndarray:
    """`nearest` for every element of `x` (any shape): indices of the same shape."""
    j = np.searchsorted(sorted_values, x)
    lo, hi = np.clip(j - 1, 0, sorted_values.size - 1), np.clip(j, 0, sorted_values.size - 1)
    return np.where(np.abs(sorted_values[hi] - x) < np.abs(sorted_values[lo] - x), hi, lo)


def _nanmean(values: list[float]) -> float | None:
    """Mean of the finite values; None when there are none (the forced switches have no threshold)."""
    finite = [v for v in values if np.isfinite(v)]
    return float(np.mean(finite)) if finite else None


def _horizon_errors(
    learner: Any, preds: list, teacher_states: list, seen: np.ndarray | None = None
) -> dict[str, Any]:
    """RMS error (teacher-state stds) of every prediction against the teacher state at stamp + h periods.
    `seen`: what the teacher saw of each state in arrival order, where the replay has it already."""
    if not teacher_states or not preds:
        return {}
    arrived = sorted(teacher_states, key=lambda t: t[0])  # as the learner took them: by log time
    stamps = np.array([s for _, s, *_ in arrived])
    norm = learner.normalise(np.stack([t[4] for t in arrived]), stamps, seen)  # (T, Dq), in arrival order
    order = np.argsort(stamps, kind="stable")
    stamps, norm = stamps[order], norm[order]
    period, tol = learner.align.period_s, learner.align.tolerance_s
    horizon = learner.align.horizon
    made = [(stamp, pred) for stamp, pred in preds if pred is not None]
    if not made:
        return {f"h{h}": {"n": 0} for h in range(1, horizon + 1)}
    pred = np.stack([p for _, p in made])[:, :horizon]  # (F, H, Dq)
    target = np.array([s for s, _ in made])[:, None] + (np.arange(horizon) + 1) * period  # (F, H)
    best = nearest_all(stamps, target)  # (F, H)
    found = np.abs(stamps[best] - target) <= tol
    rms = np.sqrt(np.mean((pred - norm[best]) ** 2, axis=-1)).astype(np.float64)  # (F, H)
    errors = [rms[found[:, h], h].tolist() for h in range(horizon)]
    out = {}
    top = max((max(e) for e in errors if e), default=1.0)
    edges = np.linspace(0.0, top, HIST_BINS + 1)
    for h, e in enumerate(errors, start=1):
        if not e:
            out[f"h{h}"] = {"n": 0}
            continue
        a = np.array(e)
        out[f"h{h}"] = {
            "n": int(a.size),
            "mean": float(a.mean()),
            "p50": float(np.percentile(a, 50)),
            "p90": float(np.percentile(a, 90)),
            "histogram": {"edges": edges.tolist(), "counts": np.histogram(a, edges)[0].tolist()},
        }
    return out


def _agreement(rows: list, teacher_actions: dict, tolerance_s: float) -> dict[str, Any]:
    """The student's action against the teacher's at the frame's stamp (nearest within tolerance)."""
    if not teacher_actions:
        return {"pairs": 0}
    keys = np.array(sorted(teacher_actions))
    tol_ns = tolerance_s * 1e9
    agree, param_err, pairs = 0, [], 0
    for r in rows:
        k = stamp_ns(r["stamp"])
        best = nearest(keys, k)
        if abs(keys[best] - k) > tol_ns:
            continue
        pairs += 1
        t_skill, t_params = teacher_actions[int(keys[best])]
        s_skill, s_params = r["student"]
        if s_skill == t_skill:
            agree += 1
            param_err.append(float(np.max(np.abs(np.asarray(s_params) - np.asarray(t_params)))))
    return {"pairs": pairs, "skill_accuracy": agree / pairs if pairs else None,
            "param_abs_error_mean": float(np.mean(param_err)) if param_err else None}  # fmt: skip


def _episodes(episodes: list[dict]) -> dict[str, Any]:
    if not episodes:
        return {"count": 0}
    steps = np.array([e["steps"] for e in episodes], float)

    def weighted(key: str) -> float:
        return float(np.sum([e[key] * e["steps"] for e in episodes]) / max(steps.sum(), 1.0))

    return {"count": len(episodes), "decisions": int(steps.sum()),
            "intervention_rate": weighted("intervention_rate"),
            "skill_agreement": weighted("skill_agreement"),
            "switches_per_min": weighted("switches_per_min")}  # fmt: skip


def _paired(replay: Any, rec: Any, rows: list) -> dict[str, Any]:
    """Latency between paired streams as the bag holds them, ms (p50, p99, n): each decided frame's image
    to its recorded embedding (the live encoder), its embedding to the executed action (the opd node), and
    the frame's stamp to the nearest teacher state's stamp (how far apart the pairs are)."""
    camera = replay.stats.get(replay.cfg.topics.name("camera"))
    image_log = dict(zip(map(stamp_ns, camera.stamps), camera.logs, strict=True)) if camera else {}
    teacher = np.sort([s for _, s, *_ in rec.teacher_states])
    spans: dict[str, list[float]] = {"image_to_embedding": [], "embedding_to_executed": [],
                                     "frame_to_teacher_stamp": []}  # fmt: skip
    for r in rows:
        k = stamp_ns(r["stamp"])
        state = rec.states.get(k)
        if state is not None and k in image_log:
            spans["image_to_embedding"].append(state.arrival - image_log[k])
        if state is not None and k in rec.executed:
            spans["embedding_to_executed"].append(rec.executed[k][0] - state.arrival)
        if teacher.size:
            spans["frame_to_teacher_stamp"].append(abs(teacher[nearest(teacher, r["stamp"])] - r["stamp"]))

    def ms(v: list[float], q: float) -> float:
        return round(float(np.percentile(v, q)) * 1e3, 3)

    return {name: {"p50": ms(v, 50), "p99": ms(v, 99), "n": len(v)} for name, v in spans.items() if v}


def _live_match(rows: list, rec: Any) -> dict[str, Any]:
    """Replayed decisions against the ones the live graph published (its /opd/gate and /opd/action)."""
    gated = [r for r in rows if r["live"] is not None]
    if not gated:
        return {"compared": 0}
    same_gate = [r["source"] == r["live"]["source"] and r["reason"] == r["live"]["reason"] for r in gated]
    executed = [(r, rec.executed[k]) for r in gated if (k := stamp_ns(r["stamp"])) in rec.executed]
    same_action = [
        r["skill"] == skill and bool(np.allclose(r["params"], params, atol=PARAMS_ATOL, rtol=0))
        for r, (_, skill, params) in executed
    ]
    first = next((i for i, ok in enumerate(same_gate) if not ok), None)
    out = {"compared": len(gated), "gate_equal": int(sum(same_gate)), "actions_compared": len(executed),
           "actions_equal": int(sum(same_action)), "live_decisions": len(rec.gate),
           "params_atol": PARAMS_ATOL}  # fmt: skip
    if first is not None:
        r = gated[first]
        out["first_difference"] = {"stamp": r["stamp"], "replayed": f"{r['source']}/{r['reason']}",
                                   "live": f"{r['live']['source']}/{r['live']['reason']}"}  # fmt: skip
    return out
