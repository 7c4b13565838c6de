"""The transfer benchmark's figures on synthetic histories and evaluations with known answers, its config,
its caches, and the report directory it writes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import get_args

import pytest
import yaml

from opd.benchmark.report import PLOTS, markdown, write_report
from opd.benchmark.transfer import (
    METHODS,
    RIVALS,
    VARIANTS,
    TransferBenchmark,
    TransferConfig,
    build_report,
    cis_separate,
    gap_closed,
    last_reasons,
    last_share,
    over_runs,
    paired,
    read_history,
    record_wall_clock,
    run_starts,
    summary,
    train_and_export,
    training_episodes,
    training_metrics,
    with_runs,
    write_json,
)
from opd.evaluation import wilson_interval
from opd.student.trainer import Method, StudentTrainConfig, refuse_another_config
from policies.artifact import Artifact, sha256_file
from policies.config import ConfigError

QUICK = Path(__file__).parents[3] / "opd" / "configs" / "transfer_quick.yaml"
SHIPPED = Path(__file__).parents[3] / "sim" / "robots" / "diffbot" / "student"  # the committed artifact
RESULTS = Path(__file__).parents[3] / "opd" / "results"  # the runs under way, and the starts they read
DATA = Path(__file__).parent / "data"


def ramp(steps: list[int], rate_until_800: float = 0.5, rate_after: float = 0.05) -> list[dict]:
    """History rows whose teacher executes `rate_until_800` of the decisions up to step 800, then
    `rate_after`: the cumulative teacher_steps a trainer would log."""

    def teacher(step: int) -> float:
        return rate_until_800 * min(step, 800) + rate_after * max(step - 800, 0)

    return [{"step": s, "labels": s // 2, "teacher_steps": teacher(s)} for s in steps]


def evaluation(successes: int, n: int = 200) -> dict:
    lo, hi = wilson_interval(successes, n)
    rate = successes / n
    return {"success_rate": rate, "ci95": [lo, hi], "episodes": n, "outcomes": {"success": successes},
            "mean_return": 0.0}  # fmt: skip


def method_result(successes: int, last20: float | None = 0.05) -> dict:
    metrics = training_metrics(ramp(list(range(100, 1001, 100))))
    return {**evaluation(successes), **metrics, "intervention_rate_last20": last20, "wall_clock_s": 12.0}


def test_last_share_is_the_teacher_share_of_the_last_fifth_of_the_decisions() -> None:
    assert last_share(ramp(list(range(100, 1001, 100)))) == pytest.approx(0.05)
    # no line at 800: the last one before it starts the window; its 200 decisions at 0.5 count too
    assert last_share(ramp([300, 600, 900, 1000])) == pytest.approx((200 * 0.5 + 200 * 0.05) / 400)
    # one line only: the window starts at step 0
    assert last_share(ramp([1000])) == pytest.approx((800 * 0.5 + 200 * 0.05) / 1000)
    assert last_share([]) is None


def test_last_reasons_split_the_last_fifth_by_why_the_gate_chose_the_teacher() -> None:
    rows = ramp(list(range(100, 1001, 100)))
    for row in rows:  # cumulative; error takeovers: 30 per 100 decisions up to 800, then 2; override: 1
        s = row["step"]
        row["gate_counts"] = {
            "teacher/error_above_threshold": 0.3 * min(s, 800) + 0.02 * max(s - 800, 0),
            "teacher/skill_disagreement": 0.01 * s,
            "student/student_confident": 0.5 * s,
        }
    reasons = last_reasons(rows)
    assert reasons == {
        "error_above_threshold": pytest.approx(0.02),
        "skill_disagreement": pytest.approx(0.01),
    }
    assert last_reasons(ramp([500, 1000])) is None  # a history logged before the gate's counts
    quiet = [{**r, "gate_counts": {"student/forced_student": r["step"]}} for r in ramp([500, 1000])]
    assert last_reasons(quiet) is None  # the teacher never ruled (DAgger)


def test_read_history_drops_the_lines_a_resumed_run_logged_again(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    # killed after logging step 300; resumed from the checkpoint at 200, it logs 300 again
    rows = [{"step": 100, "v": 1}, {"step": 200, "v": 2}, {"step": 300, "v": 3}, {"step": 300, "v": 4},
            {"step": 400, "v": 5}]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert [(r["step"], r["v"]) for r in read_history(path)] == [(100, 1), (200, 2), (300, 4), (400, 5)]
    assert read_history(tmp_path / "none.jsonl") == []


def test_training_metrics_from_a_history() -> None:
    rows = ramp(list(range(100, 1001, 100)))
    for i, row in enumerate(rows[-5:]):
        row["episode/switches_per_min"] = float(i)  # last three: 2, 3, 4
        row["pred_error/h1"], row["pred_error/h2"] = 0.1 * i, float("nan")
    m = training_metrics(rows)
    assert (m["decisions"], m["labels"], m["teacher_decisions"]) == (1000, 500, 410)
    assert m["intervention_rate"] == pytest.approx(0.41)
    assert m["intervention_rate_last20"] == pytest.approx(0.05)
    assert m["switches_per_min"] == pytest.approx(3.0)
    assert m["pred_error"] == {"h1": pytest.approx(0.4), "h2": None}  # NaN is not JSON
    empty = training_metrics([])
    assert empty["labels"] is None and empty["pred_error"] == {}


def test_training_episodes_count_the_whole_run_or_the_first_hundred_of_an_older_history() -> None:
    rows = ramp([100, 200, 300])
    counts = [{}, {"success": 3, "collision": 1}, {"success": 7, "collision": 2, "timeout": 1}]
    for row, count in zip(rows, counts, strict=True):
        row["train_outcomes"] = count
    t = training_episodes(rows)
    assert (t["episodes"], t["successes"], t["whole_run"]) == (10, 7, True)
    assert t["outcomes"] == {"success": 7, "collision": 2, "timeout": 1}
    assert t["ci95"] == pytest.approx(wilson_interval(7, 10), abs=1e-4)
    # an older history: rolling means over the newest 100 episodes, exact up to the 100th
    old = ramp([100, 200, 300, 400])
    for row, (episodes, mean) in zip(old, [(0, None), (40, 0.95), (98, 0.97), (130, 0.5)], strict=True):
        row["episodes"] = episodes
        if mean is not None:
            row["episode/success"] = mean
    t = training_episodes(old)
    assert (t["episodes"], t["successes"], t["whole_run"], t["outcomes"]) == (98, 95, False, None)
    assert training_episodes(ramp([100])) is None  # no episode finished, nothing counted
    assert training_episodes([{**ramp([100])[0], "train_outcomes": {}}]) is None


def test_the_clean_sim_references_split_the_gap_into_transfer_and_imitation() -> None:
    # clean sim: sim-only 180/200 (90%), teacher 198/200 (99%); proxy: sim-only 160 (80%), teacher 196
    methods = {"sim_only": {**method_result(160), "clean": evaluation(180)}, "dagger": method_result(170),
               "opd": method_result(184)}  # fmt: skip
    cfg = TransferConfig(methods=["sim_only", "dagger", "opd"])
    teacher = {**evaluation(196), "clean": evaluation(198)}
    report = build_report(cfg, cfg.train(), teacher, methods, "agent x")
    split = report["derived"]["gap_split"]
    assert split["transfer"] == pytest.approx(0.10) and split["imitation"] == pytest.approx(0.09)
    # OPD at 92% wins back more than the 10-point transfer gap; DAgger at 85% half of it
    assert split["transfer_won_back"] == {"dagger": pytest.approx(0.5), "opd": pytest.approx(1.2)}
    text = markdown(report)
    assert "costs the sim-only student +10.0 points" in text and "dagger 50.0%, opd 120.0%" in text
    assert "Over 100% (opd): the method ends above" in text  # 92% on the proxy against sim_only's 90% clean
    json.dumps(report, allow_nan=False)
    # a proxy that costs nothing: no share to win back
    methods["sim_only"]["clean"] = evaluation(150)
    split = build_report(cfg, cfg.train(), teacher, methods, "agent x")["derived"]["gap_split"]
    assert split["transfer_won_back"] == {"dagger": None, "opd": None}
    assert "nothing to win back" in markdown(build_report(cfg, cfg.train(), teacher, methods, "agent x"))
    # without the references (a run that kept only the small files): n/a, said so
    del methods["sim_only"]["clean"]
    report = build_report(cfg, cfg.train(), teacher, methods, "agent x")
    assert report["derived"]["gap_split"] is None and "Gap split: n/a" in markdown(report)


def test_gap_closed_and_ci_separation() -> None:
    assert gap_closed(opd=0.9, sim_only=0.5, teacher=1.0) == pytest.approx(0.8)
    assert gap_closed(opd=0.4, sim_only=0.5, teacher=1.0) == pytest.approx(-0.2)
    assert gap_closed(opd=0.9, sim_only=0.95, teacher=0.95) is None  # no gap to close
    assert cis_separate([0.85, 0.95], [0.6, 0.8])
    assert not cis_separate([0.7, 0.9], [0.6, 0.8])
    assert not cis_separate([0.8, 0.9], [0.6, 0.8])  # touching is not separate


def test_paired_comparison_counts_the_seeds_only_one_policy_succeeded_on() -> None:
    # a succeeds on every seed b does and on 10 more: 90% against 80% of 100 episodes
    one_sided = paired("1" * 90 + "0" * 10, "1" * 80 + "0" * 20)
    assert (one_sided["only_a"], one_sided["only_b"], one_sided["difference"]) == (10, 0, pytest.approx(0.1))
    assert one_sided["p_value"] == pytest.approx(2 / 2**10)  # all 10 discordant seeds one way
    # adjusted Wald (Bonett & Price 2012), by hand: (11 - 1) / 102 +- 1.96 sqrt((12/102 - (10/102)^2) / 102)
    assert one_sided["ci95"] == pytest.approx([0.0343, 0.1618], abs=1e-4)
    # the separate 95% intervals overlap (82.6-94.5% and 71.1-86.7%); the paired one excludes 0
    assert not cis_separate(list(wilson_interval(90, 100)), list(wilson_interval(80, 100)))
    assert one_sided["ci95"][0] > 0
    # discordance both ways: 5 against 3 of 10, McNemar exact 2 * (1 + 8 + 28 + 56) / 2^8
    mixed = paired("1111100011", "0000011111")
    assert mixed["p_value"] == pytest.approx(2 * 93 / 256) and mixed["difference"] == pytest.approx(0.2)
    assert mixed["ci95"] == pytest.approx([-0.3411, 0.6745], abs=1e-4)
    even = paired("10" * 50, "01" * 50)
    assert even["p_value"] == 1.0 and even["ci95"][0] == pytest.approx(-even["ci95"][1])
    none = paired("11", "11")  # no discordant seed: no evidence either way
    assert (none["difference"], none["p_value"]) == (0.0, 1.0)
    assert none["ci95"] == pytest.approx([-0.6929, 0.6929], abs=1e-4)
    with pytest.raises(ValueError, match="same episodes"):
        paired("101", "10")


def test_the_report_checks_the_targets_with_wilson_intervals() -> None:
    # 200 episodes each: opd 92% [87.5, 95.0], dagger 75% [68.6, 80.5], novelty 88% [82.8, 91.9]
    methods = {"sim_only": method_result(100), "dagger": method_result(150),
               "novelty": method_result(176), "opd": method_result(184)}  # fmt: skip
    report = build_report(TransferConfig(), TransferConfig().train(), evaluation(196), methods, "agent x")
    extra = report["derived"]
    assert extra["opd_gap_closed"] == pytest.approx((0.92 - 0.5) / (0.98 - 0.5))
    no_seeds = {"paired": None}  # evaluations without per-episode outcomes: no paired comparison
    assert extra["opd_vs_dagger"] == {"difference": pytest.approx(0.17), "ci_separated": True, **no_seeds}
    assert extra["opd_vs_novelty"] == {"difference": pytest.approx(0.04), "ci_separated": False, **no_seeds}
    assert [t["pass"] for t in report["targets"]] == [True, True, True, True, True]
    assert "95% CIs separate: no" in report["targets"][3]["note"]
    assert report["command"] == "agent x" and report["config"]["transfer"]["episodes"] == 200
    json.dumps(report, allow_nan=False)  # strict JSON

    methods["opd"] = method_result(150, last20=0.2)
    report = build_report(TransferConfig(), TransferConfig().train(), evaluation(196), methods, "agent x")
    assert [t["pass"] for t in report["targets"]] == [False, False, False, False, False]


def test_methods_evaluated_on_the_same_seeds_are_compared_pairwise() -> None:
    methods = {"dagger": method_result(150), "novelty": method_result(176), "opd": method_result(184)}
    methods["opd"]["episode_success"] = "1" * 184 + "0" * 16
    methods["dagger"]["episode_success"] = "1" * 150 + "0" * 50  # fails wherever OPD does, and more
    cfg = TransferConfig(methods=["dagger", "novelty", "opd"])
    report = build_report(cfg, cfg.train(), evaluation(196), methods, "agent x")
    pair = report["derived"]["opd_vs_dagger"]["paired"]
    assert pair == paired(methods["opd"]["episode_success"], methods["dagger"]["episode_success"])
    assert (pair["only_a"], pair["only_b"]) == (34, 0) and pair["p_value"] < 1e-9
    assert report["derived"]["opd_vs_novelty"]["paired"] is None  # novelty's evaluation kept no episodes
    notes = {t["target"]: t["note"] for t in report["targets"]}
    assert "paired 95% CI +" in notes["better than dagger at equal budget"]
    assert notes["better than novelty at equal budget"] == "95% CIs separate: no"
    assert "On the same 200 seeds, OPD alone succeeded on 34 and dagger alone on 0" in markdown(report)
    json.dumps(report, allow_nan=False)


def test_over_runs_is_the_mean_with_a_t_interval_and_none_for_one_run() -> None:
    two = over_runs([0.8, 0.9])  # sd 0.0707; t(0.975, 1) = 12.706: half width 12.706 * 0.0707 / sqrt 2
    assert two["mean"] == pytest.approx(0.85) and two["sd"] == pytest.approx(0.070711, abs=1e-6)
    assert two["ci95"] == pytest.approx([0.85 - 0.635310, 0.85 + 0.635310], abs=1e-5)
    three = over_runs([0.86, 0.89, 0.92])  # sd 0.03; t(0.975, 2) = 4.3027: half width 0.074525
    assert three["ci95"] == pytest.approx([0.89 - 0.074525, 0.89 + 0.074525], abs=1e-5)
    assert over_runs([0.9]) == {"runs": 1, "values": [0.9], "mean": 0.9, "sd": None, "ci95": None}
    spread = over_runs([0.91, 0.882, 0.953], bounds=(0.0, 1.0))  # unclipped t interval: 0.826-1.004
    assert spread["ci95"][1] == 1.0 and spread["ci95"][0] == pytest.approx(0.8262, abs=1e-4)
    assert over_runs([0.91, 0.882, 0.953])["ci95"][1] > 1.0  # differences and unbounded figures: unclipped


def runs_reports(cfg: TransferConfig, rates: dict[int, dict[str, int]]) -> dict[int, dict]:
    """build_report per training seed from successes of 200 episodes per method; episode i succeeds for
    i < successes, so a better method wins exactly the seeds between the two counts."""
    reports = {}
    for seed, successes in rates.items():
        methods = {m: method_result(k) | {"episode_success": "1" * k + "0" * (200 - k), "start_sha256": "a"}
                   for m, k in successes.items()}  # fmt: skip
        reports[seed] = build_report(cfg, cfg.train(), evaluation(196), methods, "agent x")
    return reports


def test_several_training_runs_are_judged_on_their_means_and_per_run_differences() -> None:
    cfg = TransferConfig(seeds=[0, 1000, 2000])
    reports = runs_reports(cfg, {
        0: {"sim_only": 160, "dagger": 176, "novelty": 180, "opd": 180},
        1000: {"sim_only": 150, "dagger": 184, "novelty": 178, "opd": 182},
        2000: {"sim_only": 170, "dagger": 172, "novelty": 182, "opd": 186},
    })  # fmt: skip
    report = with_runs(reports, cfg)
    runs = report["over_runs"]
    assert runs["seeds"] == [0, 1000, 2000] and report["methods"] == reports[0]["methods"]  # the first run
    opd = runs["policies"]["opd"]
    assert opd["values"] == [0.90, 0.91, 0.93] and opd["mean"] == pytest.approx(0.91333, abs=1e-5)
    assert opd["pooled"] == {"successes": 548, "episodes": 600, "success_rate": pytest.approx(548 / 600),
                             "ci95": pytest.approx(wilson_interval(548, 600), abs=1e-4)}  # fmt: skip
    dagger = runs["opd_vs"]["dagger"]  # per run +2, -1, +7 points
    assert dagger["values"] == pytest.approx([0.02, -0.01, 0.07]) and dagger["ahead_in"] == 2
    assert dagger["ci95"][0] < 0 < dagger["ci95"][1]  # three runs this far apart do not rank them
    # every run's episodes paired on their seeds: OPD alone wins 4 + 14 = 18 seeds, dagger alone 2
    assert (dagger["pooled_paired"]["only_a"], dagger["pooled_paired"]["only_b"]) == (18, 2)
    sim_only = runs["policies"]["sim_only"]["mean"]
    assert runs["opd_gap_closed"] == pytest.approx((opd["mean"] - sim_only) / (0.98 - sim_only))
    targets = {t["target"]: t for t in report["targets"]}  # judged over runs
    assert targets["OPD success on the proxy"]["value"] == pytest.approx(opd["mean"])
    better = targets["better than dagger at equal budget"]
    assert better["pass"] is True and better["value"] == pytest.approx(0.02666, abs=1e-4)
    assert "ahead in 2 of 3 runs" in better["note"] and "(includes 0)" in better["note"]
    assert report["targets_first_run"] == reports[0]["targets"]
    assert runs["starts_per_run"] == {"0": 1, "1000": 1, "2000": 1}
    md = markdown(report)
    assert (
        "## Over 3 training runs (seeds 0, 1000, 2000)" in md and "| seed 0 | seed 1000 | seed 2000 |" in md
    )
    assert "| opd | 91.3% |" in md and "OPD ahead in 2 of 3" in md
    assert "## The run with training seed 0" in md and "## Targets (over the 3 runs: their means)" in md
    assert "different sim-trained starts" not in md
    json.dumps(report, allow_nan=False)

    reports[1000]["methods"]["opd"]["start_sha256"] = "b"  # the start retrained differently between methods
    flagged = with_runs(reports, cfg)
    assert flagged["over_runs"]["starts_per_run"]["1000"] == 2
    assert "**Seed 1000's methods began from 2 different sim-trained starts**" in markdown(flagged)


def test_an_opd_variant_is_compared_with_opd_and_its_rivals_while_the_targets_stay_opds(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from agent.commands.eval import _print_transfer

    cfg = TransferConfig(methods=[*METHODS, "opd_novelty"], seeds=[1000, 2000])
    reports = runs_reports(cfg, {
        1000: {"sim_only": 150, "dagger": 184, "novelty": 178, "opd": 182, "opd_novelty": 188},
        2000: {"sim_only": 170, "dagger": 172, "novelty": 182, "opd": 186, "opd_novelty": 184},
    })  # fmt: skip
    first = reports[1000]["derived"]["variants"]["opd_novelty"]
    assert first["vs"]["novelty"]["difference"] == pytest.approx(0.05)  # 188 against 178 of 200
    assert first["vs"]["opd"]["paired"]["only_a"] == 6  # seeds 182-187: only the variant succeeded
    assert first["gap_closed"] == pytest.approx((0.94 - 0.75) / (0.98 - 0.75))
    report = with_runs(reports, cfg)
    variant = report["over_runs"]["variants"]["opd_novelty"]
    assert (
        variant["vs"]["opd"]["values"] == pytest.approx([0.03, -0.01])
        and variant["vs"]["opd"]["ahead_in"] == 1
    )
    assert variant["vs"]["novelty"]["mean"] == pytest.approx(0.03)
    means = report["over_runs"]["policies"]
    assert variant["gap_closed"] == pytest.approx(
        (means["opd_novelty"]["mean"] - means["sim_only"]["mean"]) / (0.98 - means["sim_only"]["mean"])
    )
    targets = {t["target"]: t for t in report["targets"]}  # still OPD's
    assert targets["OPD success on the proxy"]["value"] == pytest.approx(means["opd"]["mean"])
    md = markdown(report)
    assert (
        "- opd_novelty vs novelty: +3.0 points on average (per run +5.0, +1.0; opd_novelty ahead in 2 of 2)"
        in md
    )
    assert "- opd_novelty vs opd: +5.0 points; the 95% CIs overlap." not in md  # the first run's: +3.0
    assert "- opd_novelty vs opd: +3.0 points; the 95% CIs overlap." in md
    assert "| opd_novelty | 93.0% |" in md
    _print_transfer(report)
    assert "variant opd_novelty: closes" in capsys.readouterr().out
    cfg = TransferConfig(methods=["sim_only", "opd_novelty"], seeds=[1000, 2000])
    counts = {s: {"sim_only": 150, "opd_novelty": 188} for s in (1000, 2000)}
    alone = with_runs(runs_reports(cfg, counts), cfg)
    _print_transfer(alone)
    assert "variant opd_novelty: closes 82.6% of the gap; no rival run" in capsys.readouterr().out


def test_targets_of_methods_not_run_are_not_measured() -> None:
    cfg = TransferConfig(methods=["opd"])
    report = build_report(cfg, cfg.train(), evaluation(196), {"opd": method_result(184)}, "agent x")
    assert report["derived"] == {"opd_gap_closed": None, "gap_split": None, "opd_transfer_won_back": None,
                                 "opd_vs_sim_only_dr": None, "opd_vs_dagger": None, "opd_vs_novelty": None,
                                 "variants": {}}  # fmt: skip
    # no rival run: no comparison to judge; the gap needs sim_only
    assert [(t["target"], t["pass"]) for t in report["targets"]] == [
        ("OPD success on the proxy", True), ("sim-only-to-teacher gap closed", None),
        ("teacher interventions, last 20% of training", True)]  # fmt: skip


def test_config_resolves_the_training_budget_and_refuses_repeats() -> None:
    # the trainer's methods can be benchmarked
    assert set(METHODS) | set(VARIANTS) | set(RIVALS) == set(get_args(Method))
    assert all(set(rivals) <= set(METHODS) for rivals in VARIANTS.values())
    cfg = TransferConfig.from_yaml(QUICK)
    assert cfg.methods == list(METHODS) and cfg.episodes <= 10
    train = cfg.train("dagger")
    assert (train.method, train.total_steps, train.seed) == ("dagger", cfg.total_steps, cfg.seeds[0])
    assert cfg.train("dagger", seed=1000).seed == 1000
    assert TransferConfig(total_steps=None).train().total_steps == 100_000  # opd/configs/student.yaml's
    with pytest.raises(ConfigError, match="methods"):
        TransferConfig.from_dict({"methods": ["opd", "opd"]})
    with pytest.raises(ConfigError, match="episodes"):
        TransferConfig.from_dict({"episodes": 0})
    with pytest.raises(ConfigError, match="seeds"):
        TransferConfig.from_dict({"seeds": [0, 0]})
    with pytest.raises(ConfigError, match="seeds"):
        TransferConfig.from_dict({"seeds": []})


def test_wall_clock_is_the_trainers_total_and_counts_runs(tmp_path: Path) -> None:
    path = tmp_path / "wall_clock.json"
    record_wall_clock(path, 2.5)
    record_wall_clock(path, 3.5)  # a resumed run: the trainer's seconds include the first run's
    assert json.loads(path.read_text()) == {"seconds": 3.5, "runs": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["wall_clock.json"]  # written by rename


def test_a_cached_teacher_evaluation_is_not_redone(tmp_path: Path) -> None:
    cfg = TransferConfig.from_yaml(QUICK)
    write_json(tmp_path / "teacher" / "eval.json", {**evaluation(3, cfg.episodes), "proxy": True})
    write_json(tmp_path / "teacher" / "eval_clean.json", {**evaluation(5, cfg.episodes), "proxy": False})
    teacher = TransferBenchmark(cfg, tmp_path).teacher()
    assert (
        teacher["success_rate"] == 3 / cfg.episodes and teacher["clean"]["success_rate"] == 5 / cfg.episodes
    )
    no_clean = cfg.model_copy(update={"clean_reference": False})
    assert "clean" not in TransferBenchmark(no_clean, tmp_path).teacher()


def test_a_kept_evaluation_is_not_retrained_without_its_artifact_or_checkpoints(tmp_path: Path) -> None:
    """Only the small files of a finished method are kept between machines: eval.json stands for them."""
    cfg = TransferConfig.from_yaml(QUICK)
    bench = TransferBenchmark(cfg, tmp_path)
    out = tmp_path / "dagger"
    write_json(out / "eval.json", {**evaluation(2, cfg.episodes), "steps": bench.base.total_steps})
    write_json(out / "wall_clock.json", {"seconds": 7.0, "runs": 1})
    (out / "history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ramp([100, 200])))
    result = bench.method("dagger")
    assert result["success_rate"] == 2 / cfg.episodes and result["wall_clock_s"] == 7.0
    assert result["decisions"] == 200
    assert not (out / "checkpoints").exists()  # nothing was trained
    assert "clean" not in result  # only the sim-only student gets the clean-sim reference

    sim_only = tmp_path / "sim_only"
    write_json(sim_only / "eval.json", {**evaluation(4, cfg.episodes), "steps": bench.base.total_steps})
    assert bench.method("sim_only")["clean"] is None  # no artifact to evaluate in the clean sim: n/a
    write_json(sim_only / "eval_clean.json", evaluation(6, cfg.episodes))  # kept from the machine that had it
    assert bench.method("sim_only")["clean"]["success_rate"] == 6 / cfg.episodes


def test_a_kept_result_trained_under_another_config_is_refused_not_reused(tmp_path: Path) -> None:
    """A method directory whose training config is not the one this benchmark asks for (here another seed
    list) used to count as done: its results stood for a run the command did not make."""
    cfg = TransferConfig.from_yaml(QUICK)
    out = tmp_path / "dagger"
    out.mkdir()
    cfg.train("dagger").to_yaml(out / "config.yaml")
    write_json(out / "eval.json", {**evaluation(2, cfg.episodes), "steps": cfg.train().total_steps})
    (out / "history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ramp([100, 200])))
    assert TransferBenchmark(cfg, tmp_path).method("dagger")["success_rate"] == 2 / cfg.episodes
    other = TransferConfig.from_dict({**cfg.model_dump(), "seeds": [5]})
    with pytest.raises(ValueError, match=r"another config \(seed: 0 -> 5\)"):
        TransferBenchmark(other, tmp_path).method("dagger")
    assert not (out / "checkpoints").exists()  # nothing was trained over it


def test_every_committed_benchmark_run_is_the_run_its_config_asks_for() -> None:
    """Each kept method (and sim-trained start) of a committed benchmark passes the check a resume makes.
    Configs saved before runs saved the config that ran (a DAgger run's, kept here as data, says `switch:
    predictor`, the file's, though it gated with `student`; its `history: 5`, though its windows were the
    head's 128 frames) are compared resolved with the run asked for, so they still count as done."""
    saved = DATA / "dagger_config_saved_unresolved.yaml"  # transfer_wide_bf16's dagger run, seed 0
    old = StudentTrainConfig.from_yaml(saved).opd
    assert (old.switch, old.align.history) == ("predictor", 5)  # the unresolved form
    refuse_another_config(
        saved, TransferConfig.from_yaml(QUICK.parent / "transfer_wide_bf16.yaml").train("dagger")
    )
    checked = 0
    for config in sorted(RESULTS.glob("*/config.yaml")):  # the runs kept: under way, or read by one
        cfg = TransferConfig.from_yaml(config)
        for seed in cfg.seeds:
            run = config.parent if seed == cfg.seeds[0] else config.parent / f"seed{seed}"
            kept = {m: cfg.train(m, seed) for m in cfg.methods}
            if cfg.pretrain is not None:
                kept["pretrain"] = cfg.pretrain_train(seed)
            for name, want in kept.items():
                if (run / name / "config.yaml").is_file():
                    refuse_another_config(run / name / "config.yaml", want)
                    checked += 1
    assert checked >= 2  # transfer_wide_bf16's starts of seeds 1000 and 2000


def test_write_report_writes_the_markdown_json_and_plots(tmp_path: Path) -> None:
    methods = {"sim_only": method_result(100), "dagger": method_result(120),
               "novelty": method_result(150), "opd": method_result(140)}  # fmt: skip
    report = build_report(TransferConfig(), TransferConfig().train(), evaluation(196), methods, "agent x")
    rows = ramp(list(range(100, 1001, 100)))
    for row in rows:
        row.update({"threshold": 0.1, "pred_error/h1": 0.3, "pred_error/h2": 0.4})
    histories = {m: rows for m in METHODS} | {"sim_only": []}
    md = write_report(report, histories, tmp_path).read_text()
    assert json.loads((tmp_path / "results.json").read_text()) == json.loads(json.dumps(report))
    for plot in PLOTS:
        assert (tmp_path / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"]({plot})" in md
    assert "`agent x`" in md and "| teacher | 98.0% |" in md
    assert "one training run per method" in md  # the intervals do not cover retraining
    assert f"trained for {report['config']['train']['total_steps']:,} decisions" in md
    assert "| OPD success on the proxy | >= 90% | 70.0% | FAIL |" in md  # opd: 140 of 200
    versus = "| better than dagger at equal budget | > rival | +10.0 points | PASS | 95% CIs separate: no |"
    assert versus in md
    assert "## While training" not in md  # histories without episodes: nothing to count

    methods["opd"]["training_episodes"] = training_episodes(
        [{**rows[-1], "train_outcomes": {"success": 99, "collision": 1}}]
    )
    methods["dagger"]["training_episodes"] = training_episodes(
        [{**rows[-1], "episodes": 100, "episode/success": 0.92}]
    )
    md = write_report(report | {"methods": methods}, histories, tmp_path).read_text()
    assert "| opd | 99.0% | 94.5%-99.8% | 100 | the whole run | 1 | 99 |" in md
    assert "| dagger | 92.0% | 85.0%-95.9% | 100 | the first 100 episodes | - | - |" in md
    assert "## Why the teacher acted" not in md
    methods["opd"]["teacher_reasons_last20"] = {"holding": 0.06, "skill_disagreement": 0.04}
    md = write_report(report | {"methods": methods}, histories, tmp_path).read_text()
    assert "| method | holding | skill_disagreement |" in md and "| opd | 6.0% | 4.0% |" in md


EXPERIMENTS = Path(__file__).parents[3] / "docs" / "experiments" / "configs"


@pytest.mark.parametrize(
    "path",
    sorted([*QUICK.parent.glob("transfer*.yaml"), *EXPERIMENTS.glob("transfer*.yaml")]),
    ids=lambda p: p.name,
)
def test_every_shipped_transfer_config_trains_every_method_from_a_teacher_that_exists(path: Path) -> None:
    from policies.config import from_root

    cfg = TransferConfig.from_yaml(path)
    for method in cfg.methods:
        train = cfg.train(method)
        assert train.method == method and train.seed == cfg.seeds[0]
        assert from_root(train.teacher).is_file()
    if cfg.pretrain is not None:
        start = cfg.pretrain_train()
        assert (
            start.method == "sim_only" and start.seed == cfg.seeds[0] and from_root(start.teacher).is_file()
        )


@pytest.mark.slow
def test_with_pretrain_every_method_starts_from_one_sim_trained_student(tmp_path: Path) -> None:
    """The sim-trained start is trained once, evaluated, reported, and each method starts from it; once
    every method is finished, its eval.json alone stands for it (nothing is retrained without it)."""
    cfg = TransferConfig.from_dict({
        "methods": ["opd"], "train_config": "opd/configs/student_quick.yaml", "total_steps": 64,
        "episodes": 1, "num_envs": 1,
        "pretrain": {"train_config": "opd/configs/student_quick.yaml", "total_steps": 96},
    })  # fmt: skip
    assert cfg.pretrain_train().method == "sim_only" and cfg.pretrain_train().total_steps == 96
    report = TransferBenchmark(cfg, tmp_path).run()
    assert report is not None
    start = tmp_path / "pretrain" / "artifact"
    origin = json.loads((tmp_path / "opd" / "init_from.json").read_text())
    assert origin["artifact"] == str(start)  # the method started from the sim-trained student
    pretrain = report["pretrain"]
    assert pretrain["decisions"] == 96 and pretrain["episodes"] == 1 and pretrain["labels"] > 0
    kept_start = json.loads((tmp_path / "pretrain" / "eval.json").read_text())
    assert kept_start["steps"] == 96 and kept_start["weights_sha256"] == origin["weights_sha256"]
    assert pretrain["start_sha256"] == origin["weights_sha256"] == sha256_file(start / "student.pt")
    assert "| pretrained |" in write_report(report, {}, tmp_path / "report").read_text()
    done = cfg.train("opd").model_copy(update={"init_from": str(start)})
    assert train_and_export(done, tmp_path / "opd") == 64  # found done: exported again, not another run
    assert json.loads((tmp_path / "opd" / "wall_clock.json").read_text())["runs"] == 1

    kept = (tmp_path / "pretrain" / "eval.json").read_text()
    shutil.rmtree(tmp_path / "pretrain" / "checkpoints")  # asked for more episodes: evaluated again, not
    more = cfg.model_copy(update={"episodes": 2})  # retrained (its checkpoints are gone)
    assert TransferBenchmark(more, tmp_path).pretrained(needed=False) == start
    assert json.loads((tmp_path / "pretrain" / "eval.json").read_text())["episodes"] == 2
    assert not (tmp_path / "pretrain" / "checkpoints").exists()
    (tmp_path / "pretrain" / "eval.json").write_text(kept)

    shutil.rmtree(start)  # another machine: only the small files were kept
    again = TransferBenchmark(cfg, tmp_path).run()
    assert again is not None and again["pretrain"] == pretrain and again["methods"] == report["methods"]
    assert not start.exists()  # not retrained: no method needed it


@pytest.mark.slow
def test_each_training_seed_runs_the_whole_pipeline_in_its_own_directory(tmp_path: Path) -> None:
    """The first seed's run sits where a one-seed benchmark writes it; every other seed trains its own
    sim-trained start and methods under OUT/seed<s>, and the report is over both runs."""
    cfg = TransferConfig.from_dict({
        "methods": ["opd"], "train_config": "opd/configs/student_quick.yaml", "total_steps": 64,
        "episodes": 1, "num_envs": 1, "seeds": [0, 7],
        "pretrain": {"train_config": "opd/configs/student_quick.yaml", "total_steps": 64},
    })  # fmt: skip
    report = TransferBenchmark(cfg, tmp_path).run()
    assert report is not None and report["over_runs"]["seeds"] == [0, 7]
    for run, seed in ((tmp_path, 0), (tmp_path / "seed7", 7)):
        for step in ("pretrain", "opd"):
            assert yaml.safe_load((run / step / "config.yaml").read_text())["seed"] == seed
        origin = json.loads((run / "opd" / "init_from.json").read_text())
        assert origin["artifact"] == str(run / "pretrain" / "artifact")  # each run from its own start
    assert set(report["runs"]) == {"0", "7"} and report["over_runs"]["starts_per_run"] == {"0": 1, "7": 1}
    assert report["over_runs"]["policies"]["pretrained"]["runs"] == 2


def test_the_command_prints_the_means_over_runs(capsys: pytest.CaptureFixture[str]) -> None:
    from agent.commands.eval import _print_transfer

    cfg = TransferConfig(seeds=[0, 1000])
    reports = runs_reports(cfg, {0: {"sim_only": 160, "opd": 180}, 1000: {"sim_only": 150, "opd": 184}})
    _print_transfer(with_runs(reports, cfg))
    out = capsys.readouterr().out
    assert "the run with seed 0" in out and "over 2 training runs (seeds 0, 1000)" in out
    assert "91.0%" in out and "90.0% 92.0%" in out  # opd's mean and its runs
    assert "ahead in" not in out  # no rival was run: the comparisons are n/a


def test_a_start_retrained_into_another_student_is_evaluated_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A start rebuilt on another CPU (or after a resume) is not the student its eval.json describes."""
    cfg = TransferConfig.from_dict({
        "methods": ["opd"], "train_config": "opd/configs/student_quick.yaml", "total_steps": 64,
        "episodes": 3, "pretrain": {"train_config": "opd/configs/student_quick.yaml", "total_steps": 96},
    })  # fmt: skip
    bench = TransferBenchmark(cfg, tmp_path)
    start = tmp_path / "pretrain"
    shutil.copytree(SHIPPED, start / "artifact")  # rebuilt: other weights than the ones evaluated
    rebuilt = Artifact.load(SHIPPED).weights_hash
    assert rebuilt == sha256_file(SHIPPED / "student.pt") != "0" * 64
    write_json(start / "eval.json", {**evaluation(2, 3), "steps": 96, "weights_sha256": "0" * 64})
    evaluated: list[Path] = []
    monkeypatch.setattr(bench, "_evaluate_student", lambda a: evaluated.append(a) or evaluation(1, 3))
    assert bench.pretrained(needed=True) == (start / "artifact").resolve()
    kept = json.loads((start / "eval.json").read_text())
    assert evaluated and kept["success_rate"] == 1 / 3  # the rebuilt start's figure, not the old one's
    assert kept["weights_sha256"] == rebuilt
    assert "another student than the one its eval.json evaluated" in caplog.text
    bench.pretrained(needed=True)
    assert len(evaluated) == 1  # the same start again: its evaluation stands
    # a method trained from the old start is flagged: two starts in one run
    methods = {"opd": method_result(180) | {"start_sha256": "0" * 64}}
    report = build_report(cfg, cfg.train(), evaluation(196), methods, "x", bench._pretrain_result())
    assert run_starts(report) == 2


def test_bfloat16_training_is_refused_where_the_cpu_would_emulate_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Emulated, a bfloat16 update cost 12x float32's: a benchmark method would train for ~10 h."""
    import opd.benchmark.transfer as tb

    cfg = TransferConfig.from_dict({"methods": ["opd"], "train_config": "opd/configs/student_quick.yaml",
                                    "total_steps": 64, "episodes": 3})  # fmt: skip
    train = cfg.train("opd")
    bf16 = train.model_copy(update={"opd": train.opd.model_copy(update={
        "distill": train.opd.distill.model_copy(update={"precision": "bf16"})})})  # fmt: skip
    monkeypatch.setattr(tb, "native_bf16", lambda: False)
    with pytest.raises(RuntimeError, match="no native bfloat16"):
        train_and_export(bf16, tmp_path / "opd")
    assert not (tmp_path / "opd" / "checkpoints").exists()  # refused before anything was written


GAP = "sim/configs/proxy_gap.yaml"


def gap_config(**update: object) -> TransferConfig:
    """A benchmark on the gap preset judged as issue 53 asks: the transfer gap won back, p < 0.05."""
    targets = {"opd_success": 0.89, "gap_closed": 0.8, "gap": "transfer", "p_value": 0.05}
    return TransferConfig.from_dict({"methods": ["sim_only", "sim_only_dr", "dagger", "novelty", "opd"],
                                     "proxy_config": GAP, "targets": targets, **update})  # fmt: skip


def test_the_gap_targets_are_the_transfer_gap_won_back_and_leads_a_paired_test_trusts() -> None:
    cfg = gap_config()
    # 200 episodes: sim_only 2% on the gap proxy, 80% in the clean sim; the teacher 97.5%
    rates = {"sim_only": 4, "sim_only_dr": 60, "dagger": 170, "novelty": 176, "opd": 180}
    methods = {m: method_result(k) | {"episode_success": "1" * k + "0" * (200 - k)} for m, k in rates.items()}
    methods["sim_only"]["clean"] = evaluation(160)
    teacher = evaluation(195) | {"clean": evaluation(197)}
    report = build_report(cfg, cfg.train(), teacher, methods, "agent x")
    won = (0.90 - 0.02) / (0.80 - 0.02)
    assert report["derived"]["opd_transfer_won_back"] == pytest.approx(won)
    assert report["derived"]["opd_gap_closed"] == pytest.approx((0.90 - 0.02) / (0.975 - 0.02))  # still kept
    targets = {t["target"]: t for t in report["targets"]}
    assert targets["transfer gap won back (sim-only clean to proxy)"]["pass"] is True
    assert targets["OPD success on the proxy"]["pass"] is True  # 90% >= 89%
    # +10 points over sim_only_dr on 120 seeds only OPD won: p far below 0.05
    assert targets["better than sim_only_dr at equal budget"]["pass"] is True
    assert targets["better than dagger at equal budget"]["pass"] is True  # 10 seeds one way: p = 0.002
    # ahead by 4 seeds of 200: ahead, but not beyond noise (p = 0.125)
    novelty = targets["better than novelty at equal budget"]
    assert novelty["value"] == pytest.approx(0.02) and novelty["pass"] is False
    assert novelty["goal"] == "> rival, p < 0.05" and "p = 0.125" in novelty["note"]
    md = markdown(report)
    assert "| better than novelty at equal budget | > rival, p < 0.05 | +2.0 points | FAIL |" in md
    assert "- OPD vs sim_only_dr: +60.0 points" in md
    del methods["novelty"]["episode_success"]  # an evaluation that kept no episodes: cannot be judged
    report = build_report(cfg, cfg.train(), teacher, methods, "agent x")
    assert {t["target"]: t["pass"] for t in report["targets"]}["better than novelty at equal budget"] is None


def test_over_runs_the_gap_is_won_back_between_the_means_and_leads_are_tested_on_pooled_episodes() -> None:
    cfg = gap_config(seeds=[1000, 2000])
    reports = runs_reports(cfg, {
        1000: {"sim_only": 2, "sim_only_dr": 50, "dagger": 170, "novelty": 180, "opd": 184},
        2000: {"sim_only": 6, "sim_only_dr": 70, "dagger": 176, "novelty": 180, "opd": 182},
    })  # fmt: skip
    for report, clean in zip(reports.values(), (160, 150), strict=True):
        report["methods"]["sim_only"]["clean"] = summary(evaluation(clean))
        report["teacher"]["clean"] = summary(evaluation(197))
    report = with_runs(reports, cfg)
    runs = report["over_runs"]
    sim_only, opd = 0.02, 0.915  # the means
    assert runs["gap_split"]["sim_only_clean"] == pytest.approx(0.775)
    assert runs["opd_transfer_won_back"] == pytest.approx((opd - sim_only) / (0.775 - sim_only))
    targets = {t["target"]: t for t in report["targets"]}
    assert (
        targets["transfer gap won back (sim-only clean to proxy)"]["value"] == runs["opd_transfer_won_back"]
    )
    # novelty: OPD ahead in both runs by 4 and 2 seeds: 6 discordant seeds pooled, p = 0.031
    novelty = targets["better than novelty at equal budget"]
    assert runs["opd_vs"]["novelty"]["pooled_paired"]["p_value"] == pytest.approx(2 / 2**6)
    assert novelty["pass"] is True and "pooled paired p = 0.0312" in novelty["note"]
    assert "Gap split between the means" in markdown(report)


def test_the_benchmarks_proxy_preset_trains_the_adapting_methods_and_keeps_evaluations_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`proxy_config` is the robot every method but the sim-only ones adapts on and what every policy is
    evaluated on; an evaluation made on another proxy (or before evaluations named theirs) is redone."""
    import opd.benchmark.transfer as tb
    from opd.evaluation import config_sha256
    from policies.config import from_root
    from sim.real_robot_proxy import ProxyConfig

    quick = TransferConfig.from_yaml(QUICK)
    cfg = TransferConfig.from_dict({**quick.model_dump(), "proxy_config": GAP})
    assert {cfg.train(m).proxy_config for m in ("opd", "sim_only_dr", "sim_only")} == {GAP}
    assert quick.train("opd").proxy_config == "sim/configs/proxy.yaml"  # the training config's otherwise
    bench = TransferBenchmark(cfg, tmp_path)
    gap = config_sha256(ProxyConfig.from_yaml(from_root(GAP)))
    assert bench.proxy_sha256 == gap
    runs: list[Path | None] = []
    monkeypatch.setattr(tb, "evaluate_teacher", lambda *a, proxy, **k: runs.append(proxy) or {
        **evaluation(1, cfg.episodes), "proxy": proxy is not None,
        "proxy_config": None if proxy is None else {"path": GAP, "sha256": gap}})  # fmt: skip
    made_on = {"proxy": True, "proxy_config": {"path": "sim/configs/proxy.yaml", "sha256": "0" * 64}}
    write_json(tmp_path / "teacher" / "eval.json", {**evaluation(3, cfg.episodes), **made_on})
    write_json(tmp_path / "teacher" / "eval_clean.json", {**evaluation(5, cfg.episodes), "proxy": False})
    teacher = bench.teacher()
    assert runs == [from_root(GAP)] and teacher["success_rate"] == 1 / cfg.episodes  # redone on the gap
    assert teacher["clean"]["success_rate"] == 5 / cfg.episodes  # the clean sim's stands
    bench.teacher()
    assert len(runs) == 1  # made on the gap preset: kept
    before_hashes = {**evaluation(3, cfg.episodes), "proxy": True}  # no proxy_config: made on the default
    write_json(tmp_path / "teacher" / "eval.json", before_hashes)
    assert TransferBenchmark(quick, tmp_path).teacher()["success_rate"] == 3 / cfg.episodes
    bench.teacher()
    assert len(runs) == 2  # not on the gap preset


def test_a_start_kept_by_another_benchmark_is_taken_not_retrained_and_evaluated_on_this_proxy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pretrain = {"train_config": "opd/configs/student_quick.yaml", "total_steps": 96}
    base = {"methods": ["opd"], "train_config": "opd/configs/student_quick.yaml", "total_steps": 64,
            "episodes": 3, "pretrain": pretrain}  # fmt: skip
    source = tmp_path / "theirs"
    theirs = TransferConfig.from_dict({**base, "seeds": [0, 7]})
    kept = source / "seed7" / "pretrain"  # their seed 7's start: trained, its artifact kept
    kept.mkdir(parents=True)
    theirs.to_yaml(source / "config.yaml")
    theirs.pretrain_train(7).to_yaml(kept / "config.yaml")
    shutil.copytree(SHIPPED, kept / "artifact")
    (kept / "student.yaml").write_text(yaml.safe_dump({"method": "sim_only", "steps": 96}))
    write_json(kept / "wall_clock.json", {"seconds": 42.0, "runs": 1})
    (kept / "history.jsonl").write_text(json.dumps({"step": 96, "labels": 90, "teacher_steps": 0}) + "\n")
    write_json(kept / "eval.json", {**evaluation(2, 3), "steps": 96, "proxy": True})  # their proxy's

    cfg = TransferConfig.from_dict({**base, "seeds": [7, 0], "proxy_config": GAP,
                                    "pretrain": {**pretrain, "starts_from": str(source)}})  # fmt: skip
    ours = tmp_path / "ours"
    bench = TransferBenchmark(cfg, ours)
    assert bench.start_dir(7) == kept
    assert bench.start_dir(0) == ours / "seed0" / "pretrain"  # their seed 0 kept no artifact: trained here
    evaluated: list[Path] = []
    monkeypatch.setattr(bench, "_evaluate_student", lambda a: evaluated.append(a) or evaluation(1, 3))
    assert bench.pretrained(seed=7) == (kept / "artifact").resolve()
    assert evaluated == [(kept / "artifact").resolve()]  # evaluated again, here
    mine = json.loads((ours / "pretrain" / "eval.json").read_text())
    assert mine["success_rate"] == 1 / 3 and mine["weights_sha256"] == Artifact.load(SHIPPED).weights_hash
    assert not (kept / "checkpoints").exists() and not (ours / "pretrain" / "checkpoints").exists()
    result = bench._pretrain_result(7)
    assert (result["wall_clock_s"], result["labels"], result["success_rate"]) == (42.0, 90, 1 / 3)
    assert json.loads((kept / "eval.json").read_text())["success_rate"] == 2 / 3  # theirs untouched
    bench.pretrained(seed=7)
    assert len(evaluated) == 1  # kept
    longer = TransferConfig.from_dict({**cfg.model_dump(), "pretrain": {**pretrain, "total_steps": 200,
                                       "starts_from": str(source)}})  # fmt: skip
    assert TransferBenchmark(longer, tmp_path / "longer").start_dir(7) == tmp_path / "longer" / "pretrain"
    (kept / "config.yaml").write_text((kept / "config.yaml").read_text().replace("seed: 7", "seed: 8"))
    with pytest.raises(ValueError, match="another config"):  # not the start this config makes: refused
        bench.pretrained(seed=7)


def test_the_gap_benchmark_takes_its_starts_from_the_benchmark_of_record(tmp_path: Path) -> None:
    cfg = TransferConfig.from_yaml(QUICK.parent / "transfer_gap.yaml")
    bench = TransferBenchmark(cfg, tmp_path)
    assert cfg.proxy_config == GAP and cfg.targets.gap == "transfer" and cfg.targets.p_value == 0.05
    assert set(cfg.methods) == {"sim_only", "sim_only_dr", "dagger", "novelty", "opd"}
    for seed in (1000, 2000):  # committed with their artifacts
        start = bench.start_dir(seed)
        assert start == RESULTS / "transfer_wide_bf16" / f"seed{seed}" / "pretrain"
        refuse_another_config(start / "config.yaml", cfg.pretrain_train(seed))


def test_a_method_whose_final_artifact_was_kept_is_evaluated_not_retrained(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A method trained in one session and evaluated in the next: only its small files and its artifact
    (committed for the evaluation) reach the next checkout, no checkpoint."""
    cfg = TransferConfig.from_dict({"methods": ["opd"], "train_config": "opd/configs/student_quick.yaml",
                                    "total_steps": 64, "episodes": 3})  # fmt: skip
    bench = TransferBenchmark(cfg, tmp_path)
    out = tmp_path / "opd"
    shutil.copytree(SHIPPED, out / "artifact")
    cfg.train("opd").to_yaml(out / "config.yaml")
    (out / "student.yaml").write_text(yaml.safe_dump({"method": "opd", "steps": 32}))
    write_json(out / "wall_clock.json", {"seconds": 5.0, "runs": 1})
    evaluated: list[Path] = []
    monkeypatch.setattr(bench, "_evaluate_student", lambda a: evaluated.append(a) or evaluation(2, 3))

    def retrain(*_: object) -> None:
        raise RuntimeError("retrained")

    monkeypatch.setattr("opd.benchmark.transfer.StudentTrainer", retrain)
    with pytest.raises(RuntimeError, match="retrained"):  # exported short of the budget: trained on
        bench.method("opd")
    (out / "student.yaml").write_text(yaml.safe_dump({"method": "opd", "steps": 64}))
    result = bench.method("opd")
    assert evaluated == [out / "artifact"] and result["success_rate"] == 2 / 3
    assert json.loads((out / "eval.json").read_text())["steps"] == 64
    assert json.loads((out / "wall_clock.json").read_text()) == {"seconds": 5.0, "runs": 1}  # no new run
