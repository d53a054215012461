"""fp32-gemm, eager-attention, padding-waste and the kernel-name classifier, on synthetic traces."""

from __future__ import annotations

import pytest

import builders_compute as B
from builders import TraceBuilder, build_healthy
from traceinspect.analyze import analyze
from traceinspect.causes import MIN_WINDOW_US
from traceinspect.facts import kernels as K
from traceinspect.detectors.base import Context
from traceinspect.detectors.eager_attention import EagerAttention
from traceinspect.detectors.fp32_gemm import Fp32Gemm
from traceinspect.detectors.padding_waste import PaddingWaste
from traceinspect.trace.model import load_trace


def run(builder: TraceBuilder, det, tmp_path):
    trace = load_trace(builder.write(tmp_path / "t.json"))
    rep = analyze(trace, detectors=[det], strict=True)
    return trace, rep


def only(rep):
    assert len(rep.findings) == 1, [f.title for f in rep.findings]
    return rep.findings[0]


# --- kernel-name classification ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,kind,prec",
    [
        ("volta_sgemm_128x64_nt", K.GEMM, K.FP32),
        ("ampere_sgemm_32x32_sliced1x4_tn", K.GEMM, K.FP32),
        (
            "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas",
            K.GEMM,
            K.FP32,
        ),
        (
            "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>(cutlass_80_simt_sgemm_128x32_8x5_nn_align1::Params)",
            K.GEMM,
            K.FP32,
        ),
        (
            "void gemmSN_TN_kernel<float, 128, 16, 2, 4, 8, 9, false, cublasGemvTensorStridedBatched<float const> >(x)",
            K.GEMM,
            K.FP32,
        ),
        (
            "void implicit_convolve_sgemm<float, float, 1024, 6, 7, 3, 3, 5, 1, false, true, true>(int, int)",
            K.CONV,
            K.FP32,
        ),
        ("volta_scudnn_128x64_relu_interior_nn_v1", K.CONV, K.FP32),
        ("void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(int, int, int)", K.CONV, K.FP32),
        (
            "void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>(cudnn::winograd_nonfused::WinogradDataParams<float, float>)",
            K.CONV,
            K.FP32,
        ),
        # ROCm Tensile: the type token right after the index groups; "_HA_S_SAV" later in the name is not the type
        ("Cijk_Ailk_Bljk_S_B_Bias_HA_S_SAV_UserArgs_MT16x16x128_MI16x16x1_SN_LDSB1", K.GEMM, K.FP32),
        ("Cijk_Ailk_Bljk_SB_MT64x64x16_SN", K.GEMM, K.FP32),
        ("Cijk_Alik_Bljk_B_BS_BH_Bias_HA_S_SAV_UserArgs_MT256x128x64_MI16x16x1_SN", K.GEMM, K.HALF),
        ("Cijk_Ailk_Bljk_BBS_BH_MT64x64x64_MI16x16x16x1_SN_1LDSB0", K.GEMM, K.HALF),
        ("Cijk_Ailk_Bljk_HHS_BH_MT64x64x64_SN", K.GEMM, K.HALF),
        ("igemm_fwd_gtcx3_nhwc_bf16_bx0_ex1_bt128x128x32_wt32x32x8", K.CONV, K.HALF),
        ("sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize32x32x64_stage3_warpsize2x1x2_tensor16x8x8", K.GEMM, K.TF32),
        (
            "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align4>(cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align4::Params)",
            K.GEMM,
            K.TF32,
        ),
        ("nvjet_sss_tf32_128x256_TNT", K.GEMM, K.TF32),
        ("volta_fp16_s884gemm_fp16_128x128_ldg8_f2f_nn", K.GEMM, K.HALF),
        ("turing_h1688gemm_128x128_ldg8_nt", K.GEMM, K.HALF),
        ("ampere_bf16_s16816gemm_bf16_128x256_ldg8_f2f_stages_64x3_nn", K.GEMM, K.HALF),
        (
            "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
            K.GEMM,
            K.HALF,
        ),
        ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", K.GEMM, K.HALF),
        ("bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_sm100f", K.GEMM, K.FP8),
        ("ampere_gcgemm_64x64_nt", K.GEMM, K.COMPLEX),
        (
            "void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false>(x)",
            K.GEMV,
            K.FP32,
        ),
        ("void fbgemm_gpu::permute_2D_data_kernel<true, int, int, float>(int, int)", K.OTHER, K.UNKNOWN),
        (
            "std::enable_if<vllm::_typeConvert<c10::BFloat16>::exists, void>::type vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(x)",
            K.OTHER,
            K.UNKNOWN,
        ),
        (
            "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, true, false>(float*, float const*)",
            K.SOFTMAX,
            K.UNKNOWN,
        ),
        (
            "void at::native::(anonymous namespace)::cunn_SoftMaxForwardReg<c10::BFloat16, float, c10::BFloat16>(x)",
            K.SOFTMAX,
            K.UNKNOWN,
        ),
        (B.FLASH_FWD, K.ATTENTION, K.UNKNOWN),
        ("attn_fwd", K.ATTENTION, K.UNKNOWN),
        (B.EFFICIENT_FWD, K.ATTENTION, K.UNKNOWN),
        ("triton_red_fused__to_copy_add_addmm_fmha_v3_fwd_mean_24", K.OTHER, K.UNKNOWN),
    ],
)
def test_classify_name(name, kind, prec):
    c = K.classify_name(name)
    assert (c.kind, c.precision) == (kind, prec)


