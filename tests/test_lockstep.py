"""The ring the GPU tier's wall-time test runs its arms in (tests/lockstep.py): participants take turns step by
step, in ring order, and a participant that fails stops the ring at once. Run on the CPU with the built-in decoder."""

from __future__ import annotations

import time

import pytest
from lockstep import Arm, paired_ratios, run_ring

TINY = {
    "batch": 1,
    "prompt": 8,
    "decode_steps": 3,
    "n_layers": 1,
    "d_model": 64,
    "n_heads": 2,
    "d_ff": 128,
    "vocab": 128,
    "device": "cpu",
    "dtype": "float32",
}


def plain(program, i):
    return program


def test_participants_take_turns_in_ring_order(tmp_path):
    out = run_ring(tmp_path, [Arm("a", plain), Arm("b", plain), Arm("c", plain)], 4, TINY, None, 240)
    assert [len(o["passes"]) for o in out] == [4, 4, 4]
    assert all(len(p["walls"]["decode"]) == 3 and len(p["walls"]["prefill"]) == 1 for o in out for p in o["passes"])
    assert all(len(p["turns"]) == 5 for o in out for p in o["passes"])  # the setup's turn and each step's
    starts = sorted((t, o["index"]) for o in out for p in o["passes"] for t in p["turns"])
    assert [i for _, i in starts] == [0, 1, 2] * 4 * 5  # each turn of each pass: a's, b's, c's
    # each decode step of b against a's same step and next one, by hand from the walls
    want = []
    for pa, pb in zip(out[0]["passes"], out[1]["passes"], strict=True):
        a, b = pa["walls"]["decode"], pb["walls"]["decode"]
        want += [b[0] / ((a[0] + a[1]) / 2), b[1] / ((a[1] + a[2]) / 2), b[2] / a[2]]
    assert paired_ratios(out[0], out[1], "decode") == pytest.approx(want)


def test_a_participant_that_fails_stops_the_ring(tmp_path):
    def broken(program, i):
        return [*program, "--callable", "no.such.module:build"]

    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"(?s)participant 1 \(broken\) exited 1.*no\.such\.module"):
        run_ring(tmp_path, [Arm("a", plain), Arm("broken", broken), Arm("c", plain)], 2, TINY, None, 240)
    assert time.monotonic() - start < 60  # not the participants' 300 s wait for a token
    assert not list(tmp_path.glob("[0-9].json"))
