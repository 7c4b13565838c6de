"""The OPD core's config: which signal gates the teacher, the buffer, the gate, the losses, the predictor
and the novelty ensemble; and `resolve_config`, the one definition of the values a learner derives from
its student and teacher. Importable without torch: a node or a tool reads and checks it before (or
without) building a learner."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field, model_validator

from opd.distill.aligned_buffer import AlignConfig
from opd.distill.gate import GateConfig
from policies.config import Config
from policies.predictor_config import PredictorConfig

if TYPE_CHECKING:
    from policies.student_policy import StudentConfig
    from policies.teacher_policy import TeacherPolicy

Switch = Literal["predictor", "novelty", "predictor_novelty", "student", "teacher"]


class NoveltyConfig(Config):
    """Ensemble of action heads whose disagreement gates the teacher (the `novelty` method)."""

    members: int = Field(5, ge=2, le=32)  # heads in the ensemble
    hidden: list[int] = Field(default_factory=lambda: [128])  # MLP widths of each head, units


class DistillConfig(Config):
    """Distillation losses and the learner's optimiser."""

    skill_kl: float = Field(1.0, ge=0)  # weight of KL(teacher || student) on skill logits, 1
    params: float = Field(1.0, ge=0)  # weight of the masked parameter loss (half-range units), 1
    state_pred: float = Field(1.0, ge=0)  # weight of the state-prediction loss (teacher-state std units), 1
    novelty: float = Field(1.0, ge=0)  # weight of the ensemble's own loss (its switches only), 1
    lr: float = Field(3e-4, gt=0)  # Adam learning rate
    batch_size: int = Field(64, ge=1)  # samples per update
    capacity: int = Field(20_000, ge=1)  # aligned samples kept (first in, first out), samples
    grad_clip: float = Field(10.0, gt=0)  # max global gradient norm
    image_shift_px: int = Field(
        0, ge=0
    )  # random shift of each training image, px (opd.distill.augment); 0 = off
    train_encoder: bool = True  # False: frames are embeddings of a fixed encoder (the live node)
    sync_every: int = Field(1, ge=1)  # updates between copies of the learner into the acting student
    # The acting student (what acts, and what is exported) as an exponential moving average of the learner's
    # weights: acting <- acting_ema * acting + (1 - acting_ema) * learner at each sync; 0 = a plain copy.
    # Polyak averaging smooths the update-to-update swings of a student that imitates a small store.
    acting_ema: float = Field(0.0, ge=0.0, lt=1.0)
    state_std_min: float = Field(0.01, gt=0)  # floor of a teacher-state field's std, field units
    # Each sample's skill and parameter losses weighted by (share of its teacher skill in the store)^-balance,
    # normalised to mean 1 over the batch: 0 = uniform; 1 = every skill weighs the same in total. A student
    # that drives well mostly sees the teacher drive, so the rarer turns and stops it must copy near
    # obstacles weigh little under uniform weights.
    skill_balance: float = Field(0.0, ge=0.0, le=1.0)
    # The action label of a frame stamped t is the teacher's action at t + label_lead * align.period_s
    # (the newest found up to there), not at t: the student acts on a frame ~120 ms after it was taken,
    # so a label at t teaches it to do late what the teacher did on time. 0 = the teacher's at t.
    label_lead: int = Field(0, ge=0)  # control periods, at most predictor.horizon
    # Batches drawn with probability ~ (the sample's last skill + parameter loss)^priority_alpha instead of
    # uniformly (opd.distill.sample_store.SampleStore.sample): the few windows before an obstacle where the
    # student still drives and the teacher turns are ~1% of a store whose mean KL is ~0.02. 0 = uniform.
    priority_alpha: float = Field(0.0, ge=0.0, le=1.0)
    # Share of each batch drawn from the samples whose decision the gate gave to the teacher (the rest from
    # the others), as intervention-weighted regression does (IWR, Mandlekar et al. 2020: 0.5). Once the
    # gate's budget has decayed the teacher takes ~5% of decisions, so under uniform batches the states
    # where the student needed it are diluted by its own easy driving. 0 = uniform (DAgger has none).
    takeover_share: float = Field(0.0, ge=0.0, lt=1.0)
    # Weight of the memory's state loss: a linear read-out of the head's input (the newest embedding plus
    # the memory's correction) predicts the teacher-side state one period after the newest frame, which
    # for a remembering teacher holds the obstacles it has seen and no longer sees. The predictor reads
    # only the last `predictor.history` frames, so nothing else asks the memory to keep where an obstacle
    # went. Needs a head with memory; the read-out is for training only (not exported). 0 = off.
    memory_state: float = Field(0.0, ge=0)
    # Number format of the encoder's forward and backward in `update` (weights and optimiser stay float32):
    # "bf16" autocasts to bfloat16. On a CPU with AMX or AVX512-BF16 an update of the wide CPU student
    # costs ~0.46 of float32's (profiled here); on one without, bfloat16 is emulated and slower than float32.
    precision: Literal["fp32", "bf16"] = "fp32"


