"""The view model (render/view.py): report text reaches the blocks as T or C, never as the builder's own
words, and each format prints every kind of block with its own escaping."""

from __future__ import annotations


import msgspec
import pytest

from test_injection import PAYLOAD, hostile_report, poisoned  # noqa: F401 (hostile_report: a fixture)
from traceinspect.findings import Failure
from traceinspect.render import html, markdown, text, view
from traceinspect.render.view import C, Chart, Evidence, Figures, Item, Items, KeyValue, Para, Section, Sub, T, Table
from traceinspect.sections import (
    CrossRank,
    Efficiency,
    RankAlignment,
    RankSummary,
    Rediagnosed,
    ShapeRow,
    TimelineSample,
)


def _pieces(sec: Section):
    yield from sec.title
    yield from _block_pieces(sec.blocks)


def _block_pieces(blocks):
    for b in blocks:
        if isinstance(b, Sub):
            yield from b.title
            yield from _block_pieces(b.blocks)
        elif isinstance(b, Chart):
            yield from _block_pieces((b.fallback,) if b.fallback is not None else ())
        elif isinstance(b, (Evidence, Figures)):
            for row in b.rows if isinstance(b, Evidence) else b.items:
                for spans in row:
                    yield from spans
        elif isinstance(b, Para):
            yield from b.spans
        elif isinstance(b, KeyValue):
            for k, v in b.rows:
                yield from k
                yield from v
        elif isinstance(b, Table):
            yield from b.head
            for r in b.rows:
                for c in r.cells:
                    yield from c
        else:
            for it in b.items:
                yield from it.head
                yield from it.more


def test_report_text_is_carried_as_untrusted(hostile_report):  # noqa: F811
    """Every string of the report starts with a hostile payload: none may reach a bare str (the builder's
    trusted words), and each section must carry some (or the check would pass on an empty view)."""
    f0 = hostile_report.findings[0]
    rep = msgspec.structs.replace(
        hostile_report,
        failures=[Failure(code="TI999", name="a-detector", error="it crashed")],
        warnings=["a warning"],
        verdict=msgspec.structs.replace(
            hostile_report.verdict,
            rediagnosed=[
                Rediagnosed(
                    fix=f0.name,
                    present="below threshold",
                    reason=f0.title,
                    after=["host-bound"],
                    from_us=10.0,
                    to_us=9.0,
                    saved_per_step_us=1.0,
                    share_of_predicted=0.1,
                )
            ],
        ),
        ranks=[
            RankSummary(
                rank=r,
                file=f"rank{r}.json",
                median_step_us=1e3,
                mean_step_us=1e3,
                steps=3,
                slowest=r == 1,
                gpu_busy_frac=None,
                top_finding="host-bound",
            )
            for r in (0, 1)
        ],
        cross_rank=CrossRank(
            matched=3,
            ranks=[0, 1],
            steps=3,
            clock="one clock",
            clock_tolerance_us=1.0,
            straggler=1,
            collectives=[],
            max_arrival_skew_us=1.0,
            gating_rank=1,
            per_rank=[
                RankAlignment(**dict.fromkeys(RankAlignment.__struct_fields__, 0.0) | dict(rank=r, last_arrivals=r))
                for r in (0, 1)
            ],
            notes=["a note"],
        ),
        efficiency=Efficiency(
            peaks=None,
            modelled_frac=0.5,
            rows_total=1,
            kernel_us_per_step=10.0,
            rows=[
                ShapeRow(
                    **dict.fromkeys(ShapeRow.__struct_fields__)
                    | dict(op="aten::mm", family="gemm", shape="[2x2]", dtype="fp32", dims={}, kernel="k", note="")
                    | dict(bound="memory", gpu_us_per_step=5.0, calls_per_step=1.0, us_per_call=5.0)
                )
            ],
        ),
    )
    rep = poisoned(rep, numbers=False)  # (drops the timeline sample: one with a hostile choice is put back)
    sample = TimelineSample(
        intervals={"compute": [[0.0, 1.0]]},
        step=1,
        index=0,
        start_us=0.0,
        dur_us=1.0,
        device=0,
        dropped=0,
        resolution_us=1.0,
        choice=PAYLOAD + " step",
    )
    rep = msgspec.structs.replace(rep, timeline_sample=sample)
    built = {name: build(rep) for name, build in view.BUILDERS.items()}
    assert all(built.values()), [n for n, s in built.items() if s is None]
    for name, sec in built.items():
        pieces = list(_pieces(sec))
        bare = [p for p in pieces if type(p) is str and PAYLOAD in p]
        assert not bare, (name, bare)
        assert any(isinstance(p, T) and PAYLOAD in p for p in pieces), name


SAMPLE = Section(
    "sample",
    ("Title ", T("<t>")),
    (
        Para(("say ", T("<p>*x*"), " ", C("a`b")), note=True),
        KeyValue((((T("<k>"),), (T("<v>|"),)),)),
        Items((Item((C("<n>"), ": ", T("<h>")), ("so: ", T("<m>"))), Item((T("- <o>"),)))),
    ),
)


def test_each_format_escapes_every_block_in_one_place():
    t = "\n".join(text.blocks([SAMPLE], 100))
    assert t.splitlines()[0] == "Title <t>" and "  - <k>: <v>|" in t and "    so: <m>" in t
    md = "\n".join(markdown.blocks([SAMPLE]))
    assert "### Title &lt;t&gt;" in md and "``a`b``" in md and "\\*x\\*" in md and "`<n>`" in md
    assert "- &lt;k&gt;: &lt;v&gt;\\|" in md and "  so: &lt;m&gt;" in md
    h = "\n".join(html.blocks([SAMPLE]))
    assert '<section id="sample"><h2>Title &lt;t&gt;</h2>' in h and '<p class="note">say &lt;p&gt;*x*' in h
    assert "<code>&lt;n&gt;</code>: &lt;h&gt;<br>so: &lt;m&gt;</li>" in h and h.endswith("</ul></section>")
    for out in (t, md, h):
        assert "<t>" not in out or out is t  # raw markup only in text, where it is inert


@pytest.mark.parametrize("fmt", ["text", "md", "html"])
def test_a_section_is_written_once_for_every_format(fmt):
    """The formats print the view's sections: a section's title reaches each format from one builder."""
    from types import SimpleNamespace

    rep = SimpleNamespace(warnings=["w1"], failures=[], skipped=[])
    sec = view.sections(rep, ["warnings", "failures"])
    out = {"text": lambda: "\n".join(text.blocks(sec, 100)), "md": lambda: "\n".join(markdown.blocks(sec))}
    out["html"] = lambda: "\n".join(html.blocks(sec))
    assert len(sec) == 1 and "Data-quality warnings" in out[fmt]() and "w1" in out[fmt]()
