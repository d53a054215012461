"""The efficiency model (FLOPs and bytes per op family), the peak table, the per-shape table, the
far-from-roofline detector, and their comparison with the numbers of issue 19 on the real traces."""

from __future__ import annotations

import gzip
import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

import builders_roofline as br
from builders import build_healthy
from traceinspect.analyze import analyze
from traceinspect.cli import cli
from traceinspect.facts import efficiency as E
from traceinspect.detectors.base import Context
from traceinspect.detectors.far_from_roofline import FarFromRoofline
from traceinspect.errors import UsageError
from traceinspect.render import RENDERERS
from traceinspect.report import Report
from traceinspect.trace import hardware as hw
from traceinspect.trace import roofline as rl
from traceinspect.trace.model import load_trace

BF, F32 = "c10::BFloat16", "float"


def W(op, dims, types, conv_out=None):
    return rl.op_work(op, dims, types, conv_out)


# --- FLOPs and bytes, by hand ------------------------------------------------------------------------


def test_mm_addmm_linear_matmul():
    w = W("aten::mm", [[128, 64], [64, 32]], [BF, BF])
    assert (w.family, w.dims) == (rl.GEMM, {"M": 128, "N": 32, "K": 64})
    assert w.flops == 2 * 128 * 32 * 64
    assert w.bytes == 2 * (128 * 64 + 64 * 32 + 128 * 32)  # A read, B read, C written, bf16
    w = W("aten::addmm", [[32], [128, 64], [64, 32], [], []], [F32, F32, F32, "Scalar", "Scalar"])
    assert w.flops == 2 * 128 * 32 * 64 and w.dtype == "fp32"
    assert w.bytes == 4 * (128 * 64 + 64 * 32 + 128 * 32 + 32)  # + the bias, fp32
    w = W("aten::linear", [[4, 10, 64], [32, 64], [32]], [BF, BF, BF])  # weight [N, K]; batch folds into M
    assert w.dims == {"M": 40, "N": 32, "K": 64} and w.flops == 2 * 40 * 32 * 64
    assert w.bytes == 2 * (40 * 64 + 64 * 32 + 40 * 32 + 32)
    w = W("aten::matmul", [[4, 10, 64], [64, 32]], [BF, BF])
    assert w.dims == {"M": 40, "N": 32, "K": 64}
    w = W("aten::matmul", [[4, 10, 64], [4, 64, 32]], [BF, BF])
    assert w.family == rl.BMM and w.dims == {"B": 4, "M": 10, "N": 32, "K": 64}


def test_bmm_and_baddbmm():
    w = W("aten::bmm", [[37632, 8, 64], [37632, 64, 8]], [BF, BF])
    assert w.dims == {"B": 37632, "M": 8, "N": 8, "K": 64}
    assert w.flops == 2 * 37632 * 8 * 8 * 64
    assert w.bytes == 2 * 37632 * (8 * 64 + 64 * 8 + 8 * 8)
    w = W("aten::baddbmm", [[6, 5, 7], [6, 5, 3], [6, 3, 7], [], []], [BF, BF, BF, "Scalar", "Scalar"])
    assert w.flops == 2 * 6 * 5 * 7 * 3 and w.bytes == 2 * (6 * (5 * 3 + 3 * 7 + 5 * 7) + 6 * 5 * 7)


def test_convolution_forward_takes_its_output_size_from_the_backward_call():
    x, wt, go = [32, 64, 56, 56], [128, 64, 3, 3], [32, 128, 28, 28]  # stride 2
    out = rl.conv_geometry(["aten::convolution_backward"], [[go, x, wt, [], [], []]])
    assert out["go"] == {(tuple(x), tuple(wt)): (28, 28)}
    w = W("aten::cudnn_convolution", [x, wt, [], [], []], [BF, BF, "ScalarList", "ScalarList", "ScalarList"], out)
    # every output element (32 x 128 x 28 x 28) is a dot product of C/g x R x S = 64 x 3 x 3 terms
    assert w.flops == 2 * 32 * 128 * 28 * 28 * 64 * 9
    assert w.bytes == 2 * (32 * 64 * 56 * 56 + 128 * 64 * 9 + 32 * 128 * 28 * 28)
    bwd = W("aten::convolution_backward", [go, x, wt, []], [BF, BF, BF, "ScalarList"])
    assert bwd.flops == 2 * w.flops  # grad_input + grad_weight
    assert bwd.bytes == 2 * w.bytes
    # grouped (depthwise): weight [K, C/g, R, S] with g = 64
    dw = W("aten::convolution_backward", [[8, 64, 10, 10], [8, 64, 10, 10], [64, 1, 3, 3]], [BF, BF, BF])
    assert dw.dims["groups"] == 64 and dw.flops == 2 * (2 * 8 * 64 * 100 * 1 * 9)


def test_convolution_without_a_backward_call_has_no_flops():
    w = W("aten::miopen_convolution", [[1, 3, 224, 224], [768, 3, 16, 16]], [BF, BF])
    assert math.isnan(w.flops) and "output size unknown" in w.note


def test_attention_forward_and_backward():
    b, h, l, d = 2, 4, 128, 64
    q = [b, h, l, d]
    w = W("aten::_scaled_dot_product_flash_attention", [q, q, q, [], []], [BF, BF, BF, "Scalar", "Scalar"])
    assert w.flops == 4 * b * h * l * l * d  # Q K^T and P V, 2 FLOP per MAC
    assert w.bytes == 2 * 4 * b * h * l * d  # q, k, v read, out written
    fa = W("aten::_flash_attention_forward", [[b, l, h, d]] * 3, [BF] * 3)  # flash-attn layout [B, L, H, D]
    assert fa.flops == w.flops and fa.dims == {"B": b, "H": h, "Lq": l, "Lk": l, "D": d}
    bw = W("aten::_scaled_dot_product_flash_attention_backward", [q] * 5, [BF] * 5)
    assert bw.flops == 2.5 * w.flops
    assert bw.bytes == 2 * (2 * 4 + 1) * b * h * l * d  # q k v out dO read, dq dk dv written


