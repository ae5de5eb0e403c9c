"""The invocation's decisions (backend, device, versions) are made once and reused by every job."""

import json
import platform

from nsightflow.capture.launch import hostfacts


def _config(**over):
    cfg = {"profiler": "torch", "captures": None, "device": None, "tools": {"nsys": "nsys", "ncu": "ncu"}}
    cfg.update(over)
    return cfg


def test_first_reading_decides_and_later_readings_reuse():
    env = {}
    facts = hostfacts.shared(_config(), env)
    assert facts.backend == "torch" and facts.decided_on == platform.node()
    assert json.loads(env[hostfacts.ENV])["backend"] == "torch"
    # A job on another host gets the submitting host's facts, even where its own probes would differ.
    planted = json.loads(env[hostfacts.ENV]) | {"device": "NVIDIA-H200", "decided_on": "login1"}
    env[hostfacts.ENV] = json.dumps(planted)
    again = hostfacts.shared(_config(), env)
    assert (again.device, again.decided_on) == ("NVIDIA-H200", "login1")


def test_a_different_config_or_a_damaged_value_is_decided_afresh():
    env = {hostfacts.ENV: json.dumps(json.loads(hostfacts.decide(_config()).to_json()) | {"decided_on": "login1"})}
    assert hostfacts.shared(_config(profiler="nsight"), env).backend == "nsight"
    env[hostfacts.ENV] = "{not json"
    assert hostfacts.shared(_config(), env).decided_on == platform.node()


def test_named_device_and_gpu_requests():
    nsight = hostfacts.decide(_config(profiler="nsight", device="NVIDIA H200"))
    assert (nsight.device, nsight.gpu_jobs) == ("NVIDIA-H200", True)
    captures = hostfacts.decide(_config(captures="/some/dir"))
    assert (captures.backend, captures.device, captures.gpu_jobs) == ("captures", "none", False)
