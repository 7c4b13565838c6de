"""A writer SIGKILLed mid-write (issue 54, fault 4): the next start finds the last whole one, loadable."""

from __future__ import annotations

from pathlib import Path

import pytest

from opd.benchmark.killed_writes import kill_checkpoint_write, kill_export, kill_version_write
from policies.artifact import Artifact

STUDENT = Path(__file__).resolve().parents[3] / "sim" / "robots" / "diffbot" / "student"


def test_a_checkpoint_killed_mid_write_leaves_the_one_before_to_resume_from(tmp_path: Path) -> None:
    killed = kill_checkpoint_write(tmp_path)
    assert killed.loadable, killed.note


@pytest.mark.parametrize("kill", [kill_version_write, kill_export], ids=["version", "export"])
def test_an_artifact_killed_mid_write_leaves_the_one_before_whole(kill, tmp_path: Path) -> None:
    killed = kill(Artifact.load(STUDENT), tmp_path / "out")
    assert killed.loadable, killed.note