def test_classify_is_row_aligned_and_arch_floor_reads_prefixes():
    import pandas as pd

    names = pd.Series(
        pd.Categorical(["volta_sgemm_128x64_nt", "x", "volta_sgemm_128x64_nt", "turing_fp16_s1688gemm_fp16_x"])
    )
    c = K.classify(names)
    assert list(c["kind"]) == [K.GEMM, K.OTHER, K.GEMM, K.GEMM]
    assert list(c["precision"]) == [K.FP32, K.UNKNOWN, K.FP32, K.HALF]
    assert K.arch_floor(names) == 75  # the newest kernel arch: the device is at least sm75


# --- fp32-gemm ---------------------------------------------------------------------------------------------

N_GEMMS = B.GEMM_STEPS * B.GEMM_LAYERS


def test_fp32_gemm_fires_on_a100_sgemm(tmp_path):
    _, rep = run(B.build_fp32_gemm(), Fp32Gemm, tmp_path)
    f = only(rep)
    # A100: bf16 312 / fp32 19.5 = 16x peak ratio, x efficiency 0.5 = 8, capped at 4x;
    # each 1000 us sgemm saves 1000 x (1 - 1/4) = 750 us, the next kernel being queued behind it
    assert f.time_lost_us == pytest.approx(N_GEMMS * B.GEMM_US * 0.75)
    assert f.confidence == "high" and not f.upper_bound
    assert "fp32" in f.title and "A100" in f.title
    assert "bf16" in f.fix or "allow_tf32" in f.fix


def test_fp32_gemm_v100_uses_the_fp16_peak_ratio(tmp_path):
    _, rep = run(B.build_fp32_gemm_v100(), Fp32Gemm, tmp_path)
    f = only(rep)
    # V100: speedup 0.5 x 125 / 15.7 = 3.98 (under the 4x cap); saved = dur x (1 - 2 x 15.7 / 125)
    assert f.time_lost_us == pytest.approx(N_GEMMS * B.GEMM_US * (1 - 2 * 15.7 / 125))
    assert "float16" in f.fix or "fp16" in f.fix


def test_fp32_gemm_counts_unnamed_kernels_from_the_op_input_type(tmp_path):
    _, rep = run(B.build_fp32_unknown_name(), Fp32Gemm, tmp_path)
    f = only(rep)
    assert f.time_lost_us == pytest.approx(N_GEMMS * B.GEMM_US * 0.75)
    assert f.confidence == "low"  # only the recorded Input type says fp32
    assert any("Input type" in e.label for e in f.evidence)


@pytest.mark.parametrize("builder", [B.build_bf16_gemm, B.build_tf32_gemm, build_healthy])
def test_fp32_gemm_silent_on_tensor_core_gemms(builder, tmp_path):
    _, rep = run(builder(), Fp32Gemm, tmp_path)
    assert not rep.findings


def test_fp32_gemm_skips_gpus_without_tensor_cores(tmp_path):
    _, rep = run(B.build_fp32_gemm_pascal(), Fp32Gemm, tmp_path)
    assert not rep.findings
    assert any("no tensor cores" in s.reason for s in rep.skipped)


