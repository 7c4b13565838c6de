"""`agent eval`'s progress display and teacher choice, and `agent run`'s default student, in-process."""

from __future__ import annotations

import argparse
import io
import json
import shutil
from pathlib import Path

import pytest
from agent.commands import eval as eval_command
from agent.commands import run as run_command
from agent.commands.eval import DEFAULT_STUDENT, DEFAULT_TEACHER, EpisodeProgress, teacher_of
from rich.console import Console

from policies.config import PROJECT_ROOT

DISTILLED_FROM = PROJECT_ROOT / "sim/robots/diffbot/teacher_view_memory_obstacles_wide/teacher.pt"


class Clock:
    """A monotonic clock the test moves by hand, s."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_progress_off_a_terminal_is_a_plain_line_now_and_then_and_one_at_the_end(monkeypatch) -> None:
    """A log or a pipe gets no bar (rich would draw it only once it stops): one line at most every
    PLAIN_EVERY_S with the time left from the pace so far, and the final count."""
    monkeypatch.setattr(eval_command, "PLAIN_EVERY_S", 30.0)
    out, clock = io.StringIO(), Clock()
    with EpisodeProgress(10, "student", Console(file=out, width=200), clock) as progress:
        clock.now += 20
        progress(2, 1)  # 20 s in: not yet a line
        assert out.getvalue() == ""
        clock.now += 20
        progress(4, 3)  # 40 s for 4 episodes: 60 s for the other 6
        clock.now += 10
        progress(5, 4)  # 10 s after the last line: none
        clock.now += 50
        progress(10, 8)
    lines = out.getvalue().splitlines()
    assert lines == [
        "eval student: 4/10 episodes, 3 successes (75.0%), 40 s elapsed, about 1 min 00 s left",
        "eval student: 10/10 episodes, 8 successes (80.0%), 1 min 40 s elapsed",
    ]


def test_progress_on_a_terminal_is_a_rich_bar_that_stops_with_the_evaluation() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=160)
    with EpisodeProgress(4, "teacher", console) as progress:
        progress(2, 2)
        assert progress.bar is not None and progress.bar.tasks[0].completed == 2
    assert not progress.bar.live.is_started and "eval teacher" in out.getvalue()


def test_the_teacher_is_the_given_one_else_the_one_the_student_was_distilled_from(tmp_path: Path) -> None:
    given = tmp_path / "teacher.pt"
    assert teacher_of(DEFAULT_STUDENT, given) == (given, "given")
    path, why = teacher_of(DEFAULT_STUDENT, None)  # the committed student names its teacher
    assert path == DISTILLED_FROM and path != DEFAULT_TEACHER and "distilled from" in why
    # an artifact whose manifest names no teacher keeps the committed default, and says so
    bare = tmp_path / "student"
    shutil.copytree(DEFAULT_STUDENT, bare)
    manifest = json.loads((bare / "manifest.json").read_text())
    del manifest["teacher"]
    (bare / "manifest.json").write_text(json.dumps(manifest))
    path, why = teacher_of(bare, None)
    assert path == DEFAULT_TEACHER and "names no teacher" in why


def test_run_drives_the_committed_student_unless_given_a_config(tmp_path: Path, monkeypatch) -> None:
    """`agent run` without --artifact used to drive an untrained export; --config still gets one."""
    monkeypatch.chdir(tmp_path)  # found from the project root, not the working directory
    parser = argparse.ArgumentParser()
    run_command.add_arguments(parser)
    cfg = run_command.session_config(parser.parse_args([]), committed_student=True)
    assert cfg.artifact_dir == PROJECT_ROOT / "sim/robots/diffbot/student" and cfg.precision == ""
    exported = []

    def cached_artifact(config: Path, int8: bool) -> tuple[Path, bool]:  # what exports the untrained student
        exported.append((config, int8))
        return tmp_path / "untrained", True

    monkeypatch.setattr("agent.sim_session.cached_artifact", cached_artifact)
    args = parser.parse_args(["--config", "tiny.yaml", "--drive", "student"])
    cfg = run_command.session_config(args, committed_student=True)
    assert cfg.artifact_dir == tmp_path / "untrained" and exported == [(Path("tiny.yaml"), True)]
    assert cfg.precision == "int8"  # the untrained student's quantised encoder, as before


def test_bench_graph_measures_the_committed_student_and_says_when_an_untrained_one_learns(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """`agent bench graph` used to default to a random student, saying it acted at random "until Online
    Policy Distillation trains it", which only --learn does. Its default is the committed student now."""
    from agent.commands import bench as bench_command

    parser = argparse.ArgumentParser()
    bench_command.add_arguments(parser)
    cfg = run_command.session_config(parser.parse_args(["graph"]), committed_student=True)
    assert cfg.artifact_dir == PROJECT_ROOT / "sim/robots/diffbot/student"
    untrained = (tmp_path / "untrained", True)
    monkeypatch.setattr("agent.sim_session.cached_artifact", lambda config, int8: untrained)
    teacher = ("--teacher", str(DEFAULT_TEACHER))  # the untrained export is not read for its teacher
    for extra, says in (
        (("--drive", "student"), "--learn, Online Policy Distillation would train it"),
        (("--drive", "opd", "--learn", *teacher), "until the opd node's learner trains it online"),
    ):
        args = parser.parse_args(["graph", "--config", "tiny.yaml", *extra])
        run_command.session_config(args, committed_student=True)
        assert says in capsys.readouterr().err


