"""An evaluation's report from its episodes' results: shards of one evaluation merge into the report one
process gives, and shards that miss or double episodes, or are of different evaluations, are refused."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from opd.eval_report import EpisodeResult, Shard, merge, summarize, write_shard
from opd.evaluation import evaluate_teacher
from policies.skill_contract import SkillContract
from policies.teacher_policy import TeacherConfig, TeacherPolicy
from sim.robots.diffbot import constants
from sim.vector_env import DiffBotVectorEnv

SHORT = {"task": {"time_limit_s": 4.0}}  # 20 decisions at 5 Hz
HEADER = {"sim": "mujoco", "proxy": False, "seeds": {"first": 10_000, "count": 5}, "envs": 2,
          "teacher": {"path": "t.pt", "sha256": "ab"}}  # fmt: skip


def result(episode: int, outcome: str = "timeout", ret: float = 1.0) -> EpisodeResult:
    return EpisodeResult(episode=episode, outcome=outcome, success=outcome == "success", episode_return=ret,
                         progress=0.5, time_s=4.0)  # fmt: skip


def write(out: Path, shard: Shard, episodes: list[int], header: dict = HEADER) -> Path:
    record = {**header, "shard": {"id": shard.id, "count": shard.count},
              "results": [result(e).model_dump() for e in episodes]}  # fmt: skip
    return write_shard(out, record)


def test_sharded_evaluation_merged_is_the_one_process_report(tmp_path: Path) -> None:
    """The same episodes with the same outcomes, the same JSON: each episode runs on its own seed in any
    shard (one env each, so no batch changes a row's float rounding)."""
    torch.manual_seed(0)
    contract = SkillContract.load(constants.CONTRACT)
    obs_dim = DiffBotVectorEnv(1, obs_mode="privileged").single_observation_space["privileged"].shape[0]
    policy = TeacherPolicy(obs_dim + contract.num_skills, contract, TeacherConfig(hidden=[16])).eval()
    single = evaluate_teacher(policy, 5, sim_config=SHORT, num_envs=1)
    for count in (2, 3):
        for k in range(count):
            shard = Shard(k, count)
            record = evaluate_teacher(policy, 5, sim_config=SHORT, num_envs=1, shard=shard)
            assert [r["episode"] for r in record["results"]] == shard.episodes(5) == list(range(k, 5, count))
            write_shard(tmp_path / f"of{count}", record)
        merged = merge([tmp_path / f"of{count}"])
        assert json.dumps(merged) == json.dumps(single)
    assert len(set(single["episode_outcomes"])) > 1  # an untrained policy: the outcomes to pair up differ


def test_every_listed_episode_counts_once_whatever_order_they_ended_in() -> None:
    """A batch that stops when its first N episodes end counts the short ones; a report counts the list."""
    results = [result(0, "success", 3.0), result(1, "collision", -1.0), result(2, "timeout", 0.5),
               result(3, "success", 2.0)]  # fmt: skip
    shuffled = results[:]
    random.Random(0).shuffle(shuffled)
    report = summarize(shuffled, 4)
    assert report == summarize(results, 4)
    assert report["episode_outcomes"] == ["success", "collision", "timeout", "success"]
    assert report["success_rate"] == 0.5 and report["mean_return"] == pytest.approx(1.125)
    assert list(report["outcomes"]) == ["success", "collision", "timeout"]  # by first episode
    with pytest.raises(ValueError, match="not of episodes 0..3"):
        summarize(results[:3], 4)  # the three that ended first


def test_shards_split_the_list_into_balanced_disjoint_parts() -> None:
    for count, episodes in ((1, 5), (3, 10), (4, 4)):
        parts = [Shard(k, count).episodes(episodes) for k in range(count)]
        assert sorted(e for p in parts for e in p) == list(range(episodes))
        assert max(map(len, parts)) - min(map(len, parts)) <= 1
    assert Shard(2, 3).filename == "shard-2-of-3.json"
    with pytest.raises(ValueError, match="--shard-id 3: the shards of 3 are 0..2"):
        Shard(3, 3)
    with pytest.raises(ValueError, match="--num-shards 0"):
        Shard(0, 0)
    with pytest.raises(ValueError, match="shard 4 of 5 gets none of 4 episodes"):
        Shard(4, 5).episodes(4)


def test_a_merge_names_the_missing_and_the_doubled_episodes(tmp_path: Path) -> None:
    a = write(tmp_path / "a", Shard(0, 2), [0, 2, 4])
    b = write(tmp_path / "b", Shard(1, 2), [1, 3])
    assert merge([a, b])["episodes"] == 5 and merge([tmp_path / "a", b, a])["episodes"] == 5  # a file once
    with pytest.raises(ValueError, match=r"^cannot merge the shards of 5 episodes: episodes 1, 3 missing$"):
        merge([a])
    c = write(tmp_path / "c", Shard(1, 3), [1, 4])  # another split's shard: overlaps both
    with pytest.raises(ValueError) as err:
        merge([a, b, c])
    assert str(err.value) == (f"cannot merge the shards of 5 episodes: episode 1 in {b} and {c}; "
                              f"episode 4 in {a} and {c}")  # fmt: skip
    d = write(tmp_path / "d", Shard(0, 1), [0, 1, 2, 3, 7])
    with pytest.raises(ValueError, match="episode 7 not in the list of 5; episode 4 missing"):
        merge([d])


def test_a_merge_refuses_shards_of_different_evaluations_naming_the_difference(tmp_path: Path) -> None:
    a = write(tmp_path / "a", Shard(0, 2), [0, 2, 4])
    other = {**HEADER, "teacher": {"path": "t.pt", "sha256": "cd"}, "envs": 4}
    b = write(tmp_path / "b", Shard(1, 2), [1, 3], other)
    with pytest.raises(ValueError) as err:
        merge([a, b])
    assert str(err.value) == f"{b} and {a} are not shards of one evaluation: they differ in envs, teacher"


def test_a_merge_of_what_is_no_shard_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no shard file"):
        merge([tmp_path / "empty"])
    with pytest.raises(FileNotFoundError, match="no such file"):
        merge([tmp_path / "none"])
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"episodes": 5}))
    with pytest.raises(ValueError, match="report.json: not a shard file"):
        merge([report])
    bad = write(tmp_path / "bad", Shard(0, 1), [0])
    bad.write_text(bad.read_text().replace('"outcome"', '"ending"'))
    with pytest.raises(ValueError, match="shard-0-of-1.json: a malformed shard file"):
        merge([bad])
