"""The OPD gate: schedule, hysteresis and dwell, safety overrides, the calibrated budget, checkpoints."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from opd.distill.gate import REASONS, Gate, GateConfig, GateDecision
from policies.config import ConfigError

THRESHOLD = 0.15  # constant-schedule threshold of `gate()`, stds


def gate(num_envs: int = 1, **cfg: Any) -> Gate:
    """A gate with a constant 0.15 threshold unless overridden."""
    return Gate(GateConfig.from_dict({"schedule": "constant", **cfg}), num_envs)


def decide(
    g: Gate,
    error: float | list[float] | np.ndarray,
    *,
    now: float = 0.0,
    step: int = 0,
    skills: tuple[int, int] = (0, 0),
    in_contract: bool = True,
    ok: bool = True,
) -> GateDecision:
    """One decision with the same inputs for every env; `error` may differ per env."""
    n = g.num_envs
    error = np.broadcast_to(np.asarray(error, float), (n,))
    student, teacher = np.full(n, skills[0]), np.full(n, skills[1])
    return g.decide(step, np.full(n, now), error, student, teacher, np.full(n, in_contract), np.full(n, ok))


@pytest.mark.parametrize("schedule", ["exponential", "linear", "constant"])
def test_schedule_goes_from_start_to_end_and_stays(schedule: str) -> None:
    g = Gate(GateConfig(schedule=schedule, decay_steps=1_000), 1)
    end = 0.15 if schedule == "constant" else 0.05
    assert g.threshold(0) == pytest.approx(0.15)
    assert g.threshold(1_000) == pytest.approx(end)
    assert g.threshold(5_000) == pytest.approx(end)
    values = [g.threshold(s) for s in range(0, 1_001, 100)]
    assert all(a >= b for a, b in zip(values, values[1:], strict=False)), "the threshold must not rise"
    middle = {"exponential": (0.15 * 0.05) ** 0.5, "linear": 0.10, "constant": 0.15}[schedule]
    assert g.threshold(500) == pytest.approx(middle)
    assert Gate(GateConfig(schedule=schedule, decay_steps=0), 1).threshold(10**6) == pytest.approx(0.15)


def test_decision_uses_the_scheduled_threshold() -> None:
    g = Gate(GateConfig(schedule="linear", decay_steps=1_000, min_teacher_steps=1), 1)
    assert not decide(g, 0.12, step=0).use_teacher[0]
    d = decide(g, 0.12, step=1_000)
    assert d.use_teacher[0] and d.threshold == pytest.approx(0.05) and d.release == pytest.approx(0.035)


def test_hysteresis_spike_takes_over_and_release_waits_for_the_dwell() -> None:
    g = gate(min_teacher_steps=3)
    for k in range(20):  # between release (0.105) and threshold: the student keeps control
        d = decide(g, 0.11 if k % 2 else 0.14)
        assert not d.use_teacher[0] and d.reason == ("student_confident",) and not d.switched[0]
    d = decide(g, 0.2)
    assert d.use_teacher[0] and d.switched[0] and d.reason == ("error_above_threshold",)
    for k in range(20):  # between release and threshold again: the teacher keeps control
        d = decide(g, 0.11 if k % 2 else 0.14)
        assert d.use_teacher[0] and d.reason == ("holding",) and not d.switched[0]
    assert decide(g, 0.01).reason == ("error_below_release",)
    for _ in range(2):  # every takeover gets its full dwell
        assert decide(g, 0.2).use_teacher[0]
        reasons = [decide(g, 0.01).reason[0] for _ in range(3)]  # below release at once: only after the dwell
        assert reasons == ["holding", "holding", "error_below_release"]
        assert not decide(g, 0.01).use_teacher[0]


def test_noisy_error_around_the_threshold_does_not_chatter() -> None:
    g = gate(min_teacher_steps=3)
    rng = np.random.default_rng(0)
    errors = THRESHOLD + rng.normal(0.0, 0.02, 2_000)
    naive = np.count_nonzero(np.diff(errors > THRESHOLD))  # switches of a bare comparator
    for k, e in enumerate(errors):
        decide(g, e, step=k)
    assert 0 < len(g.events) < naive / 10, (len(g.events), naive)
    takeovers = [e.step for e in g.events if e.to_teacher]
    releases = [e.step for e in g.events if not e.to_teacher]
    assert all(end - start >= 3 for start, end in zip(takeovers, releases, strict=False)), "spell < dwell"


def test_skill_disagreement_hands_over_after_disagree_s_and_not_before() -> None:
    g = gate(disagree_s=0.5, min_teacher_steps=1)
    assert not decide(g, 0.0, now=0.75).use_teacher[0]
    for now in (1.0, 1.25, 1.5):  # disagreeing since 1.0: 0.5 s is not longer than 0.5 s
        assert not decide(g, 0.0, now=now, skills=(0, 1)).use_teacher[0]
    d = decide(g, 0.0, now=1.75, skills=(0, 1))
    assert d.use_teacher[0] and d.reason == ("skill_disagreement",) and d.switched[0]
    assert decide(g, 0.0, now=2.0, skills=(0, 1)).reason == ("skill_disagreement",)
    d = decide(g, 0.0, now=2.25, skills=(1, 1))  # agreement, dwell passed, error low: back to the student
    assert not d.use_teacher[0] and d.reason == ("error_below_release",)


def test_agreement_and_reset_restart_the_disagreement_timer() -> None:
    g = gate(disagree_s=0.5)
    for now in (1.0, 1.25):
        decide(g, 0.0, now=now, skills=(0, 1))
    decide(g, 0.0, now=1.5, skills=(1, 1))
    for now in (1.75, 2.0, 2.25):  # since 1.75 only
        assert not decide(g, 0.0, now=now, skills=(0, 1)).use_teacher[0]
    g.reset()
    for now in (2.5, 2.75, 3.0):  # since 2.5 only
        assert not decide(g, 0.0, now=now, skills=(0, 1)).use_teacher[0]
    assert decide(g, 0.0, now=3.25, skills=(0, 1)).reason == ("skill_disagreement",)
    off = gate(disagree_s=0.0)
    assert not any(decide(off, 0.0, now=t, skills=(0, 1)).use_teacher[0] for t in range(100))


def test_a_silent_teacher_restarts_the_disagreement_timer() -> None:
    g = gate(disagree_s=0.5)
    for now, ok in ((1.0, True), (1.25, True), (1.5, False), (1.75, True), (2.0, True), (2.25, True)):
        assert not decide(g, 0.0, now=now, skills=(0, 1), ok=ok).use_teacher[0]
    assert decide(g, 0.0, now=2.5, skills=(0, 1)).use_teacher[0]


def test_out_of_contract_hands_over_whatever_the_error() -> None:
    g = gate(min_teacher_steps=2)
    for error in (0.0, float("nan")):
        g.reset()
        d = decide(g, error, in_contract=False)
        assert d.use_teacher[0] and d.reason == ("student_out_of_contract",)
        assert decide(g, 0.0).reason == ("holding",)  # the dwell holds after the override too
        assert not decide(g, 0.0).use_teacher[0]


def test_without_a_teacher_action_the_student_acts() -> None:
    g = gate()
    decide(g, 1.0)
    d = decide(g, 1.0, in_contract=False, ok=False)
    assert not d.use_teacher[0] and d.reason == ("teacher_unavailable",) and d.switched[0]
    assert g.events[-1].reason == "teacher_unavailable" and not g.events[-1].to_teacher


def test_unknown_error_keeps_the_current_source_and_is_not_recorded() -> None:
    g = gate(min_teacher_steps=1)
    d = decide(g, float("nan"))
    assert not d.use_teacher[0] and d.reason == ("error_unknown",)
    decide(g, 1.0)
    for _ in range(3):
        d = decide(g, float("nan"))
        assert d.use_teacher[0] and d.reason == ("error_unknown",) and not d.switched[0]
    assert g.state_dict()["window"] == [1.0]


def _stationary_rate(budget: float, dwell: int, gain: float = 0.005, steps: int = 2_000) -> float:
    """Teacher rate over the second half of N=8 envs fed a lognormal error (median 0.08 stds)."""
    g = gate(8, budget=budget, min_teacher_steps=dwell, budget_gain=gain)
    rng = np.random.default_rng(3)
    rates = [decide(g, rng.lognormal(-2.5, 0.6, 8), step=8 * k).use_teacher.mean() for k in range(steps)]
    return float(np.mean(rates[steps // 2 :]))


@pytest.mark.parametrize(("budget", "dwell"), [(0.1, 1), (0.3, 1), (0.3, 3)])
def test_teacher_rate_tracks_the_budget(budget: float, dwell: int) -> None:
    assert _stationary_rate(budget, dwell) == pytest.approx(budget, abs=0.03)


def test_a_decaying_budget_lowers_the_teacher_rate_to_its_end_value() -> None:
    steps, n = 3_000, 8
    g = gate(
        n,
        budget=0.4,
        budget_end=0.05,
        schedule="exponential",
        decay_steps=n * steps // 2,
        min_teacher_steps=1,
    )
    assert g.budget(0) == pytest.approx(0.4) and g.budget(n * steps) == pytest.approx(0.05)
    rng = np.random.default_rng(5)
    rates = [decide(g, rng.lognormal(-2.5, 0.6, n), step=n * k).use_teacher.mean() for k in range(steps)]
    early, late = np.mean(rates[200:400]), np.mean(rates[-steps // 4 :])
    assert early > 0.25  # the budget early on is 0.3-0.4
    assert late == pytest.approx(0.05, abs=0.02)


def test_the_plain_quantile_misses_the_budget_that_calibration_meets() -> None:
    assert _stationary_rate(0.3, 1, gain=1e-9) > 0.33  # hysteresis adds teacher decisions


def test_budget_uses_the_schedule_until_enough_errors_then_their_quantile() -> None:
    g = gate(8, budget=0.1, budget_min_samples=200, schedule="exponential", decay_steps=1_000)
    rng = np.random.default_rng(4)
    errors = rng.lognormal(-2.5, 0.6, (25, 8))
    for k, row in enumerate(errors):  # 25 x 8 = 200 errors: the last decision still uses the schedule
        scheduled = 0.15 * (0.05 / 0.15) ** (k / 1_000)
        assert decide(g, row, step=k).threshold == pytest.approx(scheduled)
    assert g.threshold(0) == pytest.approx(np.quantile(errors, 0.9))


def test_switch_events_carry_reason_error_and_threshold() -> None:
    g = gate(2, min_teacher_steps=1)
    decide(g, [0.01, 0.3], now=4.0, step=7)
    decide(g, [0.02, 0.05], now=4.25, step=8)
    assert [(e.env, e.time_s, e.step, e.to_teacher, e.reason, e.error, e.threshold) for e in g.events] == [
        (1, 4.0, 7, True, "error_above_threshold", 0.3, THRESHOLD),
        (1, 4.25, 8, False, "error_below_release", 0.05, THRESHOLD),
    ]
    assert g.counts == {
        "student/student_confident": 2,
        "teacher/error_above_threshold": 1,
        "student/error_below_release": 1,
    }


def test_reset_hands_chosen_envs_back_to_the_student() -> None:
    g = gate(3)
    d = decide(g, 1.0)
    g.reset(np.array([0, 2]))
    assert d.use_teacher.all(), "reset must not change a decision already returned"
    d = decide(g, 0.12)  # between release and threshold: only env 1 is still the teacher's
    assert d.use_teacher.tolist() == [False, True, False] and not d.switched.any()


def test_state_dict_round_trip_restores_behaviour() -> None:
    kw = {"budget": 0.2, "budget_window": 300, "budget_min_samples": 50, "disagree_s": 0.5}
    rng = np.random.default_rng(5)
    a = gate(4, **kw)

    def run(g: Gate, inputs: list[tuple]) -> list[tuple]:
        out = []
        for k, (err, skills, contract) in enumerate(inputs):
            d = g.decide(k, np.full(4, 0.25 * k), err, skills[0], skills[1], contract, np.ones(4, bool))
            out.append((d.use_teacher.tolist(), d.reason, d.threshold))
        return out

    def inputs(n: int) -> list[tuple]:
        return [
            (rng.lognormal(-2.5, 0.6, 4), rng.integers(0, 2, (2, 4)), rng.random(4) > 0.05) for _ in range(n)
        ]

    run(a, inputs(137))  # the window wraps mid-ring: 548 errors > 300
    state = json.loads(json.dumps(a.state_dict()))  # plain types only
    later = inputs(100)
    expected = run(a, later)
    b = gate(4, **kw)
    b.load_state_dict(state)
    assert run(b, later) == expected
    assert b.counts == a.counts and list(b.events) == list(a.events)


def test_config_errors_name_the_field() -> None:
    bad = {
        "threshold_end": 0.2,  # above threshold_start
        "release_ratio": 0.0,
        "budget": 1.0,
        "budget_min_samples": 3_000,  # above budget_window
        "min_teacher_steps": 0,
        "schedule": "cosine",
    }
    for field, value in bad.items():
        with pytest.raises(ConfigError, match=rf"\b{field} = "):
            GateConfig.from_dict({field: value})


def test_wrong_input_shape_is_named() -> None:
    g = gate(2)
    with pytest.raises(ValueError, match="teacher_ok"):
        g.decide(0, np.zeros(2), np.zeros(2), np.zeros(2), np.zeros(2), np.ones(2, bool), np.ones(3, bool))


STUDENT_REASONS = {"teacher_unavailable", "error_unknown", "error_below_release", "student_confident"}
TEACHER_REASONS = set(REASONS) - {"teacher_unavailable", "error_below_release", "student_confident"}


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 5), seed=st.integers(0, 2**32 - 1), dwell=st.integers(1, 4))
def test_decisions_follow_the_rules(n: int, seed: int, dwell: int) -> None:
    g = gate(n, min_teacher_steps=dwell, disagree_s=0.3, budget=0.2, budget_window=50, budget_min_samples=20)
    rng = np.random.default_rng(seed)
    was = np.zeros(n, bool)
    for k in range(40):
        error = np.where(rng.random(n) < 0.2, np.nan, rng.exponential(0.15, n))
        contract, ok = rng.random(n) > 0.2, rng.random(n) > 0.2
        d = g.decide(
            k, np.full(n, 0.1 * k), error, rng.integers(0, 2, n), rng.integers(0, 2, n), contract, ok
        )
        teacher = d.use_teacher
        assert not teacher[~ok].any() and teacher[ok & ~contract].all()
        assert all(d.reason[i] == "student_out_of_contract" for i in np.flatnonzero(ok & ~contract))
        assert np.array_equal(d.switched, teacher != was)
        for i in range(n):
            assert d.reason[i] in (TEACHER_REASONS if teacher[i] else STUDENT_REASONS)
            if d.reason[i] == "error_above_threshold":
                assert error[i] > d.threshold and not was[i]
            if d.reason[i] == "error_below_release":
                assert error[i] < d.release and was[i]
            if d.reason[i] == "error_unknown":
                assert np.isnan(error[i]) and teacher[i] == was[i]
        was = teacher.copy()
    assert sum(g.counts.values()) == 40 * n


@settings(max_examples=300, deadline=None)
@given(
    x=st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=300).map(np.array),
    q=st.floats(0.0, 1.0),
)
def test_the_budget_quantile_is_numpys_bit_for_bit(x: np.ndarray, q: float) -> None:
    from opd.distill.gate import quantile

    assert quantile(x, q) == float(np.quantile(x, q))


BANK = [
    GateConfig(schedule="constant", threshold_start=0.3, threshold_end=0.3),
    GateConfig(threshold_start=0.2, threshold_end=0.05, decay_steps=200, schedule="linear"),
    GateConfig(release_ratio=1.0, min_teacher_steps=1, disagree_s=0.0),
    GateConfig(budget=0.2, budget_min_samples=20, budget_window=50),
    GateConfig(budget=0.3, budget_end=0.05, decay_steps=300, budget_min_samples=30, budget_window=120),
    GateConfig(budget=0.1, budget_min_samples=30),  # the longest window: the bank's whole ring
]


SMALL_RINGS = [  # the bank's ring (50) wraps many times over 400 decisions
    GateConfig(budget=0.2, budget_min_samples=20, budget_window=50),
    GateConfig(budget=0.3, budget_min_samples=10, budget_window=30, min_teacher_steps=1),
]


@pytest.mark.parametrize("configs", [BANK, SMALL_RINGS], ids=["mixed", "small_rings"])
@pytest.mark.parametrize("n", [1, 2])
@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_a_gate_of_several_settings_rules_as_one_gate_per_setting(
    configs: list[GateConfig], n: int, seed: int
) -> None:
    """Replay's counterfactual gates: each variant of one gate of several settings decides exactly as its
    own Gate, episode resets included, over random evidence (unknown errors, silent teachers, skill
    changes), for one env and for several."""
    rng = np.random.default_rng(seed)
    variants, gates = Gate(configs, n), [Gate(c, n) for c in configs]
    for step in range(400):
        if rng.random() < 0.01:
            env = rng.integers(0, n, 1)
            variants.reset(env)
            for g in gates:
                g.reset(env)
        args = dict(step=step, now=np.full(n, 0.05 * step),
                    error=np.where(rng.random(n) < 0.1, np.nan, rng.lognormal(-1.5, 0.8, n)),
                    student_skill=rng.integers(0, 2, n), teacher_skill=rng.integers(0, 2, n),
                    student_in_contract=rng.random(n) > 0.02, teacher_ok=rng.random(n) > 0.05)  # fmt: skip
        use, reason, threshold = variants.decide_variants(**args)
        for i, g in enumerate(gates):
            d = g.decide(**args)
            assert threshold[i] == d.threshold, (step, i)
            np.testing.assert_array_equal(use[i], d.use_teacher, err_msg=f"step {step}, variant {i}")
            assert tuple(REASONS[r] for r in reason[i]) == d.reason, (step, i)


def test_a_gate_of_several_settings_refuses_the_single_setting_calls() -> None:
    """`decide` and `threshold` speak for one setting: on several they would silently pick one."""
    g = Gate(SMALL_RINGS, 1)
    with pytest.raises(ValueError, match="2 settings"):
        g.threshold(0)
    skill, yes = np.zeros(1, int), np.ones(1, bool)
    args = dict(step=0, now=np.zeros(1), error=np.zeros(1), student_skill=skill, teacher_skill=skill,
                student_in_contract=yes, teacher_ok=yes)  # fmt: skip
    with pytest.raises(ValueError, match="decide_variants"):
        g.decide(**args)
    state = g.state_dict()
    fresh = Gate(SMALL_RINGS, 1)
    fresh.load_state_dict(state)
    assert json.dumps(fresh.state_dict()) == json.dumps(state)  # NaN timers: compared as written
    with pytest.raises(ValueError, match="variants, envs"):
        Gate(SMALL_RINGS[0], 1).load_state_dict(state)


@pytest.mark.parametrize(
    "fields, words",
    [
        ({"budget_end": 0.05}, "budget_end = 0.05 without a budget: set budget"),
        ({"budget": 0.05, "budget_end": 0.3}, "budget_end = 0.3 must not exceed budget = 0.05"),
    ],
)
def test_a_budget_end_the_gate_would_ignore_or_grow_to_is_refused(fields: dict, words: str) -> None:
    """Accepted and then overridden (no budget: the threshold rules) or a teacher share that grows as the
    student learns: both refused, naming the field."""
    with pytest.raises(ValidationError, match=words):
        GateConfig(**fields)
    assert GateConfig(budget=0.3, budget_end=0.3).budget_end == 0.3  # a constant budget stays allowed
