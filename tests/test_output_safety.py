"""Outputs never destroy an input, and a failed write leaves the previous file as it was (issue 28)."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from builders import build_dataloader_stall
from traceinspect.cli import cli


def run(*args):
    r = CliRunner().invoke(cli, list(map(str, args)))
    return r.exit_code, r.output


@pytest.fixture
def trace(tmp_path):
    return build_dataloader_stall().write(tmp_path / "t.pt.trace.json.gz")


def _same(path, before: bytes):
    assert path.read_bytes() == before


def test_report_onto_its_own_trace_is_refused_and_the_trace_kept(trace):
    before = trace.read_bytes()
    code, out = run("analyze", trace, "-f", "json", "-o", trace)
    assert code == 2 and "is the input" in out and str(trace) in out
    _same(trace, before)


@pytest.mark.parametrize("kind", ["hardlink", "symlink", "spelling"])
def test_report_onto_another_name_of_the_trace_is_refused(trace, tmp_path, kind):
    before = trace.read_bytes()
    other = tmp_path / "other.json"
    if kind == "hardlink":
        os.link(trace, other)
    elif kind == "symlink":
        other.symlink_to(trace)
    else:
        other = tmp_path / "." / "sub" / ".." / trace.name
        (tmp_path / "sub").mkdir()
    code, out = run("analyze", trace, "-f", "json", "-o", other)
    assert code == 2 and "is the input" in out
    _same(trace, before)


def test_report_onto_a_rank_file_of_the_run_directory_is_refused(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    r0 = build_dataloader_stall().write(d / "rank0.pt.trace.json.gz")
    before = r0.read_bytes()
    code, out = run("analyze", d, "-f", "json", "-o", r0)
    assert code == 2 and "is the input" in out
    _same(r0, before)


def test_annotate_onto_a_hard_link_of_the_source_is_refused(trace, tmp_path):
    before = trace.read_bytes()
    link = tmp_path / "link.json.gz"
    os.link(trace, link)
    code, out = run("annotate", trace, "-o", link)
    assert code == 2 and "is the input" in out
    _same(trace, before)


def test_analyze_annotate_and_report_onto_one_file_is_refused(trace, tmp_path):
    x = tmp_path / "x.json"
    x.write_text("previous\n")
    code, out = run("analyze", trace, "--annotate", x, "-f", "json", "-o", x)
    assert code == 2 and "also the output" in out
    assert x.read_text() == "previous\n"


def test_diff_onto_one_of_its_inputs_is_refused(trace, tmp_path):
    saved = tmp_path / "before.json"
    assert run("analyze", trace, "-o", saved)[0] == 0
    before = saved.read_bytes()
    code, out = run("diff", saved, trace, "-f", "json", "-o", saved)
    assert code == 2 and "is the input" in out
    _same(saved, before)


def test_a_failed_write_keeps_the_previous_report_and_leaves_no_temporary_file(trace, tmp_path, monkeypatch):
    out = tmp_path / "r.json"
    out.write_text("previous report\n")

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    code, msg = run("analyze", trace, "-o", out)
    assert code == 2 and str(out) in msg and "No space left" in msg
    assert out.read_text() == "previous report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["r.json", trace.name])


def test_a_failed_annotate_keeps_the_previous_file(trace, tmp_path, monkeypatch):
    out = tmp_path / "a.json.gz"
    out.write_bytes(b"previous")
    monkeypatch.setattr(os, "replace", lambda a, b: (_ for _ in ()).throw(OSError(28, "No space left on device")))
    code, msg = run("annotate", trace, "-o", out)
    assert code == 2 and "No space left" in msg
    assert out.read_bytes() == b"previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["a.json.gz", trace.name])


def test_a_new_report_gets_the_umask_mode_and_an_existing_one_keeps_its_mode(trace, tmp_path):
    new = tmp_path / "new.json"
    old_umask = os.umask(0o022)
    try:
        assert run("analyze", trace, "-o", new)[0] == 0
        assert new.stat().st_mode & 0o777 == 0o644  # 0o666 & ~0o022, as open() would give
        new.chmod(0o600)
        assert run("analyze", trace, "-o", new)[0] == 0
        assert new.stat().st_mode & 0o777 == 0o600
    finally:
        os.umask(old_umask)


def test_dev_null_is_still_a_valid_output(trace):
    assert run("analyze", trace, "-o", "/dev/null")[0] == 0


def test_two_outputs_naming_one_new_file_are_refused(trace, tmp_path):
    x = tmp_path / "new.json"
    code, out = run("analyze", trace, "--annotate", x, "-f", "json", "-o", tmp_path / "." / "new.json")
    assert code == 2 and "also the output" in out and not x.exists()


def test_a_symlinked_output_is_written_through_and_the_link_kept(trace, tmp_path):
    real = tmp_path / "shared" / "report.json"
    real.parent.mkdir()
    real.write_text("old\n")
    link = tmp_path / "report.json"
    link.symlink_to(real)
    assert run("analyze", trace, "-o", link)[0] == 0
    assert link.is_symlink() and real.read_text().startswith("{")


def test_isolated_with_an_explicit_config_is_a_usage_error(trace, tmp_path):
    cfg = tmp_path / "ti.toml"
    cfg.write_text('ignore = ["TI1"]\n')
    code, out = run("analyze", trace, "--isolated", "--config", cfg)
    assert code == 2 and "--isolated" in out


def test_a_chart_asset_onto_an_input_is_refused(tmp_path):
    pytest.importorskip("matplotlib")
    from traceinspect.render.markdown import ASSET_FILES

    d = tmp_path / "charts"
    d.mkdir()
    victim = build_dataloader_stall().write(d / ASSET_FILES[0][0])  # a trace named like a chart
    before = victim.read_bytes()
    code, out = run("analyze", victim, "-f", "md", "-o", tmp_path / "r.md", "--assets", d)
    assert code == 2 and "is the input" in out
    _same(victim, before)


def test_a_failed_chart_write_keeps_the_previous_chart(trace, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from traceinspect.render.markdown import ASSET_FILES

    d = tmp_path / "charts"
    d.mkdir()
    old = d / ASSET_FILES[0][0]
    old.write_text("<svg>previous</svg>\n")
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(28, "No space left on device")))
    code, msg = run("analyze", trace, "-f", "md", "-o", tmp_path / "r.md", "--assets", d)
    assert code == 2 and "No space left" in msg and str(old) in msg
    assert old.read_text() == "<svg>previous</svg>\n"
    assert [p.name for p in d.iterdir()] == [old.name]  # no temporary file left behind
