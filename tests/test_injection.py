"""Output is inert in every format: hostile kernel names, CPU op names, a GPU name, run-config keys and
values, a file name that is not UTF-8, and a poisoned saved/cached report, through text, Markdown
(rendered with GitHub's cmark-gfm), HTML, JSON, TensorBoard and diff's formats.

Each hostile trace is built with the builders so that the detectors that print names fire; every test
first checks that the hostile text did reach the report, else it would prove nothing.
"""

from __future__ import annotations

import ast
import html
import json
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import msgspec
import pytest
from click.testing import CliRunner

from builders import GEMM_BF16, TraceBuilder
from traceinspect.analyze import analyze
from traceinspect.cli import cli
from traceinspect.diff import diff
from traceinspect.inert import md_code, md_text, text
from traceinspect.render import RENDERERS
from traceinspect.render.diff import DIFF_RENDERERS
from traceinspect.report import Report
from traceinspect.trace.model import load_trace

REPO = Path(__file__).resolve().parents[1]

# Everything that has broken out of a format somewhere: a code span (backtick, \r, \n), a table cell
# (|), raw HTML, images and links, GFM autolinks (URL, www., email), entities, emphasis, math,
# headings, terminal escapes (clear screen, window title, OSC 52 clipboard, 8-bit CSI), DEL,
# Unicode line separator and a right-to-left override.
PAYLOAD = (
    "`|`` x\r<img src=https://evil.example/i.png>\n| x | y |\n![i](https://evil.example/p.png) "
    "[l](https://evil.example/l) https://evil.example/u www.evil.example a@evil.example "
    "<https://evil.example/a> &lt;b&gt; **b** _i_ ~~s~~ $x$ \\ <evil>"
    "\x1b[2J\x1b]0;title\x07\x1b]52;c;ZXZpbA==\x07\x9b31m\x7f\u2028\u202e"
)
# in a report (not a trace: whether a reader accepts them is the readers' business), also NUL and
# lone surrogates, as a file name that is not UTF-8 gives
REPORT_PAYLOAD = PAYLOAD + "\x00\udcff \ud800"  # low before high: never a pair

KERNEL = "# " + PAYLOAD + GEMM_BF16  # still a bf16 GEMM by name; a heading marker first
OP = "1. " + PAYLOAD + "module"  # an op around .item(): host-sync names the op chain
GPU = "- " + PAYLOAD + "GPU"
CFG_KEY = "key" + PAYLOAD
CFG_VALUE = "=" + PAYLOAD
FILE_NAME = os.fsdecode(b"\xff\xfe|`<img src=x>`\x1b]0;pwn\x07\x1b[2J\r" + b".pt.trace.json")

CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
LINKY = re.compile(r"<a[\s>]|<img|<evil|<script|<del", re.IGNORECASE)  # real tags: text has &lt;
MD_TAGS = {
    "h2",
    "h3",
    "h4",
    "p",
    "ul",
    "ol",
    "li",
    "br",  # an item's second line (render/markdown.blocks: a hard line break)
    "strong",
    "em",
    "code",
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
    "details",
    "summary",
}


def hostile_builder(steps: int = 4) -> TraceBuilder:
    """A DataLoader stall plus .item() syncs inside a hostile op, with hostile kernel names."""
    t = TraceBuilder()
    for _ in range(steps):
        with t.step():
            t.dataloader(5_000)
            for _ in range(12):
                t.op("aten::linear", kernels=[(KERNEL, 300.0)], cpu_us=15)
                with t.span(OP):
                    t.item()
                t.cpu(50)
    t.meta["traceinspect"] = {
        "schema_version": 1,
        "source": "hf_trainer",
        "config": {CFG_KEY: CFG_VALUE, "dataloader_num_workers": 0},
        "steps": [],
    }
    return t


def write_hostile(tmp_path: Path, name: str = "hostile.pt.trace.json") -> Path:
    doc = hostile_builder().build()
    doc["deviceProperties"][0]["name"] = GPU
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return p


