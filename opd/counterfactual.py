"""Counterfactual gates: other gate settings ruling, decision by decision, on the evidence the replayed gate
ruled on (`GateInputs`), in worker processes beside the decision pass.

The counterfactual is open loop (the recorded robot's path stays), so no variant feeds back into the
decisions: each can run apart from them. At N = 1 a `Gate.decide` is numpy call overhead (~0.15 ms), a
whole sweep (ten settings) more than the decision it shadows, so the variants run in forked worker
processes (up to one per spare core) fed in batches through pipes while the main process decides; the same
code runs in-process where fork is not available. Each variant's gate restarts at each episode boundary,
as the replayed gate does.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from opd.gate import Gate, GateConfig
from opd.online_distillation import GateInputs

BATCH = 64  # events per message to a worker
# Per variant: one (decision time s, teacher acts, threshold in force) per decision.
Results = dict[str, list[tuple[float, bool, float]]]
# ("decide", now, inputs, no_student) or ("reset",)
Event = tuple[Any, ...]


def _apply(gates: dict[str, Gate], out: Results, events: list[Event]) -> None:
    for event in events:
        if event[0] == "reset":
            for gate in gates.values():
                gate.reset()
            continue
        _, now, inputs, no_student = event
        for name, gate in gates.items():
            d = gate.decide(**vars(inputs))
            use = bool(np.where(no_student, inputs.teacher_ok, d.use_teacher)[0])
            out[name].append((now, use, d.threshold))


def _worker(configs: dict[str, GateConfig], conn: Connection) -> None:
    gates = {name: Gate(cfg, 1) for name, cfg in configs.items()}
    out: Results = {name: [] for name in configs}
    while (events := conn.recv()) is not None:
        _apply(gates, out, events)
    conn.send(out)
    conn.close()


class CounterfactualGates:
    """Variants by name; `decide` and `reset` in decision order, `results()` at the end."""

    def __init__(self, configs: dict[str, GateConfig], workers: int | None = None) -> None:
        spare = max(1, (os.cpu_count() or 1) - 1)
        workers = min(len(configs), spare if workers is None else workers)
        self.names = list(configs)
        self._pending: list[Event] = []
        self._pipes: list[Connection] = []
        self._procs: list[Any] = []
        self._local: tuple[dict[str, Gate], Results] | None = None
        if workers and "fork" in mp.get_all_start_methods():
            ctx = mp.get_context("fork")  # the gates need nothing of the parent but its imports
            names = np.array_split(np.array(self.names, dtype=object), workers)
            for part in names:
                ours, theirs = ctx.Pipe()
                proc = ctx.Process(target=_worker, args=({n: configs[n] for n in part}, theirs), daemon=True)
                proc.start()
                theirs.close()
                self._pipes.append(ours)
                self._procs.append(proc)
        else:
            self._local = ({n: Gate(c, 1) for n, c in configs.items()}, {n: [] for n in configs})

    def decide(self, now: float, inputs: GateInputs, no_student: np.ndarray) -> None:
        self._push(("decide", now, inputs, no_student))

    def reset(self) -> None:
        """An episode ended: every variant's gate restarts (the student acts, timers clear)."""
        self._push(("reset",))

    def _push(self, event: Event) -> None:
        self._pending.append(event)
        if len(self._pending) >= BATCH:
            self._flush()

    def _flush(self) -> None:
        if self._local is not None:
            _apply(*self._local, self._pending)
        for pipe in self._pipes:
            pipe.send(self._pending)
        self._pending = []

    def results(self) -> Results:
        """Every variant's decisions; the workers end."""
        self._flush()
        if self._local is not None:
            return self._local[1]
        out: Results = {}
        try:
            for pipe in self._pipes:
                pipe.send(None)
                out.update(pipe.recv())
        except (EOFError, OSError) as err:
            raise RuntimeError(f"a counterfactual gate worker died: {err!r}") from None
        finally:
            for proc in self._procs:
                proc.join(timeout=5.0)
        return {name: out[name] for name in self.names}
