"""A teacher view that remembers: a marker stays seen from its first sighting in the episode, reaching the
current marker hands the next one's sighting on, a new episode clears them, and a state the caller refuses
is not remembered. Every caller feeds it in time order; the OPD learner's targets are what it saw."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import yaml

from policies.config import from_root
from policies.teacher_policy import load_teacher
from policies.teacher_view import RememberConfig, TeacherView, ViewConfig
from sim.marker_task import privileged_fields

FIELDS = privileged_fields(3)
COL = {name: i for i, name in enumerate(FIELDS)}
OBJECTS = [
    {"x": "target_dx_m", "y": "target_dy_m", "radius_m": 0.06, "fields": ["target_cos", "target_sin"]},
    {"x": "next_dx_m", "y": "next_dy_m", "radius_m": 0.06},
]
PLAIN = ViewConfig.from_dict({"half_fov_deg": 37.5, "keep": ["progress", "time_left"], "objects": OBJECTS})
REMEMBERING = PLAIN.model_copy(update={"remember": RememberConfig()})
AHEAD, BEHIND = (2.0, 0.3), (-1.0, 0.4)  # robot-frame (x, y) of a marker inside / outside the view, m


def _state(target=BEHIND, next_=BEHIND, progress=0.0, time_left=1.0) -> np.ndarray:
    row = np.zeros((1, len(FIELDS)), np.float32)
    row[0, [COL["target_dx_m"], COL["target_dy_m"]]] = target
    row[0, [COL["next_dx_m"], COL["next_dy_m"]]] = next_
    row[0, COL["target_cos"]], row[0, COL["target_sin"]] = np.array(target) / np.hypot(*target)
    row[0, COL["progress"]], row[0, COL["time_left"]] = progress, time_left
    return row


def _target_seen(out: np.ndarray) -> bool:
    return bool(out[0, COL["target_dx_m"]] != 0)


def _next_seen(out: np.ndarray) -> bool:
    return bool(out[0, COL["next_dx_m"]] != 0)


def test_a_marker_stays_seen_from_its_first_sighting_with_its_true_position() -> None:
    view, plain = TeacherView(REMEMBERING, FIELDS), TeacherView(PLAIN, FIELDS)
    memory = view.new_memory(1)
    assert not _target_seen(view(_state(time_left=1.0), memory))  # not yet seen
    assert _target_seen(view(_state(target=AHEAD, time_left=0.99), memory))
    later = _state(target=(-0.5, 1.5), time_left=0.98)  # turned away: out of view, somewhere else now
    out = view(later, memory)
    assert out[0, COL["target_dx_m"]] == -0.5 and out[0, COL["target_dy_m"]] == 1.5  # the true position
    assert out[0, COL["target_sin"]] == pytest.approx(later[0, COL["target_sin"]])
    assert not _target_seen(plain(later))  # the memoryless view hides it


def test_reaching_a_marker_hands_the_next_ones_sighting_on() -> None:
    view = TeacherView(REMEMBERING, FIELDS)
    memory = view.new_memory(2)
    # env 0 sees the next marker on the way to the current one; env 1 never does
    view(np.concatenate([_state(next_=AHEAD, time_left=0.9), _state(time_left=0.9)]), memory)
    out = view(np.concatenate([_state(progress=0.25, time_left=0.8)] * 2), memory)  # both reach the current
    assert _target_seen(out[:1]) and not _next_seen(out[:1])  # the old next is the target, still seen
    assert not _target_seen(out[1:])  # env 1 must search for it


def test_a_new_episode_or_a_reset_clears_the_sightings() -> None:
    view = TeacherView(REMEMBERING, FIELDS)
    memory = view.new_memory(1)
    view(_state(target=AHEAD, time_left=0.5), memory)
    assert _target_seen(view(_state(time_left=0.52), memory))  # a small rise (a late state) is no restart
    assert not _target_seen(view(_state(time_left=1.0), memory))  # the episode restarted
    view(_state(target=AHEAD, time_left=0.9), memory)
    memory.reset(np.array([0]))
    assert not _target_seen(view(_state(time_left=0.89), memory))


def test_a_state_seen_without_update_is_remembered_only_once_committed() -> None:
    view = TeacherView(REMEMBERING, FIELDS)
    memory = view.new_memory(2)
    both = np.concatenate([_state(target=AHEAD, time_left=0.9)] * 2)
    assert _target_seen(view(both, memory, update=False)[:1])  # seen now ...
    assert not _target_seen(view(_state(time_left=0.89), memory, envs=np.array([0]), update=False))
    view(both, memory, update=False)
    memory.commit(np.array([True, False]))  # ... and remembered where the caller accepted it
    out = view(np.concatenate([_state(time_left=0.88)] * 2), memory)
    assert _target_seen(out[:1]) and not _target_seen(out[1:])


def test_a_nan_state_is_seen_through_the_memory_but_moves_it_nowhere() -> None:
    view = TeacherView(REMEMBERING, FIELDS)
    memory = view.new_memory(1)
    view(_state(target=AHEAD, time_left=0.9), memory)
    bad = _state(time_left=np.nan)
    view(bad, memory)
    assert _target_seen(view(_state(time_left=0.89), memory))  # no restart from the NaN


def test_a_remembering_view_needs_its_callers_memory_and_real_fields() -> None:
    view = TeacherView(REMEMBERING, FIELDS)
    with pytest.raises(ValueError, match="remembers sightings"):
        view(_state())
    assert TeacherView(PLAIN, FIELDS).new_memory(4) is None
    with pytest.raises(ValueError, match="lap_count"):
        TeacherView(PLAIN.model_copy(update={"remember": RememberConfig(advance="lap_count")}), FIELDS)


@pytest.fixture(scope="module")
def remembering_teacher(tmp_path_factory: pytest.TempPathFactory):
    """The committed view teacher's weights with a remembering view (the same network: only what it is
    shown differs), as a checkpoint beside its teacher.yaml."""
    src = from_root("sim/robots/diffbot/teacher_view/teacher.pt")
    out = tmp_path_factory.mktemp("teacher_memory")
    shutil.copy(src, out / "teacher.pt")
    meta = yaml.safe_load(src.with_suffix(".yaml").read_text())
    meta["teacher"]["view"]["remember"] = RememberConfig().model_dump(mode="json")
    (out / "teacher.yaml").write_text(yaml.safe_dump(meta))
    return out / "teacher.pt"


def test_the_learner_sees_each_env_through_its_memory_of_accepted_states(remembering_teacher) -> None:
    """The buffer's targets are what the remembering teacher saw, state by state, as an offline pass over
    the same stream computes them (`normalise`), and the env's reset (a new episode) clears its memory."""
    from opd.live.loading import load_learner
    from policies.artifact import Artifact

    learner = load_learner(Artifact.load(from_root("sim/robots/diffbot/student")), remembering_teacher)
    stream = [_state(time_left=0.99), _state(target=AHEAD, time_left=0.98), _state(time_left=0.97),
              _state(time_left=0.96)]  # fmt: skip
    stamps = np.array([1.0, 1.05, 1.1, 1.15])
    for k, state in enumerate(stream):
        ok = learner.observe_teacher(np.array([stamps[k]]), state, np.array([0]), np.array([stamps[k]]))
        assert ok[0]
    held = np.stack([learner.buffers[0].teacher_at(s).state for s in stamps])  # (T, Dq) targets
    np.testing.assert_allclose(held, learner.normalise(np.concatenate(stream), stamps), rtol=1e-6)
    raw_zero = (0 - learner.state_mean[COL["target_dx_m"]]) / learner.state_std[COL["target_dx_m"]]
    assert held[0, COL["target_dx_m"]] == pytest.approx(raw_zero)  # not yet seen: 0 in teacher units
    assert held[3, COL["target_dx_m"]] != pytest.approx(raw_zero)  # out of view, remembered
    learner.begin_episode(0)
    learner.observe_teacher(np.array([2.0]), _state(time_left=0.95), np.array([0]), np.array([2.0]))
    assert learner.buffers[0].teacher_at(2.0).state[COL["target_dx_m"]] == pytest.approx(raw_zero)
    # the offline pass, told where that episode began, forgets there too (replay: a teacher step going back)
    stream.append(_state(time_left=0.95))
    stamps = np.append(stamps, 2.0)
    passes = [learner.teacher.seen_stream(np.concatenate(stream), stamps, starts) for starts in
              (None, np.array([False] * 4 + [True]))]  # fmt: skip
    assert _target_seen(passes[0][4:]) and not _target_seen(passes[1][4:])
    np.testing.assert_array_equal(passes[0][:4], passes[1][:4])


