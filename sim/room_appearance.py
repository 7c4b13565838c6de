"""The real room: what a robot's camera meets outside the simulator's arena, drawn per episode and env.

The sim renders one look: a grey checker floor, dark grey barriers, white obstacles, saturated markers under a
white overhead light, and black above the 0.3 m barriers. A real arena stands in a room, so each field here
stands for something a robot meets there (figures and sources at each field):
- the light: its intensity and direction, with shadows (its colour and the camera's white balance are the
  camera's part, `sim.camera_effects`);
- floor, barrier, room-wall and obstacle materials from a set the sim never renders (`room_materials.yaml`);
- the markers as printed on paper, not as rendered: hue, saturation and value shifted;
- distractors in colours that are not marker colours: patches on the floor (tape, paper, a rug), posters
  on the barriers, furniture beyond them;
- the camera's mount: its position and three angles off the drawing.
Backend-agnostic numbers only: a backend that can render a room implements `set_appearance`
(`sim.mujoco_backend`); one that cannot refuses it.
"""

from __future__ import annotations

import colorsys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from policies.config import Config, ConfigError
from sim.robots.diffbot import constants as C

# arena.xml materials `room_floor_<texture>`; "checker" is the sim's own floor (material `floor`), for domain
# randomisation of the sim's own look (sim/configs/sim_dr_materials.yaml).
FLOOR_TEXTURES = ("plain", "speckle", "tiles", "grain", "checker")


class RoomMaterial(Config):
    """One surface as it looks in a real room."""

    name: str = Field(min_length=1)
    rgb: tuple[float, float, float]  # sRGB, 0-1
    texture: str = "plain"  # floors only: one of FLOOR_TEXTURES
    source: str = Field(min_length=1)  # where the colour comes from

    @model_validator(mode="after")
    def _valid(self) -> RoomMaterial:
        if not all(0.0 <= c <= 1.0 for c in self.rgb):
            raise ValueError(f"{self.name}: rgb {self.rgb} must lie in [0, 1]")
        if self.texture not in FLOOR_TEXTURES:
            raise ValueError(f"{self.name}: texture {self.texture!r} is not one of {FLOOR_TEXTURES}")
        return self


class MaterialSet(Config):
    """The surfaces a room is drawn from (sim/configs/room_materials.yaml)."""

    floors: list[RoomMaterial] = Field(min_length=1)
    walls: list[RoomMaterial] = Field(min_length=1)  # arena barriers and the room's own walls
    obstacles: list[RoomMaterial] = Field(min_length=1)
    distractors: list[RoomMaterial] = Field(min_length=1)  # posters, tape, furniture

    @classmethod
    def load(cls, path: str | Path) -> MaterialSet:
        """The set at `path`; a missing file is one error naming it and the field that named it."""
        if not Path(path).is_file():
            raise ConfigError(f"room.materials: material set not found: {path}")
        return cls.from_yaml(path)


class LightConfig(Config):
    """The room's main light (MuJoCo's directional light) and the ambient share; shadows on or off."""

    # Diffuse intensity, drawn uniformly (the sim's light is 0.8): offices are lit at 300-500 lx, homes and
    # corridors at 100-200 lx (EN 12464-1); with auto-exposure the picture keeps its brightness but the
    # contrast between lit and shadowed sides changes, which this range stands for.
    diffuse: tuple[float, float] = (0.8, 0.8)
    ambient: tuple[float, float] = (0.0, 0.0)  # ambient light added to every surface, drawn uniformly
    # Elevation of the light above the horizon, deg, drawn uniformly (90 = overhead, the sim's); a window or
    # a lamp at the side lights from 20-60 deg. Azimuth uniform over the full circle when below 90.
    elevation_deg: tuple[float, float] = (90.0, 90.0)
    # Cast shadows (the sim renders none). blob: a translucent ellipse on the floor from each obstacle and
    # beacon, away from the light (costs nothing); mapped: MuJoCo's shadow map, every surface (3-4x the
    # frame's render time on a CPU's software GL, measured: for GPU hosts).
    shadows: Literal["none", "blob", "mapped"] = "none"


