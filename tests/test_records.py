"""The run files as typed records (nsightflow.records): what the rules write reads back the same, every recorded
H200 run file reads, and a file that is not what its reader expects is refused naming the file, the key and the
fix."""

import json

import pytest
from conftest import DATA

from nsightflow.errors import RecordError
from nsightflow.records import SCHEMA, AnalyticCounts, CaptureRecord, Ceilings, Diagnostic, Manifest, Peaks, Summary


@pytest.mark.parametrize(
    "record,name",
    [(AnalyticCounts, "analytic_flops.json"), (Ceilings, "ceilings.json"), (Manifest, "manifest.json")],
)
def test_every_recorded_run_file_reads_and_writes_back_the_same(tmp_path, record, name):
    for path in sorted(DATA.glob(f"h200_v*/*/{name}")):
        got = record.read(path)
        got.write(tmp_path / name)
        again = record.read(tmp_path / name)
        assert again == got and json.loads((tmp_path / name).read_text())["schema"] == SCHEMA


def test_the_capture_record_keeps_what_the_capture_collected(tmp_path):
    rec = CaptureRecord.read(DATA / "h200_v3" / "default" / "capture.cmd.json")
    assert (rec.tensor_precisions, rec.non_tensor_flops, rec.report) == (["bf16"], False, "capture.ncu-rep")
    rec.write(tmp_path / "c.json")
    assert CaptureRecord.read(tmp_path / "c.json") == rec


def test_the_analytic_count_is_typed(tmp_path):
    counts = AnalyticCounts.read(DATA / "h200_v3" / "mixed" / "analytic_flops.json")
    mixed = counts.stages["mixed"]
    assert mixed.tensor_precisions == ["bf16", "fp16", "tf32"] and mixed.counted
    assert mixed.model_flops == mixed.flops_causal_adjusted


@pytest.mark.parametrize(
    "text,message",
    [
        ("not json", r"bad.json: not a readable analytic count \(analytic_flops.json\)"),
        ("[1, 2]", r"bad.json: a analytic count .* is a JSON object, this is a list"),
        ('{"schema": 99, "stages": {}}', r"bad.json: analytic count .* schema 99, newer than this nsightflow's 1"),
        ('{"nothing": 1}', r"bad.json: not an analytic_flops.json with a 'stages' object"),
        ('{"stages": {"prefill": {"flops": -3}}}', r"bad.json: stage 'prefill': flops is -3; a count is a number"),
        ('{"stages": {"prefill": "x"}}', r"bad.json: stage 'prefill' is 'x', not an object of counts"),
    ],
)
def test_a_bad_analytic_count_is_refused_naming_the_file_and_key(tmp_path, text, message):
    (tmp_path / "bad.json").write_text(text)
    with pytest.raises(RecordError, match=message):
        AnalyticCounts.read(tmp_path / "bad.json")


def test_a_capture_record_without_its_command_is_refused(tmp_path):
    (tmp_path / "cmd.json").write_text('{"report": "capture.ncu-rep"}')
    with pytest.raises(RecordError, match=r"cmd.json: key\(s\) \['argv'\] missing from the capture record"):
        CaptureRecord.read(tmp_path / "cmd.json")


def test_a_capture_plan_missing_a_key_is_named_with_the_fix(tmp_path):
    import json

    from nsightflow.capture.read.plan import CapturePlan
    from nsightflow.errors import RecordError

    src = json.loads((DATA / "h200_v3" / "default" / "plan.json").read_text())
    plan = CapturePlan.read(DATA / "h200_v3" / "default" / "plan.json")
    assert len(plan.expected) == len(src["expected"]) and plan.windows[0].stage == src["windows"][0]["stage"]
    plan.write(tmp_path / "plan.json")
    assert json.loads((tmp_path / "plan.json").read_text())["schema"] == 1
    assert CapturePlan.read(tmp_path / "plan.json") == plan
    del src["expected"][3]["grid"]
    (tmp_path / "bad.json").write_text(json.dumps(src))
    with pytest.raises(RecordError, match=r"bad.json: planned launches lack \['grid'\]; rerun the plan rule"):
        CapturePlan.read(tmp_path / "bad.json")


PEAKS = {
    "precision": "bf16",
    "device_name": None,
    "compute": 9.9e14,
    "compute_source": "ncu",
    "dram": 3.35e12,
    "dram_source": "ncu",
}


def test_a_summary_keeps_its_peaks_and_its_one_list_of_facts(tmp_path):
    said = [Diagnostic("note", "decode", "busy time is 12% of the range's wall time."), Diagnostic("info", "ncu", "x")]
    Summary(Peaks.from_dict(PEAKS), said, [{"what": "export", "argv": ["ncu"]}], []).write(tmp_path / "s.json")
    back = Summary.read(tmp_path / "s.json")
    assert back.diagnostics == said and back.peaks.compute == 9.9e14 and back.peaks.device_name is None
    assert back.notes() == ["decode: busy time is 12% of the range's wall time."]


def test_a_summary_written_before_notes_were_records_still_reads(tmp_path):
    (tmp_path / "s.json").write_text(json.dumps({"peaks": PEAKS, "notes": ["decode: a note"], "diagnostics": []}))
    assert Summary.read(tmp_path / "s.json").notes() == ["decode: a note"]


@pytest.mark.parametrize(
    "data,message",
    [
        ({"diagnostics": []}, r"s.json: no 'peaks' object; rerun the aggregate rule"),
        ({"peaks": {"precision": "bf16"}}, r"s.json: peaks: key\(s\) \['compute', .* missing from the peaks"),
        (
            {"peaks": PEAKS, "diagnostics": [{"level": "loud", "source": "", "message": "m"}]},
            r"s.json: diagnostic .* is not \{level: one of \['note', 'warning', 'estimate', 'info'\]",
        ),
    ],
)
def test_a_bad_summary_is_refused_naming_the_file_and_key(tmp_path, data, message):
    (tmp_path / "s.json").write_text(json.dumps(data))
    with pytest.raises(RecordError, match=message):
        Summary.read(tmp_path / "s.json")
