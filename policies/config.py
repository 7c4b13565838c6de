"""Typed configuration: one pydantic model per component, loaded from and saved to YAML.

Every field is declared with its unit and meaning; unknown keys are rejected so that a typo in a YAML
file fails loudly with the field's name instead of silently falling back to a default.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

C = TypeVar("C", bound="Config")


class ConfigError(ValueError):
    """A configuration file or value is invalid; the message names the field and the value."""


class Config(BaseModel):
    """Base for every component config: strict keys, validated on creation and on assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)

    @classmethod
    def from_dict(cls: type[C], data: dict[str, Any] | None, source: str = "<dict>") -> C:
        """Build and validate from a plain dict, turning pydantic errors into one readable ConfigError."""
        try:
            return cls.model_validate(data or {})
        except ValidationError as err:
            raise ConfigError(format_validation_error(cls.__name__, source, err)) from None

    @classmethod
    def from_yaml(cls: type[C], path: str | Path) -> C:
        """Load from a YAML file; a missing or unparsable file is a ConfigError naming the path."""
        path = Path(path)
        try:
            data = yaml.safe_load(path.read_text())
        except FileNotFoundError:
            raise ConfigError(f"{cls.__name__}: config file not found: {path}") from None
        except yaml.YAMLError as err:
            raise ConfigError(f"{cls.__name__}: {path} is not valid YAML: {err}") from None
        if data is not None and not isinstance(data, dict):
            raise ConfigError(f"{cls.__name__}: {path} must hold a mapping, got {type(data).__name__}")
        return cls.from_dict(data, source=str(path))

    def to_yaml(self, path: str | Path) -> None:
        """Write the resolved config (every field, defaults included) so a run can be reproduced."""
        Path(path).write_text(yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False))


def format_validation_error(name: str, source: str, err: ValidationError) -> str:
    """One line per bad field: `Encoder (file.yaml): fusion.heads = 3: must divide dim`."""
    lines = [f"{name} ({source}) is invalid:"]
    for e in err.errors():
        field = ".".join(str(p) for p in e["loc"]) or "<root>"
        value = e.get("input")
        shown = "" if isinstance(value, dict) else f" = {value!r}"
        lines.append(f"  {field}{shown}: {e['msg']}")
    return "\n".join(lines)
