"""Configuration as ruff does it (traceinspect/config.py): discovery, select/ignore, typed thresholds,
overrides, and an error naming the file and key for every bad setting. One test per knob."""

from __future__ import annotations

import pytest

from builders import build_launch_bound
from traceinspect import config as C
from traceinspect.analyze import analyze
from traceinspect.detectors import ALL
from traceinspect.detectors.launch_bound import LaunchBound
from traceinspect.errors import UsageError
from traceinspect.trace.model import load_trace


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_found_by_walking_up_from_the_working_directory_never_from_the_trace(tmp_path, monkeypatch):
    _write(tmp_path / "pyproject.toml", '[tool.traceinspect]\nignore = ["TI101"]\n')
    _write(tmp_path / "tickets" / "pyproject.toml", '[tool.traceinspect]\nignore = ["TI"]\n')
    trace = _write(tmp_path / "tickets" / "t.json", "{}")
    monkeypatch.chdir(_write(tmp_path / "work" / "src" / "x.py", "").parent)
    assert trace.exists()
    cfg = C.load()
    assert cfg.ignore == ("TI101",) and cfg.source == str(tmp_path / "pyproject.toml")
    assert LaunchBound not in cfg.detectors() and len(cfg.detectors()) == len(ALL) - 1


def test_the_repository_root_ends_the_search(tmp_path, monkeypatch):
    _write(tmp_path / "pyproject.toml", '[tool.traceinspect]\nignore = ["TI"]\n')
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    monkeypatch.chdir(_write(tmp_path / "repo" / "sub" / "x.py", "").parent)
    assert C.find_pyproject() is None and C.load() == C.Config()


def test_cli_ignores_a_pyproject_beside_the_trace_and_isolated_ignores_the_users(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from builders import build_dataloader_stall
    from traceinspect.cli import cli

    (tmp_path / "cwd" / ".git").mkdir(parents=True)
    trace = build_dataloader_stall().write(_write(tmp_path / "t" / "pyproject.toml", "").parent / "t.json")
    stranger = '[tool.traceinspect]\nignore = ["TI"]\n'
    (tmp_path / "t" / "pyproject.toml").write_text(stranger)
    monkeypatch.chdir(tmp_path / "cwd")
    out = CliRunner().invoke(cli, ["analyze", str(trace)]).output
    assert "dataloader-stall" in out and "Config:" not in out
    (tmp_path / "cwd" / "pyproject.toml").write_text(stranger)
    out = CliRunner().invoke(cli, ["analyze", str(trace)]).output
    assert "VERDICT" not in out  # every detector off: no cause is named
    # ... and the report says why, on one line near the top
    line = f"Config: {tmp_path / 'cwd' / 'pyproject.toml'} (ignore: TI) - {len(ALL)} detectors off"
    assert "".join(line.split()) in "".join(out.split())  # the text report wraps a long path
    out = CliRunner().invoke(cli, ["analyze", str(trace), "--isolated"]).output
    assert "dataloader-stall" in out and "Config:" not in out


def test_a_deeply_nested_config_is_a_usage_error(tmp_path):
    p = _write(tmp_path / "deep.toml", "x = " + "[" * 100000 + "]" * 100000 + "\n")
    with pytest.raises(UsageError, match="nested too deeply|not valid TOML"):
        C.load(p)


def test_a_pyproject_without_the_table_is_skipped_and_none_means_defaults(tmp_path):
    _write(tmp_path / "pyproject.toml", '[tool.traceinspect]\nselect = ["launch-bound"]\n')
    _write(tmp_path / "sub" / "pyproject.toml", '[project]\nname = "x"\n')
    assert C.load(start=tmp_path / "sub").select == ("launch-bound",)  # start: the walk's first directory
    assert C.find_pyproject(tmp_path / "sub") == tmp_path / "pyproject.toml"
    assert C.Config().detectors() == ALL and C.Config().non_default() == {}


def test_select_by_code_prefix_and_name_and_ignore():
    cfg = C.Config(select=("TI1",), ignore=("padding-waste",))
    got = {d.name for d in cfg.detectors()}
    assert got == {d.name for d in ALL if d.code.startswith("TI1")} - {"padding-waste"}


def test_thresholds_from_the_file_reach_the_detector(tmp_path):
    p = _write(tmp_path / "ti.toml", "[launch-bound]\nmin_idle_frac = 0.99\n")
    cfg = C.load(p)
    assert cfg.make(LaunchBound).min_idle_frac == 0.99
    assert cfg.non_default() == {"launch-bound.min_idle_frac": 0.99, "source": str(p)}  # none off: no list
    trace = load_trace(build_launch_bound().write(tmp_path / "lb.json"))
    assert "launch-bound" in [f.name for f in analyze(trace).findings]
    rep = analyze(trace, config=cfg)  # a threshold nobody can reach: the detector declines
    assert "launch-bound" not in [f.name for f in rep.findings]


def test_settings_override_typed_from_the_declared_option():
    cfg = C.override(
        C.Config(), settings=["TI101.min_idle_frac=0.2", "launch-bound.max_busy_frac=1"], select=["launch-bound"]
    )
    assert cfg.options == {"launch-bound": {"min_idle_frac": 0.2, "max_busy_frac": 1.0}}
    assert isinstance(cfg.options["launch-bound"]["max_busy_frac"], float)
    assert cfg.detectors() == (LaunchBound,)


@pytest.mark.parametrize(
    "toml, words",
    [
        ("[tool.traceinspect]\nselct = []\n", "unknown key 'selct'"),
        ('[tool.traceinspect]\nselect = ["no-such"]\n', "unknown detector 'no-such'"),
        ('[tool.traceinspect]\nselect = "TI101"\nignore = 3\n', "ignore must be a list"),
        ("[tool.traceinspect.launch-bound]\nmin_frac = 0.1\n", "unknown option 'launch-bound.min_frac'"),
        ('[tool.traceinspect.launch-bound]\nmin_idle_frac = "lots"\n', "launch-bound.min_idle_frac must be a float"),
        ("[tool.traceinspect.launch-bound]\nmin_idle_frac = true\n", "launch-bound.min_idle_frac must be a float"),
        ("[tool.traceinspect.no-such]\nx = 1\n", "unknown key 'no-such'"),
        ("[tool.traceinspect\n", "not valid TOML"),
    ],
)
def test_bad_settings_are_usage_errors_naming_the_file_and_key(tmp_path, toml, words):
    p = _write(tmp_path / "pyproject.toml", toml)
    with pytest.raises(UsageError) as e:
        C.load(p)
    msg = str(e.value)
    assert e.value.exit_code == 2 and words in msg and str(p) in msg and "\n" not in msg
    assert "--" not in msg + e.value.hint  # library errors never name command-line flags


@pytest.mark.parametrize(
    "setting, words",
    [
        ("launch-bound.min_idle_frac", "is not detector.option=value"),
        ("nope.x=1", "unknown detector 'nope'"),
        ("launch-bound.min_idle_frac=abc", "must be a float"),
    ],
)
def test_bad_overrides_are_usage_errors(setting, words):
    with pytest.raises(UsageError, match=words):
        C.override(C.Config(), settings=[setting])


def test_a_missing_config_file_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="configuration file not found"):
        C.load(tmp_path / "nope.toml")


