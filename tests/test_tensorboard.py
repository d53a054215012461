"""TensorBoard export: read back with tensorboard's own EventAccumulator (skipped without tensorboard)."""

import sys

import pytest
from click.testing import CliRunner

from builders import build_dataloader_stall
from traceinspect.analyze import analyze
from traceinspect.cli import cli
from traceinspect.errors import UsageError
from traceinspect.inert import md_text
from traceinspect.tensorboard import write_report
from traceinspect.trace.model import load_trace


@pytest.fixture
def report(tmp_path):
    return analyze(load_trace(build_dataloader_stall().write(tmp_path / "stall.pt.trace.json")))


def read_back(logdir):
    ea_mod = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator",
        reason="tensorboard is not installed (pip install -e '.[tensorboard]' in the traceinspect checkout)",
    )
    ea = ea_mod.EventAccumulator(str(logdir))
    ea.Reload()
    return ea


def test_scalars_and_text_read_back(report, tmp_path):
    pytest.importorskip("tensorboard")
    write_report(report, tmp_path / "tb")
    ea = read_back(tmp_path / "tb")
    steps = report.steps["per_step"]
    got = ea.Scalars("traceinspect/step_time_ms")
    assert [e.step for e in got] == [r["step"] for r in steps]
    # stored as float32: compare to ~1e-6 relative
    assert [e.value for e in got] == pytest.approx([r["dur_us"] / 1e3 for r in steps], rel=1e-6)
    busy = ea.Scalars("traceinspect/gpu_busy_pct")[0]
    assert busy.step == steps[-1]["step"]
    assert busy.value == pytest.approx(100 * report.breakdown["gpu_busy"]["frac"], rel=1e-6)
    lost = ea.Scalars("traceinspect/time_lost_ms_per_step/dataloader-stall")[0].value
    stall = next(f for f in report.findings if f.name == "dataloader-stall")
    assert lost == pytest.approx(stall.time_lost_per_step_us / 1e3, rel=1e-6)
    assert ea.Scalars("traceinspect/breakdown_ms/idle_dataloader")
    verdict = ea.Tensors("traceinspect/verdict")[0].tensor_proto.string_val[0].decode()
    assert verdict == md_text(report.verdict["top_title"])  # TensorBoard renders it as Markdown
    md = ea.Tensors("traceinspect/report")[0].tensor_proto.string_val[0].decode()
    assert md.startswith("## traceinspect") and "dataloader-stall" in md


def test_cli_option_writes_an_event_file(tmp_path):
    pytest.importorskip("tensorboard")
    trace = build_dataloader_stall().write(tmp_path / "stall.pt.trace.json.gz")
    r = CliRunner().invoke(cli, ["analyze", str(trace), "--tensorboard", str(tmp_path / "tb")])
    assert r.exit_code == 0, r.output
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))


def test_without_tensorboard_a_clear_usage_error(report, tmp_path, monkeypatch):
    # a None entry makes `import tensorboard...` fail, also for submodules an earlier test imported
    for name in [m for m in sys.modules if m == "tensorboard" or m.startswith("tensorboard.")] + ["tensorboard"]:
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(UsageError, match=r"pip install -e '\.\[tensorboard\]' in the traceinspect checkout"):
        write_report(report, tmp_path / "tb")


def test_summary_markdown_makes_no_image_or_link(report):
    """TensorBoard renders the text as Markdown and its sanitiser keeps <img> and <a>."""
    pu = pytest.importorskip("tensorboard.plugin_util")
    from traceinspect.tensorboard import summary_markdown

    d = report.to_dict()
    d["findings"][0]["title"] = (
        "![x](https://evil.example/i.png) <img src=https://evil.example/j.png> [l](https://e.example)"
    )
    d["trace"]["file"] = "https://evil.example/f www.evil.example a@evil.example"
    from traceinspect.report import Report

    out = pu.markdown_to_safe_html(summary_markdown(Report.from_dict(d)))
    assert "<img" not in out and "<a " not in out and "href" not in out
    assert "evil.example/i.png" in out  # shown as text
