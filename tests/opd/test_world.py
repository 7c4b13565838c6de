"""The job's world read from torchrun's or Slurm's environment, and `--device` names resolved against it."""

import pytest

from opd.world import World, device_name


def test_plain_python_is_a_world_of_one():
    world = World.from_env({})
    assert (world.rank, world.local_rank, world.size) == (0, 0, 1)
    assert (world.distributed, world.is_main) == (False, True)


def test_torchrun_variables_are_read():
    env = {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "MASTER_ADDR": "node0", "MASTER_PORT": "29500"}
    world = World.from_env(env)
    assert (world.rank, world.local_rank, world.size) == (3, 1, 4)
    assert (world.master_addr, world.master_port) == ("node0", 29500)
    assert (world.distributed, world.is_main) == (True, False)


def test_slurm_variables_are_the_fallback_and_torchrun_wins_over_them():
    slurm = {"SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURM_NTASKS": "8"}
    slurm |= {"MASTER_ADDR": "n0", "MASTER_PORT": "1"}
    assert (World.from_env(slurm).rank, World.from_env(slurm).size) == (5, 8)
    both = {**slurm, "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2"}
    assert (World.from_env(both).rank, World.from_env(both).size) == (0, 2)


@pytest.mark.parametrize(
    "env, words",
    [
        ({"WORLD_SIZE": "2", "RANK": "0", "MASTER_PORT": "29500"}, "MASTER_ADDR"),
        ({"WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "n0"}, "MASTER_PORT"),
        ({"WORLD_SIZE": "2", "RANK": "2", "MASTER_ADDR": "n0", "MASTER_PORT": "1"}, "outside the world of 2"),
        ({"WORLD_SIZE": "two"}, "WORLD_SIZE='two'"),
        ({"WORLD_SIZE": "0"}, "at least 1"),
        ({"LOCAL_RANK": "-1"}, "LOCAL_RANK"),
    ],
)
def test_an_inconsistent_world_is_refused_naming_the_variable(env, words):
    with pytest.raises(ValueError, match=words):
        World.from_env(env)


def test_device_names():
    one, second = World(), World(rank=1, local_rank=1, size=2, master_addr="n0", master_port=1)
    assert device_name("cpu", one, cuda_count=2) == "cpu"
    assert device_name("auto", one, cuda_count=0) == "cpu"
    assert device_name("auto", second, cuda_count=2) == "cuda:1"  # each rank its own GPU
    assert device_name("auto", second, cuda_count=1) == "cpu"
    assert device_name("cuda", second, cuda_count=2) == "cuda:1"
    assert device_name("cuda:0", second, cuda_count=2) == "cuda:0"
    for bad, words in (("gpu", "expected auto"), ("cuda:x", "expected auto"), ("cuda:2", "no CUDA device")):
        with pytest.raises(ValueError, match=words):
            device_name(bad, one, cuda_count=0 if bad == "cuda:2" else 2)


def test_ranks_that_never_meet_need_no_rendezvous():
    """Evaluation shards under srun: rank and size without MASTER_ADDR/MASTER_PORT."""
    world = World.from_env({"SLURM_PROCID": "1", "SLURM_NTASKS": "4"}, rendezvous=False)
    assert (world.rank, world.size, world.master_addr) == (1, 4, None)