def test_elementwise_normalisation_reduction():
    n = 16 * 1024
    add = W("aten::add", [[16, 1024], [16, 1024], []], [BF, BF, "Scalar"])
    assert (add.family, add.flops, add.bytes) == (rl.ELEMENTWISE, n, 3 * 2 * n)  # 2 reads + 1 write
    bias = W("aten::add", [[16, 1024], [1024], []], [BF, BF, "Scalar"])  # broadcast
    assert bias.bytes == 2 * (n + 1024 + n)
    cp = W("aten::copy_", [[16, 1024], [16, 1024], []], [BF, F32, "Scalar"])  # fp32 -> bf16 cast
    assert cp.flops == 0 and cp.bytes == 2 * n + 4 * n
    assert W("aten::fill_", [[16, 1024], []], [F32, "Scalar"]).bytes == 4 * n
    ln = W("aten::native_layer_norm", [[16, 1024], [], [1024], [1024], []], [BF, "ScalarList", BF, BF, "Scalar"])
    assert ln.family == rl.NORM and ln.bytes == 2 * 2 * n + 2 * 2 * 1024  # x read, y written, w, b
    lnb = W(
        "aten::native_layer_norm_backward",
        [[16, 1024], [16, 1024], [], [16, 1], [16, 1]],
        [BF, BF, "ScalarList", F32, F32],
    )
    assert lnb.bytes == 3 * 2 * n + 2 * 4 * 16  # dy, x read, dx written
    s = W("aten::sum", [[16, 1024], [], []], [F32, "ScalarList", "Scalar"])
    assert (s.family, s.flops, s.bytes) == (rl.REDUCTION, n, 4 * n)


@pytest.mark.parametrize(
    "op,dims,types",
    [
        ("aten::mm", [[128, 64], [63, 32]], [BF, BF]),  # K mismatch
        ("aten::mm", [[128, -64], [-64, 32]], [BF, BF]),  # negative
        ("aten::mm", [[True, 64], [64, 32]], [BF, BF]),  # bool is not a size
        ("aten::mm", [[128, 64.0], [64, 32]], [BF, BF]),
        ("aten::mm", [[128, 64]], [BF]),
        ("aten::mm", {"a": 1}, [BF, BF]),
        ("aten::mm", [[128, 64], [64, 32]], "c10::BFloat16"),
        ("aten::mm", [[128, 64], [64, 32]], ["<script>", BF]),  # unknown dtype: not a tensor
        ("aten::bmm", [[2, 8, 64], [3, 64, 8]], [BF, BF]),  # batch mismatch
        ("aten::bmm", [[2, 8, 1 << 41], [2, 1 << 41, 8]], [BF, BF]),  # absurd size
        ("aten::convolution_backward", [[1, 2, 3], [1, 2], [1, 2, 3]], [BF, BF, BF]),
        ("aten::_scaled_dot_product_flash_attention", [[1, 2, 3], [1, 2, 3], [1, 2, 3]], [BF] * 3),
        ("aten::add", [[[1, 2]], [3]], ["TensorList", BF]),
        ("aten::unknown_op", [[2, 2]], [BF]),
        ("aten::mm", None, None),
    ],
)
def test_hostile_or_unmodelled_shapes_give_no_model(op, dims, types):
    w = W(op, dims, types)
    assert w is None or not (w.flops > 0)


# --- the peak table ------------------------------------------------------------------------------


def test_every_known_gpu_has_a_source_and_dense_peaks():
    names = {p.name for _, p in hw.KNOWN}
    for want in ("V100", "A100", "H100 SXM", "H200 SXM", "B200", "MI210", "MI250X", "MI300X", "MI325X"):
        assert want in names
    for _, p in hw.KNOWN:
        assert p.source and p.half_tflops > p.fp32_tflops > 0 and p.mem_gbps > 0
    h100 = hw.peaks_for("NVIDIA H100 80GB HBM3", 9)
    assert h100.matrix_tflops("bf16") == 989.4 and h100.matrix_tflops("fp8") == 1978.9
    assert h100.matrix_tflops("fp32") == 67 and h100.matrix_tflops("fp32", "tf32") == 494.7
    v100 = hw.peaks_for("Tesla V100-SXM2-32GB", 7)
    assert v100.matrix_tflops("bf16") == v100.fp32_tflops  # no bf16 tensor cores
    assert v100.matrix_tflops("fp16") == 125
    assert hw.peaks_for("NVIDIA A100-SXM4-40GB", 8).mem_gbps == 1555
    assert hw.peaks_for("AMD Instinct MI300X VF", None).name == "MI300X"


def test_hardware_override_file(tmp_path, monkeypatch):
    f = tmp_path / "hw.json"
    f.write_text(
        json.dumps(
            [
                {
                    "match": "RTX 6000 Ada",
                    "name": "RTX 6000 Ada",
                    "fp32_tflops": 91.1,
                    "half_tflops": 364.2,
                    "mem_gbps": 960,
                },
                {"match": "h100", "mem_gbps": 3000},
            ]
        )
    )
    monkeypatch.setenv(hw.HARDWARE_ENV, str(f))
    p = hw.peaks_for("NVIDIA RTX 6000 Ada Generation", 8)
    assert (p.name, p.half_tflops, p.mem_gbps, p.approximate) == ("RTX 6000 Ada", 364.2, 960, False)
    assert "hw.json" in p.source
    h = hw.peaks_for("NVIDIA H100 80GB HBM3", 9)
    assert h.mem_gbps == 3000 and h.half_tflops == 989.4  # the rest from the built-in row


