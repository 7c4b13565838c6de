"""Online Policy Distillation (OPD): a gated student/teacher switch and a student that learns while it acts.

Seed 003, section 3.4: a teacher (simulation, true undelayed state) and a student (robot, ~120 ms late,
noisy camera + IMU) write to ONE timestamp-aligned state buffer; an LSTM predictor (last 5 student frames
in, horizons 1..3 out) estimates what the teacher sees; when its error exceeds a threshold (0.15 at the
start, decaying) the teacher's action is executed, otherwise the student's; the student learns from the
action KL plus the state-prediction error.

How this class does it, per env (N envs side by side; N = 1 on a live robot):
- `observe_teacher(stamp, privileged, skill, now)`: the frozen teacher acts on the true state; the entry
  (state, skill, parameters, logits) joins the env's `AlignedBuffer` at its stamp.
- `observe_student(envs, stamp, frame, now)`: a new camera frame (measured at `stamp`, arriving later) is
  encoded by the acting student; the head, on the env's last `memory.frames` embeddings, gives the student's
  action and the predictor, on its last `history` embeddings, the teacher-side state at stamp + h periods
  (h = 1..horizon), in units of the teacher state's std.
- `act(now)`: the prediction error of the newest frame whose targets the teacher stream has already reached
  (RMS over fields, mean over the horizons resolved) goes to the `Gate`, which picks the executed action.
- `process_step(now, done)`: frames whose teacher partners are in are popped from the buffer as aligned
  (student frame, teacher state, teacher action) samples into the learner's own `SampleStore`.
- `update()`: one gradient step on a batch of the store: KL(teacher || student) on the skill logits, the
  masked loss on the teacher's skill's parameters (the head on each sample's stored window) and the
  state-prediction loss, both of which reach the encoder through the newest frame of the window. Acting
  uses a copy of the weights (`acting`), refreshed by `sync_policy`, so an act never waits for a gradient
  step and never sees a half-applied one.

The teacher is frozen: eval mode, no gradients, and not in the optimiser.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from opd.distill.aligned_buffer import AlignedBuffer, AlignedSample, StudentEntry, TeacherEntry
from opd.distill.augment import random_shift
from opd.distill.config import OPDConfig, resolve_config, state_width
from opd.distill.distill_loss import DistillLoss
from opd.distill.env_state import EnvState
from opd.distill.gate import Gate
from opd.distill.model_memo import ModelMemo
from opd.distill.novelty import EnsembleNovelty
from opd.distill.onnx_acting import OnnxActing
from opd.distill.sample_store import SampleStore, StoreSpec
from opd.distill.signal_mix import SignalMix
from policies.state_predictor import StatePredictor
from policies.student_input import INPUT_NAMES
from policies.student_policy import StudentPolicy
from policies.teacher_policy import TeacherPolicy

if TYPE_CHECKING:
    from policies.export import Novelty

log = logging.getLogger(__name__)


def native_bf16() -> bool:
    """This CPU computes bfloat16 natively (AMX or AVX512-BF16), so `distill.precision: bf16` pays off."""
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


@dataclass(frozen=True)
class Decision:
    """The executed action of N envs and why. Shapes: (N,) except params (N, P)."""

    skill: np.ndarray
    params: np.ndarray
    use_teacher: np.ndarray
    reason: tuple[str, ...]
    error: np.ndarray  # the gate's input: prediction error or disagreement, NaN = unknown
    threshold: float
    inputs: GateInputs | None = None  # what the gate ruled on (None for the forced switches)
    no_student: np.ndarray | None = None  # (N,) bool: no usable student; the gate's choice was overridden


@dataclass(frozen=True)
class GateInputs:
    """The arguments of one `Gate.decide` call: another gate can rule on the same evidence (replay's
    counterfactual gates). Shapes: (N,) except step."""

    step: int
    now: np.ndarray
    error: np.ndarray
    student_skill: np.ndarray
    teacher_skill: np.ndarray
    student_in_contract: np.ndarray
    teacher_ok: np.ndarray


class OnlineDistillation:
    """The OPD learner. What a runner (trainer, node, replay, bench) uses: `observe_teacher`,
    `observe_student`, `act`, `process_step`, `begin_episode`, `update`, `stats`, `save` / `load`, the
    acting weights (`get_policy`, `acting_state` / `set_acting`, `snapshot_policy`) and, to serve another
    process or replay, `attach_sink` / `add_sample` and `use_memo`."""

    def __init__(
        self, student: StudentPolicy, teacher: TeacherPolicy, cfg: OPDConfig, num_envs: int, seed: int = 0,
        learning: bool = True, device: torch.device | str = "cpu",
    ) -> None:  # fmt: skip
        """`learning=False`: a learner that acts, gates and measures but never updates (offline replay, a
        node with `learn` off), so it keeps no sample store (`distill.capacity` windows of memory).
        `device`: where the student, predictor and ensemble learn and act (numpy in and out either way);
        the frozen teacher, a small MLP on one state per env, stays on the CPU."""
        if teacher is None:
            raise ValueError("OPD needs a trained teacher: pass the frozen TeacherPolicy")
        self.cfg, self.num_envs, self.learning = cfg, num_envs, learning
        self.device = torch.device(device)
        self.teacher = teacher.eval().requires_grad_(False)
        self.contract = student.contract
        k, p = self.contract.num_skills, self.contract.num_params
        self.state_dim = state_width(teacher)
        ec = student.cfg.encoder
        resolved = resolve_config(cfg, student.cfg, teacher)
        self.predictor_cfg = resolved.predictor
        self.align = align = resolved.align
        self.memory_frames = student.memory_frames
        self.student = student.train()
        self.predictor = StatePredictor(self.predictor_cfg).train()
        with_novelty = cfg.switch in ("novelty", "predictor_novelty")
        self.novelty = EnsembleNovelty(ec.embed_dim, self.contract, cfg.novelty) if with_novelty else None
        mixed = cfg.switch == "predictor_novelty"
        self.mix = SignalMix(cfg.gate.budget_window, cfg.gate.budget_min_samples) if mixed else None
        if cfg.distill.memory_state > 0 and student.memory is None:
            raise ValueError("distill.memory_state needs a head with memory (student memory.frames > 1)")
        self.memory_readout = (
            torch.nn.Linear(ec.embed_dim, self.state_dim) if cfg.distill.memory_state > 0 else None
        )  # (B, E) -> (B, Dq)
        # On a GPU the encoder learns in bfloat16 whatever `distill.precision` says: tensor cores make it
        # the fast format there; on the CPU it pays only where the CPU computes bfloat16 natively.
        bf16 = cfg.distill.precision == "bf16" or self.device.type == "cuda"
        self.loss = DistillLoss(self.student, self.predictor, self.novelty, self.memory_readout, cfg.distill,
                                self.predictor_cfg.history, bf16).to(self.device)  # fmt: skip
        self.objective: torch.nn.Module = self.loss  # what `update` calls: the loss, or DDP over it
        self.lock = threading.Lock()  # guards the acting copies against sync_policy from a learner thread
        self.acting, self.acting_predictor, self.acting_novelty = self._copies()
        params = list(self.student.parameters()) + list(self.predictor.parameters())
        if self.novelty is not None:
            params += list(self.novelty.parameters())
        if self.memory_readout is not None:
            params += list(self.memory_readout.parameters())
        if not cfg.distill.train_encoder:
            self.student.encoder.requires_grad_(False)
            params = [q for q in params if q.requires_grad]
        self.optimizer = torch.optim.Adam(params, lr=cfg.distill.lr)
        if learning and cfg.distill.precision == "bf16" and self.device.type == "cpu" and not native_bf16():
            log.warning("distill.precision bf16: this CPU has no native bfloat16; updates will be slower")
        # Teacher-state scale for the predictor: the teacher's own observation statistics (fixed, so an
        # error means the same at every step of training).
        norm = self.teacher.norm
        self.state_mean = norm.mean[: self.state_dim].numpy().astype(np.float32)
        self.state_std = np.maximum(norm.var[: self.state_dim].sqrt().numpy(), cfg.distill.state_std_min)
        self.state_std = self.state_std.astype(np.float32)
        image = (ec.image.height, ec.image.width, 3) if cfg.distill.train_encoder else None
        spec = StoreSpec(
            image, ec.imu.window, ec.embed_dim, align.history, align.horizon, self.state_dim, k, p
        )
        self.store = SampleStore(spec, cfg.distill.capacity, streams=num_envs) if learning else None
        # Where each aligned sample also goes (`attach_sink`)
        self.sink: Callable[[dict[str, np.ndarray], int], None] | None = None
        self.buffers = [AlignedBuffer(align) for _ in range(num_envs)]
        self.gate = Gate(cfg.gate, num_envs)
        self.rng = np.random.default_rng(seed)
        self.steps = 0  # decisions, summed over envs
        self.teacher_steps = 0  # decisions that executed the teacher's action, summed over envs
        self.updates = 0
        self.env = EnvState(num_envs, align.history, ec.embed_dim, align.horizon, self.contract,
                            self.teacher.new_memory(num_envs))  # fmt: skip
        self.memo: ModelMemo | None = None  # outputs computed ahead (`use_memo`)
        self.onnx: OnnxActing | None = None  # the head and predictor acting in ONNX Runtime (`act_in_onnx`)
        # Parameter-error metric: the slots each skill owns (K, P) and the half-range of each slot (P,).
        head = self.teacher.head
        self._slot_masks = head.slot_mask(torch.arange(k)).numpy()
        self._half_range = (head.high - head.low).numpy() / 2.0

    # ---- acting -------------------------------------------------------------------------------------
    @torch.no_grad()
    def observe_teacher(
        self, stamp: np.ndarray, privileged: np.ndarray, active_skill: np.ndarray, now: np.ndarray
    ) -> np.ndarray:
        """The frozen teacher acts on the true state of every env and its entry joins the buffer.

        Shapes: stamp (N,) s, privileged (N, Dq), active_skill (N,), now (N,) s. Returns (N,) bool: the entry
        was accepted (the buffer counts why not: stale, future, duplicate, non-finite).
        """
        seen = self.teacher.seen(privileged, self.env.sightings, update=False)  # (N, Dq)
        feats = self.teacher.features(privileged, active_skill, seen=seen)
        skill, params, logits = self.teacher_outputs(feats)
        # The buffer keeps each state as the predictor's target, normalised once here rather than per use;
        # a raw state with a non-finite field stays non-finite (refused), even where the view hides it.
        target = self._scaled(seen)  # (N, Dq)
        target[~np.isfinite(privileged).all(axis=1)] = np.nan
        accepted = np.zeros(self.num_envs, dtype=bool)
        for i, buf in enumerate(self.buffers):
            entry = TeacherEntry(
                float(stamp[i]),
                target[i],
                int(skill[i]),
                params[i].astype(np.float32),
                logits[i].astype(np.float32),
            )
            accepted[i] = buf.add_teacher(entry, float(now[i]))
        if self.env.sightings is not None:
            stamps = np.asarray(stamp, np.float64)
            remembered = accepted & (stamps > self.env.sighted_upto)
            self.env.sightings.commit(remembered)
            self.env.sighted_upto[remembered] = stamps[remembered]
        # a refused entry (stale, future, duplicate, non-finite) neither acts nor counts as a live teacher
        self.env.teacher_skill[accepted] = skill[accepted]
        self.env.teacher_params[accepted] = params[accepted]
        self.env.teacher_seen_at[accepted] = now[accepted]
        return accepted

    @torch.no_grad()
    def observe_student(
        self, envs: np.ndarray, stamp: np.ndarray, frame: dict[str, np.ndarray], now: np.ndarray
    ) -> np.ndarray:
        """New student frames for `envs` (M,): encode, act, predict, and join the buffer.

        `frame` holds the encoder's inputs (`INPUT_NAMES`, each with a leading M axis) or, with a fixed
        encoder, "embedding" (M, E). stamp (M,) is each frame's measurement time, now (M,) its arrival.
        Returns (M,) bool: the frame was accepted (the buffer counts why not: late, duplicate, non-finite).
        """
        with self.lock:
            if "embedding" in frame:  # a copy: the caller's array may be read-only (a decoded message)
                emb_np = np.array(frame["embedding"], np.float32)  # (M, E)
            else:
                inputs = (torch.as_tensor(frame[k]).to(self.device) for k in INPUT_NAMES)
                emb_np = self.acting.encoder(*inputs)[0].cpu().numpy()
            # Only frames the buffer accepts (not late, duplicate or non-finite) act and enter the windows,
            # so the acting window and the training windows hold the same frames.
            payloads = [{k: np.array(frame[k][j]) for k in frame} for j in range(len(envs))]
            accepted = np.array(
                [
                    self.buffers[i].add_student(
                        StudentEntry(float(stamp[j]), emb_np[j], payloads[j]), float(now[j])
                    )
                    for j, i in enumerate(envs)
                ],
                dtype=bool,
            )
            if not accepted.any():
                return accepted
            sel = np.flatnonzero(accepted)
            windows = self.env.windows.push(envs[sel], emb_np[sel])  # (M', T, E)
            skill, params = self.head_outputs(np.ascontiguousarray(windows[:, -self.memory_frames :]))
            pred = self.predictions_of(np.ascontiguousarray(windows[:, -self.predictor_cfg.history :]))
            if self.acting_novelty is not None:
                novelty = self.acting_novelty.disagreement(torch.from_numpy(emb_np[sel]).to(self.device))
                self.env.novelty_score[envs[sel]] = novelty.cpu().numpy()
        for row, j in enumerate(sel):
            i = envs[j]
            payloads[j]["prediction"] = pred[row]  # the buffer hands the payload back with the sample
            self.env.predictions[i].append((float(stamp[j]), payloads[j]["prediction"]))
            self.env.student_skill[i], self.env.student_params[i] = int(skill[row]), params[row]
            self.env.student_ok[i] = bool(np.isfinite(self.env.student_params[i]).all())
            self.env.has_student[i] = True
            # its age counts from when it was measured: a frame that arrives 1.5 s late is stale on arrival
            self.env.student_seen_at[i] = min(float(now[j]), float(stamp[j]))
            self.env.newest_payload[i] = payloads[j]
        return accepted

    @torch.no_grad()
    def teacher_outputs(self, feats: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The frozen teacher on features (M, Dq + K): skills (M,), params (M, P) float64, logits (M, K)."""
        if self.memo is not None and (held := self.memo.get("teacher", feats)) is not None:
            return held
        dist = self.teacher(torch.from_numpy(feats))
        skill, params = self.teacher.head.deterministic(dist)
        return skill.numpy(), params.double().numpy(), dist.logits.numpy()

    @torch.no_grad()
    def head_outputs(self, frames: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The acting head on windows (M, W, E) float32: deployed skills (M,) and params (M, P) float64."""
        if self.memo is not None and (held := self.memo.get("head", frames)) is not None:
            return held
        if self.onnx is not None:
            return self.onnx.head_outputs(frames)
        dist = self.acting.act_dist(torch.from_numpy(frames).to(self.device))
        skill, params = self.acting.head.deterministic(dist)
        return skill.cpu().numpy(), params.double().cpu().numpy()

    @torch.no_grad()
    def episode_head_outputs(self, episode: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`head_outputs` of the window ending at each frame of one episode's embeddings (N, E) float32,
        computed together (`FrameMemory.sliding`): for offline replay, which knows the episode ahead.
        Acting in ONNX: each window as live (W frames, zero rows before the first) through the graph, in
        batches."""
        if self.onnx is not None:
            w, e = self.memory_frames, episode.shape[1]
            padded = np.concatenate([np.zeros((w - 1, e), np.float32), episode])  # (W - 1 + N, E)
            windows = np.lib.stride_tricks.sliding_window_view(padded, (w, e))[:, 0]  # (N, W, E), a view
            outs = [self.onnx.head_outputs(np.array(windows[i : i + 256]))  # a copy of one batch only
                    for i in range(0, len(windows), 256)]  # fmt: skip
            return np.concatenate([o[0] for o in outs]), np.concatenate([o[1] for o in outs])
        emb = torch.from_numpy(episode).to(self.device)
        feats = emb if self.acting.memory is None else self.acting.memory.sliding(emb)  # (N, E)
        skill, params = self.acting.head.deterministic(self.acting.head(feats))
        return skill.cpu().numpy(), params.double().cpu().numpy()

    @torch.no_grad()
    def predictions_of(self, windows: np.ndarray) -> np.ndarray:
        """The acting predictor on windows (M, T, E) float32: predictions (M, H, Dq), normalised units."""
        if self.memo is not None and (held := self.memo.get("predictor", windows)) is not None:
            return held[0]
        if self.onnx is not None:
            return self.onnx.predictions(windows)
        h0, c0 = (z.to(self.device) for z in self.acting_predictor.initial_state(len(windows)))
        pred, _, _ = self.acting_predictor(torch.from_numpy(windows).to(self.device), h0, c0)
        return pred.cpu().numpy()

    def act(self, now: np.ndarray, teacher_ok: np.ndarray | None = None) -> Decision:
        """The executed action of every env: the gate's choice between the student and the teacher.

        An env without a usable student (no frame yet, none measured within `student_timeout_s`, or a
        non-finite action) is driven by the teacher, or by the safe action when the teacher is silent too.
        """
        n, inputs = self.num_envs, None
        fresh = now - self.env.teacher_seen_at <= self.cfg.teacher_timeout_s
        teacher_ok = fresh if teacher_ok is None else teacher_ok & fresh
        if self.cfg.switch == "novelty":
            error = self.env.novelty_score.copy()
        elif self.mix is not None:
            error = self.mix(self._prediction_errors(), self.env.novelty_score)
        else:
            error = self._prediction_errors()
        if self.cfg.switch == "student":
            use, reason, threshold = np.zeros(n, dtype=bool), ("forced_student",) * n, float("nan")
        elif self.cfg.switch == "teacher":
            use, threshold = teacher_ok.copy(), float("nan")
            reason = tuple("forced_teacher" if ok else "teacher_unavailable" for ok in teacher_ok)
        else:
            # no frame yet is no contract violation: such envs are driven below, outside the gate's rules
            in_contract = self.env.student_ok | ~self.env.has_student
            inputs = GateInputs(self.steps, np.array(now, np.float64), error, self.env.student_skill.copy(),
                                self.env.teacher_skill.copy(), in_contract, teacher_ok)  # fmt: skip
            d = self.gate.decide(**vars(inputs))
            use, reason, threshold = d.use_teacher, d.reason, d.threshold
            if self.mix is not None:
                self.mix.count(np.array([r == "error_above_threshold" for r in reason]))
        stale = now - self.env.student_seen_at > self.cfg.student_timeout_s
        no_student = ~self.env.has_student | ~self.env.student_ok | stale
        use = np.where(no_student, teacher_ok, use)
        skill = np.where(use, self.env.teacher_skill, self.env.student_skill)
        params = np.where(use[:, None], self.env.teacher_params, self.env.student_params)
        unsafe = no_student & ~teacher_ok
        skill[unsafe] = self.contract.safe_skill_id
        params[unsafe] = self.contract.layout.defaults
        # where the student is unusable its reason is said here: the gate ruled on a student that is not there
        reason = tuple(
            "no_input_safe_action" if u else "no_student" if ns else r
            for u, ns, r in zip(unsafe, no_student, reason, strict=True)
        )
        for i in np.flatnonzero(use & ~no_student):  # the gate took the student's decision on this frame
            if (payload := self.env.newest_payload[i]) is not None:
                payload["takeover"] = True
        self._track(use, use != self.env.using_teacher)
        self.teacher_steps += int(use.sum())
        self.env.using_teacher = use.copy()
        self.steps += n
        return Decision(skill.astype(np.int64), params, use, reason, error, threshold, inputs, no_student)

    def last_actions(self, env: int) -> tuple[int, np.ndarray, int, np.ndarray]:
        """Env `env`'s newest student action and teacher action: (skill, params (P,)) each."""
        return (int(self.env.student_skill[env]), self.env.student_params[env].copy(),
                int(self.env.teacher_skill[env]), self.env.teacher_params[env].copy())  # fmt: skip

    def last_prediction(self, env: int) -> np.ndarray | None:
        """Env `env`'s newest prediction (H, Dq), teacher-state std units; None before the first frame."""
        preds = self.env.predictions[env]
        return preds[-1][1] if preds else None

    def _prediction_errors(self) -> np.ndarray:
        """Per env: RMS error (std units) of the newest prediction the teacher stream has reached, averaged
        over its resolved horizons; NaN when none is resolved yet. Shape: (N,)."""
        out = np.full(self.num_envs, np.nan)
        period = self.align.period_s
        for i, (buf, preds) in enumerate(zip(self.buffers, self.env.predictions, strict=True)):
            for stamp, pred in reversed(preds):
                hit = [(h, e) for h in range(pred.shape[0])
                       if (e := buf.teacher_at(stamp + (h + 1) * period)) is not None]  # fmt: skip
                if hit:
                    diff = pred[[h for h, _ in hit]] - np.stack([e.state for _, e in hit])  # targets
                    out[i] = float(np.sqrt(np.mean(diff**2, axis=1)).astype(np.float64).mean())  # (H',) -> 1
                    break
        return out

    def normalise(
        self, state: np.ndarray, stamps: np.ndarray | None = None, seen: np.ndarray | None = None
    ) -> np.ndarray:
        """One stream's privileged states (T, Dq), in arrival order, as the predictor's targets: what the
        teacher sees of each (its view; a remembering one as `TeacherPolicy.seen_stream`, `stamps` (T,);
        `seen` where the caller has it already), (seen - mean) / std in the teacher's own statistics, which
        are of what it sees (a field its view hides has std ~0: the raw field over that floor would be
        hundreds of stds)."""
        return self._scaled(self.teacher.seen_stream(state, stamps) if seen is None else seen)

    def _scaled(self, seen: np.ndarray) -> np.ndarray:
        """What the teacher sees (..., Dq) in its own statistics, float32."""
        return ((np.asarray(seen, np.float32) - self.state_mean) / self.state_std).astype(np.float32)

    def _track(self, use_teacher: np.ndarray, switched: np.ndarray) -> None:
        mask, half = self._slot_masks[self.env.teacher_skill], self._half_range  # (N, P), (P,)
        for i, m in enumerate(self.env.metrics):
            m.switches += int(switched[i] and m.steps > 0)  # the first decision of an episode is no switch
            m.steps += 1
            m.teacher_steps += int(use_teacher[i])
            if self.env.has_student[i] and self.env.student_skill[i] == self.env.teacher_skill[i]:
                m.agree_steps += 1
                err = ((self.env.student_params[i] - self.env.teacher_params[i]) / half) ** 2 * mask[i]
                m.param_error_sum += float(err.sum() / max(mask[i].sum(), 1.0))

    # ---- data -------------------------------------------------------------------------------------
    def process_step(
        self, now: np.ndarray, done: np.ndarray, outcomes: list[str] | None = None
    ) -> list[dict[str, Any]]:
        """Move aligned samples into the store; finish the episodes of `done` (N,) envs.

        Returns the metric summaries of the finished episodes (`EpisodeMetrics.summary`).
        """
        finished = []
        for i, buf in enumerate(self.buffers):
            # an ended episode flushes its pending frames: no teacher entry will come for them any more
            t = float(now[i]) + (self.align.max_wait_s + 1.0 if done[i] else 0.0)
            for sample in buf.pop_ready(t):
                self._store(i, sample)
            if done[i]:
                m = self.env.metrics[i]
                m.outcome = outcomes[i] if outcomes else "done"
                finished.append(m.summary(1.0 / self.align.period_s))
                self.begin_episode(i)
        return finished

    def begin_episode(self, env: int, after: float = -np.inf) -> None:
        """A new episode for env `env`: buffer, windows, gate timers and metrics start afresh, and no entry
        stamped at or before `after` (s; the ended episode's) may pair in it. `process_step` begins one
        for each env it finishes; call it to end one unfinished (its samples and metrics are dropped)."""
        self.buffers[env].reset(after)
        self.gate.reset(np.array([env]))
        self.env.reset(env)

    def stats(self) -> dict[str, Any]:
        """Counters for logs and diagnostics, cumulative: decisions and those the teacher's action executed
        (summed over envs), gradient steps, the gate's switches and its decisions by "source/reason", with
        a mixed signal the takeovers by which uncertainty led, and with a store its samples (held, added,
        window frames lost to overwriting: 0 in a sound run)."""
        out: dict[str, Any] = {
            "decisions": self.steps,
            "teacher_decisions": self.teacher_steps,
            "updates": self.updates,
            "switches": self.gate.switches,
            "gate_counts": dict(self.gate.counts),
        }
        if self.mix is not None:
            out["gate_led"] = dict(self.mix.takeovers)
        if self.store is not None:
            out.update(samples=len(self.store), labels=self.store.added, lost_frames=self.store.lost_frames)
        return out

    def attach_sink(self, sink: Callable[[dict[str, np.ndarray], int], None] | None) -> None:
        """Hand every aligned sample (the row `add_sample` takes, its env) to `sink` as well, or stop with
        None: a learner in another process (`opd.live.process`) keeps the store there. Not a constructor
        argument: the process that owns the sink starts and stops while the learner lives on."""
        self.sink = sink

    def add_sample(self, row: dict[str, np.ndarray], stream: int = 0) -> None:
        """An aligned sample made elsewhere (another learner's sink) joins this learner's store."""
        if self.store is None:
            raise RuntimeError("this learner was built with learning=False: it keeps no samples")
        self.store.add(row, stream=stream)

    def sample_shapes(self) -> dict[str, tuple[tuple[int, ...], Any]]:
        """Each row key's (shape, dtype) as `add_sample` takes it."""
        if self.store is None:
            raise RuntimeError("this learner was built with learning=False: it keeps no samples")
        return self.store.spec.shapes()

    def act_in_onnx(self, acting: OnnxActing | None, novelty: dict[str, torch.Tensor] | None = None) -> None:
        """Act with `acting`'s head and predictor graphs (an artifact's or a learnt version's), and a novelty
        gate with the ensemble weights `novelty` when given, from the next decision on: swapped under the
        lock, so a decision sees the old version or the new one, never a mix. None: the torch acting copies.
        The torch copies stay the learner's; only `sync_policy` / `set_acting` change those."""
        with self.lock, torch.no_grad():
            self.onnx = acting
            if novelty is not None and self.acting_novelty is not None:
                self.acting_novelty.load_state_dict(novelty)

    @property
    def acting_version(self) -> int:
        """The student version acting in ONNX (0: the deployed artifact's own; -1: torch copies)."""
        return -1 if self.onnx is None else self.onnx.version

    def use_memo(self, memo: ModelMemo | None) -> None:
        """Serve the frozen models' outputs from `memo` where it holds them (offline replay computes a whole
        recording's ahead, in batches: `opd.distill.model_memo`); None: compute each. Not a constructor
        argument: the memo is computed with this learner's own models."""
        self.memo = memo

    def _store(self, env: int, s: AlignedSample) -> None:
        future = s.future  # (H, Dq) predictor targets (`observe_teacher`), zeros where none
        pred = s.payload["prediction"]
        m = self.env.metrics[env]
        err = np.sqrt(np.mean((pred - future) ** 2, axis=1))  # (H,) per-horizon RMS error
        m.horizon_error_sum += np.where(s.future_mask, err, 0.0)
        m.horizon_count += s.future_mask
        if self.store is None and self.sink is None:  # not learning: the metrics are all a sample is for
            return
        label = self._label(s)
        row = {
            "embedding": s.window[-1],
            "window": s.window,
            "window_mask": s.window_mask,
            "window_ids": s.window_ids,
            "teacher_logits": label.logits,
            "teacher_skill": label.skill,
            "teacher_params": label.params,
            "future": future,
            "future_mask": s.future_mask,
            "takeover": bool(s.payload.get("takeover", False)),
        }
        if self.cfg.distill.train_encoder:  # the store keeps the newest frame's encoder inputs
            row.update({k: s.payload[k] for k in INPUT_NAMES})
        if self.store is not None:
            self.store.add(row, stream=env)
        if self.sink is not None:
            self.sink(row, env)

    def _label(self, s: AlignedSample) -> TeacherEntry:
        """The teacher entry whose action labels sample s: the newest found up to distill.label_lead
        periods after its stamp (near an episode's end the later ones may be missing)."""
        lead = self.cfg.distill.label_lead
        return next((e for e in reversed(s.future_teacher[:lead]) if e is not None), s.teacher)

    # ---- learning ------------------------------------------------------------------------------------
    def update(self) -> dict[str, float]:
        """One gradient step on a batch of the store; {} while it holds less than a batch (in a job of
        several ranks: while any rank's store does, since every rank takes every step together)."""
        from opd.distributed import all_min

        cfg = self.cfg.distill
        if self.store is None:
            raise RuntimeError("this learner was built with learning=False: it keeps no samples")
        if all_min(len(self.store), self.device) < cfg.batch_size:
            return {}
        b = self.store.sample(cfg.batch_size, self.rng, cfg.priority_alpha, cfg.takeover_share)
        if cfg.train_encoder:
            b["image"] = random_shift(b["image"], cfg.image_shift_px, self.rng)  # (B, H, W, 3)
        b["weight"] = self._skill_weights(b["teacher_skill"])  # (B,)
        index = b.pop("index").numpy()
        losses, priority = self.learn_on(b)
        if cfg.priority_alpha > 0:
            self.store.set_priority(index, priority + 1e-3)
        return losses

    def learn_on(self, batch: dict[str, torch.Tensor]) -> tuple[dict[str, float], np.ndarray]:
        """One gradient step on `batch` (a store batch without "index", with "weight": host tensors, moved
        here to the learner's device through pinned memory on a GPU). Returns the losses and each sample's
        skill + parameter loss (B,), for priorities."""
        cuda = self.device.type == "cuda"
        b = {k: (v.pin_memory() if cuda else v).to(self.device, non_blocking=cuda) for k, v in batch.items()}
        loss, parts, priority = self.objective(b)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        params = [q for g in self.optimizer.param_groups for q in g["params"]]
        grad_norm = torch.nn.utils.clip_grad_norm_(params, self.cfg.distill.grad_clip)
        self.optimizer.step()
        self.updates += 1
        if self.updates % self.cfg.distill.sync_every == 0:
            self.sync_policy(average=True)
        losses = {k: float(v) for k, v in parts.items()}
        losses["grad_norm"] = float(grad_norm)
        return losses, priority.cpu().numpy()

    def distribute(self) -> None:
        """Learn as one rank of a job (a process group is joined: `opd.distributed.process_group`):
        DistributedDataParallel over the loss's models broadcasts rank 0's weights to every rank now and
        averages the gradients of every update, so all ranks keep the same weights while each learns from
        its own store. The acting copies take the broadcast weights."""
        from torch.nn.parallel import DistributedDataParallel

        ids = [self.device.index] if self.device.type == "cuda" else None
        # static_graph: the same parameters take part in every update, and the head's log_std in none (the
        # losses read the mean and logits): DDP learns that once instead of searching the graph each step
        self.objective = DistributedDataParallel(self.loss, device_ids=ids, static_graph=True)
        self.sync_policy()

    def _skill_weights(self, skills: torch.Tensor) -> torch.Tensor:
        """Per-sample loss weights (B,) from each teacher skill's share of the store (skill_balance)."""
        balance = self.cfg.distill.skill_balance
        if balance == 0.0:
            return torch.ones(skills.shape[0])
        share = self.store.skill_counts(self.contract.num_skills) / max(len(self.store), 1)  # (K,)
        w = torch.from_numpy(np.maximum(share, 1e-3) ** -balance).float()[skills]  # (B,)
        return w / w.mean()

    def sync_policy(self, average: bool = False) -> None:
        """Copy the learner's weights into the acting student, predictor and ensemble, in place under the
        lock (acting sees the old weights or the new ones, never a mix). Call it from the thread that
        updates. A fixed encoder (the live node) is not copied: only the head acts on embeddings there.
        `average` (after an update): with `acting_ema`, the acting student moves towards the learner's
        weights by 1 - acting_ema instead."""
        skip = self._fixed_prefixes
        student = {k: v for k, v in self.student.state_dict().items() if not k.startswith(skip)}
        ema = self.cfg.distill.acting_ema if average else 0.0
        with self.lock, torch.no_grad():
            if ema > 0:
                acting = self.acting.state_dict()  # the module's own tensors: updated in place
                for k, v in student.items():
                    if v.is_floating_point():
                        acting[k].lerp_(v, 1.0 - ema)
                    else:
                        acting[k].copy_(v)
            else:
                self.acting.load_state_dict(student, strict=not skip)
            self.acting_predictor.load_state_dict(self.predictor.state_dict())
            if self.novelty is not None:
                self.acting_novelty.load_state_dict(self.novelty.state_dict())

    def _copies(self) -> tuple[StudentPolicy, StatePredictor, EnsembleNovelty | None]:
        def frozen(m: torch.nn.Module, shared: dict[int, Any] | None = None) -> Any:
            return copy.deepcopy(m, shared).eval().requires_grad_(False)

        # A fixed encoder never changes and the learner never runs it (frames come as embeddings): the
        # acting student shares it instead of holding a second copy of the largest weights.
        encoder = self.student.encoder
        return (
            frozen(self.student, None if self.cfg.distill.train_encoder else {id(encoder): encoder}),
            frozen(self.predictor),
            None if self.novelty is None else frozen(self.novelty),
        )

    def acting_state(self) -> dict[str, dict[str, torch.Tensor]]:
        """The acting student (without a fixed encoder), predictor and (for a gate that reads it) novelty
        ensemble weights, copied under the lock: what another process's acting copies take
        (`set_acting`)."""
        student = self._acting_state()
        parts = {"predictor": self.acting_predictor, "novelty": self.acting_novelty}
        with self.lock:
            copies = {
                name: {k: v.clone() for k, v in m.state_dict().items()}
                for name, m in parts.items()
                if m is not None
            }
        return {"student": student, **copies}

    def set_acting(self, state: dict[str, dict[str, torch.Tensor]]) -> None:
        """Load `acting_state()` of a learner of the same config into the acting copies, under the lock:
        acting sees the old weights or the new ones, never a mix. The ensemble too: a node's acting learner
        never updates, so without it a novelty gate would read an untrained ensemble's disagreement."""
        with self.lock, torch.no_grad():
            self.acting.load_state_dict(state["student"], strict=not self._fixed_prefixes)
            self.acting_predictor.load_state_dict(state["predictor"])
            if self.acting_novelty is not None:
                self.acting_novelty.load_state_dict(state["novelty"])

    def get_policy(self) -> tuple[StudentPolicy, StatePredictor]:
        """The acting student and predictor (eval mode): what `export_artifact` writes."""
        with self.lock:
            return self.acting, self.acting_predictor

    def snapshot_policy(self) -> tuple[StudentPolicy, StatePredictor, Novelty | None]:
        """Copies of the acting student, predictor and (for a gate that reads it) novelty ensemble taken
        under the lock: one consistent version, which later updates do not touch (for exporting while
        learning goes on)."""
        with self.lock:
            return copy.deepcopy(self.acting), copy.deepcopy(self.acting_predictor), self._novelty_export()

    def novelty_export(self) -> Novelty | None:
        """The acting novelty ensemble as an artifact carries it (None without one), copied under the lock."""
        with self.lock:
            return self._novelty_export()

    def _novelty_export(self) -> Novelty | None:
        from policies.export import Novelty  # the exporter's imports (onnx) cost the node's start-up 0.7 s

        if self.acting_novelty is None:
            return None
        state = {k: v.clone() for k, v in self.acting_novelty.state_dict().items()}
        return Novelty(self.cfg.novelty.model_dump(mode="json"), state)

    # ---- checkpoints -----------------------------------------------------------------------------------
    def save(self, store: Path | None = None) -> dict[str, Any]:
        """Learner state (tensors and plain values only: loadable with weights_only=True); the sample store
        (~1 GB: numpy, not the state dict) is written to `store` atomically, first, when given."""
        if store is not None:
            if self.store is None:
                raise RuntimeError("this learner was built with learning=False: it keeps no samples")
            self.store.save(store)
        return {
            "student": self.student.state_dict(),
            "predictor": self.predictor.state_dict(),
            "novelty": None if self.novelty is None else self.novelty.state_dict(),
            "memory_readout": None if self.memory_readout is None else self.memory_readout.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "gate": self.gate.state_dict(),
            "signal_mix": None if self.mix is None else self.mix.state_dict(),
            "steps": self.steps,
            "teacher_steps": self.teacher_steps,
            "updates": self.updates,
            "rng": self.rng.bit_generator.state,
            # the averaged acting student (`acting_ema`), without a fixed encoder: the learner's is the same
            "acting": self._acting_state() if self.cfg.distill.acting_ema > 0 else None,
        }

    @property
    def _fixed_prefixes(self) -> tuple[str, ...]:
        """State-dict prefixes the acting student shares with the learner (a fixed encoder): never copied."""
        return () if self.cfg.distill.train_encoder else ("encoder.",)

    def _acting_state(self) -> dict[str, torch.Tensor]:
        skip = self._fixed_prefixes
        with self.lock:
            return {k: v.clone() for k, v in self.acting.state_dict().items() if not k.startswith(skip)}

    def load(self, state: dict[str, Any], store: Path | None = None) -> None:
        """Restore `save()` (and the sample store it wrote to `store`, when given); a checkpoint of another
        config (shapes) is refused with the mismatch named. Every env begins a new episode: no takeover or
        timer of the saved one carries over."""
        try:
            self.student.load_state_dict(state["student"])
            self.predictor.load_state_dict(state["predictor"])
            if self.novelty is not None:
                self.novelty.load_state_dict(state["novelty"])
            if self.memory_readout is not None:
                self.memory_readout.load_state_dict(state["memory_readout"])
            self.optimizer.load_state_dict(state["optimizer"])
        except (RuntimeError, KeyError, TypeError, ValueError) as err:
            raise ValueError(f"OPD checkpoint does not fit this learner's config: {err}") from None
        self.gate.load_state_dict(state["gate"])
        self.gate.reset()
        if self.mix is not None and state.get("signal_mix") is not None:
            self.mix.load_state_dict(state["signal_mix"])
        self.steps, self.updates = int(state["steps"]), int(state["updates"])
        self.teacher_steps = int(state["teacher_steps"])
        self.rng.bit_generator.state = state["rng"]
        self.sync_policy()
        if self.cfg.distill.acting_ema > 0 and state.get("acting") is not None:
            with self.lock:
                self.acting.load_state_dict(state["acting"], strict=not self._fixed_prefixes)
        if store is not None:
            if self.store is None:
                raise RuntimeError("this learner was built with learning=False: it keeps no samples")
            self.store.load(store)
