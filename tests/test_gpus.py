"""One device per concurrent capture: real processes contending for a pool of file locks."""

import multiprocessing as mp
import time

import pytest

from nsightflow.capture.launch.gpus import claim, visible
from nsightflow.errors import ConfigError


def _hold(lock_dir, n, seconds, queue):
    with claim(n_devices=n, lock_dir=lock_dir, poll_s=0.05, env={}) as (env, _):
        start = time.time()
        time.sleep(seconds)
        queue.put((env["CUDA_VISIBLE_DEVICES"], start, time.time()))


def test_concurrent_jobs_never_share_a_device(tmp_path):
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_hold, args=(tmp_path, 2, 1.0, queue)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    held = [queue.get(timeout=5) for _ in procs]
    assert {d for d, _, _ in held} <= {"0", "1"}
    # Any two jobs on the same device did not overlap in time; at most two ran at once.
    for i, (d1, s1, e1) in enumerate(held):
        for d2, s2, e2 in held[i + 1 :]:
            if d1 == d2:
                assert e1 <= s2 or e2 <= s1
    third = sorted(held, key=lambda h: h[1])[2]
    assert third[1] >= min(e for _, _, e in held) - 0.01


def test_a_schedulers_choice_is_respected(tmp_path):
    with claim(n_devices=4, lock_dir=tmp_path, env={"CUDA_VISIBLE_DEVICES": "3"}) as (env, why):
        assert env["CUDA_VISIBLE_DEVICES"] == "3" and "respected" in why
    with claim(n_devices=1, lock_dir=tmp_path, env={}) as (env, _):
        assert "CUDA_VISIBLE_DEVICES" not in env


def test_jobs_inside_an_allocation_of_several_gpus_claim_among_them(tmp_path):
    # The whole run inside an allocation of GPUs 2 and 3 (CUDA_VISIBLE_DEVICES=2,3), two one-GPU jobs at once: each
    # gets one of those two, never the same, never a device outside them (the locks are those devices').
    env = {"CUDA_VISIBLE_DEVICES": "2,3"}
    with claim(8, tmp_path, env=env) as (one, said), claim(8, tmp_path, env=env) as (other, _):
        assert {one["CUDA_VISIBLE_DEVICES"], other["CUDA_VISIBLE_DEVICES"]} == {"2", "3"}
        assert said == "device 2 of CUDA_VISIBLE_DEVICES=2,3 claimed (CUDA_VISIBLE_DEVICES=2)"
        assert not (tmp_path / "gpu0.lock").exists()  # the locks are the listed devices'
    uuids = {"CUDA_VISIBLE_DEVICES": "GPU-6ddcf0e2-d46d, GPU-c176d4ed-7932"}
    with claim(None, tmp_path, env=uuids) as (first, _), claim(None, tmp_path, env=uuids) as (second, _):
        assert (first["CUDA_VISIBLE_DEVICES"], second["CUDA_VISIBLE_DEVICES"]) == (
            "GPU-6ddcf0e2-d46d",
            "GPU-c176d4ed-7932",
        )
    with claim(8, tmp_path, env=env, want=2) as (both, said):  # as many as listed: the allocation as it is
        assert both["CUDA_VISIBLE_DEVICES"] == "2,3" and "respected" in said


def test_a_job_of_more_ranks_than_devices_is_refused_before_it_starts(tmp_path):
    # Two ranks, one GPU each, where one is listed or the machine has one: refused with the key and the fix (its
    # rank 1 would fail on "invalid device ordinal"); a machine without GPUs (a CPU run of ranks) is no refusal.
    for env, n, where in (({"CUDA_VISIBLE_DEVICES": "0"}, 2, "CUDA_VISIBLE_DEVICES=0 lists 1"), ({}, 1, "has 1")):
        with pytest.raises(ConfigError, match=f"wants 2 GPUs .*gpus.* but (this machine )?{where}.*gpus: 1"):
            with claim(n, tmp_path, env=env, want=2):
                pytest.fail("the job ran")
    with claim(0, tmp_path, env={}, want=2) as (cpu, said):
        assert "0 GPU(s) visible" in said and "CUDA_VISIBLE_DEVICES" not in cpu
    assert visible({"CUDA_VISIBLE_DEVICES": "2,3"}) == 2 and visible({"CUDA_VISIBLE_DEVICES": "GPU-6ddcf0e2"}) == 1


def test_a_job_of_ranks_claims_its_devices_together(tmp_path):
    # Three devices: a two-rank job holds two of them; a one-GPU job beside it gets the third, never a held one.
    env = {"PATH": "/usr/bin"}
    with claim(3, tmp_path, env=env, want=2) as (pair, said):
        assert pair["CUDA_VISIBLE_DEVICES"] == "0,1" and "devices 0,1 of 3" in said
        with claim(3, tmp_path, env=env) as (single, _):
            assert single["CUDA_VISIBLE_DEVICES"] == "2"
    with claim(2, tmp_path, env=env, want=2) as (every, said):
        assert "CUDA_VISIBLE_DEVICES" not in every and "no device choice" in said  # all of them: nothing to choose