@pytest.fixture(scope="module")
def hostile_report(tmp_path_factory):
    rep = analyze(load_trace(write_hostile(tmp_path_factory.mktemp("hostile"))))
    names = {f.name for f in rep.findings}
    # the detectors that print names fired, and the names reached the report
    assert {"dataloader-stall", "host-sync"} <= names, names
    sync = next(f for f in rep.findings if f.name == "host-sync")
    assert PAYLOAD in sync.title + " ".join(str(e.value) for e in sync.evidence)
    assert any(k["name"] == KERNEL for k in rep.top_kernels)
    assert rep.trace["gpu"]["name"] == GPU
    assert rep.trace["run_config"][CFG_KEY] == CFG_VALUE
    return rep


def poison(obj, key: str = ""):
    """Every string -> the payload (keys too, in free-form maps); every number -> a hostile string."""
    if isinstance(obj, str):
        return REPORT_PAYLOAD + obj
    if isinstance(obj, bool) or obj is None:
        return obj
    if isinstance(obj, (int, float)):
        return "<img src=https://evil.example/n.png>" + REPORT_PAYLOAD
    if isinstance(obj, msgspec.Struct):  # a typed section: msgspec does not validate on construction
        return msgspec.structs.replace(
            obj,
            **{f: poison(getattr(obj, f), f) for f in obj.__struct_fields__ if getattr(obj, f) is not msgspec.UNSET},
        )
    if isinstance(obj, list):
        return [poison(v, key) for v in obj]
    if isinstance(obj, dict):
        free = key in ("run_config", "versions", "profiler", "environment", "run_framework")
        return {(REPORT_PAYLOAD + k if free else k): poison(v, k) for k, v in obj.items()}
    return obj


def poisoned(rep: Report, numbers: bool = True) -> Report:
    d = rep.to_dict()
    d.pop("timeline_sample", None)  # intervals: shape validation of cache entries is not rendering
    rep = Report.from_dict({k: v if k == "schema_version" else _strings_only(v) for k, v in d.items()})
    if not numbers:
        return rep
    # A saved or cached report with numbers given as strings is refused by Report.from_dict (its shape is
    # checked on every read); the renderers must stay inert whatever they are given all the same, so the
    # free-form dict sections are poisoned on the object itself.
    with pytest.raises(ValueError):
        Report.from_dict({k: v if k in ("schema_version", "steps") else poison(v, k) for k, v in d.items()})
    return msgspec.structs.replace(
        rep,
        **{
            k: poison(getattr(rep, k), k)
            for k in ("trace", "breakdown", "verdict", "account", "efficiency", "top_kernels", "ranks")
            if k in d
        },
    )


def _strings_only(obj, key=""):
    if isinstance(obj, str):
        return REPORT_PAYLOAD + obj
    if isinstance(obj, list):
        return [_strings_only(v, key) for v in obj]
    if isinstance(obj, dict):
        return {k: _strings_only(v, k) for k, v in obj.items()}
    return obj


# --- checks, one per format ------------------------------------------------------------------------


def _gfm(md: str) -> str:
    cmarkgfm = pytest.importorskip("cmarkgfm", reason="pip install cmarkgfm (GitHub's cmark-gfm; the test extra)")
    from cmarkgfm.cmark import Options

    # UNSAFE: raw HTML passes through instead of becoming a comment, so any that leaks is seen
    return cmarkgfm.github_flavored_markdown_to_html(md, options=Options.CMARK_OPT_UNSAFE)


def _cells(row: str) -> int:
    # GFM splits a row on every `|` not preceded by a backslash, before it reads code spans
    return len(re.split(r"(?<!\\)\|", row.strip())) - 2


