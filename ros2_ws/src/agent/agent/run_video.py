"""`agent run --video`: an MP4 of the live graph's robot, as a viewer of Isaac Lab or LeRobot looks at first.

Each frame is the camera image the sim bridge sent the graph beside a camera that follows the robot, with
who decided the command the base follows and what it is. Frames are taken on the robot thread, where the
backend's GL context is current, every `every`-th observation; a frame costs about 26 ms of rendering on a
2-core CPU, so the default takes one in two (10 frames a second) and the run's live line shows whatever
missed cycles that costs. Encoding runs on a thread of its own; a frame the encoder cannot take in time is
dropped and counted, never waited for.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np

from sim.realtime_loop import Release

log = logging.getLogger(__name__)

QUEUE_FRAMES = 32  # frames waiting for the encoder, at most


class RunVideo:
    """Env 0 of a running robot into an MP4. `who()` says who decided the command the base follows now;
    `applied()` is that command as the overlay shows it (e.g. 'drive(speed=0.40, curvature=-1.20)')."""

    def __init__(
        self, path: Path, control_hz: float, who: Callable[[], str],
        applied: Callable[[], str], every: int = 2,
    ) -> None:  # fmt: skip
        from sim.video import Mp4Writer

        if every < 1:
            raise ValueError(f"every {every}: take at least every observation's frame (1)")
        self.path, self.who, self.applied, self.every = path, who, applied, every
        self.writer = Mp4Writer(path, control_hz / every)
        self.frames: queue.Queue[np.ndarray | None] = queue.Queue(QUEUE_FRAMES)
        self.view = None  # made on the robot thread, at the first frame
        self.released = self.written = self.dropped = 0
        self.error: BaseException | None = None
        self._encoder = threading.Thread(target=self._encode, name="run-video", daemon=True)
        self._encoder.start()

    def __call__(self, release: Release, robot: object) -> None:
        """Robot thread: the frame of this observation, if it is one the video takes."""
        if release.imu_only or self.error is not None:
            return
        self.released += 1
        if (self.released - 1) % self.every:
            return
        from sim.third_person import ThirdPersonView
        from sim.video import compose

        try:
            if self.view is None:
                self.view = ThirdPersonView(robot)
            obs = release.obs
            lines = [f"t {float(obs.time_s[0]):6.2f} s  progress {float(obs.task.progress[0]):.2f}",
                     f"acted: {self.who()}  {self.applied()}"]  # fmt: skip
            camera = None if obs.image is None else obs.image[0]
            frame = compose(self.view.render(0), camera, lines)
        except Exception as err:  # a video must never stop the robot: it stops itself, and says why
            self.error = err
            log.error("--video stopped: %r", err)
            return
        try:
            self.frames.put_nowait(frame)
        except queue.Full:
            self.dropped += 1

    def _encode(self) -> None:
        while (frame := self.frames.get()) is not None:
            try:
                self.writer.append(frame)
                self.written += 1
            except Exception as err:  # a full disk, a broken pipe to ffmpeg
                self.error = err
                log.error("--video stopped: %r", err)
                return

    def close(self) -> str:
        """Finish the file; what it holds, in one line."""
        self.frames.put(None)
        self._encoder.join()
        if self.view is not None:
            self.view.close()
        self.writer.close()
        dropped = f", {self.dropped} dropped (the encoder was behind)" if self.dropped else ""
        failed = f"; stopped early: {self.error!r}" if self.error is not None else ""
        return f"video: {self.written} frames in {self.path}{dropped}{failed}"
