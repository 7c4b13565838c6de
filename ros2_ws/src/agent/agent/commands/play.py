"""`agent play`: watch a policy drive a few episodes, in a window where a display exists, else in an MP4.

    agent play                                   # the committed student, 3 episodes in the clean sim
    agent play --teacher sim/robots/diffbot/teacher/teacher.pt --proxy --episodes 1 --video runs/play/t.mp4

Each frame is the student's camera as the student sees it beside a camera that follows the robot, with
who acted and the skill it chose (`opd.episode_video`). The episodes are the evaluation's first seeded
ones on one env, so `agent eval student --episodes N --envs 1` reports what was shown. The window is
matplotlib's Tk one (the same frames as the MP4: opencv here is the headless build, and MuJoCo's own
viewer would show the scene without the student's camera); without a display, or with --video, the
MP4 is written (runs/play/ by default) and its path printed.
"""

from __future__ import annotations

import argparse
import functools
import os
import time
from datetime import datetime
from pathlib import Path

import numpy as np

from agent.commands import at_least
from agent.commands.eval import DEFAULT_PROXY, DEFAULT_STUDENT, EVAL_SEED, PROXY_HELP

PLAY_DIR = Path("runs/play")  # where an MP4 goes without --video


def add_arguments(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--artifact", type=Path, default=DEFAULT_STUDENT,
                       help="the student artifact that drives, acting alone (agent export)")  # fmt: skip
    which.add_argument(
        "--teacher", type=Path, help="drive with this teacher.pt instead (teacher.yaml beside it)"
    )
    parser.add_argument("--proxy", action="store_true", help="run on the real-robot proxy")
    parser.add_argument("--proxy-config", type=Path, help=PROXY_HELP)
    parser.add_argument("--sim-config", type=Path, help="sim YAML (default: sim/configs/mujoco.yaml)")
    parser.add_argument("--episodes", type=at_least(1), default=3, help="episodes, one after another")
    parser.add_argument("--seed", type=at_least(0), default=EVAL_SEED, help="seed of the first episode")
    parser.add_argument("--backend", default="onnxruntime", help="the student's runtime backend")
    parser.add_argument("--video", type=Path, metavar="PATH", help="write this MP4 instead of opening a "
                        f"window (without a display: {PLAY_DIR}/<policy>-<time>.mp4)")  # fmt: skip


class Window:
    """Frames shown in a matplotlib window at the episode's pace; closing the window ends the play."""

    def __init__(self, fps: float) -> None:
        import matplotlib.pyplot as plt

        self.plt, self.period = plt, 1.0 / fps
        self.figure = plt.figure("agent play")
        self.image = None
        self.due = time.monotonic()

    def append(self, frame: np.ndarray) -> None:
        """Show one frame (H, W, 3) uint8, no sooner than one period after the last."""
        if not self.plt.fignum_exists(self.figure.number):
            raise KeyboardInterrupt  # the window was closed: stop as Ctrl-C does
        if self.image is None:
            self.image = self.figure.figimage(frame, resize=True)
        self.image.set_data(frame)
        self.due += self.period
        self.plt.pause(max(self.due - time.monotonic(), 1e-3))

    def close(self) -> None:
        self.plt.close(self.figure)


def window_backend() -> str | None:
    """Why no window can open (None: one can): a display is named and Tk reaches it."""
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        return "no display (DISPLAY and WAYLAND_DISPLAY are unset)"
    try:
        import tkinter

        tkinter.Tk().destroy()  # connects to the display: a named one that cannot be reached fails here
    except Exception as err:  # ImportError without Tk, TclError for a display that is not there
        return f"no window on this display ({err})"
    import matplotlib

    matplotlib.use("TkAgg")
    return None


def run(args: argparse.Namespace) -> int:
    from opd.episode_video import Recording
    from sim.video import Mp4Writer, mp4_path

    proxy = args.proxy_config or (DEFAULT_PROXY if args.proxy else None)
    name = (args.teacher or args.artifact).resolve()
    name = name.parent.name if args.teacher else name.name
    path, why = args.video, None
    if path is None and (why := window_backend()) is not None:
        path = PLAY_DIR / f"{name}-{datetime.now():%Y%m%d-%H%M%S}.mp4"
    if path is not None:
        path = mp4_path(path)  # a path that cannot be written fails here, before any episode runs
        print(f"{why}: writing {path}" if why else f"writing {path}", flush=True)
    recording = Recording(functools.partial(Mp4Writer, path) if path else Window, args.episodes)
    if args.teacher:
        from opd.evaluation import evaluate_teacher
        from policies.teacher_policy import load_teacher

        report = evaluate_teacher(load_teacher(args.teacher), args.episodes, proxy=proxy, seed=args.seed,
                                  sim_config=args.sim_config, num_envs=1, video=recording)  # fmt: skip
    else:
        from opd.evaluation import evaluate_student
        from policies.runtime import load_student

        runtime = load_student(args.artifact, backend=args.backend)
        report = evaluate_student(runtime, args.episodes, proxy=proxy, sim_config=args.sim_config,
                                  seed=args.seed, num_envs=1, video=recording)  # fmt: skip
    outcomes = ", ".join(f"{e}: {o}" for e, o in enumerate(report["episode_outcomes"], args.seed))
    print(f"{name}, episodes by seed: {outcomes}")
    if path is not None:
        print(f"wrote {path}")
    return 0