@pytest.mark.parametrize(
    "content,what",
    [
        ("{not json", "not a JSON file"),
        ('{"match": "x"}', "expected a JSON list"),
        ('[{"name": "x"}]', "'match'"),
        ('[{"match": "zz9000", "fp32_tflops": 1}]', "'half_tflops' is required"),
        ('[{"match": "h100", "mem_gbps": -1}]', "'mem_gbps' must be a number"),
        ('[{"match": "h100", "mem_gbps": "fast"}]', "'mem_gbps' must be a number"),
        ('[{"match": "h100", "bf16": "yes"}]', "'bf16' must be true or false"),
    ],
)
def test_bad_override_file_is_a_usage_error_naming_the_file(tmp_path, monkeypatch, content, what):
    f = tmp_path / "hw.json"
    f.write_text(content)
    monkeypatch.setenv(hw.HARDWARE_ENV, str(f))
    with pytest.raises(UsageError) as e:
        hw.peaks_for("NVIDIA H100", 9)
    assert str(f) in str(e.value) and what in str(e.value) and e.value.hint


def test_bad_override_file_through_the_cli_exits_2(tmp_path, monkeypatch):
    trace = br.build_big_gemm().write(tmp_path / "t.json")
    monkeypatch.setenv(hw.HARDWARE_ENV, str(tmp_path / "missing.json"))
    r = CliRunner().invoke(cli, ["analyze", str(trace)])
    assert r.exit_code == 2 and "missing.json" in r.output and "Traceback" not in r.output


# --- the per-shape table on builders -------------------------------------------------------------


def _load(builder, tmp_path, name="t.json"):
    return load_trace(builder.write(tmp_path / name))


def test_table_rows_of_the_tiny_bmm_builder(tmp_path):
    t = _load(br.build_tiny_bmm(), tmp_path)  # MI300X: 1307.4 TFLOP/s bf16, 5.3 TB/s
    rows = {r.op: r for r in E.shape_table(t)}
    r = rows["aten::bmm"]
    flops = 2 * br.TB_B * br.TB_M * br.TB_N * br.TB_K
    byts = 2 * br.TB_B * (br.TB_M * br.TB_K + br.TB_K * br.TB_N + br.TB_M * br.TB_N)
    assert r.calls_per_step == br.LAYERS and r.gpu_us_per_step == pytest.approx(br.LAYERS * br.TINY_BMM_US)
    assert r.tflops == pytest.approx(flops / br.TINY_BMM_US / 1e6)  # FLOP/us / 1e6 = TFLOP/s: 0.27
    assert r.tbps == pytest.approx(byts / br.TINY_BMM_US / 1e6)
    assert r.intensity == pytest.approx(flops / byts) and r.bound == "memory"  # 3.8 FLOP/B < 1307.4/5.3
    roof_us = byts / 5.3e6  # at 5.3 TB/s = 5.3e6 B/us
    assert r.share_of_peak == pytest.approx(roof_us / br.TINY_BMM_US)  # 1.4%
    g = rows["aten::addmm"]
    gflops = 2 * br.MM_M * br.MM_N * br.MM_K
    assert g.bound == "compute" and g.share_of_peak == pytest.approx(gflops / 1307.4e6 / br.BIG_GEMM_US)
    cov = E.coverage(t)
    assert cov["modelled_frac"] == pytest.approx(1.0)


def test_table_leaves_out_unmodelled_ops_and_reports_coverage(tmp_path):
    t = _load(build_healthy(), tmp_path)  # aten::add has no shapes in this builder: not modelled
    ops = {r.op for r in E.shape_table(t)}
    assert ops == {"aten::linear", "aten::scaled_dot_product_attention"}
    # per layer: linear 800 us + attention 600 us modelled, add 100 us not
    assert E.coverage(t)["modelled_frac"] == pytest.approx(1400 / 1500)


# --- the detector ----------------------------------------------------------------------------------


def _findings(t):
    return [f for f in FarFromRoofline().detect(t, Context.of(t)) if hasattr(f, "time_lost_us")]


def test_fires_on_the_tiny_bmm_with_the_time_at_half_the_roofline(tmp_path):
    t = _load(br.build_tiny_bmm(), tmp_path)
    (f,) = _findings(t)
    byts = 2 * br.TB_B * (br.TB_M * br.TB_K + br.TB_K * br.TB_N + br.TB_M * br.TB_N)
    target = byts / 5.3e6 / 0.5  # us per call at 50% of the roofline
    assert f.time_lost_per_step_us == pytest.approx(br.LAYERS * (br.TINY_BMM_US - target))
    assert f.confidence == "medium"
    assert "tiny matrices" in f.title and "M=8, N=8" in f.title
    assert any("batch of 37,632" in str(e.value) for e in f.evidence)
    assert "fold" in f.fix.lower() or "batch folds into M" in f.fix


def test_silent_on_well_shaped_gemms_and_skips_without_shapes(tmp_path):
    assert _findings(_load(br.build_big_gemm(), tmp_path)) == []
    b = br.build_tiny_bmm()
    for e in b.events:
        e.get("args", {}).pop("Input Dims", None)
    b.meta["record_shapes"] = 0
    t = _load(b, tmp_path, "noshapes.json")
    out = list(FarFromRoofline().detect(t, Context.of(t)))
    assert len(out) == 1 and "record_shapes" in out[0].reason


def test_degenerate_shape_reasons():
    from traceinspect.detectors.far_from_roofline import shape_issues

    row = lambda fam, dims, dt="bf16": E.ShapeRow(  # noqa: E731
        op="x",
        family=fam,
        shape="",
        dtype=dt,
        dims=dims,
        calls_per_step=1,
        gpu_us_per_step=1,
        us_per_call=1,
        gflops_per_call=1,
        mbytes_per_call=1,
        tflops=1,
        tbps=1,
        intensity=1,
        peak_tflops=1,
        peak_tbps=1,
        bound="compute",
        share_of_peak=0.01,
        roofline_us_per_step=0.01,
        kernel="",
        note="",
    )
    assert shape_issues(row(rl.GEMM, {"M": 4096, "N": 4096, "K": 3137})) == ["K=3137 not a multiple of 8"]
    assert shape_issues(row(rl.GEMM, {"M": 4096, "N": 4096, "K": 3137}, "fp32")) == ["K=3137 not a multiple of 4"]
    assert shape_issues(row(rl.GEMM, {"M": 4096, "N": 4096, "K": 4096})) == []
    assert shape_issues(row(rl.CONV, {"C": 3, "K": 64})) == ["C=3 channels: not a multiple of 8"]
    # 1 x 8 heads x ceil(141 / 128) = 16 output tiles for the MI300X's 304 CUs
    few = shape_issues(row(rl.ATTENTION, {"B": 1, "H": 8, "Lq": 141, "Lk": 141, "D": 64}), 304)
    assert few == [
        "only 16 output tiles of 128 rows for 304 SMs/CUs (too little work per call: a larger batch fills the GPU)"
    ]
    assert shape_issues(row(rl.GEMM, {"M": 4096, "N": 4096, "K": 4096}), 132) == []  # 32 x 32 tiles