# Obstacles are listed nearest first, so a slot is not an obstacle: the view remembers them by world place.
OBSTACLES = [
    {"x": f"obstacle{k}_dx_m", "y": f"obstacle{k}_dy_m", "radius_m": 0.15, "fields": [f"obstacle{k}_gap_m"],
     "static": True}
    for k in range(3)
]  # fmt: skip
WITH_OBSTACLES = ViewConfig.from_dict(
    {"half_fov_deg": 37.5, "keep": ["progress", "time_left"], "objects": OBJECTS + OBSTACLES, "remember": {}}
)
WORLD = np.array([1.0 + 0.2j, -1.5 + 0.3j, 0.0 - 3.0j])  # obstacles A, B, C in the world, m


def _posed(x: float, y: float, yaw: float, time_left: float = 1.0) -> np.ndarray:
    """The state of a robot at (x, y, yaw) among WORLD's obstacles, slots nearest first as in the sim."""
    row = _state(time_left=time_left)
    row[0, [COL["x_m"], COL["y_m"], COL["cos_yaw"], COL["sin_yaw"]]] = x, y, np.cos(yaw), np.sin(yaw)
    rel = (WORLD - complex(x, y)) * np.exp(-1j * yaw)
    for k, j in enumerate(np.argsort(np.abs(rel))):
        row[0, [COL[f"obstacle{k}_dx_m"], COL[f"obstacle{k}_dy_m"]]] = rel[j].real, rel[j].imag
        row[0, COL[f"obstacle{k}_gap_m"]] = abs(rel[j]) - 0.3
    return row


