"""Offline OPD evaluation: a recorded run through the encoder, the LSTM predictor, the gate and the student.

`agent replay BAG` reads the bag in-process (`opd.replay.bags.reader`: no DDS, no wall clock) and drives the
one-stream OPD core the live `opd` node runs (`opd.distill.decision_stream.DecisionStream`), so two runs on
one bag give byte-identical JSON and a run recorded by `agent run --record` replays to the decisions it made.

Three passes over the bag:
1. index: every topic but the camera, decoded and checked with the nodes' own checks
   (`policies.message_fields`): IMU samples, active skills, teacher states, recorded embeddings, executed
   actions and gate decisions; per topic the stamps and log times (latency, gaps, drops);
2. encode (the default): camera frames in log order, each with the IMU window the live encoder would cut
   (`policies.imu_buffer.ImuBuffer`, the last samples at or before the image stamp), resized and encoded
   in batches through the deployed runtime (ONNX Runtime by default), which the live graph cannot do. When
   the bag holds the live encoder's output (`state`), exactly the frames it encoded are encoded (the live
   one drops frames under load), each with the skill state its embedding names; otherwise every frame with
   a window, with the last skill state recorded before the frame arrived. `--reuse-state` skips this pass
   and takes the recorded embeddings, when each names this artifact's encoder
   (StateEmbedding.encoder_hash; the first that names another stops the replay);
3. decide: frames and teacher states in arrival order through the core. A frame the live gate decided
   (its /opd/gate record) is decided at the recorded time after exactly the teacher states the live one had
   (`teacher_upto`); when the bag holds such records, frames without one (dropped by the live node's
   reader while it lagged) are not decided, as they were not live; otherwise frames are decided at their
   arrival. The frozen models' outputs for the whole recording are computed first, in batches
   (`opd.distill.model_memo`), and served to the core by input. Alongside, the counterfactual gates
   (`ReplayConfig.gates`, one `opd.distill.gate.Gate` of their settings) rule on the same evidence
   (`opd.distill.learner.GateInputs`), restarting at each episode as the replayed gate does: the
   would-have-intervened rate, switches per minute and where they fall, for a whole threshold sweep in one
   pass. The counterfactual is open loop: the robot's path is the
   recorded one whatever a variant would have done.
"""

from __future__ import annotations

import bisect
import json
import logging
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pydantic import Field

from opd.distill.decision_stream import DecisionStream
from opd.distill.gate import Gate, GateConfig
from opd.distill.model_memo import ModelMemo
from opd.evaluation import project_path
from opd.live.loading import DEFAULT_OPD_CONFIG, acting_version, default_teacher, load_learner
from opd.replay.bags.reader import BagError, BagInput, BagMessage, BagTopics, stamp_ns
from opd.replay.summary import summarise
from policies.artifact import MANIFEST, Artifact, sha256_file
from policies.config import Config, from_root
from policies.imu_buffer import ImuBuffer, MatchStatus
from policies.message_fields import (
    REPLAY_ENCODINGS,
    MessageError,
    checked_skill_state,
    checked_stamp,
    compressed_to_rgb,
    image_to_rgb,
    imu_to_sample,
    msg_to_action,
    msg_to_embedding,
    msg_to_gate,
    msg_to_privileged,
    msg_to_skill_state,
    privileged_names,
)
from policies.preprocessing import resize_rgb

log = logging.getLogger(__name__)


class GateVariant(Config):
    """A counterfactual gate: overrides on top of the replayed gate's config."""

    name: str
    gate: dict[str, Any] = Field(default_factory=dict)  # GateConfig fields


def _threshold(x: float) -> GateVariant:
    fixed = {"schedule": "constant", "threshold_start": x, "threshold_end": x, "budget": None}
    return GateVariant(name=f"threshold {x:g}", gate=fixed)


def default_variants() -> list[GateVariant]:
    """A constant-threshold sweep, hysteresis and dwell off, and two budgets."""
    return [
        *(_threshold(x) for x in (0.05, 0.1, 0.15, 0.3, 0.6, 1.0)),
        GateVariant(name="no hysteresis", gate={"release_ratio": 1.0, "min_teacher_steps": 1}),
        GateVariant(name="budget 5%", gate={"budget": 0.05, "budget_end": None}),
        GateVariant(name="budget 20%", gate={"budget": 0.2, "budget_end": None}),
    ]