# --- the report field and its rendering ------------------------------------------------------------


def test_report_field_round_trips_and_renders(tmp_path):
    rep = analyze(_load(br.build_tiny_bmm(), tmp_path))
    d = rep.to_dict()
    assert d["efficiency"]["peaks"]["name"] == "MI300X" and d["efficiency"]["rows"][0]["op"] == "aten::bmm"
    again = Report.from_dict(json.loads(json.dumps(d)))
    assert again.efficiency.to_dict() == d["efficiency"]
    for fmt in ("text", "md", "html"):
        out = RENDERERS[fmt][0](again)
        assert "roofline" in out and "37632x8x64" in out
    old = dict(d)
    del old["efficiency"]  # a report saved before the field
    assert "efficiency" not in Report.from_dict(old).to_dict()
    for junk in (
        [],
        {"rows": "x"},
        {"rows": [1, None, {"op": 5, "share_of_peak": "NaN"}]},
        {"peaks": "x"},
        {"rows": [{"share_of_peak": 0.5}]},
        {"peaks": {"fp32_tflops": 1.0}},
    ):  # a row without op, peaks without name
        with pytest.raises(ValueError, match=r"\$\.efficiency"):  # refused on read, naming the key
            Report.from_dict({**d, "efficiency": junk})
    for absent in (None, {}):  # absent: no section, rendered without one
        r = Report.from_dict({**d, "efficiency": absent})
        assert "efficiency" not in r.to_dict()
        for fmt in ("text", "md", "html", "json"):
            RENDERERS[fmt][0](r)


# --- the real traces: issue 19's numbers -----------------------------------------------------------

TL = "AMD-AGI__TraceLens/tests/traces"


def _rows(shared_dir, rel):
    t = load_trace(shared_dir / rel)
    return t, E.shape_table(t)


def _find(rows, op, shape):
    return next(r for r in rows if r.op == op and r.shape == shape)


def test_timesformer_h100_attention_matmuls_vs_the_rest(shared_dir):
    t, rows = _rows(shared_dir, f"{TL}/h100/facebook_timesformer-base-finetuned-k400__1016002.json.gz")
    # issue 19 (TraceLens side by side): attention matmuls at 64-71 TFLOP/s, other matmuls at 705-746
    att = [
        _find(rows, "aten::bmm", "[96x3137x64], [96x64x3137]"),
        _find(rows, "aten::bmm", "[96x3137x3137], [96x3137x64]"),
    ]
    assert sorted(round(r.tflops) for r in att) == [pytest.approx(64, rel=0.1), pytest.approx(71, rel=0.1)]
    big = [r for r in rows if r.op == "aten::addmm" and r.dims["M"] > 25000 and r.dims["N"] > 768]
    assert big and all(705 * 0.9 <= r.tflops <= 746 * 1.1 for r in big)
    tiny = _find(rows, "aten::bmm", "[37632x8x64], [37632x64x8]")
    assert tiny.gpu_us_per_step == pytest.approx(490, rel=0.1)  # "the same shape takes 0.49 ms on the H100"


def test_timesformer_mi300x_tiny_bmm_and_the_detector(shared_dir):
    t, rows = _rows(shared_dir, f"{TL}/mi300/facebook_timesformer-base-finetuned-k400__1016002.json.gz")
    tiny = _find(rows, "aten::bmm", "[37632x8x64], [37632x64x8]")
    # issue 19: 13.7 ms per step at 0.27 TFLOP/s, 1.4% of peak
    assert tiny.gpu_us_per_step == pytest.approx(13_700, rel=0.1)
    assert tiny.tflops == pytest.approx(0.27, rel=0.1) and tiny.share_of_peak == pytest.approx(0.014, rel=0.1)
    (f,) = _findings(t)
    assert "[37632x8x64], [37632x64x8]" in f.title and f.confidence == "medium"


def test_ddp_resnet18_mi300x_convolutions_have_rows(shared_dir):
    t, rows = _rows(shared_dir, f"{TL}/mi300/ddp_resnet18_no_pool/train_resnet18.json.gz")
    conv = [r for r in rows if r.family == rl.CONV and r.dtype == "bf16"]
    # forward convolutions get their output size from the backward call of the same shapes: all modelled
    assert conv and all(r.share_of_peak is not None for r in conv)
    fwd = [r for r in conv if r.op == "aten::miopen_convolution"]
    assert fwd and all(r.tflops / r.peak_tflops < 0.3 for r in fwd)  # far below the bf16 matrix peak