def subcommand_help(what: str) -> str:
    parser = argparse.ArgumentParser()
    eval_command.add_arguments(parser)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return " ".join(sub.choices[what].format_help().split())


@pytest.mark.parametrize("what", ["teacher", "student"])
def test_eval_help_says_which_teacher_runs_and_that_a_proxy_config_implies_the_proxy(what: str) -> None:
    text = subcommand_help(what)
    assert "the one the student artifact was distilled from" in text
    assert "--proxy-config PROXY_CONFIG proxy YAML; implies --proxy" in text


def eval_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    eval_command.add_arguments(parser)
    return parser.parse_args(argv)


def test_a_shard_is_the_launchers_rank_unless_given_and_more_than_one_needs_a_shard_out(monkeypatch) -> None:
    from opd.eval_report import Shard

    for name in ("WORLD_SIZE", "RANK", "SLURM_NTASKS", "SLURM_PROCID", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    assert eval_command.shard_of(eval_args("teacher")) is None  # plain python: one process, no file
    assert eval_command.shard_of(eval_args("teacher", "--shard-out", "d")) == Shard(0, 1)
    monkeypatch.setenv("SLURM_NTASKS", "4")  # srun sets no MASTER_ADDR: shards never meet, need none
    given = eval_args("student", "--shard-out", "d", "--num-shards", "2", "--shard-id", "1")
    assert eval_command.shard_of(given) == Shard(1, 2)
    monkeypatch.setenv("SLURM_PROCID", "3")
    assert eval_command.shard_of(eval_args("student", "--shard-out", "d")) == Shard(3, 4)
    monkeypatch.delenv("SLURM_PROCID")
    torchrun = {"WORLD_SIZE": "4", "RANK": "2", "MASTER_ADDR": "node0", "MASTER_PORT": "29500"}
    for name, value in torchrun.items():
        monkeypatch.setenv(name, value)
    assert eval_command.shard_of(eval_args("teacher", "--shard-out", "d")) == Shard(2, 4)
    with pytest.raises(ValueError, match="4 shards write one file each: give --shard-out DIR"):
        eval_command.shard_of(eval_args("teacher"))  # each rank would evaluate every episode
    with pytest.raises(ValueError, match="--shard-id 5: the shards of 4 are 0..3"):
        eval_command.shard_of(eval_args("teacher", "--shard-out", "d", "--shard-id", "5"))


def test_eval_teacher_in_shards_then_merged_prints_what_one_process_prints(tmp_path: Path, capsys) -> None:
    """The same JSON, and the same text report (the merge prints through the same function)."""
    from agent import cli

    teacher = ("eval", "teacher", "--checkpoint", str(DEFAULT_TEACHER), "--episodes", "3", "--envs", "1")
    assert cli.main([*teacher, "--json"]) == 0
    single = capsys.readouterr().out
    for k in (1, 0):
        shard = ("--num-shards", "2", "--shard-id", str(k), "--shard-out", str(tmp_path))
        assert cli.main([*teacher, *shard]) == 0
        assert f"shard {k} of 2: {2 - k} of 3 episodes" in capsys.readouterr().out
    assert cli.main(["eval", "merge", str(tmp_path), "--json"]) == 0
    assert capsys.readouterr().out == single
    assert cli.main(["eval", "merge", str(tmp_path / "shard-0-of-2.json")]) == 2
    assert capsys.readouterr().err.endswith("episode 1 missing\n")
    eval_command._print_report(json.loads(single))
    from_single = capsys.readouterr().out
    assert cli.main(["eval", "merge", str(tmp_path)]) == 0
    assert capsys.readouterr().out == from_single and "3 episodes on the clean sim" in from_single


def test_eval_merge_of_nothing_there_is_one_clear_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "agent.cli", "eval", "merge", str(tmp_path / "none")],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip() == f"agent eval: error: {tmp_path / 'none'}: no such file or directory"


def test_the_transfer_report_records_the_command_without_where_its_jobs_ran() -> None:
    argv = ["-v", "eval", "transfer", "--quick", "--executor", "ray", "--address=10.0.0.1:6379", "--out", "o",
            "--train-gpus", "1", "--exec=local"]  # fmt: skip
    assert eval_command._without_executor(argv) == ["-v", "eval", "transfer", "--quick", "--out", "o"]


def test_ray_options_without_the_ray_executor_are_refused_by_name() -> None:
    from agent.cli import build_parser

    args = build_parser().parse_args(["eval", "transfer", "--quick", "--address", "10.0.0.1:6379"])
    with pytest.raises(ValueError, match="--address and --train-gpus are for --executor ray"):
        eval_command.run_transfer(args)


def test_a_gpu_asked_for_where_there_is_none_is_one_clear_error(monkeypatch) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here: --device cuda would run on it")
    assert eval_command.device_of(eval_args("teacher", "--device", "cpu")) == "cpu"
    assert eval_command.device_of(eval_args("student")) == "cpu"  # auto, without a GPU
    with pytest.raises(ValueError, match="device 'cuda:1' .* torch sees no CUDA device"):
        eval_command.device_of(eval_args("student", "--device", "cuda:1"))
