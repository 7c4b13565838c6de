"""Where a training run writes (runs/<job>/<name>-<time>, or --out) and the optional W&B run."""

import argparse
import importlib.util
import re
from pathlib import Path

import pytest
from agent.commands.run_dirs import add_run_arguments, run_dir, wandb_run


def parse(*args: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_run_arguments(parser, "train_student")
    return parser.parse_args(args)


def test_a_run_is_named_by_job_name_and_time_unless_out_names_it() -> None:
    made = run_dir(parse(), "train_student", "student-opd")
    assert made.parent == Path("runs/train_student")
    assert re.fullmatch(r"student-opd-\d{8}-\d{6}", made.name)
    assert run_dir(parse("--name", "wide"), "train_student", "student-opd").name.startswith("wide-")
    assert run_dir(parse("--out", "x/y"), "train_student", "student-opd") == Path("x/y")  # resumes there


def test_ranks_of_one_job_must_be_told_where_to_write() -> None:
    with pytest.raises(ValueError, match="2 ranks write one run: give --out DIR"):
        run_dir(parse(), "train_student", "student-opd", ranks=2)
    assert run_dir(parse("--out", "r"), "train_student", "s", ranks=2) == Path("r")


def test_wandb_only_when_asked_and_a_clear_error_when_it_is_not_installed(tmp_path: Path) -> None:
    with wandb_run(parse(), tmp_path / "run", {}):  # not asked: nothing happens, nothing is written
        pass
    assert not (tmp_path / "run").exists()
    if importlib.util.find_spec("wandb") is not None:
        pytest.skip("wandb is installed here: --wandb would start a run")
    with pytest.raises(ValueError, match="--wandb needs Weights & Biases: pip install wandb"):
        with wandb_run(parse("--wandb"), tmp_path / "run", {}):
            pass


def test_wandb_offline_logs_the_config_and_the_tensorboard_curves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With W&B installed and --wandb asked: a run beside the training (offline here: no account, no
    network), holding the config and the TensorBoard curves written inside it, resumable under one id."""
    if importlib.util.find_spec("wandb") is None:
        pytest.skip("wandb is not installed (an optional extra: pip install wandb)")
    from torch.utils.tensorboard import SummaryWriter

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    out = tmp_path / "student-opd-20261208-000000"
    with wandb_run(parse("--wandb"), out, {"opd": {"gate": {"budget": 0.05}}}):
        writer = SummaryWriter(str(out / "tb"))
        for step in range(3):
            writer.add_scalar("loss/kl", 1.0 / (step + 1), step)
        writer.close()
    runs = list((out / "wandb").glob("offline-run-*-student-opd-20261208-000000"))
    assert len(runs) == 1, list((out / "wandb").iterdir())
    # An offline run keeps its records in one log that `wandb sync` uploads later; its format is W&B's own,
    # so only the names are looked for: the config's field and the curve synced from TensorBoard.
    log = (runs[0] / f"run-{out.name}.wandb").read_bytes()
    assert b'"budget":0.05' in log and b"loss/kl" in log