def episode_floors(teacher: list[tuple], starts: np.ndarray) -> np.ndarray:
    """Per episode of the teacher states (arrival order; `starts` (T,) marks each that begins one): the stamp
    at or before which a frame is the previous episode's, as `DecisionStream` cuts it (that episode's newest
    state; -inf for the first episode, and after a clock that went back). Shape: (episodes,)."""
    stamps = np.array([t[1] for t in teacher], np.float64)  # (T,)
    episode = np.cumsum(starts)  # (T,)
    floors = np.full(int(episode[-1]) + 1 if len(episode) else 1, -np.inf)
    for e in range(1, len(floors)):
        newest, first = stamps[episode == e - 1].max(), stamps[np.argmax(episode == e)]
        floors[e] = newest if newest < first else -np.inf
    return floors


class ReplayConfig(Config):
    """One replay: topic mapping, the OPD core's config, encoding, and the counterfactual gates."""

    topics: BagTopics = Field(default_factory=BagTopics)
    # YAML with an `opd:` section and the teacher checkpoint; "" = the recorded run's (the bag's
    # agent.params), else opd/configs/live.yaml and the artifact's teacher (opd.live.loading.default_teacher).
    opd_config: str = ""
    teacher: str = ""
    backend: str = "onnxruntime"  # runtime of the re-encoding (onnxruntime, torch, tensorrt)
    precision: str = ""  # fp32, fp16, int8; "" = the recorded run's (agent.launch_args), else the default
    threads: int | None = Field(None, ge=1)  # inference threads; None = the backend's default
    batch_size: int = Field(32, ge=1)  # frames encoded together, frames
    # The live encoder's parameters (agent.graph, node "encoder"): the same windows, the same drops.
    sync_tolerance_s: float = Field(0.01, ge=0)  # newest window sample at most this before the image, s
    imu_future_tolerance_s: float = Field(0.2, ge=0)  # IMU samples this far ahead of arrival: refused, s
    imu_buffer_size: int = Field(1000, ge=1)  # IMU samples held, samples
    max_latency_s: float = Field(0.3, gt=0)  # frames arriving later than this after their stamp: dropped, s
    gap_factor: float = Field(1.5, gt=1)  # a stamp step over this x the median period is a gap, 1
    gates: list[GateVariant] = Field(default_factory=default_variants)


@dataclass
class TopicStats:
    """Stamps and log times of one topic, for latency, gaps and drops."""

    stamps: list[float] = field(default_factory=list)
    logs: list[float] = field(default_factory=list)

    def add(self, stamp: float, log_s: float) -> None:
        self.stamps.append(stamp)
        self.logs.append(log_s)

    def summary(self, gap_factor: float) -> dict[str, Any]:
        """Count, rate, latency (log time - stamp), gaps, duplicates and backwards stamps."""
        st, lg = np.asarray(self.stamps), np.asarray(self.logs)
        out: dict[str, Any] = {"messages": int(st.size)}
        if st.size == 0:
            return out
        latency = lg - st
        out["latency_ms"] = {"p50": _ms(np.percentile(latency, 50)), "p99": _ms(np.percentile(latency, 99)),
                             "max": _ms(latency.max())}  # fmt: skip
        out["backwards"] = int(np.sum(np.diff(st) < 0))  # stamps that went back, in arrival order
        ordered = np.sort(st)
        steps = np.diff(ordered)
        out["duplicates"] = int(np.sum(steps < 1e-9))
        steps = steps[steps >= 1e-9]
        if steps.size:
            period = float(np.median(steps))
            gaps = steps[steps > gap_factor * period]
            out.update({"rate_hz": round(1.0 / period, 3), "gaps": int(gaps.size),
                        "missing": int(np.sum(np.round(gaps / period) - 1)),
                        "largest_gap_ms": _ms(steps.max())})  # fmt: skip
        return out


def _ms(x: float) -> float:
    return round(float(x) * 1e3, 3)


@dataclass
class Frame:
    """A student frame to decide on: its stamp, arrival (log time), embedding and recorded context."""

    stamp: float
    arrival: float  # when the opd node got it: the recorded embedding's log time, else the image's, s
    embedding: np.ndarray | None = None  # (E,)
    active: tuple[int, float, float] | None = None  # (skill, progress, step) the live encoder used