def test_silent_on_the_healthy_qwen_h100_trace(shared_dir):
    t = load_trace(shared_dir / f"{TL}/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
    assert _findings(t) == []


# --- pageable-memcpy on the num_workers=4 trace, from raw events -----------------------------------

SYNC_CALLS = {
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cudaEventSynchronize",
    "cudaMemcpy",
    "cudaMemcpy2D",
    "cudaMemset",
}


def _minus(pieces, windows):
    """Interval pieces minus a list of windows (plain Python: a handful of each)."""
    for ws, we in windows:
        out = []
        for s, e in pieces:
            if we <= s or ws >= e:
                out.append((s, e))
                continue
            if s < ws:
                out.append((s, ws))
            if we < e:
                out.append((we, e))
        pieces = out
    return pieces


def _raw_blocked_idle(path) -> tuple[float, int]:
    """From the raw events: GPU idle time (no kernel, copy or memset) inside the runtime calls of the
    pageable copies of >= 1 MB, in the ProfilerStep windows, in gaps the host is to blame for: not
    gaps whose next GPU op had been launched before the gap began (queued work), not time in a
    DataLoader __next__ span, not time in a synchronising call or within 100 us after it returns."""
    ev = json.loads(gzip.open(path).read())["traceEvents"]
    x = [e for e in ev if e.get("ph") == "X" and "dur" in e]
    cat = lambda e: str(e.get("cat", "")).lower()  # noqa: E731
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in x if str(e.get("name", "")).startswith("ProfilerStep#"))
    gpu = sorted(
        (e for e in x if cat(e) in ("kernel", "memcpy", "memset", "gpu_memcpy", "gpu_memset")), key=lambda e: e["ts"]
    )
    runtime = {
        e["args"]["correlation"]: e
        for e in x
        if cat(e) in ("runtime", "cuda_runtime") and "correlation" in e.get("args", {})
    }
    sync = [
        (e["ts"], e["ts"] + e["dur"] + 100.0)
        for e in x
        if cat(e) in ("runtime", "cuda_runtime") and e["name"] in SYNC_CALLS
    ]
    loader = [(e["ts"], e["ts"] + e["dur"]) for e in x if str(e.get("name", "")).startswith("enumerate(DataLoader)#")]
    copies = [e for e in gpu if "Pageable" in e["name"] and e["args"].get("bytes", 0) >= 1 << 20]
    calls = [
        (
            runtime[c["args"]["correlation"]]["ts"],
            runtime[c["args"]["correlation"]]["ts"] + runtime[c["args"]["correlation"]]["dur"],
        )
        for c in copies
        if c["args"].get("correlation") in runtime
    ]
    total = 0.0
    for lo, hi in steps:
        gaps, t = [], lo
        for e in gpu:
            s, f = e["ts"], e["ts"] + e["dur"]
            if f <= t or s >= hi:
                continue
            if s > t:
                launched = runtime.get(e["args"].get("correlation"), {}).get("ts", math.inf)
                if launched > t:  # the host was late: not queued work
                    gaps.append((t, s))
            t = max(t, f)
        for s, e in _minus(_minus(gaps, loader), sync):
            total += sum(max(0.0, min(e, ce) - max(s, cs)) for cs, ce in calls)
    return total, len(steps)


@pytest.mark.parametrize(
    "name",
    ["worker0.1623212756351.pt.trace.json.gz", "worker0.1623213129365.pt.trace.json.gz", "worker0.pt.trace.json.gz"],
)
def test_pageable_claim_on_num_workers_4_is_the_blocked_idle_time(shared_dir, name):
    from traceinspect.detectors.pageable_memcpy import PageableMemcpy

    path = shared_dir / "pytorch__kineto/tb_plugin/samples/resnet50_num_workers_4" / name
    idle, n = _raw_blocked_idle(path)
    if name.startswith("worker0.16232127"):
        assert idle / n > 5_000  # issue 19: the GPU idles ~6.3 ms/step there
    t = load_trace(path)
    (f,) = [x for x in PageableMemcpy().detect(t, Context.of(t)) if hasattr(x, "time_lost_us")]
    claimed = next(e for e in f.evidence if e.label.startswith("GPU idle while the host is blocked"))
    assert claimed.value == pytest.approx(idle / n / 1e3, abs=0.01)  # ms/step, two decimals
    bandwidth_part = f.time_lost_per_step_us - idle / n
    exposed = next(e for e in f.evidence if "exposed" in e.label).value * 1e3
    assert 0 < bandwidth_part < exposed  # plus what pinned speed saves on the copy itself
    assert np.isfinite(f.time_lost_us)


def test_roofline_doc_lists_the_peak_table_as_coded():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs/roofline.md").read_text()
    for key, p in hw.KNOWN:
        line = next((ln for ln in doc.splitlines() if ln.startswith(f"| `{key}` | {p.name}")), None)
        assert line is not None, f"docs/roofline.md lacks the {key} row"
        cells = [c.strip() for c in line.split("|")]
        assert cells[5].split()[0] == f"{p.half_tflops:g}" and cells[8] == f"{p.mem_gbps:g}", line
        assert cells[9] == p.source


def test_efficiency_rows_from_a_hostile_saved_report_stay_inert(tmp_path):
    d = analyze(_load(br.build_tiny_bmm(), tmp_path)).to_dict()
    evil = "<script>alert(1)</script> | `x` \x1b]0;t\x07"
    d["efficiency"]["rows"][0].update(op=evil, shape=evil, dtype=evil, bound=evil)
    d["efficiency"]["peaks"].update(name=evil, source="<b>1</b>")
    r = Report.from_dict(d)
    html = RENDERERS["html"][0](r)
    assert "<script>alert(1)</script>" not in html and "<b>1</b>" not in html and "&lt;b&gt;1&lt;/b&gt;" in html
    md = RENDERERS["md"][0](r)
    rows = [ln for ln in md.splitlines() if ln.startswith("| ") and "alert" in ln]
    assert rows and all(ln.count(" | ") == 9 for ln in rows)  # the "|" in the values did not add cells
    assert "\x1b" not in md and "\x1b" not in RENDERERS["text"][0](r)


JUNK = [
    None,
    [],
    {},
    "x",
    -1,
    1e300,
    [[-5, 2]],
    [[2**40, 2**40, 2**40, 2**40]],
    [[1.5, 2]],
    [["a"]],
    [[[[[]]]]],
    [[True, False]],
    [[2, 3], {"k": 1}],
    [[0, 0], [0, 0]],
    [[2**39] * 30, [2**39] * 30],
]
JUNK_TYPES = [
    None,
    [],
    "c10::BFloat16",
    ["TensorList", "TensorList"],
    [BF, 7],
    ["float", None],
    [{}, []],
    ["c10::Float8_e4m3fn", "c10::Float8_e4m3fn"],
    [BF, BF, BF, BF, BF],
]


