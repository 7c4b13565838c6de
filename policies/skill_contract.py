"""Skill contract: the discrete skills a robot offers and the bounded continuous parameters of each.

The contract is declared once (YAML) and used by the policy head (tanh mapping into bounds), by every
robot backend (safety clipping in `send_action`), by the exported artifact's sidecar and by the docs.

Parameters of all skills share one flat vector in contract order (`P = num_params` slots): skill k owns
`slices[k]`. A full action is `(skill: int, params: float[P])`; the slots of the skills not chosen hold
their defaults, so an action is always inside the bounds.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
from pydantic import Field, field_validator, model_validator

from policies.config import Config


class ParamSpec(Config):
    """One continuous parameter of a skill."""

    name: str = Field(min_length=1, description="identifier, unique within the skill")
    unit: str = Field(min_length=1, description="physical unit, e.g. m/s, rad/s, m, 1")
    low: float = Field(description="lower bound, in `unit`")
    high: float = Field(description="upper bound, in `unit`")
    default: float = Field(description="value used when the skill is not chosen or when unset, in `unit`")
    description: str = ""

    @model_validator(mode="after")
    def _bounds(self) -> ParamSpec:
        if not (np.isfinite(self.low) and np.isfinite(self.high)):
            raise ValueError(
                f"param {self.name!r}: bounds must be finite, got low={self.low}, high={self.high}"
            )
        if not self.low < self.high:
            raise ValueError(f"param {self.name!r}: low ({self.low}) must be < high ({self.high})")
        if not self.low <= self.default <= self.high:
            raise ValueError(
                f"param {self.name!r}: default {self.default} is outside [{self.low}, {self.high}]"
            )
        return self


class SkillSpec(Config):
    """One discrete skill and its parameters."""

    name: str = Field(min_length=1, description="identifier, unique within the contract")
    description: str = ""
    params: list[ParamSpec] = Field(default_factory=list)

    @field_validator("params")
    @classmethod
    def _unique_params(cls, params: list[ParamSpec]) -> list[ParamSpec]:
        names = [p.name for p in params]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate parameter names: {dupes}")
        return params


class SkillContract(Config):
    """The skills of one robot, in the order that fixes skill ids and parameter slots."""

    robot: str = Field(min_length=1, description="robot the contract belongs to")
    safe_skill: str = Field(description="skill sent when inputs are stale or invalid (usually `stop`)")
    skills: list[SkillSpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> SkillContract:
        names = [s.name for s in self.skills]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"skills: duplicate skill names: {dupes}")
        if self.safe_skill not in names:
            raise ValueError(f"safe_skill: {self.safe_skill!r} is not one of the skills {names}")
        return self

    @classmethod
    def load(cls, path: str | Path) -> SkillContract:
        """Load a contract from YAML; errors name the bad field."""
        return cls.from_yaml(path)

    # Derived layout. Cached: contracts are not mutated after loading.
    @property
    def num_skills(self) -> int:
        return len(self.skills)

    @cached_property
    def names(self) -> list[str]:
        return [s.name for s in self.skills]

    @cached_property
    def layout(self) -> ParamLayout:
        return ParamLayout.from_skills(self.skills)

    @cached_property
    def fingerprint(self) -> str:
        """16 hex digits of SHA-256 over the whole contract: actions name it (agent_interfaces/HybridAction),
        so a node holding another contract refuses them instead of misreading the parameter slots."""
        text = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def num_params(self) -> int:
        return self.layout.size

    @property
    def safe_skill_id(self) -> int:
        return self.names.index(self.safe_skill)

    def skill_id(self, name: str) -> int:
        """Index of a skill by name; unknown names are a ValueError listing the known ones."""
        try:
            return self.names.index(name)
        except ValueError:
            raise ValueError(f"unknown skill {name!r}; the contract has {self.names}") from None

    def check_skill_id(self, skill: int) -> int:
        """Return `skill` as int if it is a valid id, else raise ValueError naming the range."""
        if isinstance(skill, (bool, np.bool_)) or not isinstance(skill, (int, np.integer)):
            raise ValueError(f"skill id must be an integer, got {skill!r}")
        if not 0 <= int(skill) < self.num_skills:
            raise ValueError(f"skill id {skill} out of range [0, {self.num_skills - 1}] ({self.names})")
        return int(skill)

    def param_mask(self, skills: np.ndarray) -> np.ndarray:
        """Slots owned by each chosen skill. Shape: (B,) int -> (B, P) bool."""
        return self.layout.owner[None, :] == np.asarray(skills)[:, None]

    def action(self, skill: str | int, **params: float) -> tuple[int, np.ndarray]:
        """Build a full action from a skill and named parameter values (others at their defaults).

        Raises ValueError for unknown names or values outside the bounds.
        """
        k = self.skill_id(skill) if isinstance(skill, str) else self.check_skill_id(skill)
        vec = self.layout.defaults.copy()
        spec = self.skills[k]
        by_name = {p.name: i for i, p in enumerate(spec.params)}
        for name, value in params.items():
            if name not in by_name:
                raise ValueError(f"skill {spec.name!r} has no parameter {name!r}; it has {list(by_name)}")
            p = spec.params[by_name[name]]
            if not (np.isfinite(value) and p.low <= value <= p.high):
                raise ValueError(f"{spec.name}.{name} = {value} is outside [{p.low}, {p.high}] {p.unit}")
            vec[self.layout.slices[k].start + by_name[name]] = value
        return k, vec

    def clip(self, skill: int, params: np.ndarray) -> ClippedAction:
        """Make any proposed action safe to execute.

        Non-finite values or an invalid skill id give the safe skill at its defaults; otherwise the chosen
        skill's parameters are clipped into bounds and the other slots reset to their defaults.
        Shape: params (P,).
        """
        params = np.asarray(params, dtype=np.float64)
        valid_id = isinstance(skill, (int, np.integer)) and 0 <= int(skill) < self.num_skills
        if not valid_id or params.shape != (self.num_params,) or not np.all(np.isfinite(params)):
            reason = "invalid skill id" if not valid_id else "malformed or non-finite parameters"
            return ClippedAction(self.safe_skill_id, self.layout.defaults.copy(), clipped=True, reason=reason)
        sl = self.layout.slices[int(skill)]
        out = self.layout.defaults.copy()
        out[sl] = np.clip(params[sl], self.layout.low[sl], self.layout.high[sl])
        clipped = bool(np.any(out[sl] != params[sl]))
        return ClippedAction(int(skill), out, clipped=clipped, reason="out of bounds" if clipped else "")

    def named_params(self, skill: int, params: np.ndarray) -> dict[str, float]:
        """The chosen skill's parameters by name, e.g. {'speed': 0.4}."""
        spec = self.skills[self.check_skill_id(skill)]
        sl = self.layout.slices[int(skill)]
        return {p.name: float(v) for p, v in zip(spec.params, np.asarray(params)[sl], strict=True)}

    def markdown_table(self) -> str:
        """The contract as a Markdown table, for READMEs and reports."""
        rows = ["| id | skill | parameter | unit | low | high | default |", "|---|---|---|---|---|---|---|"]
        for k, s in enumerate(self.skills):
            if not s.params:
                rows.append(f"| {k} | `{s.name}` | - | - | - | - | - |")
            for p in s.params:
                rows.append(
                    f"| {k} | `{s.name}` | `{p.name}` | {p.unit} | {p.low} | {p.high} | {p.default} |"
                )
        return "\n".join(rows)


@dataclass(frozen=True)
class ParamLayout:
    """Flat parameter layout: bounds, defaults and owning skill of every slot. Arrays have shape (P,)."""

    slices: tuple[slice, ...]
    low: np.ndarray
    high: np.ndarray
    defaults: np.ndarray
    owner: np.ndarray  # skill index owning each slot, int64

    @property
    def size(self) -> int:
        return int(self.low.shape[0])

    @classmethod
    def from_skills(cls, skills: list[SkillSpec]) -> ParamLayout:
        slices, low, high, defaults, owner, start = [], [], [], [], [], 0
        for k, s in enumerate(skills):
            slices.append(slice(start, start + len(s.params)))
            start += len(s.params)
            for p in s.params:
                low.append(p.low)
                high.append(p.high)
                defaults.append(p.default)
                owner.append(k)
        arr = lambda xs, dt=np.float64: np.asarray(xs, dtype=dt)  # noqa: E731
        return cls(tuple(slices), arr(low), arr(high), arr(defaults), arr(owner, np.int64))


@dataclass(frozen=True)
class ClippedAction:
    """What a robot actually executes after safety clipping, and why it differs from the request."""

    skill: int
    params: np.ndarray  # (P,)
    clipped: bool
    reason: str = ""