def _cli(*args):
    from click.testing import CliRunner
    from traceinspect.cli import cli

    return CliRunner().invoke(cli, ["analyze", *args, "--format", "json", "--no-cache"])


def test_cli_set_select_ignore_and_the_discovered_pyproject(tmp_path, monkeypatch):
    import json

    monkeypatch.chdir(tmp_path)  # the search starts in the working directory
    (tmp_path / "run").mkdir()
    trace = build_launch_bound().write(tmp_path / "run" / "lb.json")
    names = lambda r: [f["name"] for f in json.loads(r.output)["findings"]]  # noqa: E731
    assert "launch-bound" in names(_cli(str(trace)))
    assert "launch-bound" not in names(_cli(str(trace), "--set", "launch-bound.min_idle_frac=0.99"))
    assert "launch-bound" not in names(_cli(str(trace), "--ignore", "TI101"))
    assert names(_cli(str(trace), "--select", "host-sync,TI104")) == []
    _write(tmp_path / "pyproject.toml", '[tool.traceinspect]\nignore = ["launch-bound"]\n')
    assert "launch-bound" not in names(_cli(str(trace)))
    bad = _cli(str(trace), "--set", "launch-bound.min_frac=0.1")
    assert bad.exit_code == 2 and "launch-bound.min_frac" in bad.output and "Traceback" not in bad.output


def test_the_report_names_its_non_default_settings_in_every_format(tmp_path):
    import json
    from traceinspect.render import RENDERERS
    from traceinspect.report import Report

    trace = load_trace(build_launch_bound().write(tmp_path / "lb.json"))
    assert "settings" not in analyze(trace).to_dict()  # defaults: the report keeps its shape
    cfg = C.override(C.Config(), settings=["launch-bound.min_idle_frac=0.5"], ignore=["host-sync"])
    rep = analyze(trace, config=cfg)
    d = json.loads(json.dumps(rep.to_dict()))
    assert d["settings"] == {
        "ignore": ["host-sync"],
        "launch-bound.min_idle_frac": 0.5,
        "detectors_off": ["TI201 host-sync"],  # the detectors that did not run, by code and name
        "source": "command line",
    }
    assert Report.from_dict(d).settings == d["settings"]
    line = "Config: command line (ignore: host-sync; launch-bound.min_idle_frac=0.5) - 1 detector off"
    for fmt in ("text", "md", "html"):
        out = RENDERERS[fmt][0](rep)
        assert line in out.replace("\\_", "_"), fmt  # Markdown escapes the underscores