def test_fp32_gemm_without_device_properties_uses_name_arch(tmp_path):
    t = B.build_fp32_gemm_v100()
    t.meta["deviceProperties"] = []
    _, rep = run(t, Fp32Gemm, tmp_path)
    f = only(rep)
    # 'volta_' => sm70 family peaks (approximate): 0.5 x 100 / 14 = 3.57x
    assert f.time_lost_us == pytest.approx(N_GEMMS * B.GEMM_US * (1 - 2 * 14 / 100))
    assert f.confidence == "low" and "kernel names" in f.title


def test_fp32_gemm_gains_little_wall_time_when_the_gpu_waits_on_the_host(tmp_path):
    """20 us sgemms, each launched after 60 us of host work: every kernel but the last of a step ends in a
    host-late gap, so only that last one (followed by the step's cudaDeviceSynchronize) is on the critical path."""
    steps, per_step, dur = 3, 100, 20.0
    t = TraceBuilder("A100")
    for _ in range(steps):
        with t.step(wait_gpu=True):
            for _ in range(per_step):
                t.op("aten::mm", kernels=[(B.SGEMM_AMPERE, dur)], cpu_us=60, input_type=["float", "float"])
    _, rep = run(t, Fp32Gemm, tmp_path)
    f = only(rep)
    assert f.time_lost_us == pytest.approx(steps * dur * 0.75)
    ev = {e.label: e.value for e in f.evidence}
    assert ev["GPU time these kernels would save"] == pytest.approx(per_step * dur * 0.75 / 1e3, abs=0.01)
    assert "waits on the host" in f.title


# --- eager-attention -------------------------------------------------------------------------------------

N_LAYERS = B.ATT_STEPS * B.ATT_LAYERS
# per layer: bmm + scale + softmax + dropout + bmm run eagerly; the fused model costs half the two bmms
BLOCK_US = 2 * B.BMM_US + B.SCALE_US + B.SOFTMAX_US + B.DROPOUT_US
FUSED_US = 0.5 * 2 * B.BMM_US


def test_eager_attention_fires_with_4d_scores(tmp_path):
    _, rep = run(B.build_eager_attention(), EagerAttention, tmp_path)
    f = only(rep)
    assert f.time_lost_us == pytest.approx(N_LAYERS * (BLOCK_US - FUSED_US))
    assert f.confidence == "high"
    ev = {e.label: e.value for e in f.evidence}
    assert ev["attention score shape (softmax input)"] == f"[{B.ATT_B}, {B.ATT_H}, {B.ATT_L}, {B.ATT_L}]"
    # the classifier softmax over [B, 1000] after the last layer is not counted
    assert ev["eager attention softmax calls (forward / backward)"] == f"{N_LAYERS} / 0"
    assert "scaled_dot_product_attention" in f.fix


def test_eager_attention_without_shapes_relies_on_bmm_neighbours(tmp_path):
    _, rep = run(B.build_eager_attention_no_shapes(), EagerAttention, tmp_path)
    f = only(rep)
    assert f.time_lost_us == pytest.approx(N_LAYERS * (BLOCK_US - FUSED_US))
    assert f.confidence == "medium"


def test_eager_attention_counts_the_backward_blocks(tmp_path):
    _, rep = run(B.build_eager_attention_training(), EagerAttention, tmp_path)
    f = only(rep)
    # backward block: bmm (dV) + dropout bwd + softmax bwd + mul bwd + bmm (dQ) = the forward block's kernels
    assert f.time_lost_us == pytest.approx(2 * N_LAYERS * (BLOCK_US - FUSED_US))
    ev = {e.label: e.value for e in f.evidence}
    assert ev["eager attention softmax calls (forward / backward)"] == f"{N_LAYERS} / {N_LAYERS}"


def test_eager_attention_names_the_sdpa_math_fallback(tmp_path):
    _, rep = run(B.build_sdpa_math_fallback(), EagerAttention, tmp_path)
    f = only(rep)
    assert "math backend" in f.fix
    assert f.time_lost_us == pytest.approx(N_LAYERS * (BLOCK_US - FUSED_US))


def test_fp32_gemm_with_mixed_precision_on_points_at_layers_outside_autocast(tmp_path):
    t = B.build_fp32_gemm()
    t.meta["traceinspect"] = {
        "schema_version": 1,
        "source": "hf_trainer",
        "framework": {"transformers": "4.46"},
        "config": {"bf16": True},
        "steps": [],
    }
    _, rep = run(t, Fp32Gemm, tmp_path)
    f = only(rep)
    assert "Mixed precision is on" in f.fix


