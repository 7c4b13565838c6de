"""`agent render` and `agent bench proxy` as a user runs them: a picture of the gap, its cost per frame."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from PIL import Image


def agent(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", *args], capture_output=True, text=True, timeout=300
    )


def test_render_writes_the_sim_above_the_gap_proxy_for_each_seed(tmp_path: Path) -> None:
    out = tmp_path / "gap.png"
    done = agent("render", "--out", str(out), "--seeds", "3", "4", "--width", "32", "--height", "16",
                 "--scale", "2")  # fmt: skip
    assert done.returncode == 0, done.stderr
    image = np.asarray(Image.open(out))
    assert image.shape == (2 * (2 * 16 + 2), 2 * (2 * 32 + 2), 3)  # 2 rows x 2 seeds, 2 px gaps, scaled x2
    top, bottom = image[: 2 * 16], image[2 * 18 :]
    assert not np.array_equal(top, bottom)  # the gap proxy shows another room through another camera


def test_bench_proxy_prints_its_figures_as_json() -> None:
    done = agent("bench", "proxy", "--envs", "1", "--steps", "3", "--rounds", "1", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(result["frames"]) == {"proxy", "gap", "sim"} and result["frames"]["proxy"]["vs_proxy"] == 1.0
    assert result["gap_vs_proxy"] > 0 and result["target_gap_vs_proxy"] == 1.3 and result["cpu"]


def test_render_refuses_a_missing_proxy_config(tmp_path: Path) -> None:
    done = agent("render", "--out", str(tmp_path / "x.png"), "--proxy-config", "sim/configs/no_such.yaml")
    assert done.returncode == 2 and "no_such.yaml" in done.stderr and "Traceback" not in done.stderr


def test_eval_factors_is_listed_and_refuses_an_unknown_policy(tmp_path: Path) -> None:
    """The whole measurement is `opd.benchmark.factors.measure` (tests/opd/benchmark/test_factor_costs.py);
    here, its CLI."""
    listed = agent("eval", "--help")
    assert listed.returncode == 0 and "factors" in listed.stdout
    done = agent("eval", "factors", "--artifact", "sim/robots/diffbot/student", "--policies", "robot",
                 "--out", str(tmp_path / "f"))  # fmt: skip
    assert done.returncode == 2 and "--policies 'robot'" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "f").exists()