def assert_markdown_inert(md: str, *expect_visible: str) -> str:
    assert not CONTROL.search(md), repr(CONTROL.search(md))
    assert "\r" not in md
    out = _gfm(md)
    assert not LINKY.search(out), out[max(0, LINKY.search(out).start() - 200) :][:400]
    tags = set(re.findall(r"<([a-zA-Z][a-zA-Z0-9-]*)", out))
    assert tags <= MD_TAGS, tags - MD_TAGS
    attrs = {a for t in re.findall(r"<[a-zA-Z][^>]*>", out) for a in re.findall(r"\s([a-zA-Z:-]+)=", t)}
    assert attrs <= {"align"}, attrs
    # tables keep their columns and their rows: none ended early, none split
    tables, cur = [], []
    for line in md.split("\n") + [""]:
        if line.startswith("|"):
            cur.append(line)
        elif cur:
            tables.append(cur)
            cur = []
    for rows in tables:
        assert {_cells(r) for r in rows} == {_cells(rows[0])}, rows
    assert out.count("<table>") == len(tables)
    assert out.count("<tr>") == sum(len(rows) - 1 for rows in tables)  # less each delimiter row
    # inert, not deleted: the hostile text is there to read
    visible = html.unescape(re.sub(r"<[^>]+>", "", out)).replace("\u2060", "")
    for s in expect_visible:
        assert s in visible, s
    return out


def assert_text_inert(out: str) -> None:
    assert not CONTROL.search(out), repr(CONTROL.search(out))
    assert "\\x1b[2J" in out  # shown as an escape, not acted on


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def assert_html_inert(page: str) -> None:
    assert not CONTROL.search(page.replace("\t", " "))
    p = _Tags()
    p.feed(page)
    names = [t for t, _ in p.tags]
    for bad in ("img", "a", "iframe", "object", "embed", "link", "form", "base", "evil"):
        assert bad not in names, bad
    scripts = [a for t, a in p.tags if t == "script"]
    assert scripts == [{"type": "application/json", "id": "traceinspect-data"}]
    for tag, attrs in p.tags:
        for k, v in attrs.items():
            assert not k.startswith("on") and k not in ("src", "srcdoc", "formaction"), (tag, k)
            if k.endswith("href"):
                assert (v or "").startswith("#"), (tag, k, v)  # matplotlib's <use xlink:href="#id">
    data = re.search(r'<script type="application/json" id="traceinspect-data">(.*?)</script>', page, re.S)
    json.loads(data.group(1))


def assert_json_valid(out: str) -> dict:
    out.encode("utf-8")  # no lone surrogate in the text
    doc = json.loads(out)

    def walk(o):
        if isinstance(o, str):
            o.encode("utf-8")  # nor as a \udXXX escape (invalid I-JSON)
        elif isinstance(o, dict):
            [walk(k) or walk(v) for k, v in o.items()]
        elif isinstance(o, list):
            [walk(v) for v in o]

    walk(doc)
    return doc


def shows_file_name(fmt: str, out: str) -> bool:
    """The file name is there, its undecodable bytes as escapes (in each format's own quoting)."""
    if fmt == "md":
        return "\\\\xff\\\\xfe\\|" in out  # \\xff\\xfe\| : backslashes escaped
    if fmt == "json":
        return any(str(v).startswith("\\xff\\xfe|") for v in json.loads(out)["trace"].values())
    return "\\xff\\xfe|" in out


def tensorboard_html(md: str) -> str:
    pu = pytest.importorskip("tensorboard.plugin_util", reason="tensorboard is not installed")
    return pu.markdown_to_safe_html(md)


# --- the helpers themselves -----------------------------------------------------------------------

HELPER_CASES = [
    PAYLOAD,
    REPORT_PAYLOAD,
    KERNEL,
    OP,
    GPU,
    CFG_VALUE,
    "`",
    "``a``",
    " ` ",
    "",
    "|",
    "\\",
    "a\\|b",
    "1) x",
    "+ x",
    "www.x.org",
    "mailto:a@b.co",
    "xmpp:a@b.co",
]


