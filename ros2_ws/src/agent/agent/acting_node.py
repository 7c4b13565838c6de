"""Base of the two nodes that send hybrid actions: the policy (the student's proposal) and the opd node (the
executed action, and its /cmd_vel). The encoder, teacher and sim bridge act on nothing and stay `AgentNode`s.

One rule for both: an action goes out only while the node is acting, and under `self.lock`, the lock the
watchdog decides and sends the safe action under, so a safe action decided before an action went out never
follows it. The watchdog (ticking on the steady clock, timing on the ROS clock, so it follows /clock with
use_sim_time, and a system clock stepped back stops at once) sends the contract's safe action once the
source has been silent for `input_timeout_s`, then every 1/`safe_keepalive_hz` s
(`policies.safe_fallback.SafeFallback`). Deactivating (disarm, Ctrl-C, shutdown) ends acting and sends the
safe action in one step under that lock, so it is the last action out. An action answering an input older
than `max_age_s` when it would go out (a starved process decided late) is not sent but counted: the
base then reaches the safe action on the watchdog instead of driving on what it saw half a second ago.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from builtin_interfaces.msg import Time
from rclpy.duration import Duration

from agent.graph import NodeSpec
from agent.lifecycle_node import AgentNode
from agent.messages import ActionCodec, checked_stamp, sec_to_stamp
from policies.safe_fallback import SafeFallback
from policies.skill_contract import ClippedAction, SkillContract
from policies.stream_stats import StreamStats

ACK_TIMEOUT = Duration(seconds=0.5)  # how long the last safe action may take to be acknowledged on exit


class ActingNode(AgentNode):
    """An AgentNode that sends hybrid actions on one topic, and the safe action when their source is silent.

    Subclasses call `configure_acting` at configure, `start_acting` first in activate and `stop_acting` first
    in deactivate, send with `send`, and say why the source counts as silent (`silence`).
    """

    def __init__(self, spec: NodeSpec, **kwargs: Any) -> None:
        self.fallback: SafeFallback | None = None  # set at configure
        self.acting = False  # actions may go out (active, not deactivating)
        super().__init__(spec, **kwargs)

    def configure_acting(
        self, contract: SkillContract, settings: dict[str, Any], topic: str, max_age_s: float = math.inf
    ) -> None:
        """The contract actions are clipped into, the fallback's timing, the action publisher on `topic`, and
        the oldest input an action may answer when sent (`max_age_s`, s)."""
        self.contract = contract
        self.max_age_s = max_age_s
        self.stale = 0  # actions not sent: their input was older than max_age_s by then
        self.codec = ActionCodec(contract)
        self.fallback = SafeFallback(settings["input_timeout_s"], 1.0 / settings["safe_keepalive_hz"])
        self.watchdog_period_s = 1.0 / settings["watchdog_rate_hz"]
        self.clipped = 0  # actions that had to be clipped into the contract
        self.acting = False
        self.pub_action = self.publisher(topic)

    def start_acting(self) -> None:
        """Actions may go out from now on; the watchdog runs."""
        self.acting = True
        # Ticks on the steady clock; what it decides reads the ROS clock. A ROS-clock timer is due at a set
        # system time, so a system clock stepped back 5 s (NTP, chrony) held the stop back 5.5 s (measured
        # with libfaketime); ticking on, the fallback reads the step as silence and stops at once.
        self.timer(self.watchdog_period_s, self.watchdog, self.io_group, steady=True)

    def stop_acting(self) -> None:
        """No action goes out from here on, even from a callback already running, but the safe action, now."""
        with self.lock:
            self.acting = False
            self.publish_safe(self.now_s())

    def silence(self, now: float) -> str:
        """Why the source counts as silent, for logs and diagnostics."""
        raise NotImplementedError

    def clip(self, skill: int, params: np.ndarray, what: str) -> ClippedAction:
        """The action made safe to execute (`SkillContract.clip`); a change is warned about, throttled."""
        action = self.contract.clip(skill, params)
        if action.clipped:
            self.warn_throttled("clipped", f"{what} clipped into the contract: {action.reason}")
        return action

    def send(self, action: ClippedAction, stamp: Time, source: str, sent: StreamStats) -> bool:
        """Send `action` with its input's `stamp` and count it on `sent`, unless acting stopped meanwhile (the
        safe action then stays the last one); True when it ends a stop (the source acts again)."""
        input_s = checked_stamp(stamp)
        with self.lock:
            if not self.acting:
                return False
            now = self.now_s()  # read under the lock, as the watchdog reads it
            if source != "safe" and (age := now - input_s) > self.max_age_s:
                self.stale += 1  # no sign of life either: the watchdog stops the base if none is fresher
            else:
                self.clipped += action.clipped  # counted before the action is out: whoever sees it sees it
                self.publish(action.skill, action.params, stamp, source)
                sent.accept(input_s, now)
                return self.fallback.on_action(now)
        self.warn_throttled("stale", f"{source} action not sent: its input is {age:.3f} s old "
                            f"(max_input_age_s {self.max_age_s:g} s); {self.stale} so far")  # fmt: skip
        return False

    def watchdog(self) -> None:
        """The safe action while the source is silent: at once, then at the keep-alive rate."""
        # Decided and sent under the lock that actions go out under: a safe action decided before an action
        # was executed cannot follow it. The time is read under the lock too: read before it, an action
        # executed while this waited would look like a clock that went back, and a "stop" would follow it.
        with self.lock:
            now = self.now_s()
            if not self.acting:
                return
            entering = not self.fallback.stopped
            due = self.fallback.on_tick(now)
            if due:
                self.publish_safe(now)
        if due and entering:
            self.get_logger().warning(f"{self.silence(now)}: sending the safe action")

    def publish_safe(self, now: float) -> None:
        """The contract's safe action, stamped when sent; called under `self.lock`."""
        self.publish(self.contract.safe_skill_id, self.contract.layout.defaults, sec_to_stamp(now), "safe")

    def publish(self, skill: int, params: np.ndarray, stamp: Time, source: str) -> None:
        """The action (within the contract) on the action topic; `source` is one of SOURCES.

        The stamp goes out exactly as it came in, to the nanosecond (float seconds are 0.2 us apart at
        today's epoch), so the answer matches its input however it is compared.
        """
        msg = self.codec.to_msg(skill, params, 0.0, source)
        msg.header.stamp = stamp  # the input's own
        self.pub_action.publish(msg)