@pytest.mark.parametrize("builder", [B.build_sdpa_flash, B.build_classifier_softmax, build_healthy])
def test_eager_attention_silent(builder, tmp_path):
    _, rep = run(builder(), EagerAttention, tmp_path)
    assert not rep.findings


# --- padding-waste ---------------------------------------------------------------------------------------

# per step: embedding 20 us + layers x (two linears + attention); the optimizer kernel is not per-token
TOKEN_US = B.PAD_STEPS * (20 + B.PAD_LAYERS * (2 * B.LINEAR_US + B.SDPA_US))
ATTN_US = B.PAD_STEPS * B.PAD_LAYERS * B.SDPA_US


def _replayed_padding_cost(trace, rep, gpu_saving_us: float) -> None:
    """The finding's cost is its fix replayed alone over the window (the replay's model, whatif.engine
    step_saving), and here, where the host waits on the GPU at each step's end, almost all of the GPU time
    on pad tokens: at most that, less only the host time the first kernels of a step wait for."""
    from traceinspect.whatif import engine as E

    f = only(rep)
    replayed = E.predict(trace, rep.findings, ("padding-waste",), with_path=False).step_us.sum()
    assert f.time_lost_us == pytest.approx(trace.window_us - replayed, abs=1e-3)
    assert 0.99 * gpu_saving_us <= f.time_lost_us <= gpu_saving_us + 1e-6
    return f


def test_padding_waste_exact_from_capture_metadata(tmp_path):
    trace, rep = run(B.build_padding_metadata(), PaddingWaste, tmp_path)
    share = round(1 - B.PAD_REAL / (B.PAD_B * B.PAD_L), 3)  # as the finding states it
    f = _replayed_padding_cost(trace, rep, share * TOKEN_US)
    assert f.confidence == "high" and not f.upper_bound
    assert "DataCollatorWithFlattening" in f.fix  # the run config says HF Trainer


def test_padding_waste_from_varlen_attention(tmp_path):
    trace, rep = run(B.build_padded_varlen(), PaddingWaste, tmp_path)
    share = round(1 - B.VARLEN_Q / (B.PAD_B * B.PAD_L), 3)  # as the finding states it
    # varlen attention already skips the pads: only the rest of the token work is wasted
    f = _replayed_padding_cost(trace, rep, share * (TOKEN_US - ATTN_US))
    assert f.confidence == "medium"


def test_padding_waste_shape_only_is_a_low_confidence_upper_bound(tmp_path):
    trace, rep = run(B.build_padded_shapes(), PaddingWaste, tmp_path)
    share = round((B.PAD_B - 1) / (2 * B.PAD_B), 2)  # lengths spread evenly up to each batch's longest
    f = _replayed_padding_cost(trace, rep, share * TOKEN_US)
    assert f.confidence == "low" and f.upper_bound
    assert "173..419" in f.title


@pytest.mark.parametrize("builder", [B.build_packed, B.build_fixed_length, build_healthy])
def test_padding_waste_silent(builder, tmp_path):
    _, rep = run(builder(), PaddingWaste, tmp_path)
    assert not rep.findings


@pytest.mark.parametrize(
    "steps",
    [
        "not a list",
        [None, 3, "x"],
        [{"step": 10, "real_tokens": "many", "padded_tokens": 4096}],
        [{"step": 10, "real_tokens": 5000, "padded_tokens": 4096}],
        [{"step": 10, "real_tokens": None, "padded_tokens": 0}],
    ],
)
def test_padding_waste_survives_bad_metadata(steps, tmp_path):
    t = B.build_fixed_length()
    t.meta["traceinspect"] = {"schema_version": 1, "source": "loop", "config": "oops", "steps": steps}
    _, rep = run(t, PaddingWaste, tmp_path)
    assert not rep.findings and not rep.failures


def test_cpu_only_trace_is_skipped(tmp_path):
    t = TraceBuilder()
    for _ in range(3):  # 3 x 5 ms: past run_detectors' 1 ms window guard, so the detectors themselves run
        with t.step():
            t.op("aten::linear", cpu_us=5_000)
    trace = load_trace(t.write(tmp_path / "cpu.json"))
    assert not trace.has_gpu and Context.of(trace).window_us >= MIN_WINDOW_US
    for det in (Fp32Gemm, EagerAttention, PaddingWaste):
        rep = analyze(trace, detectors=[det], strict=True)
        assert not rep.findings and not rep.failures
        assert [s.code for s in rep.skipped] == [det.code]
        assert "too short" not in rep.skipped[0].reason, rep.skipped[0].reason