class OPDConfig(Config):
    """The OPD core: which signal gates the teacher, the buffer, the gate, the losses, the predictor."""

    # predictor: OPD; novelty: ensemble disagreement (ThriftyDAgger-style); predictor_novelty: the higher of
    # the predictor's error and the disagreement mapped onto its scale (opd.distill.signal_mix); student: the
    # student always acts and the teacher only labels (DAgger); teacher: the teacher always acts (behaviour
    # cloning).
    switch: Switch = "predictor"
    # A teacher silent for this long is gone (its simulation stopped): the student acts alone, or the safe
    # action goes out when there is no student either.
    teacher_timeout_s: float = Field(0.5, gt=0)  # s
    # A student without an accepted frame for this long (camera or encoder stalled) no longer acts.
    student_timeout_s: float = Field(0.5, gt=0)  # s
    align: AlignConfig = Field(default_factory=AlignConfig)
    gate: GateConfig = Field(default_factory=GateConfig)
    distill: DistillConfig = Field(default_factory=DistillConfig)
    predictor: PredictorConfig = Field(default_factory=PredictorConfig)
    novelty: NoveltyConfig = Field(default_factory=NoveltyConfig)

    @model_validator(mode="after")
    def _one_batch_rule(self) -> OPDConfig:
        if self.distill.takeover_share > 0 and self.distill.priority_alpha > 0:
            raise ValueError("distill.takeover_share and distill.priority_alpha both set: choose one")
        return self

    @model_validator(mode="after")
    def _lead_within_horizon(self) -> OPDConfig:
        if self.distill.label_lead > self.predictor.horizon:
            raise ValueError(
                f"distill.label_lead ({self.distill.label_lead}) exceeds predictor.horizon "
                f"({self.predictor.horizon}): the buffer finds teacher entries only that far ahead"
            )
        return self


def state_width(teacher: TeacherPolicy) -> int:
    """Dq: the width of the teacher-side state the predictor predicts (the teacher reads it and the skill
    one-hot)."""
    return teacher.obs_dim - teacher.contract.num_skills


def resolve_config(
    cfg: OPDConfig, student: StudentConfig, teacher: TeacherPolicy, check_given: bool = True
) -> OPDConfig:
    """The OPD config a learner of this student and teacher runs, its derived values filled in: the
    predictor's widths (the student's embedding in, the teacher-side state out) and the buffer's window and
    horizon. Resolving a resolved config changes nothing, so a run's saved config is the one it ran.

    A given predictor.out_dim that is not the teacher's is refused, and so is a given align.history or
    align.horizon that is not the derived one: a value accepted and then replaced would be a silent lie.
    (A config dumped whole and rebuilt has every field given: rebuild from `model_dump(exclude_unset=True)`.)
    `check_given` False resolves a config saved before runs saved the one they ran (it gives the fields
    whatever they were) to compare it with another.
    """
    dq = state_width(teacher)
    if cfg.predictor.out_dim not in (None, dq):
        raise ValueError(
            f"predictor.out_dim ({cfg.predictor.out_dim}) must equal the teacher's privileged state "
            f"width ({dq})"
        )
    predictor = cfg.predictor.model_copy(update={"in_dim": student.encoder.embed_dim, "out_dim": dq})
    # The buffer's windows and targets are the inputs (the predictor's and the head's) and the predictor's
    # outputs: one definition. A window is the longer of the two inputs; each model takes its newest frames.
    history = max(cfg.predictor.history, student.memory.frames)
    derived = {
        "history": (history, f"the longer of predictor.history ({cfg.predictor.history}) and the student's "
                             f"memory.frames ({student.memory.frames})"),
        "horizon": (cfg.predictor.horizon, "predictor.horizon"),
    }  # fmt: skip
    for name, (value, source) in derived.items():  # given in the config: it must be what it will be
        given = getattr(cfg.align, name)
        if check_given and name in cfg.align.model_fields_set and given != value:
            raise ValueError(f"align.{name} = {given} is not what the buffer uses ({value}): it comes from "
                             f"{source}; leave align.{name} out")  # fmt: skip
    align = cfg.align.model_copy(update={"history": history, "horizon": cfg.predictor.horizon})
    return cfg.model_copy(update={"predictor": predictor, "align": align})