class MarkerPrintConfig(Config):
    """Markers as printed on paper and lit by the room, against their rendered colours (per marker)."""

    hue_shift_deg: float = Field(0.0, ge=0, le=60)  # uniform in [-h, h]: ink and paper shift hue by 5-15 deg
    saturation: tuple[float, float] = (1.0, 1.0)  # scale, uniform: CMYK print gamut is ~60-90% of sRGB's
    value: tuple[float, float] = (1.0, 1.0)  # scale, uniform: matte paper reflects 60-90% of white


class DistractorConfig(Config):
    """Objects that are not markers, in colours that are not marker colours (visual only: none collides)."""

    floor: tuple[int, int] = (0, 0)  # flat patches on the floor (tape, paper, a rug), count, uniform
    posters: tuple[int, int] = (0, 0)  # on the barriers' inner faces, count, uniform
    furniture: tuple[int, int] = (0, 0)  # beyond the barriers, seen above them, count, uniform
    room_walls: bool = False  # the room's walls 0.6-1.5 m beyond the barriers (the sim shows black there)
    min_hue_gap_deg: float = Field(25.0, ge=0, le=90)  # a saturated distractor's hue keeps this far from
    # every marker hue


class CameraMountConfig(Config):
    """The camera's mount off its drawing: a 3D-printed or bent-metal bracket holds a few mm and degrees."""

    position_m: float = Field(0.0, ge=0, le=0.05)  # uniform in [-p, p] per axis, m
    angle_rad: float = Field(0.0, ge=0, le=0.2)  # uniform in [-a, a] per axis (roll, pitch, yaw), rad


class RoomConfig(Config):
    """A real room around the arena; off unless `materials` names a set or a part differs from its default."""

    materials: str = ""  # material set YAML, relative to the project root; "" = the sim's own surfaces
    light: LightConfig = Field(default_factory=LightConfig)
    markers: MarkerPrintConfig = Field(default_factory=MarkerPrintConfig)
    distractors: DistractorConfig = Field(default_factory=DistractorConfig)
    camera_mount: CameraMountConfig = Field(default_factory=CameraMountConfig)

    @model_validator(mode="after")
    def _ranges(self) -> RoomConfig:
        pairs = {
            "light.diffuse": (self.light.diffuse, 0.0, 2.0), "light.ambient": (self.light.ambient, 0.0, 1.0),
            "light.elevation_deg": (self.light.elevation_deg, 5.0, 90.0),
            "markers.saturation": (self.markers.saturation, 0.0, 1.5),
            "markers.value": (self.markers.value, 0.0, 1.5),
            "distractors.floor": (self.distractors.floor, 0, FLOOR_PATCHES),
            "distractors.posters": (self.distractors.posters, 0, POSTERS),
            "distractors.furniture": (self.distractors.furniture, 0, FURNITURE),
        }  # fmt: skip
        for name, ((low, high), lo_bound, hi_bound) in pairs.items():
            if not lo_bound <= low <= high <= hi_bound:
                raise ValueError(f"{name} = {(low, high)}: need {lo_bound} <= low <= high <= {hi_bound}")
        return self

    @property
    def active(self) -> bool:
        return self != RoomConfig()


# Distractor slots in arena.xml (`distractor_<k>`): floor patches first, then posters, then furniture.
FLOOR_PATCHES, POSTERS, FURNITURE = 6, 6, 6
DISTRACTOR_SLOTS = FLOOR_PATCHES + POSTERS + FURNITURE
ROOM_WALLS = ("room_wall_north", "room_wall_south", "room_wall_east", "room_wall_west")
SHADOW_SLOTS = 8  # arena.xml `shadow_<k>`: one per obstacle and beacon


@dataclass(frozen=True)
class Box:
    """A visual-only box: centre (3,) m, yaw rad, half-sizes (3,) m, colour (3,) sRGB."""

    pos: np.ndarray
    yaw: float
    half: np.ndarray
    rgb: np.ndarray