@pytest.mark.parametrize("s", HELPER_CASES, ids=[f"case{i}" for i in range(len(HELPER_CASES))])
def test_helpers_keep_markdown_inert_in_cells_and_lines(s):
    line = f"- {md_code(s)}: {md_text(s)}"
    row = f"| {md_code(s, in_table=True)} | {md_text(s)} |"
    md = "\n".join([md_text(s), "", line, "", "| a | b |", "|---|---|", row, ""])
    assert_markdown_inert(md)
    out = _gfm(md)
    assert out.count("<code>") == 2


def test_code_spans_keep_the_name_exactly():
    # no escaping inside a code span (none is possible): the fence is what changes
    for s in ["a`b", "``x``", "`lead", "trail`", "plain<T>|x"]:
        out = _gfm(md_code(s))
        inner = re.search(r"<code>(.*)</code>", out, re.S).group(1)
        assert html.unescape(inner) == s


def test_text_shows_controls_as_escapes():
    assert text("a\x1b[2Jb\r\n\t\x9b\x7f\u202e") == "a\\x1b[2Jb\\r\\n\\t\\x9b\\x7f\\u202e"
    assert text(os.fsdecode(b"\xff.json")) == "\\xff.json"  # as backslashreplace shows the byte
    assert text("\ud800") == "\\ud800"
    assert text("kernel<float> aten::mm ü 😀") == "kernel<float> aten::mm ü 😀"


# --- every format, from a hostile trace -------------------------------------------------------------


def test_markdown_report_is_inert(hostile_report):
    md = RENDERERS["md"][0](hostile_report)
    assert_markdown_inert(
        md,
        "![i](https://evil.example/p.png)",
        "<img src=https://evil.example/i.png>",
        "\\x1b[2J",
        "- `|`` x\\r<img",
        "key`|`` x\\r<img",
    )


def test_text_report_is_inert(hostile_report):
    out = RENDERERS["text"][0](hostile_report)
    assert_text_inert(out)
    assert "<img src=https://evil.example/i.png>" in out  # text needs no HTML escaping


def test_html_report_is_inert(hostile_report):
    assert_html_inert(RENDERERS["html"][0](hostile_report))


def test_json_report_is_valid_and_keeps_the_names(hostile_report):
    doc = assert_json_valid(RENDERERS["json"][0](hostile_report))
    assert doc["trace"]["gpu"]["name"] == GPU  # data stays data: JSON escapes it


def test_tensorboard_summary_is_inert(hostile_report, tmp_path):
    from traceinspect.tensorboard import summary_markdown, write_report

    md = summary_markdown(hostile_report)
    assert PAYLOAD[:5] not in md and "\\`\\|" in md  # the hostile text is there, escaped
    out = tensorboard_html(md)
    assert not LINKY.search(out), out
    assert_markdown_inert(md)
    pytest.importorskip("tensorboard")
    write_report(hostile_report, tmp_path / "tb")


# --- a poisoned saved or cached report ----------------------------------------------------------------


@pytest.mark.parametrize("numbers", [True, False], ids=["numbers-as-strings", "strings-only"])
def test_poisoned_report_renders_inert_in_every_format(hostile_report, numbers):
    rep = poisoned(hostile_report, numbers=numbers)
    assert REPORT_PAYLOAD in str(rep.trace["rank"] if numbers else rep.trace["file"])
    assert_markdown_inert(RENDERERS["md"][0](rep))
    assert_text_inert(RENDERERS["text"][0](rep))
    assert_html_inert(RENDERERS["html"][0](rep))
    assert_json_valid(RENDERERS["json"][0](rep))
    from traceinspect.tensorboard import summary_markdown

    md = summary_markdown(rep)
    assert_markdown_inert(md)
    assert not LINKY.search(tensorboard_html(md))


