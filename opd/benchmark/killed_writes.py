"""Fault 4 of issue 54: a writer SIGKILLed in the middle of a checkpoint, a student version or an export, and
what the next start finds: the last whole one, loadable, and nothing half-written under a name it reads.

Each case runs the writer the stack runs, in a child process, kills it once its temporary file or directory
exists (the write under way), and loads what is there as the next start would: the newest checkpoint
(`opd.runs.checkpoints`, what the trainers resume from), every student version and the number the next one
gets (`opd.live.loading.VersionWriter`), the export's output directory (`policies.artifact.Artifact`,
hashes checked). `agent bench faults` reports them, and tests/opd/benchmark/test_killed_writes.py asserts
them.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from opd.runs import checkpoints
from policies.artifact import MANIFEST, Artifact, sha256_file
from policies.torch_files import load_torch

KILL_WAIT_S = 120.0  # longest a writer may take to begin its write, s (torch's import on a loaded CPU)

# The trainers' write: a state saved to a temporary file beside the checkpoint, renamed over it
# (opd/student/trainer.py and opd/teacher/trainer.py `save_checkpoint`); 32 MiB so the kill lands mid-write.
_CHECKPOINT_WRITER = """
import sys, torch
from pathlib import Path
from opd.runs import checkpoint_path
from policies.files import atomic_path
for step in range(1, 1000):
    with atomic_path(checkpoint_path(Path(sys.argv[1]), step)) as tmp:
        torch.save({"step": step, "w": torch.full((8 << 20,), float(step))}, tmp)
"""

# `agent export` over an existing artifact: the same atomic directory write as every export.
_EXPORT_WRITER = """
import sys
from pathlib import Path
from policies.artifact import Artifact
from policies.export import export_head_version
from policies.state_predictor import StatePredictor
from policies.student_from_artifact import build_student
base = Artifact.load(sys.argv[1])
predictor = StatePredictor(base.predictor_config)
export_head_version(base, build_student(base), predictor, Path(sys.argv[2]), 1)
"""


@dataclass
class KilledWrite:
    """What a start after the kill finds."""

    write: str
    loadable: bool  # the last whole one loads, and what the next start reads is whole
    note: str  # what was loaded, and what the cut write left


def _kill_when(cmd: list[str], started: Callable[[], bool]) -> None:
    """Run `cmd`, SIGKILL it as soon as `started()` (its write is under way); raises if it never starts."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + KILL_WAIT_S
    try:
        while not started():
            if proc.poll() is not None:
                raise RuntimeError(f"{cmd[:3]} ended before its write: {proc.stderr.read().decode()[-500:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{cmd[:3]}: no write within {KILL_WAIT_S:g} s")
            time.sleep(0.002)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stderr.close()


def kill_checkpoint_write(ckpt_dir: Path) -> KilledWrite:
    """Kill the writer during its second checkpoint (or a later one): the newest checkpoint is whole."""
    ckpt_dir.mkdir(parents=True, exist_ok=True)

    def second_under_way() -> bool:
        return len(checkpoints(ckpt_dir)) >= 1 and any(ckpt_dir.glob(".step_*.tmp.pt"))

    _kill_when([sys.executable, "-c", _CHECKPOINT_WRITER, str(ckpt_dir)], second_under_way)
    newest = checkpoints(ckpt_dir)[-1]
    try:
        state = load_torch(newest)
        ok = bool((state["w"] == state["step"]).all())
    except Exception as err:  # noqa: BLE001 - a checkpoint that does not load is the answer
        return KilledWrite("checkpoint", False, f"{newest.name} does not load: {err}")
    cut = len(list(ckpt_dir.glob(".step_*.tmp.pt")))
    return KilledWrite(
        "checkpoint",
        ok,
        f"resumes from {newest.name}, step {state['step']}; "
        f"{cut} cut write left as a hidden .tmp, never read",
    )


def kill_version_write(base: Artifact, root: Path) -> KilledWrite:
    """Kill the learner's version export (`python -m opd.live.loading`, VersionWriter's child) while it
    writes v000002 over a whole v000001: every version loads, and the next one is numbered 2 again."""
    from opd.live.loading import VersionWriter

    shutil.copytree(base.root, root / "v000001")  # a whole version: an artifact of the same encoder
    weights = root / ".weights"
    weights.mkdir()
    shutil.copy2(base.weights.student, weights / "student.pt")
    shutil.copy2(base.weights.predictor, weights / "predictor.pt")
    cmd = [sys.executable, "-m", "opd.live.loading", str(base.root), str(weights), str(root / "v000002"), "2"]
    _kill_when(cmd, lambda: any(root.glob(".v000002.*")))
    shutil.rmtree(weights)
    versions = sorted(root.glob("v[0-9]*"))
    try:
        for version in versions:
            Artifact.load(version)
    except ValueError as err:
        return KilledWrite("student version", False, f"a version does not load: {err}")
    number = VersionWriter(base, root, 60.0, lambda path, n: None).number
    ok = [v.name for v in versions] == ["v000001"] and number == 1
    return KilledWrite(
        "student version",
        ok,
        f"versions {[v.name for v in versions]} load; the next is "
        f"v{number + 1:06d}; the cut write stays a hidden directory",
    )


def kill_export(base: Artifact, out: Path) -> KilledWrite:
    """Kill an export over an existing artifact at `out`: the old artifact loads, hashes checked."""
    shutil.copytree(base.root, out)
    before = sha256_file(Artifact.load(out).root / MANIFEST)
    _kill_when(
        [sys.executable, "-c", _EXPORT_WRITER, str(base.root), str(out)],
        lambda: any(out.parent.glob(f".{out.name}.*")),
    )
    try:
        after = sha256_file(Artifact.load(out).root / MANIFEST)
    except ValueError as err:
        return KilledWrite("export", False, f"{out.name} does not load: {err}")
    return KilledWrite(
        "export", after == before, "the artifact there before loads, unchanged (hashes checked)"
    )


def run_all(workdir: Path, base: Artifact) -> list[KilledWrite]:
    """The three kills, each in its own directory under `workdir`."""
    return [
        kill_checkpoint_write(workdir / "checkpoints"),
        kill_version_write(base, workdir / "versions"),
        kill_export(base, workdir / "export" / "student"),
    ]
