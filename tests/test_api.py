"""The library API (traceinspect.api, docs/api.md): the same reports as the command line, every
config form, errors that name parameters (not flags), and docs/api.md's code blocks run."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import traceinspect as ti
from builders import build_dataloader_stall, build_healthy
from traceinspect import api
from traceinspect.cli import cli
from traceinspect.errors import TraceError, UsageError

DOC = Path(__file__).resolve().parents[1] / "docs" / "api.md"


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("api")
    return build_dataloader_stall().write(d / "stall.pt.trace.json"), build_healthy().write(d / "ok.pt.trace.json")


def _cli(*args) -> tuple[int, str]:
    r = CliRunner().invoke(cli, [str(a) for a in args])
    return r.exit_code, r.output


def test_root_exports_the_api_lazily():
    assert ti.load is api.load and ti.analyze is api.analyze and ti.diff is api.diff
    assert ti.Config.__module__ == "traceinspect.config" and ti.ReportDiff.__name__ == "ReportDiff"


@pytest.mark.parametrize("fmt", ["text", "md", "json", "html"])
def test_analyze_renders_what_the_cli_prints(traces, fmt):
    stall, _ = traces
    code, out = _cli("analyze", stall, "--format", fmt, "--no-cache")
    assert code == 0
    assert api.render(ti.analyze(stall), fmt) == out


def test_load_gives_dataframes_and_analyze_takes_a_trace(traces):
    stall, _ = traces
    trace = ti.load(stall, steps="1:")
    assert len(trace.steps) == 3 and {"name", "dur_us"} <= set(trace.kernels.columns)
    from_trace = ti.analyze(trace)
    assert from_trace.findings[0].name == "dataloader-stall"
    assert from_trace.to_dict() == ti.analyze(stall, steps="1:").to_dict()


def test_config_forms_agree(traces, tmp_path):
    stall, _ = traces
    toml = tmp_path / "ti.toml"
    toml.write_text('ignore = ["dataloader-stall"]\n')
    reports = [
        ti.analyze(stall, c)
        for c in (ti.Config(ignore=("dataloader-stall",)), {"ignore": ["dataloader-stall"]}, toml, str(toml))
    ]
    for r in reports:
        assert "dataloader-stall" not in [f.name for f in r.findings]
        assert r.settings["ignore"] == ["dataloader-stall"]
    assert reports[0].to_dict() == reports[1].to_dict()


def test_config_none_reads_the_working_directorys_pyproject_never_the_traces(tmp_path, monkeypatch):
    (tmp_path / "run").mkdir()
    (tmp_path / "cwd" / ".git").mkdir(parents=True)
    p = build_dataloader_stall().write(tmp_path / "run" / "x.pt.trace.json")
    stranger = '[tool.traceinspect]\nignore = ["dataloader-stall"]\n'
    (tmp_path / "run" / "pyproject.toml").write_text(stranger)  # beside the trace: a stranger's file
    monkeypatch.chdir(tmp_path / "cwd")
    assert ti.analyze(p).findings[0].name == "dataloader-stall"
    (tmp_path / "cwd" / "pyproject.toml").write_text(stranger)  # the user's own project
    assert "dataloader-stall" not in [f.name for f in ti.analyze(p).findings]
    assert ti.analyze(p, ti.Config()).findings[0].name == "dataloader-stall"


def test_bad_config_key_is_a_usage_error(traces):
    with pytest.raises(UsageError, match="unknown key"):
        ti.analyze(traces[0], {"no-such-key": 1})
    with pytest.raises(UsageError) as e:
        ti.analyze(traces[0], 42)
    assert e.value.param == "config"


def test_errors_name_parameters_and_the_cli_words_them_as_flags(traces, tmp_path):
    stall, _ = traces
    with pytest.raises(UsageError) as e:
        ti.analyze(stall, steps="9:")
    assert e.value.param == "steps" and "--" not in str(e.value) and str(e.value).startswith("steps='9:'")
    with pytest.raises(UsageError) as e:
        ti.analyze(stall, rank=3)
    assert e.value.param == "rank" and "--" not in str(e.value)
    code, out = _cli("analyze", stall, "--steps", "9:")
    assert code == 2 and "error: --steps '9:' selects no step" in out
    code, out = _cli("analyze", stall, "--rank", "3")
    assert code == 2 and "error: --rank 3: " in out and "is rank 0" in out
    with pytest.raises(TraceError):
        ti.load(tmp_path / "missing.json")


def test_diff_takes_reports_saved_reports_and_traces(traces, tmp_path):
    stall, ok = traces
    before = ti.analyze(stall)
    saved = tmp_path / "before.json"
    saved.write_text(api.render(before, "json"))
    d1, d2, d3 = ti.diff(before, ok), ti.diff(saved, ti.load(ok)), ti.diff(str(stall), str(ok))
    assert "dataloader-stall" in d1.resolved and d1.speedup > 1.5
    assert d1.to_dict() == d3.to_dict()
    assert d2.resolved == d1.resolved and d2.step_time_us == d1.step_time_us
    code, out = _cli("diff", stall, ok, "--format", "json")
    assert code == 0 and json.loads(out) == json.loads(api.render(d1, "json"))


def test_render_rejects_an_unknown_format(traces):
    with pytest.raises(UsageError) as e:
        api.render(ti.analyze(traces[0]), "pdf")
    assert e.value.param == "format"


def test_docs_api_code_blocks_run(traces, tmp_path, monkeypatch, capsys):
    stall, ok = traces
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert len(blocks) >= 5
    monkeypatch.chdir(tmp_path)
    ns: dict = {"TRACE": str(stall), "AFTER": str(ok)}
    for i, src in enumerate(blocks):
        try:
            exec(compile(src, f"{DOC.name}[block {i}]", "exec"), ns)
        except Exception as e:  # noqa: BLE001 - the message carries the block
            pytest.fail(f"docs/api.md code block {i} failed: {type(e).__name__}: {e}\n{src}")
    out = capsys.readouterr().out
    # what the page says the examples show
    assert ns["report"].findings[0].name == "dataloader-stall"
    assert "dataloader-stall" in ns["d"].resolved
    assert "steps - steps='9:' selects no step: the trace has 4 steps (0..3)" in out


def test_library_error_messages_name_no_flag():
    """Outside cli.py, no UsageError / TraceError message (its first argument) spells a command-line flag:
    a parameter at fault is UsageError(param=...), which the CLI words as its flag."""
    import ast

    pkg = Path(api.__file__).parent
    bad = []
    for f in pkg.rglob("*.py"):
        if f.name == "cli.py":
            continue
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", None) in ("UsageError", "TraceError")
                and node.args
            ):
                msg = node.args[-1] if node.func.id == "TraceError" else node.args[0]
                parts = [c.value for c in ast.walk(msg) if isinstance(c, ast.Constant) and isinstance(c.value, str)]
                if any(re.search(r"(^|\s)--[a-z]", p) for p in parts):
                    bad.append(f"{f.relative_to(pkg)}:{node.lineno}")
    assert not bad, bad


def test_analyzing_one_trace_twice_gives_the_same_report(tmp_path):
    from builders import TraceBuilder

    t = TraceBuilder()  # one step of about 0.1 ms: analyze warns that the window is under 1 ms
    with t.step():
        t.kernel("k", 50)
    trace = ti.load(t.write(tmp_path / "short.pt.trace.json"))
    first, second = ti.analyze(trace), ti.analyze(trace)
    assert any("under 1 ms" in w for w in first.warnings)
    assert first.to_dict() == second.to_dict()