# A frame's encoder inputs: the frame, its image (H, W, 3) uint8, IMU window (T, 6), (skill, progress, step)
FrameInput = tuple[Frame, np.ndarray, np.ndarray, tuple[int, float, float]]


@dataclass
class Recorded:
    """What pass 1 read, besides the camera."""

    imu: list[tuple[float, float, np.ndarray]] = field(default_factory=list)  # (log, stamp, sample (6,))
    skills: list[tuple[float, tuple[int, float, float]]] = field(default_factory=list)  # (log, active)
    # (log, stamp, active skill, step, privileged state (Dq,))
    teacher_states: list[tuple[float, float, int, int, np.ndarray]] = field(default_factory=list)
    teacher_actions: dict[int, tuple[int, np.ndarray]] = field(default_factory=dict)  # stamp ns ->
    states: dict[int, Frame] = field(default_factory=dict)  # stamp ns -> the live encoder's frame
    # stamp ns -> (log time s, skill, params (P,)) of the first executed action with that stamp
    executed: dict[int, tuple[float, int, np.ndarray]] = field(default_factory=dict)
    gate: dict[int, dict[str, Any]] = field(default_factory=dict)  # stamp ns -> /opd/gate (msg_to_gate)
    # stamp ns of the first frame a student version decided live -> (its number, its directory)
    versions: dict[int, tuple[int, str]] = field(default_factory=dict)


