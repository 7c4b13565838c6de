"""Typed configuration: one pydantic model per component, loaded from and saved to YAML.

Every field is declared with its unit and meaning; unknown keys are rejected so that a typo in a YAML
file fails loudly with the field's name instead of silently falling back to a default.

A YAML file may start from another one: `extends: base.yaml` (a path relative to the file) loads the base
and applies this file's keys over it, mappings merged key by key and anything else (lists included)
replaced. An experiment's config then holds only what it changes, and its resolved form (`to_yaml`, written
beside every run) holds every field.

The command line lays dotted overrides on the file the same way (`agent train student opd.gate.budget=0.05`):
each value is read as YAML, so it means what it would in the file, and the same model validates the result.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from policies.files import write_atomic

C = TypeVar("C", bound="Config")


PROJECT_ROOT = Path(__file__).resolve().parents[1]  # relative paths in configs are relative to this


def from_root(path: str | Path) -> Path:
    """A path from a config: relative ones are relative to the project root, not the working directory."""
    path = Path(path)
    return path if path.is_absolute() else PROJECT_ROOT / path


class ConfigError(ValueError):
    """A configuration file or value is invalid; the message names the field and the value."""


class Config(BaseModel):
    """Base for every component config: strict keys, validated on creation and on assignment. No field takes
    NaN or an infinity (`.nan`, `.inf` in YAML): bounds like `gt=0` let an infinity through, which then
    overflows deep in a simulator or spreads into rewards and thresholds."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False, allow_inf_nan=False)

    @classmethod
    def from_dict(cls: type[C], data: dict[str, Any] | None, source: str = "<dict>") -> C:
        """Build and validate from a plain dict, turning pydantic errors into one readable ConfigError."""
        try:
            return cls.model_validate(data or {})
        except ValidationError as err:
            raise ConfigError(format_validation_error(cls.__name__, source, err, cls)) from None

    @classmethod
    def from_yaml(
        cls: type[C], path: str | Path, overrides: Sequence[str] = (), given: Mapping[str, Any] | None = None
    ) -> C:
        """Load from a YAML file, resolving `extends:`, then the dotted `overrides` (`KEY.SUB=VALUE`) and
        `given` values by dotted key (a command's flags: `{"total_steps": 64}`); a key set by both is
        refused, as is a missing or unparsable file (or base) or a malformed override, naming it."""
        data, source = load_yaml_mapping(Path(path), cls.__name__)
        pairs = [(k, v, f"{k}={v!r}") for k, v in (given or {}).items()]
        pairs += [(*_split(text, cls.__name__), text) for text in overrides]
        if pairs:
            data = merge(data, _nest(pairs, cls.__name__))
            source += f" with {' '.join(text for *_, text in pairs)}"
        return cls.from_dict(data, source=source)

    def to_yaml(self, path: str | Path) -> None:
        """Write the resolved config (every field, defaults included) so a run can be reproduced; atomically
        (a temporary file renamed over it), so a kill mid-write leaves the old file or the new one."""
        write_atomic(path, yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False))


def load_yaml_mapping(path: Path, name: str) -> tuple[dict[str, Any], str]:
    """The mapping in `path` with `extends:` resolved, and its source for messages (`a.yaml extends
    b.yaml`); `name` (the config's) starts each ConfigError."""
    chain: list[Path] = []
    data = _resolve(path, name, chain)
    return data, " extends ".join(str(p) for p in chain)


