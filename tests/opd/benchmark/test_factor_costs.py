"""`agent eval factors`' core: every setting measured once, resumed from what is written, refused when the
preset changed, and tabled as drops from the clean sim."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from opd.benchmark.factors import SETTINGS, measure
from policies.config import from_root
from sim.gap_factors import FACTORS
from sim.real_robot_proxy import ProxyConfig

PRESET = ProxyConfig.from_yaml(from_root("sim/configs/proxy_gap.yaml"))


class FakeRunner:
    """An evaluation whose success rate says which config it ran on (clean 0.9, a factor 0.8, all 0.5)."""

    def __init__(self) -> None:
        self.calls: list[Path | None] = []

    def __call__(self, proxy: Path | None) -> dict:
        self.calls.append(proxy)
        if proxy is None:
            rate = 0.9
        else:
            rate = 0.5 if ProxyConfig.from_yaml(proxy) == PRESET else 0.8
        return {"episodes": 200, "success_rate": rate}


def test_every_setting_is_measured_once_then_resumed(tmp_path: Path) -> None:
    runner = FakeRunner()
    table = measure({"student": runner}, PRESET, tmp_path)
    assert len(runner.calls) == len(SETTINGS) == len(FACTORS) + 2
    rows = table["student"]
    assert rows["clean"]["cost_points"] == 0.0 and rows["all"]["cost_points"] == pytest.approx(40.0)
    assert all(rows[f]["cost_points"] == pytest.approx(10.0) for f in FACTORS)
    lo, hi = rows["all"]["ci95"]
    assert lo < 0.5 < hi
    assert (tmp_path / "factors.png").stat().st_size > 0
    assert "| room |" in (tmp_path / "factors.md").read_text()
    again = FakeRunner()
    assert measure({"student": again}, PRESET, tmp_path) == table and again.calls == []  # all read back
    assert json.loads((tmp_path / "factors.json").read_text()) == table


def test_a_result_measured_under_another_preset_is_refused(tmp_path: Path) -> None:
    measure({"teacher": FakeRunner()}, PRESET, tmp_path)
    changed = PRESET.model_copy(update={"lens": PRESET.lens.model_copy(update={"focal_error": 0.08})})
    # the preset whole is measured right after the clean sim: it is the first to differ
    with pytest.raises(ValueError, match=r"all\.proxy\.yaml: this evaluation ran on another proxy config"):
        measure({"teacher": FakeRunner()}, changed, tmp_path)
