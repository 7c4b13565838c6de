"""The body of every node executable (`ros2 run agent <node>`): init, spin, and a stop no signal can cut.

From the start of `run_node` to the process's exit, SIGINT and SIGTERM are only recorded
(`agent.stop_signals`). The main thread polls the record while the executor spins on a thread of its own;
the first signal begins the shutdown (executor stopped, node finalized: the opd node's safe action sent and
acknowledged, its learner stopped), and later ones, which a terminal's Ctrl-C under `ros2 launch` always
brings, are counted, never acted on. Once the node is destroyed and the context shut down, nothing is left
to stop, and the signals are ignored while the interpreter exits (a torch atexit hook was interrupted).
"""

from __future__ import annotations

from collections.abc import Callable
from threading import Thread

import rclpy
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.signals import SignalHandlerOptions

from agent.executors import stop_executor
from agent.lifecycle_node import AgentNode
from agent.stop_signals import StopSignals

SIGNAL_POLL_S = 0.05  # longest the main thread takes to notice SIGINT/SIGTERM, s


def run_node(node_class: Callable[[], AgentNode], args: list[str] | None = None) -> None:
    """Init, spin until a signal or shutdown, finalize (safe action first), exit; see the module doc."""
    signals = StopSignals().install()  # before rclpy.init: a signal during start-up raises nothing either
    try:
        # rclpy's signal handlers stay off: they would shut the context down under the running node, and
        # the safe action could no longer be published.
        with rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO):
            node = node_class()
            if not signals:
                spin(node, signals)
            else:  # stopped while starting: never configured, nothing to stop
                node.destroy_node()
    except ExternalShutdownException:
        pass  # a shutdown from elsewhere
    finally:
        signals.ignore()


def spin(node: AgentNode, signals: StopSignals) -> None:
    """Spin one node on a single-threaded executor until a signal or shutdown; on the way out, finalize it
    while the context is valid (a policy sends its safe action then).

    Spun as `agent.bringup` spins each node, for the reasons it gives: single-threaded, and `spin` on a
    thread of its own rather than a spin_once(timeout) loop, which creates a timeout timer per message.
    """
    executor = SingleThreadedExecutor(context=node.context)
    executor.add_node(node)
    failure: list[BaseException] = []

    def spin_executor() -> None:
        try:
            executor.spin()
        except ExternalShutdownException:
            pass  # the context was shut down elsewhere
        except BaseException as err:  # a callback raised: stop the node, then re-raise it below
            failure.append(err)

    thread = Thread(target=spin_executor, name=f"executor-{node.get_name()}", daemon=True)
    thread.start()
    try:
        while not signals and thread.is_alive():
            thread.join(SIGNAL_POLL_S)
    finally:
        stop_executor(executor)  # first: no callback may run on an entity that finalize destroys
        thread.join()
        node.finalize()
        if len(signals.received) > 1:
            node.get_logger().info(f"{len(signals.received) - 1} more stop signal(s) while stopping: ignored")
        node.destroy_node()
    if failure:
        raise failure[0]
