"""The OPD core's config resolved for a student and teacher: derived values filled in, and a value the
config gives that resolving would replace refused by name (it would be a silent lie)."""

import pytest

from opd.distill.config import OPDConfig, resolve_config
from policies.config import from_root
from policies.student_policy import StudentConfig
from policies.teacher_policy import load_teacher
from sim.robots import diffbot

MEMORY_STUDENT = "policies/configs/student_cpu_memory128_wide.yaml"  # a head over its last 128 frames


@pytest.fixture(scope="module")
def teacher():
    return load_teacher(from_root(diffbot.TEACHER))


@pytest.fixture(scope="module")
def student() -> StudentConfig:
    return StudentConfig.from_yaml(from_root(MEMORY_STUDENT))


def test_the_buffer_window_and_horizon_come_from_the_student_and_predictor(teacher, student):
    cfg = resolve_config(OPDConfig.from_dict({"predictor": {"history": 5, "horizon": 2}}), student, teacher)
    assert (cfg.align.history, cfg.align.horizon) == (128, 2)
    assert resolve_config(cfg, student, teacher) == cfg  # resolving a resolved config changes nothing


@pytest.mark.parametrize(
    "align, words",
    [
        ({"history": 5}, r"align.history = 5 is not what the buffer uses \(128\): it comes from the longer "
                         r"of predictor.history \(5\) and the student's memory.frames \(128\)"),
        ({"horizon": 5}, r"align.horizon = 5 is not what the buffer uses \(3\): it comes from "
                         r"predictor.horizon"),
    ],
)  # fmt: skip
def test_a_derived_value_given_otherwise_is_refused_naming_its_source(teacher, student, align, words):
    cfg = OPDConfig.from_dict({"align": align})
    with pytest.raises(ValueError, match=words):
        resolve_config(cfg, student, teacher)
    # a config saved before runs saved the one they ran gives every field: compared, it still resolves
    assert resolve_config(cfg, student, teacher, check_given=False).align.history == 128
    assert resolve_config(OPDConfig.from_dict({"align": {"history": 128}}), student, teacher)  # the same: ok
