"""`agent play`: without a display it writes the MP4 and says where; a path it cannot write is one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from policies.config import from_root
from policies.teacher_policy import load_teacher
from sim.robots import diffbot

TEACHER = from_root(diffbot.TEACHER)


def play(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agent.cli", "play", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip


def headless() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}


def test_play_without_a_display_writes_the_mp4_of_its_episodes_and_prints_its_path(tmp_path: Path) -> None:
    import imageio.v2 as imageio

    default = str(from_root("sim/configs/mujoco.yaml"))
    (tmp_path / "second.yaml").write_text(yaml.safe_dump({"extends": default, "task": {"time_limit_s": 1.0}}))
    out = play("--teacher", str(TEACHER), "--episodes", "1", "--sim-config", "second.yaml",
               cwd=tmp_path, env=headless())  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "no display" in out.stdout
    written = [line.removeprefix("wrote ") for line in out.stdout.splitlines() if line.startswith("wrote ")]
    assert len(written) == 1 and written[0].startswith("runs/play/teacher-")
    frames = list(imageio.get_reader(tmp_path / written[0]).iter_data())
    assert len(frames) == 20 // load_teacher(TEACHER).cfg.action_repeat  # a second, one frame a decision


def test_a_video_path_that_cannot_be_written_is_one_clear_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    out = play("--video", str(tmp_path / "file" / "v.mp4"), cwd=tmp_path, env=headless())
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1].startswith("agent play: error: video ")
    assert "cannot create its folder" in out.stderr
