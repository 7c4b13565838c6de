"""An evaluation's report from its episodes' results, whether one process ran them all or shards ran them
(`agent eval teacher|student --shard-out DIR`, then `agent eval merge DIR...`).

The episode list is fixed, episode i on seed first + i for i < count. Shard K of N runs the episodes i with
i % N == K (every shard draws from the whole seed range, and their sizes differ by one at most) and writes
DIR/shard-K-of-N.json: what it measured (the report's header: policy, configs, seeds, envs), its place and
each of its episodes' result. The merge refuses files that describe different evaluations, and missing or
doubled episodes, naming them; otherwise it reports through `evaluation_report`, as one process does, over
every listed episode's result whatever order the episodes ended in. Torch-free: a merge loads no model.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from policies.files import write_atomic

_OWN = ("shard", "results")  # a shard file's keys that are not the report's header


def wilson_interval(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95% Wilson score interval of a binomial proportion (Wilson 1927); (0, 1) for n = 0."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z**2 / n
    centre = (p + z**2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z**2 / (4 * n**2)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


class EpisodeResult(BaseModel):
    """How one listed episode ended: what a report's aggregates are computed from (`summarize`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    episode: int  # index in the evaluation's list: it ran on seed first + episode
    outcome: str  # success, collision, timeout, ...
    success: bool
    episode_return: float  # sum of the rewards
    progress: float  # share of the tour done at the end (markers reached / M)
    time_s: float  # episode time at the end, s


_RESULTS = TypeAdapter(list[EpisodeResult])


def summarize(results: Iterable[EpisodeResult], count: int) -> dict:
    """A report's aggregates over the `count` listed episodes, from their results taken in episode order,
    whatever order the episodes ended in: each listed episode counts once, so no batch or shard biases the
    rate towards the episodes that end soonest. ValueError unless the results are episodes 0..count-1."""
    ordered = sorted(results, key=lambda r: r.episode)
    if [r.episode for r in ordered] != list(range(count)):
        raise ValueError(f"the results are not of episodes 0..{count - 1}, once each")
    successes = sum(r.success for r in ordered)
    lo, hi = wilson_interval(successes, count)
    ends: dict[str, list[EpisodeResult]] = {}
    for r in ordered:
        ends.setdefault(r.outcome, []).append(r)
    return {
        "episodes": count,
        "success_rate": successes / count,
        "ci95": [round(lo, 4), round(hi, 4)],
        "mean_return": float(np.mean([r.episode_return for r in ordered])),
        "outcomes": {k: len(v) for k, v in ends.items()},
        "episode_outcomes": [r.outcome for r in ordered],  # in episode order: episode i ran on seed + i
        # where each kind of ending happens: the share of the tour done (markers reached / M) and when
        "by_outcome": {
            k: {
                "progress_mean": round(float(np.mean([r.progress for r in v])), 4),
                "time_s_mean": round(float(np.mean([r.time_s for r in v])), 3),
            }
            for k, v in sorted(ends.items())
        },  # fmt: skip
    }


def evaluation_report(header: dict, results: Iterable[EpisodeResult]) -> dict:
    """The report of an evaluation: the aggregates over its listed episodes (`summarize`), then what it
    measured (`header`; its seeds say how many episodes are listed). One process and the merge of its
    shards both report through this."""
    return {**summarize(results, header["seeds"]["count"]), **header}


@dataclass(frozen=True)
class Shard:
    """This process's part of an evaluation: shard `id` of `count`."""

    id: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"--num-shards {self.count}: must be at least 1")
        if not 0 <= self.id < self.count:
            raise ValueError(f"--shard-id {self.id}: the shards of {self.count} are 0..{self.count - 1}")

    def episodes(self, count: int) -> list[int]:
        """The indices this shard runs of a list of `count` episodes; ValueError when that is none."""
        mine = list(range(self.id, count, self.count))
        if not mine:
            raise ValueError(f"shard {self.id} of {self.count} gets none of {count} episodes: use at most "
                             f"{count} shards")  # fmt: skip
        return mine

    @property
    def filename(self) -> str:
        return f"shard-{self.id}-of-{self.count}.json"


