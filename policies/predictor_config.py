"""The state predictor's config, apart from the model so that configs load without torch."""

from __future__ import annotations

from pydantic import Field

from policies.config import Config


class PredictorConfig(Config):
    """State predictor."""

    in_dim: int | None = Field(None, ge=1)  # student feature width per frame; None = the encoder's embed_dim
    # teacher-side state width (privileged fields per step); None = the robot's privileged state width,
    # resolved at build time (`policies.export`)
    out_dim: int | None = Field(None, ge=1)
    hidden: int = Field(64, ge=1)  # LSTM hidden size
    layers: int = Field(1, ge=1, le=4)  # LSTM layers
    history: int = Field(5, ge=1, le=100)  # frames in
    horizon: int = Field(3, ge=1, le=20)  # future steps predicted, 1..horizon
