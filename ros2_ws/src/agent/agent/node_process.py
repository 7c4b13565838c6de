"""The body of every node executable (`ros2 run agent <node>`): init, spin, and a stop no signal can cut.

From the start of `run_node` to the process's exit, SIGINT and SIGTERM are only recorded
(`agent.stop_signals`). The first one halts the node at once, in the handler (the opd node sends no
further source action), and the main thread, which polls the record while the executor spins on a thread of
its own, begins the shutdown: executor stopped, node finalized (the opd node's safe action sent and
acknowledged, its learner stopped). Later ones, which a Ctrl-C under `ros2 launch` can bring, are counted,
never acted on. Once the node is destroyed and the context shut down, nothing is left to stop: the signals
are ignored while the interpreter exits (a torch atexit hook was interrupted), and the collector's last
pass is skipped.
"""

from __future__ import annotations

import gc
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
            signals.on_first = node.halt
            if not signals:
                spin(node, signals)
            else:  # stopped while starting: never configured, nothing to stop
                node.destroy_node()
    except ExternalShutdownException:
        pass  # a shutdown from elsewhere
    finally:
        signals.ignore()
        # Nothing is left to stop: skip the collector's pass over every object at exit, which took the
        # teacher and opd nodes (torch loaded) ~4 s, past launch's 5 s wait before its SIGTERM.
        gc.freeze()


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