def test_hostile_shapes_in_a_trace_never_break_the_table_or_the_report(tmp_path):
    import random

    rnd = random.Random(19)
    b = br.build_tiny_bmm()
    ops = [e for e in b.events if e.get("cat") == "cpu_op" and "Input Dims" in e.get("args", {})]
    for i, e in enumerate(ops):
        e["args"]["Input Dims"] = JUNK[i % len(JUNK)] if rnd.random() < 0.8 else e["args"]["Input Dims"]
        e["args"]["Input type"] = JUNK_TYPES[rnd.randrange(len(JUNK_TYPES))]
        if rnd.random() < 0.3:
            e["name"] = rnd.choice(
                [
                    "aten::convolution_backward",
                    "aten::miopen_convolution",
                    "aten::add",
                    "aten::_flash_attention_backward",
                    "aten::native_layer_norm",
                    "aten::matmul",
                ]
            )
    rep = analyze(_load(b, tmp_path))
    assert not rep.failures
    json.dumps(rep.to_dict(), allow_nan=False)  # no NaN or inf reaches the JSON
    for fmt in ("text", "md", "html"):
        RENDERERS[fmt][0](rep)


# --- issue 32 item 6: each GPU shows only the precisions it has, and a rate says what it is the peak of


@pytest.mark.parametrize("gpu", ["V100", "H100", "MI300X"])
def test_peaks_line_names_only_the_precisions_the_gpu_has(tmp_path, gpu):
    from builders import DEVICE_PROPS
    from traceinspect.render.common import efficiency_peaks

    props = DEVICE_PROPS[gpu]
    p = hw.peaks_for(props["name"], props["computeMajor"])
    line = efficiency_peaks(analyze(_load(br.build_big_gemm(gpu), tmp_path)))
    half = "bf16/fp16" if p.bf16 else "fp16"
    assert f"{p.half_tflops:g} {half}," in line and f"{p.fp32_tflops:g} fp32" in line
    assert ("bf16" in line) == p.bf16  # a V100 has fp16 tensor cores and no bf16 ones
    assert ("TF32" in line) == (p.tf32_tflops > 0) and ("fp8" in line) == (p.fp8_tflops > 0)
    assert " 0 " not in line  # no '0 TF32'


@pytest.mark.parametrize("gpu", ["V100", "H100"])
def test_a_row_says_which_unit_its_peak_is_of(tmp_path, gpu):
    props = __import__("builders").DEVICE_PROPS[gpu]
    p = hw.peaks_for(props["name"], props["computeMajor"])
    rows = {r.op: r for r in E.shape_table(_load(br.build_big_gemm(gpu), tmp_path))}
    g = rows["aten::addmm"]  # a bf16 GEMM
    if p.bf16:
        assert g.peak_unit == "bf16 matrix" and g.peak_tflops == p.half_tflops
    else:  # the V100 runs bf16 math without tensor cores: the fp32 rate, said so
        assert g.peak_unit == "fp32 (no bf16 matrix cores)" and g.peak_tflops == p.fp32_tflops
    assert rl.roof_unit(p, rl.ELEMENTWISE, "bf16") == "fp32 vector"
    assert rl.roof(p, rl.ELEMENTWISE, "bf16") == p.vector_tflops()


def test_roofline_evidence_names_the_unit_of_its_peak_on_mi300x(shared_dir):
    # the MI300X resnet_act_checkpoint trace's top slow row is a bf16 elementwise op: its 163.4 TFLOP/s
    # roof is the fp32 vector rate, which the evidence labelled '(bf16)'
    t = load_trace(shared_dir / f"{TL}/mi300/resnet_act_checkpoint.json.gz")
    rows = E.shape_table(t)
    p = t.device.peaks
    for r in rows:
        if r.peak_tflops is None:
            continue
        matrix = r.family in rl.MATRIX_FAMILIES
        assert ("matrix" in r.peak_unit) == (matrix and r.peak_tflops != p.fp32_tflops) or r.peak_unit == "fp32"
        if not matrix:
            assert r.peak_unit == "fp32 vector" and r.peak_tflops == p.vector_tflops()
    (f,) = [f for f in FarFromRoofline().detect(t, Context.of(t)) if hasattr(f, "time_lost_us")]
    (ev,) = [e for e in f.evidence if e.label.startswith("roofline peaks")]
    assert "(bf16)" not in str(ev.value) and ("matrix" in str(ev.value) or "vector" in str(ev.value))


# --- issue 32 item 1: cuDNN's own convolution ops, and advice from the trace's own settings -----------


def _conv_flops(x, w, go) -> float:
    # every output element is a dot product of C/g x R x S terms (here groups = 1)
    return 2.0 * go[0] * go[1] * math.prod(go[2:]) * w[1] * math.prod(w[2:])