def test_poisoned_report_through_the_cli(hostile_report, tmp_path):
    saved = tmp_path / "saved.json"
    saved.write_text(json.dumps(poisoned(hostile_report, numbers=False).to_dict()))
    other = tmp_path / "other.json"
    other.write_text(json.dumps(hostile_report.to_dict()))
    for fmt in ("text", "md", "json", "html"):
        r = CliRunner().invoke(cli, ["diff", str(saved), str(other), "--format", fmt])
        assert r.exit_code == 0, r.output
        {"text": assert_text_inert, "md": assert_markdown_inert, "json": assert_json_valid, "html": assert_html_inert}[
            fmt
        ](r.stdout)


@pytest.mark.parametrize("fmt", ["text", "md", "html"])
def test_poisoned_cache_entry_through_the_cli(hostile_report, tmp_path, monkeypatch, fmt):
    """A cache entry of the right shape whose strings are hostile (served as is, as a valid entry would be)."""
    from traceinspect import cache

    entry = poisoned(hostile_report, numbers=False).to_dict()
    entry["trace"]["file"] = "<img src=https://evil.example/r.png>" + REPORT_PAYLOAD
    monkeypatch.setattr(cache, "MIN_BYTES", 0)
    # cache.load checks an entry's shape (a string rank is a miss: tests/test_cache.py); a valid entry
    # with hostile strings is served as it is
    monkeypatch.setattr(cache, "load", lambda key: Report.from_dict(json.loads(json.dumps(entry))))
    monkeypatch.setattr(cache, "store", lambda key, value: None)
    path = write_hostile(tmp_path)
    r = CliRunner().invoke(cli, ["analyze", str(path), "--format", fmt])
    assert r.exit_code == 0, r.output
    assert "evil.example/r.png" in r.stdout.replace("\u2060", "")  # the cached report was rendered
    {"text": assert_text_inert, "md": assert_markdown_inert, "html": assert_html_inert}[fmt](r.stdout)


# --- diff ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hostile_diff(hostile_report):
    before = poisoned(hostile_report, numbers=False)
    after = Report.from_dict(hostile_report.to_dict())
    after = msgspec.structs.replace(  # one resolved finding, one new environment difference
        after,
        findings=after.findings[1:],
        trace=msgspec.structs.replace(
            after.trace, gpu=msgspec.structs.replace(after.trace.gpu, name="B" + REPORT_PAYLOAD)
        ),
    )
    d = diff(before, after)
    assert d.resolved_findings and d.kernels and d.environment, "the diff must show names"
    return d


@pytest.mark.parametrize("fmt", ["text", "md", "json", "html"])
def test_diff_is_inert(hostile_diff, fmt):
    out = DIFF_RENDERERS[fmt][0](hostile_diff)
    {"text": assert_text_inert, "md": assert_markdown_inert, "json": assert_json_valid, "html": assert_html_inert}[fmt](
        out
    )


# --- the CLI: a file name that is not UTF-8, stdout, -o, stderr ------------------------------------------


@pytest.mark.parametrize("fmt", ["text", "md", "json", "html"])
def test_cli_renders_a_hostile_file_name_in_every_format(tmp_path, fmt):
    path = write_hostile(tmp_path, FILE_NAME)
    r = CliRunner().invoke(cli, ["analyze", str(path), "--format", fmt])
    assert r.exit_code == 0, r.output
    out_file = tmp_path / f"report.{fmt}"
    r2 = CliRunner().invoke(cli, ["analyze", str(path), "--format", fmt, "-o", str(out_file)])
    assert r2.exit_code == 0, r2.output
    for out in (r.stdout, out_file.read_text(encoding="utf-8")):
        assert shows_file_name(fmt, out)
        {"text": assert_text_inert, "md": assert_markdown_inert, "json": assert_json_valid, "html": assert_html_inert}[
            fmt
        ](out)