def finish(header: dict, results: list[EpisodeResult], shard: Shard | None) -> dict:
    """An evaluation's return: its report, or with `shard` the shard's record (the header, the shard and
    its results in episode order), to which a caller may add header keys before `write_shard`."""
    if shard is None:
        return evaluation_report(header, results)
    ordered = sorted(results, key=lambda r: r.episode)
    return {**header, "shard": {"id": shard.id, "count": shard.count},
            "results": [r.model_dump() for r in ordered]}  # fmt: skip


def write_shard(out_dir: str | Path, record: dict) -> Path:
    """Write a shard's record to OUT_DIR/shard-K-of-N.json atomically; its path."""
    path = Path(out_dir) / Shard(**record["shard"]).filename
    write_atomic(path, json.dumps(record, indent=2) + "\n")
    return path


def shard_files(paths: Iterable[str | Path]) -> list[Path]:
    """The shard files named: a file as given, a directory's shard-*-of-*.json; each file once."""
    found: dict[Path, Path] = {}
    for path in map(Path, paths):
        if path.is_dir():
            inside = sorted(path.glob("shard-*-of-*.json"))
            if not inside:
                raise FileNotFoundError(f"{path}: no shard file (shard-K-of-N.json) in it")
        elif path.is_file():
            inside = [path]
        else:
            raise FileNotFoundError(f"{path}: no such file or directory")
        for file in inside:
            found.setdefault(file.resolve(), file)
    if not found:
        raise ValueError("no shard file given")
    return list(found.values())


def merge(paths: Iterable[str | Path]) -> dict:
    """The report of the evaluation whose shard files `paths` (files or directories) hold, as one process
    would give it; ValueError naming the files that differ, or the episodes missing or doubled."""
    header, first = None, ""
    where: dict[int, list[str]] = {}  # episode -> the files that hold a result of it
    results: list[EpisodeResult] = []
    for path in shard_files(paths):
        record = _read(path)
        own = {k: v for k, v in record.items() if k not in _OWN}
        if header is None:
            header, first = own, str(path)
        elif own != header:
            keys = sorted(k for k in own.keys() | header.keys() if own.get(k) != header.get(k))
            raise ValueError(f"{path} and {first} are not shards of one evaluation: they differ in "
                             f"{', '.join(keys)}")  # fmt: skip
        for r in record["results"]:
            where.setdefault(r.episode, []).append(str(path))
        results += record["results"]
    count = header["seeds"]["count"]
    problems = []
    if outside := sorted(e for e in where if not 0 <= e < count):
        problems.append(f"{_episodes(outside)} not in the list of {count}")
    if missing := [e for e in range(count) if e not in where]:
        problems.append(f"{_episodes(missing)} missing")
    doubled = [(e, names) for e, names in sorted(where.items()) if len(names) > 1]
    for e, names in doubled[:10]:
        held = f"twice in {names[0]}" if len(set(names)) == 1 else f"in {' and '.join(names)}"
        problems.append(f"episode {e} {held}")
    if len(doubled) > 10:
        problems.append(f"{len(doubled) - 10} more episodes counted twice")
    if problems:
        raise ValueError(f"cannot merge the shards of {count} episodes: {'; '.join(problems)}")
    return evaluation_report(header, results)


def _read(path: Path) -> dict:
    """A shard file, its results validated; ValueError naming the file and what is wrong."""
    try:
        record = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: not a shard file ({err})") from None
    if not isinstance(record, dict) or any(k not in record for k in (*_OWN, "seeds")):
        raise ValueError(f"{path}: not a shard file (it needs shard, results and seeds; agent eval "
                         "teacher|student --shard-out writes them)")  # fmt: skip
    try:
        record["results"] = _RESULTS.validate_python(record["results"])
        count = record["seeds"]["count"]
    except (ValidationError, KeyError, TypeError) as err:
        raise ValueError(f"{path}: a malformed shard file: {err}") from None
    if not isinstance(count, int) or count < 1:
        raise ValueError(f"{path}: a malformed shard file: seeds count {count!r}")
    return record


def _episodes(indices: list[int], shown: int = 20) -> str:
    """`episode 3`, `episodes 3, 7`, `episodes 0-4, 9`: runs of consecutive indices as ranges."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    parts = [str(a) if a == b else f"{a}-{b}" for a, b in runs]
    more = f" and {len(parts) - shown} more" if len(parts) > shown else ""
    return f"episode{'s' if len(indices) > 1 else ''} {', '.join(parts[:shown])}{more}"
