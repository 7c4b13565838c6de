"""--video and --video-episodes, shared by the commands that can record their episodes (`agent eval`)."""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from agent.commands import at_least

if TYPE_CHECKING:  # imported when the command runs: `agent --help` must not load imageio or MuJoCo
    from opd.episode_video import Recording


def add_video_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--video", type=Path, metavar="PATH", help="also write an MP4 of env 0's first "
                        "episodes: the camera as the student sees it beside a camera following the robot, "
                        "who acted and the skill it chose (the report is the same)")  # fmt: skip
    parser.add_argument("--video-episodes", type=at_least(1), default=3, metavar="N",
                        help="episodes in the --video")  # fmt: skip


def recording_of(args: argparse.Namespace) -> Recording | None:
    """The --video to record, its path checked now (before any episode runs) and named on stderr (stdout
    is the report); None without --video."""
    if args.video is None:
        return None
    if getattr(args, "shard_out", None) is not None:
        raise ValueError("--video records env 0 of one process: run it without --shard-out")
    from opd.episode_video import Recording
    from sim.video import Mp4Writer, mp4_path

    path = mp4_path(args.video)
    print(f"video: env 0's first {args.video_episodes} episodes into {path}", file=sys.stderr)
    return Recording(functools.partial(Mp4Writer, path), args.video_episodes)