def test_cudnn_convolution_and_its_backward_ops_are_modelled(tmp_path):
    t = _load(br.build_cudnn_resnet(), tmp_path)
    rows = {(r.op, r.shape): r for r in E.shape_table(t)}
    for x, w, go in (br.CONV_A, br.CONV_B):  # A: the parent backward op carries the sizes; B: joined
        io = 4 * (math.prod(x) + math.prod(w) + math.prod(go))  # fp32: each pass moves the three once
        fwd = rows[("aten::cudnn_convolution", f"[{rl._fmt(x)}], [{rl._fmt(w)}]")]
        b_in = rows[("aten::cudnn_convolution_backward_input", f"[{rl._fmt(go)}], [{rl._fmt(w)}]")]
        b_wt = rows[("aten::cudnn_convolution_backward_weight", f"[{rl._fmt(go)}], [{rl._fmt(x)}]")]
        for r, us in ((fwd, br.CONV_US["fwd"]), (b_in, br.CONV_US["bwd_input"]), (b_wt, br.CONV_US["bwd_weight"])):
            assert r.gflops_per_call * 1e9 == pytest.approx(_conv_flops(x, w, go)), r.op
            assert r.mbytes_per_call * 1e6 == pytest.approx(io), r.op
            assert r.peak_tflops == 15.7 and r.share_of_peak == pytest.approx(
                max(_conv_flops(x, w, go) / 15.7e6, io / 0.9e6) / us  # V100: 15.7 TFLOP/s fp32, 0.9 TB/s
            )
        assert fwd.dims["output"] == rl._fmt(go[2:]) and b_wt.dims["kernel"] == rl._fmt(w[2:])
    # relu as PyTorch 1.8 records it: clamp_min.out(self, min, out=self) reads go once, writes it once
    clamp = [r for r in E.shape_table(t) if r.op == "aten::clamp_min"]
    assert clamp and clamp[0].mbytes_per_call * 1e6 == pytest.approx(2 * 4 * math.prod(br.CONV_A[2]))
    assert E.coverage(t)["modelled_frac"] == pytest.approx(1.0)
    from traceinspect.whatif.engine import speed_of_light

    sol = speed_of_light(t)
    # the convolutions are compute-bound (3 passes each at 15.7 TFLOP/s); each relu moves go twice at
    # 0.9 TB/s, never more than its measured 50 us
    want = sum(3 * _conv_flops(*layer) / 15.7e6 for layer in (br.CONV_A, br.CONV_B))
    want += sum(min(2 * 4 * math.prod(layer[2]) / 0.9e6, br.CLAMP_US) for layer in (br.CONV_A, br.CONV_B))
    assert sol["sol_us"] == pytest.approx(want) and sol["why"] == ""


def test_the_geometry_join_leaves_a_weight_used_at_two_resolutions_unknown():
    w = [64, 64, 3, 3]
    names = ["aten::cudnn_convolution", "aten::cudnn_convolution", "aten::cudnn_convolution_backward_input"]
    dims = [[[8, 64, 56, 56], w], [[8, 64, 28, 28], w], [[], [8, 64, 28, 28], w]]
    geo = rl.conv_geometry(names, dims)
    assert geo["go"] == {} and geo["x"] == {}  # 56 -> 28 at stride 2 or 28 -> 28 at stride 1: not told
    work = rl.op_work(names[2], dims[2], ["GenericList", "float", "float"], geo)
    assert math.isnan(work.flops) and "input size unknown" in work.note


def test_sol_advice_names_the_unmodelled_ops_of_a_trace_with_shapes(tmp_path):
    from traceinspect.whatif.engine import speed_of_light

    t = _load(br.build_cudnn_resnet(extra_op_us=20_000.0), tmp_path)
    assert t.meta.profiler.get("record_shapes")
    sol = speed_of_light(t)
    assert sol["sol_us"] is None  # 20 ms of 26 ms per step unmodelled: below MIN_SOL_COVERAGE
    assert "record_shapes=True" not in sol["why"]
    assert "myext::fused_block 20.0 ms/step" in sol["why"], sol["why"]
    b = br.build_cudnn_resnet(extra_op_us=20_000.0)
    for e in b.events:
        e.get("args", {}).pop("Input Dims", None)
    b.meta["record_shapes"] = 0
    t = _load(b, tmp_path, "noshapes.json")
    assert "capture with record_shapes=True" in speed_of_light(t)["why"]


def test_a_floor_is_never_above_the_measured_time_of_its_op(tmp_path):
    """cuDNN runs 3x3 convolutions as Winograd (fewer multiplies than the direct count): a row can run
    faster than its direct FLOPs at peak allow, and its floor is then its measured time."""
    from traceinspect.whatif.engine import speed_of_light

    b = br.build_cudnn_resnet()
    fast = 0.5 * _conv_flops(*br.CONV_A) / 15.7e6  # layer A's forward at twice the direct-count peak
    for e in b.events:
        if e.get("cat") == "kernel" and e.get("dur") == br.CONV_US["fwd"]:
            e["dur"] = fast
    t = _load(b, tmp_path)
    sol = speed_of_light(t)
    a = sum(_conv_flops(*br.CONV_A) / 15.7e6 for _ in range(2))  # A's backward passes at peak
    bb = 3 * _conv_flops(*br.CONV_B) / 15.7e6
    relu = sum(min(2 * 4 * math.prod(layer[2]) / 0.9e6, br.CLAMP_US) for layer in (br.CONV_A, br.CONV_B))
    assert sol["sol_us"] == pytest.approx(a + bb + fast + relu, rel=1e-3)


def test_kineto_v100_cudnn_rows_are_modelled_and_advice_is_true(shared_dir):
    t, rows = _rows(
        shared_dir, "pytorch__kineto/tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
    )
    by_op: dict = {}
    for r in rows:
        by_op.setdefault(r.op, []).append(r)
    for op in (
        "aten::cudnn_convolution",
        "aten::cudnn_convolution_backward_input",
        "aten::cudnn_convolution_backward_weight",
    ):
        modelled = sum(r.gpu_us_per_step for r in by_op[op] if r.share_of_peak is not None)
        assert modelled > 0.7 * sum(r.gpu_us_per_step for r in by_op[op]), op  # was 0: every row read "n/a"
    assert E.coverage(t)["modelled_frac"] > 0.5
    from traceinspect.whatif.engine import speed_of_light

    sol = speed_of_light(t)
    assert sol["sol_us"] is not None and 0 < sol["sol_us"] < float(t.steps["dur_us"].median())


@pytest.mark.parametrize(
    "rel",
    [
        f"{TL}/b200/eager_trace.json.gz",
        "facebookresearch__HolisticTraceAnalysis/tests/data/trace_diff/control/control.json.gz",
    ],
)
def test_traces_captured_with_shapes_are_not_told_to_capture_with_them(shared_dir, rel):
    t = load_trace(str(shared_dir / rel))
    from traceinspect.whatif.engine import speed_of_light

    sol = speed_of_light(t)
    why = sol["why"]
    assert "capture with record_shapes" not in why, why
    # either enough is modelled for a floor (control, once its kernels link to their ops by the launch's
    # enclosing op) or the reason names what the model lacks
    assert sol["sol_us"] is not None or "the shapes are recorded" in why, why


