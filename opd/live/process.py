"""The live learner in a process of its own: gradient steps beside the control loop, not inside it.

The opd node acts with its `OnlineDistillation` (built with `learning=False`: no store) and hands each
aligned sample to a child process (`OnlineDistillation.attach_sink`). The child builds the same learner from
the artifact, keeps the sample store and takes gradient steps (at most `max_rate_hz`, at most `max_share` of
its time, at `nice`). A node acting in ONNX (`opd.distill.onnx_acting`, the live graph's) takes what it
learnt as the student versions the child writes (`on_version`: the node loads each, hashes checked, and
swaps it in between two decisions); a learner acting in torch takes the acting weights after each step
instead (`send_weights`: a receiver thread swaps them into its acting copies under the learner's lock,
`OnlineDistillation.set_acting`).

Why a process: with the learner on a thread, its updates shared the node's interpreter (in `agent bench
graph`, every node's), and the control loop paid for it. Measured on 2026-12-03, `agent bench graph --drive
opd --proxy --duration 150`, back to back: the thread at nice 19 gave image -> command p99 37.4 ms and 10
missed cycles (none in host steal) at 1.65 updates/s; the same updates in a separate process at nice 19,
p99 25.8 ms and 0 missed at 2.7 updates/s (without learning: 17.6 ms, 0). The child is started with
"spawn": forking a process that runs DDS threads could copy a lock some thread holds.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import os
import queue
import signal
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

SAMPLE_QUEUE = 2_000  # samples waiting for the child, rows (100 s at 20 Hz: the child's start-up fits)


@dataclass(frozen=True)
class LearnerSpec:
    """What the child builds its learner and version writer from (plain values: it is sent to a new
    interpreter)."""

    artifact: str  # the deployed artifact's directory (`opd.live.loading.load_learner`)
    teacher: str = ""  # teacher.pt; empty: the artifact's own (`opd.live.loading.default_teacher`)
    opd_config: str = ""  # the `opd:` YAML; empty: opd/configs/live.yaml
    max_rate_hz: float = 20.0  # gradient steps per second, at most
    max_share: float = 1.0  # of the child's time spent in steps, at most: after one of d s it rests
    nice: int = 0  # the child's nice value (0-19: lowering a priority needs no privilege)
    versions_dir: str = ""  # where student versions go; empty: none are written
    version_every_s: float = 60.0  # seconds between versions
    # after each update, send the acting weights (torch acting copies); False for a node acting in ONNX,
    # which takes the learnt student as versions only (`opd.distill.onnx_acting`): the count goes instead
    send_weights: bool = True


def rest_s(period_s: float, elapsed_s: float, busy_s: float, max_share: float) -> float:
    """Seconds to rest after a step of `busy_s` that began `elapsed_s` ago: the rest of the period, and at
    least busy_s (1 / max_share - 1), so that steps take at most `max_share` of the time on average."""
    return max(period_s - elapsed_s, busy_s * (1.0 / max_share - 1.0))


class LearnerProcess:
    """Trains `learner`'s head and predictor in a child process (see the module doc); start() / stop()."""

    def __init__(
        self, learner: Any, spec: LearnerSpec, on_version: Callable[[Path, int], None] | None = None
    ) -> None:
        if not 0.0 < spec.max_share <= 1.0:
            raise ValueError(f"max_share must be in (0, 1], got {spec.max_share}")
        if not 0 <= spec.nice <= 19:
            raise ValueError(f"nice must be in [0, 19] (lowering a priority needs no privilege): {spec.nice}")
        if learner.learning:
            raise ValueError("the acting learner keeps no store (learning=False): the child keeps it")
        self.learner, self.spec, self.on_version = learner, spec, on_version
        self.updates = 0  # gradient steps the child has taken, as of the newest weights received
        self.sent = self.dropped = 0  # samples handed to the child / dropped on a full queue
        self.error: BaseException | None = None
        self._proc: Any = None

    def start(self) -> None:
        ctx = mp.get_context("spawn")
        self._samples = ctx.Queue(SAMPLE_QUEUE)
        # Everything the child says (weights, versions, its failure) comes on one one-way pipe whose write
        # end only the child holds: its death, even mid-message, is an EOF here. A queue's pipe has both
        # ends in this process, so a child killed mid-put left the receiver blocked in its read for good.
        self._conn, child_end = ctx.Pipe(duplex=False)
        # A flag in shared memory, polled: an Event's set() waits on its waiters, and a child killed while
        # resting on it made stop() (disarm, Ctrl-C) hang for good.
        self._stop = ctx.Value("b", 0, lock=False)
        self.error, self.updates = None, 0  # a new child: a failure of the last one is no longer news
        self._proc = ctx.Process(
            target=_child_main, name="opd-learner", daemon=True,
            args=(os.getpid(), self.spec, self._samples, child_end, self._stop),
        )  # fmt: skip
        self._proc.start()
        child_end.close()
        self._receiver = threading.Thread(target=self._receive, name="opd-learner-receiver", daemon=True)
        self._receiver.start()
        self.learner.attach_sink(self.send)

    def send(self, row: dict, stream: int) -> None:
        """One aligned sample for the child's store; dropped (counted) when the child falls behind."""
        try:
            self._samples.put_nowait((row, stream))
            self.sent += 1
        except queue.Full:
            self.dropped += 1

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the child (killed if it does not stop within `timeout_s`) and the receiver."""
        if self._proc is None:
            return
        self.learner.attach_sink(None)
        self._stop.value = 1
        self._proc.join(timeout_s)
        if self._proc.is_alive():  # e.g. inside a version export: that goes too (the child's group)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            if self._proc.is_alive():  # not yet a group of its own
                self._proc.kill()
            self._proc.join()
        self._receiver.join(timeout_s)  # the child's exit closed its end: the receiver has read to EOF
        self._conn.close()
        self._samples.cancel_join_thread()  # rows not yet flushed to a stopped child are not waited for
        self._samples.close()
        self._proc = None

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def _receive(self) -> None:
        """Take what the child says until its end of the pipe closes; a close nobody asked for (the child
        died, at any point of a message) is reported with its exit code."""
        proc = self._proc  # stop() clears it once this thread has ended
        while True:
            try:
                kind, *data = self._conn.recv()
            except (EOFError, OSError):  # OSError: the end closed in the middle of a message
                break
            self._take(kind, data)
        if self.error is None and not self._stop.value:
            proc.join(1.0)  # the exit code: EOF may come before the child is reaped
            self.error = RuntimeError(f"learner process exited with code {proc.exitcode}")
        if self.error is not None:
            log.error("OPD learner process stopped: %r; acting goes on", self.error)

    def _take(self, kind: str, data: list) -> None:
        """One message of the child: weights to act with, a version written, or why it failed."""
        if kind == "weights" and self.error is None:
            try:
                self.learner.set_acting(_as_tensors(data[1]))
                self.updates = data[0]
            except Exception as err:  # noqa: BLE001 - weights that do not load: reported, acting goes on
                self.error = err
                log.exception("OPD learner weights not taken; acting goes on with the last ones")
                self._stop.value = 1  # the child stops; its later weights are read (it never blocks) unused
        elif kind == "updates":
            self.updates = data[0]
        elif kind == "version" and self.on_version is not None:
            try:
                self.on_version(Path(data[0]), int(data[1]))
            except Exception:  # noqa: BLE001 - e.g. a node shutting down: the version stays on disk
                log.warning("student version %s not announced", data[1], exc_info=True)
        elif kind == "error":
            self.error = RuntimeError(data[0])


def _child_main(parent: int, spec: LearnerSpec, samples: Any, conn: Any, stop: Any) -> None:
    """The child: build the learner, then take samples and gradient steps until `stop` or until `parent`
    (the node's pid) is no longer its parent. The node passes its pid: a spawned child starts in seconds
    (it imports torch), and a node killed meanwhile would leave it a parent to watch that is not the node."""
    os.setpgrp()  # a group of its own: stop() can kill it with a version export it started
    try:
        os.nice(spec.nice)
        import torch

        from opd.live.loading import VersionWriter, load_learner
        from policies.artifact import Artifact

        torch.set_num_threads(1)  # the control loop's inference keeps the other core
        # Adam drives weights into denormal floats, which slow every later pass ~10x on a CPU.
        torch.set_flush_denormal(True)
        artifact = Artifact.load(spec.artifact)
        learner = load_learner(artifact, spec.teacher, spec.opd_config)
        writer = None
        if spec.versions_dir:
            announce = lambda path, number: conn.send(("version", str(path), number))  # noqa: E731
            writer = VersionWriter(artifact, spec.versions_dir, spec.version_every_s, announce)
        period = 1.0 / spec.max_rate_hz
        while not stop.value and os.getppid() == parent:  # a node killed outright: stop too
            t0 = time.monotonic()
            _take_samples(learner, samples)
            if learner.update():
                # Blocks while the node's receiver is busy taking the last set: at most one set in flight.
                if spec.send_weights:
                    conn.send(("weights", learner.updates, _as_arrays(learner.acting_state())))
                else:
                    conn.send(("updates", learner.updates))
            busy = time.monotonic() - t0
            if writer is not None and writer.due():
                writer.write(learner)  # in a grandchild process: not counted as busy
            _rest(stop, rest_s(period, time.monotonic() - t0, busy, spec.max_share))
    except Exception:  # noqa: BLE001 - reported to the node (/diagnostics); acting goes on there
        with contextlib.suppress(OSError):  # the node's end closed: nobody is left to tell
            conn.send(("error", traceback.format_exc(limit=8)))


def _rest(stop: Any, seconds: float, poll_s: float = 0.02) -> None:
    """Sleep `seconds`, or until the shared `stop` flag is set (polled every `poll_s`)."""
    end = time.monotonic() + seconds
    while not stop.value and (left := end - time.monotonic()) > 0:
        time.sleep(min(poll_s, left))


def _as_arrays(state: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Tensors as numpy arrays, which pickle by value: torch's own queue reductions pass shared-memory
    handles that the receiver can only open while the sender lives."""
    return {part: {k: v.numpy() for k, v in weights.items()} for part, weights in state.items()}


def _as_tensors(state: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    import torch

    return {part: {k: torch.from_numpy(v) for k, v in weights.items()} for part, weights in state.items()}


def _take_samples(learner: Any, samples: Any) -> None:
    while True:
        try:
            row, stream = samples.get_nowait()
        except queue.Empty:
            return
        learner.add_sample(row, stream)