class Replay:
    """One bag through one artifact. `run()` -> the result dict; `timings` -> seconds by stage."""

    def __init__(
        self, bag: str | Path, artifact: str | Path, cfg: ReplayConfig | None = None,
        reuse_state: bool = False, progress: Callable[[str, int, int], None] | None = None,
    ) -> None:  # fmt: skip
        self.cfg = cfg or ReplayConfig()
        self.progress = progress or (lambda stage, done, total: None)  # (stage, done, total): a bar
        self.bag_path, self.reuse_state = Path(bag), reuse_state
        self.artifact = Artifact.load(artifact)
        self.artifact_hash = sha256_file(self.artifact.root / MANIFEST)
        self.contract = self.artifact.contract
        self.timings: Counter[str] = Counter()  # s: read, decode, encode, gate
        self.stats: dict[str, TopicStats] = defaultdict(TopicStats)
        self.counts: Counter[str] = Counter()  # frames encoded, dropped, ...
        self.memo: ModelMemo | None = None  # the decision pass's batched model outputs (hits and misses)
        # what the teacher saw of each teacher state, by arrival (its view: a remembering one is a pass
        # over the stream), computed once for the teacher's batches and reused for the prediction errors
        self.teacher_seen: np.ndarray | None = None

    def _read(self, messages: Iterator[BagMessage]) -> Iterator[BagMessage]:
        """The bag's messages, the time spent reading (and decoding) them counted as "read"."""
        while True:
            t0 = time.perf_counter()
            m = next(messages, None)
            self.timings["read"] += time.perf_counter() - t0
            if m is None:
                return
            yield m

    # ---- pass 1 ---------------------------------------------------------------------------------------
    def _index(self, bag: BagInput) -> Recorded:
        rec = Recorded()
        c = self.contract
        emb_dim = self.artifact.embed_dim
        fields = self.artifact.model("predictor").get("fields") or []
        priv_names = privileged_names(fields)
        roles = ("privileged", "teacher_action", "state", "executed", "gate", "version")
        # With --reuse-state the camera, IMU and skill are not needed: their stamps are read for the figures.
        sensors = ("imu", "active_skill")
        stamps_only = ("camera", *sensors) if self.reuse_state else ()
        for m in self._read(bag.messages(roles if self.reuse_state else (*roles, *sensors), stamps_only)):
            t1 = time.perf_counter()
            try:
                if m.role == "version":  # a JSON note without a header (`agent.nodes.opd.announce_version`)
                    note = json.loads(m.msg.data)
                    rec.versions[stamp_ns(float(note["stamp"]))] = (int(note["number"]), str(note["path"]))
                    continue
                stamp = checked_stamp(m.stamp or m.msg.header.stamp)
                if m.role == "gate":
                    rec.gate[stamp_ns(stamp)] = msg_to_gate(m.msg)
                    continue
                self.stats[m.topic].add(stamp, m.log_s)
                if m.msg is None:  # stamp only
                    continue
                if m.role == "imu":
                    rec.imu.append((m.log_s, stamp, imu_to_sample(m.msg)))
                elif m.role == "active_skill":
                    rec.skills.append((m.log_s, msg_to_skill_state(m.msg, c.num_skills)))
                elif m.role == "privileged":
                    skill, step, state = msg_to_privileged(m.msg, priv_names, c.num_skills)
                    rec.teacher_states.append((m.log_s, stamp, skill, step, state))
                elif m.role == "teacher_action":
                    rec.teacher_actions[stamp_ns(stamp)] = msg_to_action(m.msg, c)
                elif m.role == "executed":
                    rec.executed.setdefault(stamp_ns(stamp), (m.log_s, *msg_to_action(m.msg, c)))
                elif m.role == "state":
                    emb = self._recorded_embedding(m, emb_dim) if self.reuse_state else None
                    active = checked_skill_state(m.msg.skill, m.msg.progress, m.msg.step, c.num_skills)
                    rec.states.setdefault(stamp_ns(stamp), Frame(stamp, m.log_s, emb, active))
            except (MessageError, ValueError, KeyError, TypeError) as err:
                reason = err.reason if isinstance(err, MessageError) else "invalid"
                bag.skips.add(m.topic, reason, m.log_s, str(err))
            self.timings["decode"] += time.perf_counter() - t1
        return rec

    def _recorded_embedding(self, m: BagMessage, dim: int) -> np.ndarray:
        """A recorded embedding (E,) for --reuse-state; one of another encoder stops the replay."""
        encoder = self.artifact.encoder_hash
        if m.msg.encoder_hash != encoder:
            raise BagError(
                f"--reuse-state: {m.topic} at log time {m.log_s:.6f} s holds an embedding of encoder "
                f"{m.msg.encoder_hash[:12] or '(unnamed)'}..., not {self.artifact.root}'s "
                f"({encoder[:12]}...); "
                "replay without --reuse-state to re-encode the camera"
            )
        return msg_to_embedding(m.msg, dim, encoder)

    # ---- pass 2 ---------------------------------------------------------------------------------------
    def _encode(self, bag: BagInput, rec: Recorded) -> list[Frame]:
        from policies.runtime import load_student

        options: dict[str, Any] = {"threads": self.cfg.threads} if self.cfg.threads else {}
        if precision := self.cfg.precision or bag.launch_args().get("precision"):
            options["precision"] = precision
        rt = load_student(self.artifact, backend=self.cfg.backend, **options)
        size = max(self.cfg.imu_buffer_size, rt.imu_window)
        imu = ImuBuffer(rt.imu_window, size, self.cfg.sync_tolerance_s, period_s=1.0 / rt.imu_rate_hz,
                        future_tolerance_s=self.cfg.imu_future_tolerance_s)  # fmt: skip
        wanted = set(rec.states) if rec.states else None  # the live encoder's frames, when recorded
        imaged: set[int] = set()  # those of them whose image is in the bag (used or skipped)
        skill_logs = [t for t, _ in rec.skills]
        frames: list[Frame] = []
        batch: list[FrameInput] = []
        k = 0  # next IMU sample to push
        total = len(rec.states) if rec.states else bag.message_count("camera")

        def prepare(m: BagMessage) -> FrameInput | None:
            """One camera message -> its encoder inputs, or None (skipped and counted)."""
            nonlocal k
            try:
                stamp = checked_stamp(m.msg.header.stamp)
                self.stats[m.topic].add(stamp, m.log_s)
                if wanted is not None and stamp_ns(stamp) not in wanted:
                    self.counts["frames_not_encoded_live"] += 1
                    return None
                if wanted is not None:
                    imaged.add(stamp_ns(stamp))
                if wanted is None and m.log_s - stamp > self.cfg.max_latency_s:
                    raise MessageError("late", f"image {m.log_s - stamp:.3f} s old on arrival")
                if hasattr(m.msg, "format"):
                    rgb = compressed_to_rgb(m.msg)
                else:
                    rgb = image_to_rgb(m.msg, REPLAY_ENCODINGS)
            except MessageError as err:
                bag.skips.add(m.topic, err.reason, m.log_s, str(err))
                return None
            # IMU delivered by this frame's arrival, then on while the IMU lags its stamp (the encoder waits)
            while k < len(rec.imu) and (rec.imu[k][0] <= m.log_s or (imu.newest or 0.0) < stamp):
                log_s, s, sample = rec.imu[k]
                if why := imu.push(s, sample, log_s):
                    bag.skips.add(self.cfg.topics.name("imu"), why, log_s, f"IMU sample at {s:.6f}")
                k += 1
            match = imu.match(stamp)
            if match.status is not MatchStatus.OK:
                bag.skips.add(m.topic, "no_imu_window", m.log_s, match.reason)
                return None
            self.counts["windows_with_gap"] += bool(match.gap_s)
            rgb = rgb if rgb.shape[:2] == rt.image_hw else resize_rgb(rgb, *rt.image_hw)
            live = rec.states.get(stamp_ns(stamp))
            if live is not None:  # the skill state the live encoder used, as its embedding names it
                return Frame(stamp, live.arrival), rgb, match.window, live.active
            # else the last one recorded before the frame arrived
            i = bisect.bisect_right(skill_logs, m.log_s) - 1
            active = rec.skills[i][1] if i >= 0 else (self.contract.safe_skill_id, 0.0, 0.0)
            return Frame(stamp, m.log_s), rgb, match.window, active

        for m in self._read(bag.messages(("camera",))):
            t1 = time.perf_counter()
            item = prepare(m)
            self.timings["decode"] += time.perf_counter() - t1
            if item is None:
                continue
            batch.append(item)
            if len(batch) == self.cfg.batch_size:
                frames += self._encode_batch(rt, batch)
                batch = []
                self.progress("encode", len(frames), total)
        if batch:
            frames += self._encode_batch(rt, batch)
        if wanted is not None:  # duplicated or skipped images are no missing ones
            self.counts["live_frames_without_image"] = len(wanted - imaged)
        return frames

    def _encode_batch(self, rt: Any, batch: list[FrameInput]) -> list[Frame]:
        t0 = time.perf_counter()
        images = np.stack([b[1] for b in batch])  # (B, H, W, 3) uint8
        windows = np.stack([b[2] for b in batch])  # (B, T, 6)
        skills = np.array([b[3][0] for b in batch], np.int64)
        progress = np.array([b[3][1] for b in batch], np.float32)
        steps = np.array([b[3][2] for b in batch], np.float32)
        emb, _ = rt.encode(images, windows, skills, progress, steps)  # (B, E)
        self.timings["encode"] += time.perf_counter() - t0
        self.counts["frames_encoded"] += len(batch)
        out = []
        for (frame, *_), e in zip(batch, emb, strict=True):
            frame.embedding = np.asarray(e, np.float32)
            out.append(frame)
        return out

    # ---- pass 3 ---------------------------------------------------------------------------------------
    def _learner(self, bag: BagInput) -> Any:
        recorded = {k: v for k, v in bag.node_params("opd").items() if isinstance(v, str)}  # paths only
        opd_config = self.cfg.opd_config or recorded.get("opd_config") or str(DEFAULT_OPD_CONFIG)
        teacher = self.cfg.teacher or recorded.get("teacher_checkpoint") or default_teacher(self.artifact)
        # as the project names them: the report reads alike on every checkout
        self.used = {
            "opd_config": project_path(from_root(opd_config)),
            "teacher": project_path(from_root(teacher)),
        }
        learner = load_learner(self.artifact, from_root(teacher), from_root(opd_config), learning=False,
                               onnx=True)  # as the live node acts  # fmt: skip
        carried = self.artifact.weights.novelty is not None
        if learner.acting_novelty is not None and not carried:
            log.warning(
                "%s: switch %r reads a novelty ensemble, which artifact %s does not hold (its student was "
                "not distilled with one): the replayed gate reads an untrained one",
                opd_config, learner.cfg.switch, self.artifact.root,
            )  # fmt: skip
        return learner

    def _decide(self, bag: BagInput, rec: Recorded, frames: list[Frame]) -> dict[str, Any]:
        """Pass 3 on one torch thread: its operations are tiny (batch 1), and a second thread only waits
        (measured: 4x slower with two threads on a busy 2-core machine)."""
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return self._decide_all(bag, rec, frames)
        finally:
            torch.set_num_threads(threads)

    def _decide_all(self, bag: BagInput, rec: Recorded, frames: list[Frame]) -> dict[str, Any]:
        learner = self._learner(bag)
        stream = DecisionStream(learner)
        base = learner.cfg.gate.model_dump()
        names = [v.name for v in self.cfg.gates]
        configs = [GateConfig.from_dict({**base, **v.gate}, f"gates: {v.name}") for v in self.cfg.gates]
        variants = Gate(configs, 1) if configs else None  # (V,) counterfactual settings on the same evidence
        teacher = sorted(rec.teacher_states, key=lambda x: x[0])
        frames = sorted(frames, key=lambda f: f.arrival)
        if rec.gate:
            # A recorded decision stream: exactly the frames the live gate decided. One it never saw (its
            # reader dropped it while the node lagged) is not decided here either.
            decided = [f for f in frames if stamp_ns(f.stamp) in rec.gate]
            if len(decided) < len(frames):
                self.counts["frames_not_decided_live"] += len(frames) - len(decided)
            frames = decided
        schedule = self._schedule(rec, frames, teacher)
        t0 = time.perf_counter()
        self.memo = self._precompute(learner, frames, teacher, schedule)
        learner.use_memo(self.memo)
        self.timings["models"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        rows: list[dict[str, Any]] = []
        teacher_actions: dict[int, tuple[int, np.ndarray]] = {}
        preds: list[tuple[float, np.ndarray]] = []
        cf_use: dict[str, list[tuple[float, bool, float]]] = {name: [] for name in names}
        episodes = 0
        k = 0
        for f, (now, fed) in zip(frames, schedule, strict=True):
            context = rec.gate.get(stamp_ns(f.stamp))
            while k < fed:
                log_s, stamp, skill, step, state = teacher[k]
                stream.on_teacher(stamp, skill, step, state, log_s)
                _, _, t_skill, t_params = learner.last_actions(0)
                teacher_actions[stamp_ns(stamp)] = (t_skill, t_params)
                k += 1
            if (version := rec.versions.get(stamp_ns(f.stamp))) is not None:
                self._swap_version(stream, *version)
            decided = stream.on_frame(f.stamp, f.embedding, now)
            if len(rows) % 200 == 0:
                self.progress("decide", len(rows), len(frames))
            if decided is None:
                continue
            d = decided.decision
            action = self.contract.clip(int(d.skill[0]), d.params[0])
            s_skill, s_params, _, _ = learner.last_actions(0)
            pred = learner.last_prediction(0)
            preds.append((f.stamp, pred))
            rows.append({"stamp": f.stamp, "now": now, "source": decided.source, "reason": decided.reason,
                         "error": float(d.error[0]), "threshold": float(d.threshold),
                         "skill": int(action.skill), "params": np.asarray(action.params, np.float64),
                         "student": (s_skill, s_params), "live": context})  # fmt: skip
            if len(stream.episodes) > episodes:  # an episode ended before this decision: as the live gate,
                episodes = len(stream.episodes)  # the counterfactual ones restart
                if variants is not None:
                    variants.reset()
            if variants is not None and d.inputs is not None:
                use, _, thresholds = variants.decide_variants(**vars(d.inputs))  # (V, 1), _, (V,)
                use = np.where(d.no_student[0], d.inputs.teacher_ok[0], use[:, 0])  # no student: as the core
                for name, u, th in zip(names, use.tolist(), thresholds.tolist(), strict=True):
                    cf_use[name].append((now, u, th))
        stream.finish(frames[-1].arrival if frames else 0.0)
        self.timings["gate"] += time.perf_counter() - t0
        teacher_actions = {**rec.teacher_actions, **teacher_actions}  # the replayed teacher's first
        return {"rows": rows, "episodes": stream.episodes, "counterfactual": cf_use, "preds": preds,
                "teacher_actions": teacher_actions, "learner": learner,
                "refusals": stream.refusals}  # fmt: skip

    def _swap_version(self, stream: DecisionStream, number: int, path: str) -> None:
        """A student version learnt live acts from this frame on, as it did live (its hashes checked). The
        memo holds the deployed head's outputs: from here the head and predictor are computed per frame, as
        live. A version no longer on disk (only the newest few are kept) is counted and the replay goes on
        with the last one, so its decisions may then differ from the live ones."""
        try:
            stream.offer(*acting_version(from_root(path), self.artifact))
        except (OSError, ValueError) as err:
            self.counts["versions_missing"] += 1
            log.warning("student version %d (%s) not loaded: %s; replay goes on with the last one", number,
                        path, err)  # fmt: skip
            return
        self.counts["versions_swapped"] += 1
        if self.memo is not None:
            self.memo.tables["head"].clear()
            self.memo.tables["predictor"].clear()

    @staticmethod
    def _schedule(rec: Recorded, frames: list[Frame], teacher: list[tuple]) -> list[tuple[float, int]]:
        """Per frame (in decision order): when it is decided, and how many of `teacher` (sorted by arrival)
        the core has been given by then. With the live context: the teacher states up to the stamp the
        live gate had (NaN: none yet); without: those that arrived before the frame."""
        schedule, k = [], 0
        for f in frames:
            context = rec.gate.get(stamp_ns(f.stamp))
            now = float(context["decided_at"]) if context else f.arrival
            upto = float(context["teacher_upto"]) if context else np.inf
            while k < len(teacher) and (teacher[k][1] <= upto if context else teacher[k][0] <= now):
                k += 1
            schedule.append((now, k))
        return schedule

    def _precompute(
        self, learner: Any, frames: list[Frame], teacher: list[tuple], schedule: list[tuple[float, int]]
    ) -> ModelMemo:
        """The acting models on every input of the recording, in batches (`opd.distill.model_memo`): the
        teacher on each teacher state, the student head (all of an episode's windows together) and the
        predictor on each frame's window as it will be if every frame is accepted, an episode starting
        wherever a teacher step goes back (as `DecisionStream` starts one) and a frame of the last episode
        decided after that refused (`episode_floors`). A window that turns out otherwise (after a refused
        frame) is computed as live."""
        memo = ModelMemo()
        steps = np.array([t[3] for t in teacher], np.int64)
        starts = np.r_[False, steps[1:] < steps[:-1]][: len(steps)]  # (T,) a state that begins an episode
        if frames:
            emb = np.stack([f.embedding for f in frames]).astype(np.float32)  # (F, E)
            resets = np.cumsum(starts)  # (T,) episodes begun by each
            episode = np.array([resets[fed - 1] if fed else 0 for _, fed in schedule])  # (F,)
            floors = episode_floors(teacher, starts)[episode]  # (F,) a frame at or before it is refused
            kept = np.array([f.stamp for f in frames]) > floors + 1e-9  # (F,)
            history = learner.align.history
            pad = np.zeros((history - 1, emb.shape[1]), np.float32)
            for ep in np.unique(episode):  # one strided view per episode: windows are not copied
                sel = np.flatnonzero((episode == ep) & kept)
                padded = np.concatenate([pad, emb[sel]])
                windows = np.lib.stride_tricks.sliding_window_view(padded, (history, emb.shape[1]))[:, 0]
                memo.put("head", windows[:, -learner.memory_frames :], learner.episode_head_outputs(emb[sel]))
                memo.fill("predictor", windows[:, -learner.predictor_cfg.history :], learner.predictions_of)
        if teacher:
            states, skills = np.stack([t[4] for t in teacher]), np.array([t[2] for t in teacher])
            stamps = np.array([t[1] for t in teacher], np.float64)
            # in arrival order, so a view that remembers sightings sees each state as the learner will
            seen = self.teacher_seen = learner.teacher.seen_stream(states, stamps, starts)  # (T, Dq)
            feats = learner.teacher.features(states, skills, seen=seen)
            memo.fill("teacher", feats, learner.teacher_outputs)
        return memo

    # ---- all of it ------------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        with BagInput(self.bag_path, self.cfg.topics) as bag:
            if self.reuse_state and not bag.has("state"):
                raise BagError(f"--reuse-state: {self.bag_path} has no recorded state embeddings "
                               f"({self.cfg.topics.name('state')})")  # fmt: skip
            rec = self._index(bag)
            if self.reuse_state:
                frames = sorted(rec.states.values(), key=lambda f: f.arrival)
            else:
                if not bag.has("camera"):
                    raise BagError(f"{self.bag_path}: no camera topic {self.cfg.topics.name('camera')!r} to "
                                   "encode (map it in the config, or --reuse-state)")  # fmt: skip
                frames = self._encode(bag, rec)
            if not frames:
                skipped = bag.skips.rows()
                raise BagError(f"{self.bag_path}: no student frame could be built; skipped: {skipped}")
            out = self._decide(bag, rec, frames)
            return summarise(self, bag, rec, out, len(frames))


def load_config(path: str | Path | None) -> ReplayConfig:
    """ReplayConfig from YAML (None: the defaults, opd/configs/replay.yaml)."""
    return ReplayConfig.from_yaml(path or from_root("opd/configs/replay.yaml"))
