"""The warm-up rule (nsightflow.capture.read.warmup) on walls written out here, with the steps each case must set
apart worked out by hand from the rule's text: a leading step more than twice the median of the later half of its
sequence, or one in which torch.compile made a graph; never the last step of a sequence."""

from nsightflow.capture.read.warmup import warmup_steps

DECODE = "decode-only, batch {}".format


def _apart(walls, graphs=None, mixes=None, first=None):
    return [w.step for w in warmup_steps("iteration", walls, graphs or [0] * len(walls), first, mixes)]


def test_a_prefill_is_no_warm_up_of_the_decode_steps_after_it():
    # a serving loop's iterations: the prefill of every prompt (10x a decode step), then decode steps by batch size
    walls = [1.40, 0.15, 0.14, 0.13, 0.12, 0.12, 0.11]
    mixes = ["prefill-only"] + [DECODE(64)] * 3 + [DECODE(63)] * 3
    assert _apart(walls) == [0]  # judged all at once: 1.40 > 2 x median(0.13, 0.12, 0.12, 0.11) = 0.24
    assert _apart(walls, mixes=mixes) == []  # the prefill alone in its mix; batch 64's first is 0.15 < 2 x 0.135


def test_each_mix_sets_apart_its_own_leading_steps():
    # batch sizes in turn, the first step of each new size slow (a kernel chosen or compiled once per shape)
    rows = [2, 8, 8, 4, 2, 8, 8, 4, 2, 8, 8, 4]
    walls = [0.07 if i in (0, 1, 3) else 0.01 for i in range(len(rows))]
    mixes = [f"rows={r}" for r in rows]
    assert _apart(walls) == [0, 1]  # all at once the run stops at step 2, a steady one
    assert _apart(walls, mixes=mixes) == [0, 1, 3]
    reasons = {w.step: w.why for w in warmup_steps("iteration", walls, [0] * 12, None, mixes)}
    assert reasons[3] == "7.0x the steady median rows=4 step (10 ms)"


def test_a_mix_of_one_step_keeps_it_even_where_it_compiled():
    walls, graphs = [30.0, 0.5, 0.4, 0.4], [2, 1, 0, 0]
    mixes = ["prefill-only", DECODE(4), DECODE(4), DECODE(4)]
    assert _apart(walls, graphs) == [0, 1]
    assert _apart(walls, graphs, mixes) == [1]  # the prefill, its mix's only step, stays; batch 4's first compiled


def test_mixes_that_do_not_match_the_steps_are_not_used_and_warmup_steps_n_wins():
    walls = [1.0, 0.1, 0.1, 0.1]
    assert _apart(walls, mixes=["a", "b"]) == [0]  # two mixes for four steps: the rule over every step
    assert _apart(walls, mixes=["a", "b", "b", "b"], first=2) == [0, 1]  # warmup_steps: 2, whatever the mixes