@dataclass(frozen=True)
class RoomDraw:
    """One episode's room for one env, as numbers a backend applies."""

    light_dir: np.ndarray  # (3,) unit vector the light travels along (world frame)
    light_diffuse: float
    light_ambient: float
    shadows: str  # LightConfig.shadows
    floor: RoomMaterial | None  # None: the sim's own surfaces
    wall_rgb: np.ndarray | None  # (3,) the barriers
    obstacle_rgb: np.ndarray | None  # (3,)
    marker_rgb: dict[str, np.ndarray]  # colour name -> (3,) as printed
    distractors: list[Box] = field(default_factory=list)  # at most DISTRACTOR_SLOTS
    room_walls: list[Box] = field(default_factory=list)  # 0 or 4
    camera_offset_m: np.ndarray = field(default_factory=lambda: np.zeros(3))  # (3,) in the camera's body
    camera_rpy_rad: np.ndarray = field(default_factory=lambda: np.zeros(3))  # (3,) roll, pitch, yaw


class RoomSampler:
    """Draws a `RoomDraw` per episode from a `RoomConfig` and its material set."""

    def __init__(self, cfg: RoomConfig, root: Path, marker_colours: tuple[str, ...]) -> None:
        self.cfg = cfg
        self.materials = MaterialSet.load(root / cfg.materials) if cfg.materials else None
        self.marker_colours = marker_colours
        self._marker_hues = [colorsys.rgb_to_hsv(*C.MARKER_RGB[c])[0] * 360 for c in marker_colours]

    def draw(self, rng: np.random.Generator) -> RoomDraw:
        cfg, mats = self.cfg, self.materials
        elevation = np.radians(rng.uniform(*cfg.light.elevation_deg))
        azimuth = rng.uniform(0.0, 2 * np.pi)
        light_dir = -np.array([np.cos(elevation) * np.cos(azimuth), np.cos(elevation) * np.sin(azimuth),
                               np.sin(elevation)])  # fmt: skip
        pick = (lambda options: options[int(rng.integers(len(options)))]) if mats else None
        d = cfg.distractors
        return RoomDraw(
            light_dir=light_dir,
            light_diffuse=rng.uniform(*cfg.light.diffuse),
            light_ambient=rng.uniform(*cfg.light.ambient),
            shadows=cfg.light.shadows,
            floor=pick(mats.floors) if mats else None,
            wall_rgb=np.array(pick(mats.walls).rgb) if mats else None,
            obstacle_rgb=np.array(pick(mats.obstacles).rgb) if mats else None,
            marker_rgb={c: self._printed(C.MARKER_RGB[c], rng) for c in self.marker_colours},
            distractors=[
                *(self._floor_patch(rng) for _ in range(rng.integers(d.floor[0], d.floor[1] + 1))),
                *(self._poster(rng) for _ in range(rng.integers(d.posters[0], d.posters[1] + 1))),
                *(self._furniture(rng) for _ in range(rng.integers(d.furniture[0], d.furniture[1] + 1))),
            ],
            room_walls=self._room_walls(rng) if d.room_walls else [],
            camera_offset_m=rng.uniform(-1, 1, 3) * cfg.camera_mount.position_m,
            camera_rpy_rad=rng.uniform(-1, 1, 3) * cfg.camera_mount.angle_rad,
        )

    def _printed(self, rgb: tuple[float, float, float], rng: np.random.Generator) -> np.ndarray:
        m = self.cfg.markers
        h, s, v = colorsys.rgb_to_hsv(*rgb)
        h = (h + rng.uniform(-m.hue_shift_deg, m.hue_shift_deg) / 360.0) % 1.0
        s = min(1.0, s * rng.uniform(*m.saturation))
        v = min(1.0, v * rng.uniform(*m.value))
        return np.array(colorsys.hsv_to_rgb(h, s, v))

    def _distractor_rgb(self, rng: np.random.Generator, furniture: bool = False) -> np.ndarray:
        """A distractor colour from the set (for furniture, the obstacles' too) whose hue, if it is
        saturated, is no marker's."""
        options = (self.materials.distractors + (self.materials.obstacles if furniture else [])) \
            if self.materials else []  # fmt: skip
        gap = self.cfg.distractors.min_hue_gap_deg
        allowed = [m for m in options if not self._marker_like(m.rgb, gap)]
        if not allowed:
            return np.full(3, rng.uniform(0.2, 0.8))  # a grey
        return np.array(allowed[int(rng.integers(len(allowed)))].rgb)

    def _marker_like(self, rgb: tuple[float, float, float], gap_deg: float) -> bool:
        h, s, _ = colorsys.rgb_to_hsv(*rgb)
        if s < 0.25:  # greys, whites, browns of low saturation are no marker's colour
            return False
        return any(abs((h * 360 - mh + 180) % 360 - 180) < gap_deg for mh in self._marker_hues)

    def _floor_patch(self, rng: np.random.Generator) -> Box:
        lim = C.ARENA_HALF_SIZE_M - 0.3
        half = np.array([rng.uniform(0.04, 0.3), rng.uniform(0.02, 0.3), 0.0004])
        pos = np.array([rng.uniform(-lim, lim), rng.uniform(-lim, lim), 0.0004])  # under the marker discs
        return Box(pos, rng.uniform(0, np.pi), half, self._distractor_rgb(rng))

    def _poster(self, rng: np.random.Generator) -> Box:
        side = int(rng.integers(4))  # 0 north, 1 south, 2 east, 3 west
        along = rng.uniform(-1.6, 1.6)
        inner = C.ARENA_HALF_SIZE_M - 0.003
        half = np.array([rng.uniform(0.08, 0.3), 0.002, rng.uniform(0.04, 0.12)])
        z = rng.uniform(half[2] + 0.02, 0.3 - half[2])
        xy = [(along, inner), (along, -inner), (inner, along), (-inner, along)][side]
        return Box(np.array([*xy, z]), 0.0 if side < 2 else np.pi / 2, half, self._distractor_rgb(rng))

    def _furniture(self, rng: np.random.Generator) -> Box:
        angle = rng.uniform(0, 2 * np.pi)
        half = np.array([rng.uniform(0.15, 0.4), rng.uniform(0.15, 0.4), rng.uniform(0.25, 0.6)])
        reach = C.ARENA_HALF_SIZE_M + 0.15 + half[:2].max()  # beyond the barriers, clear of them
        scale = reach / max(abs(np.cos(angle)), abs(np.sin(angle)))  # onto the square around the arena
        pos = np.array([scale * np.cos(angle), scale * np.sin(angle), half[2]])
        return Box(pos, rng.uniform(0, np.pi / 2), half, self._distractor_rgb(rng, furniture=True))

    def _room_walls(self, rng: np.random.Generator) -> list[Box]:
        """Four walls of a room 1.2-3 m wider than the arena, 2.5 m tall, one paint."""
        rgb = np.array(self.materials.walls[int(rng.integers(len(self.materials.walls)))].rgb) \
            if self.materials else np.full(3, 0.85)  # fmt: skip
        out = []
        for k in range(4):
            d = C.ARENA_HALF_SIZE_M + rng.uniform(0.6, 1.5)
            pos = [np.array([0.0, d, 1.25]), np.array([0.0, -d, 1.25]), np.array([d, 0.0, 1.25]),
                   np.array([-d, 0.0, 1.25])][k]  # fmt: skip
            out.append(Box(pos, 0.0 if k < 2 else np.pi / 2, np.array([4.0, 0.02, 1.25]), rgb))
        return out


def blob_shadow(xy: np.ndarray, radius: float, height: float, room: RoomDraw) -> tuple[Box, float]:
    """The shadow a vertical cylinder (base centre `xy` (2,) m) casts on the floor in `room`'s light, as a
    flat ellipse over its base disc and its top's projection; with its opacity (darker under a strong
    direct light against the ambient and MuJoCo's 0.4 headlight)."""
    down = room.light_dir  # (3,) travels along; its horizontal part points away from the light
    horizontal = np.hypot(down[0], down[1])
    length = height * horizontal / max(-down[2], 1e-3)  # top's projection from the base, m
    u = down[:2] / horizontal if horizontal > 1e-6 else np.array([1.0, 0.0])
    centre = np.r_[np.asarray(xy) + 0.5 * length * u, 0.0025]  # over the marker discs (0.002 m)
    half = np.array([0.5 * length + radius, radius, 0.0003])
    opacity = float(
        np.clip(0.8 * room.light_diffuse / (room.light_diffuse + room.light_ambient + 0.4), 0.1, 0.7)
    )
    return Box(centre, float(np.arctan2(u[1], u[0])), half, np.zeros(3)), opacity
