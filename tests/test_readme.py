"""The README shows what the tool prints: its example report is the output of `traceinspect analyze` on the
trace it names (a public PyTorch profiler sample, in ../shared/traces where present), line for line up to
its "...", and every step time its prose quotes is one the tool prints for that trace or its after-run."""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from traceinspect.cli import cli

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
BEFORE = "pytorch__kineto/tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
AFTER = "pytorch__kineto/tb_plugin/samples/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz"


def _example() -> tuple[str, list[str], str]:
    """The trace file named in the example block, the block's lines after the command up to "...",
    and the prose above the block."""
    head, _, rest = README.partition("## Example report")
    block = re.search(r"```text\n\$ traceinspect analyze (\S+)\n(.*?)```", rest, re.S)
    assert block, "README: no example block under '## Example report'"
    lines = block.group(2).splitlines()
    if lines and lines[-1].strip() == "...":
        lines = lines[:-1]
    return block.group(1), lines, rest[: block.start()]


def _analyze(path: Path) -> str:
    r = CliRunner().invoke(cli, ["analyze", str(path), "--no-cache"])
    assert r.exit_code == 0, r.output
    return r.output


def test_example_report_is_the_tools_output(shared_dir):
    name, lines, _ = _example()
    trace = shared_dir / BEFORE
    assert trace.name == name
    out = _analyze(trace).splitlines()
    assert len(lines) > 20
    for i, line in enumerate(lines):
        assert out[i].rstrip() == line.rstrip(), (
            f"README example line {i + 1} differs:\n  README: {line!r}\n  tool:   {out[i]!r}"
        )


def test_example_prose_numbers_are_printed(shared_dir):
    _, lines, prose = _example()
    before = _analyze(shared_dir / BEFORE)
    after = _analyze(shared_dir / AFTER)
    quoted = re.findall(r"(\d+\.\d) ms", prose)
    assert quoted, "the prose quotes no step time"
    for q in quoted:
        assert f"{q} ms" in before or f"median {q} ms" in after, (
            f"README prose quotes {q} ms, which the tool does not print"
        )


def test_shipped_sample_command_works():
    """The README's first command: the shipped sample analyses, and is the DataLoader stall it is named for."""
    assert "traceinspect analyze sample_traces/synthetic_dataloader_stall.pt.trace.json.gz" in README
    out = _analyze(ROOT / "sample_traces" / "synthetic_dataloader_stall.pt.trace.json.gz")
    assert "1. dataloader-stall (TI104)" in out


def test_extras_are_installed_from_the_checkout_everywhere():
    """traceinspect is not on a package index: `pip install 'traceinspect[X]'` would fetch another
    project or nothing, so every install line for an extra uses the checkout form (`-e ".[X]"`)."""
    files = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "traceinspect").rglob("*.py")]
    bad = [
        f"{p.relative_to(ROOT)}: {line.strip()}"
        for p in files
        for line in p.read_text(encoding="utf-8").splitlines()
        if re.search(r"pip install\s+['\"]?traceinspect\[", line)
    ]
    assert not bad, bad
