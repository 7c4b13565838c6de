"""When the source of the executed action goes silent: the safe action, decisively but without a flood.

The node that commands the robot executes its source's actions as they come. With no action from that
source for `timeout_s` (or none yet), it must stop the robot instead of leaving it on the last command.
The first safe action goes out at the first check after the source went silent; after that it is repeated
only every `keepalive_s` (1 s by default in the opd node) while the source stays silent: enough for a
receiver that joins late or lost one message, without pushing a 20 Hz stream of stops that an arbiter in
front of the base (twist_mux style) would have to out-rank. The base's own command watchdog brakes in
between. Acting resumes with the source's next action.

Pure Python, so the decision a robot's safety depends on is tested without DDS. All times are float
seconds of one clock (the node's ROS clock, which follows /clock with use_sim_time).
"""

from __future__ import annotations

ROUNDING_S = 1e-6  # float seconds from integer nanoseconds: a period "just" under keepalive_s is one, s


class SafeFallback:
    """Is the source silent, and is a safe action due now?

    Args:
        timeout_s: the source is silent after this long without an action, s.
        keepalive_s: period of the repeated safe action while the source stays silent, s.
    """

    def __init__(self, timeout_s: float, keepalive_s: float) -> None:
        if timeout_s <= 0 or keepalive_s <= 0:
            raise ValueError(f"timeout_s = {timeout_s} and keepalive_s = {keepalive_s} must be > 0")
        self.timeout_s = timeout_s
        self.keepalive_s = keepalive_s
        self.last_action_s: float | None = None  # when the source's last action was executed
        self.last_safe_s: float | None = None  # when the last safe action went out; None: acting
        self.safe_sent = 0  # safe actions sent because the source was silent

    @property
    def stopped(self) -> bool:
        """A safe action went out since the source's last action (the robot is held on it)."""
        return self.last_safe_s is not None

    def silent(self, now: float) -> bool:
        """No action from the source within `timeout_s` (or none yet, or the clock went back since)."""
        return self.last_action_s is None or not 0.0 <= now - self.last_action_s <= self.timeout_s

    def on_action(self, now: float) -> bool:
        """The source's action is executed now; True when it ends a stop (acting resumes)."""
        resumed = self.stopped
        self.last_action_s, self.last_safe_s = now, None
        return resumed

    def on_tick(self, now: float) -> bool:
        """True when the caller must send the safe action now: on going silent, then every `keepalive_s`."""
        if not self.silent(now):
            return False
        # A clock that went back (a restarted simulation) makes the elapsed time negative: send, do not wait.
        if self.stopped and 0.0 <= now - self.last_safe_s < self.keepalive_s - ROUNDING_S:
            return False
        self.last_safe_s = now
        self.safe_sent += 1
        return True