def _resolve(path: Path, name: str, chain: list[Path]) -> dict[str, Any]:
    """The mapping in `path` laid over the one its `extends:` names, recursively; `chain` collects the files
    read, the extending one first. A cycle or a base that is not a mapping is a ConfigError."""
    if path.resolve() in (p.resolve() for p in chain):
        raise ConfigError(f"{name}: {path} extends itself: {' -> '.join(str(p) for p in [*chain, path])}")
    chain.append(path)
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        via = f" (extended by {chain[-2]})" if len(chain) > 1 else ""
        raise ConfigError(f"{name}: config file not found: {path}{via}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{name}: {path} is not valid YAML: {err}") from None
    except (OSError, UnicodeDecodeError) as err:  # a directory, unreadable, or not text
        raise ConfigError(f"{name}: cannot read {path} as a YAML file: {err}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{name}: {path} must hold a mapping, got {type(data).__name__}")
    base = data.pop("extends", None)
    if base is None:
        return data
    if not isinstance(base, str):
        raise ConfigError(f"{name}: {path}: extends must be one file name, got {base!r}")
    return merge(_resolve(path.parent / base, name, chain), data)


def parse_overrides(overrides: Sequence[str], name: str) -> dict[str, Any]:
    """`["opd.gate.budget=0.05", "seed=3"]` as the nested mapping a YAML file would hold. The value is
    YAML (`0.05` a float, `[1, 2]` a list, `null` None). Which keys exist is the model's to say."""
    return _nest([(*_split(text, name), text) for text in overrides], name)


def _split(text: str, name: str) -> tuple[str, Any]:
    """`KEY.SUB=VALUE` as (dotted key, value read as YAML)."""
    key, eq, value = text.partition("=")
    if not eq or not all(p.strip() for p in key.split(".")):
        raise ConfigError(f"{name}: override {text!r}: expected KEY=VALUE with a dotted KEY (a.b.c=1)")
    try:
        return key, yaml.safe_load(value)
    except yaml.YAMLError as err:
        raise ConfigError(f"{name}: override {text!r}: the value is not YAML: {err}") from None


def _nest(pairs: list[tuple[str, Any, str]], name: str) -> dict[str, Any]:
    """(dotted key, value, as given) as one nested mapping; a key given twice, or a value and keys below
    it, is a ConfigError naming both."""
    out: dict[str, Any] = {}
    said: dict[str, str] = {}  # dotted key -> how it was given
    for key, value, text in pairs:
        parts = key.split(".")
        for i in range(1, len(parts) + 1):
            if (other := said.get(".".join(parts[:i]))) is not None:
                raise ConfigError(f"{name}: {text!r} and {other!r} both set {'.'.join(parts[:i])}")
        if below := [t for k, t in said.items() if k.startswith(key + ".")]:
            raise ConfigError(f"{name}: {text!r} replaces what {below[0]!r} sets below {key}")
        said[key] = text
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return out


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` laid on `base`: where both hold a mapping, merged key by key; otherwise `over`'s value."""
    out = dict(base)
    for key, value in over.items():
        both = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = merge(out[key], value) if both else value
    return out


def format_validation_error(name: str, source: str, err: ValidationError, model: type | None = None) -> str:
    """One line per bad field: `Encoder (file.yaml): fusion.heads = 3: must divide dim`. An unknown key of
    `model` also names the keys it may have meant."""
    lines = [f"{name} ({source}) is invalid:"]
    for e in err.errors():
        field = ".".join(str(p) for p in e["loc"]) or "<root>"
        value = e.get("input")
        shown = "" if isinstance(value, dict) else f" = {value!r}"
        hint = _known_keys(model, e["loc"]) if e["type"] == "extra_forbidden" and model else ""
        lines.append(f"  {field}{shown}: {e['msg']}{hint}")
    return "\n".join(lines)


def _known_keys(model: type, loc: tuple) -> str:
    """`; did you mean budget?` (or the keys there are) for the unknown key at `loc` of `model`."""
    for part in loc[:-1]:
        field = getattr(model, "model_fields", {}).get(part)
        model = field.annotation if field is not None else None
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return ""
    keys = list(model.model_fields)
    close = difflib.get_close_matches(str(loc[-1]), keys, n=3)
    return f"; did you mean {' or '.join(close)}?" if close else f"; the keys here are {', '.join(keys)}"