def test_cli_error_names_a_hostile_file_without_replaying_it(tmp_path):
    missing = str(tmp_path / FILE_NAME)
    r = CliRunner().invoke(cli, ["analyze", missing])
    assert r.exit_code == 3, r.output
    assert not CONTROL.search(r.stderr.replace("\n", " ")), repr(r.stderr)
    assert "\\xff\\xfe|`<img src=x>`\\x1b]0;pwn\\x07\\x1b[2J\\r" in r.stderr


@pytest.mark.parametrize("env", [{"PYTHONIOENCODING": "utf-8"}, {"PYTHONIOENCODING": "ascii"}], ids=["utf8", "ascii"])
def test_real_process_with_non_utf8_argv(tmp_path, env):
    """Real argv bytes and a real stdout: the exit-5 crash of the audit (non-UTF-8 name, --format md).
    With an ASCII stdout, click writes UTF-8 anyway; what matters is that nothing raises."""
    write_hostile(tmp_path, FILE_NAME)
    raw = os.fsencode(str(tmp_path / FILE_NAME))
    for fmt in ("md", "text"):
        p = subprocess.run(
            [sys.executable, "-m", "traceinspect", "analyze", raw, "--format", fmt, "--no-cache"],
            capture_output=True,
            env={**os.environ, **env, "PYTHONPATH": str(REPO)},
            timeout=120,
        )
        assert p.returncode == 0, p.stderr.decode(errors="replace")
        out = p.stdout.decode("utf-8")
        assert shows_file_name(fmt, out) and not CONTROL.search(out)


# --- make it hard to forget ----------------------------------------------------------------------------

SAFE_MD_CALLS = {
    "md_text",
    "md_code",
    "ms",
    "pct",
    "count",
    "lost",
    "per_step",
    "_signed",
    "_opt",
    "_ms",
    "_pct",
    "_spans",
    "_summary",
    "_item",
}


def _markdown_functions():
    yield REPO / "traceinspect/render/markdown.py", "render"
    yield REPO / "traceinspect/render/markdown.py", "blocks"
    yield REPO / "traceinspect/render/diff.py", "render_md"
    yield REPO / "traceinspect/tensorboard.py", "summary_markdown"


@pytest.mark.parametrize("path,func", list(_markdown_functions()), ids=lambda x: getattr(x, "name", x))
def test_markdown_renderers_interpolate_only_through_the_helpers(path, func):
    """Each {value} in a Markdown f-string is a helper call, a loop counter, or a choice of literals."""
    tree = ast.parse(path.read_text())
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == func)

    def safe(e) -> bool:
        if isinstance(e, ast.Call):
            f = e.func
            if isinstance(f, ast.Name):
                return f.id in SAFE_MD_CALLS
            # ", ".join(md_code(n) for n in ...)
            return (
                isinstance(f, ast.Attribute)
                and f.attr == "join"
                and isinstance(f.value, ast.Constant)
                and len(e.args) == 1
                and isinstance(e.args[0], ast.GeneratorExp)
                and safe(e.args[0].elt)
            )
        if isinstance(e, ast.IfExp):
            return safe(e.body) and safe(e.orelse)
        if isinstance(e, ast.JoinedStr):
            return all(safe(v.value) for v in e.values if isinstance(v, ast.FormattedValue))
        if isinstance(e, ast.Constant):
            return True
        return False

    bad = [
        ast.unparse(v.value)
        for node in ast.walk(fn)
        if isinstance(node, ast.JoinedStr)
        for v in node.values
        if isinstance(v, ast.FormattedValue) and not safe(v.value)
    ]
    assert not bad, f"{path.name}:{func} interpolates without md_text/md_code/ms/pct/count: {bad}"


def test_inert_is_a_leaf_module():
    """errors.py (the lowest layer) imports inert.py: it must import nothing from the package."""
    tree = ast.parse((REPO / "traceinspect/inert.py").read_text())
    imports = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert not [
        ast.unparse(n)
        for n in imports
        if isinstance(n, ast.ImportFrom) and (n.level or (n.module or "").startswith("traceinspect"))
    ]