def _obstacles_seen(out: np.ndarray) -> list[tuple[float, float]]:
    """The (dx, dy) of each obstacle slot the view shows."""
    shown = [(out[0, COL[f"obstacle{k}_dx_m"]], out[0, COL[f"obstacle{k}_dy_m"]]) for k in range(3)]
    return [(float(x), float(y)) for x, y in shown if (x, y) != (0, 0)]


def test_an_obstacle_is_remembered_by_its_place_when_its_slot_changes() -> None:
    view = TeacherView(WITH_OBSTACLES, FIELDS)
    memory = view.new_memory(1)
    first = view(_posed(0, 0, 0), memory)  # A ahead (slot 0), B behind, C to the right
    assert _obstacles_seen(first) == [pytest.approx((1.0, 0.2))]
    # moved and turned left: B is nearest now (slot 0) and out of view, A (slot 1) is out of view too
    later = _posed(-0.5, 0, np.pi / 2, time_left=0.99)
    out = view(later, memory)
    assert out[0, COL["obstacle0_dx_m"]] == 0 and out[0, COL["obstacle0_gap_m"]] == 0  # B: never seen
    assert (out[0, COL["obstacle1_dx_m"]], out[0, COL["obstacle1_dy_m"]]) == pytest.approx((0.2, -1.5))
    assert out[0, COL["obstacle1_gap_m"]] == later[0, COL["obstacle1_gap_m"]]  # A: remembered, true fields
    memoryless = TeacherView(WITH_OBSTACLES.model_copy(update={"remember": None}), FIELDS)
    assert _obstacles_seen(memoryless(later)) == []
    # a new episode forgets it; a state with no pose keeps the memory as it was
    memory_b = view.new_memory(1)
    view(_posed(0, 0, 0), memory_b)
    lost = _posed(-0.5, 0, np.pi / 2, time_left=0.9)
    lost[0, COL["x_m"]] = np.nan
    assert _obstacles_seen(view(lost, memory_b)) == []
    assert len(_obstacles_seen(view(_posed(-0.5, 0, np.pi / 2, time_left=0.89), memory_b))) == 1
    assert _obstacles_seen(view(_posed(-0.5, 0, np.pi / 2, time_left=1.0), memory_b)) == []  # restart


def test_the_committed_obstacle_remembering_teacher_knows_only_obstacles_it_has_seen() -> None:
    teacher = load_teacher(from_root("sim/robots/diffbot/teacher_view_memory_obstacles/teacher.pt"))
    assert teacher.view is not None and teacher.view.remember is not None
    memory = teacher.new_memory(1)
    assert _obstacles_seen(teacher.seen(_posed(-0.5, 0, np.pi / 2), memory)) == []  # none in view yet
    assert len(_obstacles_seen(teacher.seen(_posed(0, 0, 0, time_left=0.99), memory))) == 1  # A ahead
    assert len(_obstacles_seen(teacher.seen(_posed(-0.5, 0, np.pi / 2, time_left=0.98), memory))) == 1