def test_a_convolution_above_its_direct_count_roof_says_why(tmp_path):
    b = br.build_cudnn_resnet()
    fast = 0.5 * _conv_flops(*br.CONV_A) / 15.7e6
    for e in b.events:
        if e.get("cat") == "kernel" and e.get("dur") == br.CONV_US["fwd"]:
            e["dur"] = fast
    t = _load(b, tmp_path)
    (r,) = [r for r in E.shape_table(t) if r.op == "aten::cudnn_convolution" and r.share_of_peak > 1]
    assert "Winograd" in r.note
    assert all("Winograd" not in r.note for r in E.shape_table(t) if r.share_of_peak <= 1)


def _h100_steps(ops, steps: int = 3):
    """An H100 trace of `steps` steps, each running ops: (name, kernel, us, input dims, input types, stream)."""
    from builders import TraceBuilder

    t = TraceBuilder("H100")
    for _ in range(steps):
        with t.step(wait_gpu=True):
            for name, kernel, us, dims, types, stream in ops:
                t.op(name, kernels=[(kernel, us)], input_dims=dims, input_type=types, stream=stream)
    return t


def test_far_from_roofline_names_the_unmodelled_ops_when_no_row_is_modelled(tmp_path):
    t = _h100_steps([("myext::fused_block", "myext_fused_block_kernel", 900.0, [[4, 4]], ["float"], 7)])
    tr = _load(t, tmp_path)
    (skip,) = list(FarFromRoofline().detect(tr, Context.of(tr)))
    assert "myext::fused_block" in skip.reason and "record_shapes=True" not in skip.reason


def test_speed_of_light_counts_memory_bound_ops_at_their_roofline(tmp_path):
    """A step of modelled elementwise work and a tiny GEMM: the floor is each op's larger of FLOPs at
    peak and bytes at bandwidth, not the GEMM's FLOPs alone (issue 26: '4 us' on 5 ms of kernels)."""
    from traceinspect.whatif.engine import speed_of_light

    n = 64 * 1024 * 1024  # bf16 elements: an add reads 2n, writes n
    add = ("aten::add", "add_kernel", 150.0, [[n], [n], []], [BF, BF, "Scalar"], 7)
    t = _h100_steps([add] * 4 + [("aten::mm", "tiny_gemm", 10.0, [[64, 64], [64, 64]], [BF, BF], 7)])
    tr = _load(t, tmp_path)
    sol = speed_of_light(tr)
    add_roof = 3 * 2 * n / 3.35e6  # us per add at the H100's 3.35 TB/s
    gemm_roof = max(2 * 64**3 / 989.4e6, 2 * 3 * 64 * 64 / 3.35e6)
    assert sol["sol_us"] == pytest.approx(4 * add_roof + gemm_roof, rel=1e-3)
    assert sol["unmodelled_us"] == pytest.approx(0.0, abs=1e-6)
    assert sol["mfu"] == pytest.approx(2 * 64**3 / 989.4e6 / float(tr.steps["dur_us"].median()))
    out = CliRunner().invoke(cli, ["whatif", str(tmp_path / "t.json"), "--fix", "host-sync"])
    assert out.exit_code == 0, out.output
    assert "modelled ops at their roofline" in out.output and "MFU" in out.output


def test_overlapping_streams_scale_the_floor(tmp_path):
    from traceinspect.whatif.engine import speed_of_light

    n = 64 * 1024 * 1024
    # two adds on two streams, launched back to back: they run side by side
    add = ("aten::add", "add_kernel", 300.0, [[n], [n], []], [BF, BF, "Scalar"])
    t = _h100_steps([(*add, 7), (*add, 8)])
    tr = _load(t, tmp_path)
    k = E.step_kernels(tr)
    from traceinspect.trace.intervals import total, union

    busy = total(union(k["ts_us"].to_numpy(), k["end_us"].to_numpy())) / 3
    sol = speed_of_light(tr)
    assert busy < 600 and sol["overlap"] == pytest.approx(busy / 600, rel=1e-6)
    assert sol["sol_us"] == pytest.approx(2 * 3 * 2 * n / 3.35e6 * busy / 600, rel=1e-3)


def test_fused_serving_kernels_move_each_argument_once():
    t, h = 888, 2880
    rms = W("_C::rms_norm", [[t, h], [t, h], [h], []], [BF, BF, BF, "Scalar"])
    assert rms.family == rl.NORM and rms.bytes == 2 * (t * h + t * h + h)  # out written, input and weight read
    fused = W("_C::fused_add_rms_norm", [[t, h], [t, h], [h], []], [BF, BF, BF, "Scalar"])
    assert fused.bytes == 2 * (2 * t * h + 2 * t * h + h)  # input and residual are updated in place
    silu = W("sgl_kernel::silu_and_mul", [[t, 4 * h], [t, 8 * h]], [BF, BF])
    assert silu.family == rl.ELEMENTWISE and silu.bytes == 2 * (t * 4 * h + t * 8 * h)
    # arguments that do not match the signature: no model rather than a wrong one
    assert W("_C::rms_norm", [[t, h], [h], []], [BF, BF, "Scalar"]) is None


def test_sglang_trace_models_its_fused_kernels(shared_dir):
    t, rows = _rows(shared_dir, f"{TL}/inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz")
    fused = [r for r in rows if r.op in ("aiter::rmsnorm", "aiter::add_rmsnorm", "sgl_kernel::silu_and_mul")]
    assert {r.op for r in fused} == {"aiter::rmsnorm", "aiter::add_rmsnorm", "sgl_kernel::silu_and_mul"}
    assert all(r.bound == "memory" and 0 < r.share_of_peak <= 1 for r in fused)
    assert "aiter::rmsnorm" not in E.shapes_advice(t)
