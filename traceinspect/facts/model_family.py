"""The model family the trace shows: "vision", "language", "recommender" or "unknown".

Fix texts read it so that their advice fits the run (tokenization for a language model, image decoding
and augmentation for a vision model, sparse-feature preprocessing for a recommender, generic wording when
the trace does not say). It is derived from what the trace records, strongest first:

1. the capture's run configuration (`model_type`, a Hugging Face config's `model_type`);
2. Python module paths, when with_stack recorded them (`transformers/models/<name>/`,
   `torchvision/models/`, `timm/`, `diffusers/`, `torchrec/`); modules of two families (a diffusion
   pipeline's text encoder) settle nothing;
3. the aten / library ops (and, for traces without CPU ops, the kernel names): how PyTorch runs each
   kind of model.

   - recommender: pooled sparse lookups, `aten::embedding_bag` and FBGEMM's table-batched embedding
     and sparse/jagged ops (`fbgemm::split_embedding_codegen_*`, `fbgemm::*sparse*`,
     `*lengths*`), TorchRec's KeyedJaggedTensor / EmbeddingBagCollection;
   - vision: 2-D/3-D convolutions and pooling (`aten::conv2d`, `aten::max_pool2d`,
     `aten::adaptive_avg_pool2d`, `aten::upsample_*2d`, `aten::cudnn_convolution` unless every
     convolution is `aten::conv1d`), batch norm alongside them, torchvision ops (`torchvision::nms`);
   - language: token lookups (`aten::embedding`) with attention (`aten::scaled_dot_product_attention`
     and its flash / memory-efficient / cuDNN variants, flash-attn, xformers) or softmax / layer norm /
     RMS norm; varlen (packed-sequence) attention alone also counts.

   A vision transformer (patch convolution plus attention, no token lookup) is vision; a model with
   both convolutions and token lookups (a vision-language model) or with nothing recognisable is
   "unknown", which fix texts answer with generic wording.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd

VISION, LANGUAGE, RECOMMENDER, UNKNOWN = "vision", "language", "recommender", "unknown"

# Hugging Face model_type values (config.model_type) by family; anything else is not guessed
_HF_VISION = re.compile(
    r"^(vit|vit_mae|vit_msn|deit|beit|swin|swinv2|convnext|convnextv2|resnet|regnet|efficientnet|"
    r"mobilenet_v1|mobilenet_v2|mobilevit|mobilevitv2|dinov2|dinat|nat|levit|poolformer|pvt|pvt_v2|"
    r"segformer|detr|deformable_detr|conditional_detr|dab_detr|rt_detr|yolos|mask2former|maskformer|"
    r"upernet|dpt|glpn|sam|bit|cvt|focalnet|hiera|swiftformer|van|efficientformer|imagegpt|"
    r"table-transformer|depth_anything|zoedepth|timm_wrapper)$"
)
_HF_LANGUAGE = re.compile(
    r"^(llama|llama4|mistral|mixtral|gpt2|gpt_neo|gpt_neox|gptj|gpt_bigcode|gpt_oss|opt|bloom|falcon|"
    r"qwen|qwen2|qwen2_moe|qwen3|qwen3_moe|gemma|gemma2|gemma3|gemma3_text|phi|phi3|phimoe|deepseek|"
    r"deepseek_v2|deepseek_v3|olmo|olmo2|olmoe|starcoder2|codegen|mpt|stablelm|internlm|internlm2|"
    r"baichuan|chatglm|glm|glm4|cohere|cohere2|granite|granitemoe|jamba|mamba|mamba2|rwkv|recurrent_gemma|"
    r"bert|roberta|xlm-roberta|distilbert|albert|electra|deberta|deberta-v2|modernbert|t5|mt5|umt5|bart|"
    r"mbart|pegasus|longformer|bigbird|xlnet|ernie|megatron-bert|nemotron|exaone|smollm3|ministral)$"
)
_VISION_MODULE = re.compile(
    r"(^|/)(torchvision/models|timm|detectron2|mmdet|mmseg|ultralytics|segment_anything|diffusers)/"
)
_RECOMMENDER_MODULE = re.compile(r"(^|/)(torchrec|fbgemm_gpu|dlrm[^/]*)/|dlrm_s_pytorch")
_HF_MODELS = re.compile(r"transformers/models/([a-z0-9_\-]+)/")

_RECOMMENDER_OP = re.compile(
    r"^aten::_?embedding_bag|^fbgemm::.*(embedding|sparse|jagged|lengths|bounds_check_indices)|"
    r"^torchrec|KeyedJaggedTensor|EmbeddingBagCollection|SparseLengthsSum|sparse_lengths",
    re.IGNORECASE,
)
_RECOMMENDER_KERNEL = re.compile(r"split_embedding|embedding_bag|EmbeddingBag|jagged", re.IGNORECASE)
_VISION_OP = re.compile(
    r"^aten::(conv2d|conv3d|conv_transpose2d|conv_transpose3d|cudnn_convolution_transpose|"
    r"(max|avg)_pool[23]d|adaptive_(max|avg)_pool[23]d|upsample_\w+[23]d|grid_sampler_2d|pixel_shuffle|"
    r"im2col|col2im)\b|^torchvision::",
)
_CONV_OP = re.compile(r"^aten::(cudnn_convolution|miopen_convolution|convolution|_convolution)$")
_CONV1D_OP = re.compile(r"^aten::conv1d$")
_VISION_KERNEL = re.compile(r"conv2d|fprop|dgrad|wgrad|implicit_gemm|nchwToNhwc|nhwcToNchw|max_pool|avg_pool")
_TOKEN_OP = re.compile(r"^aten::embedding$")
_ATTENTION_OP = re.compile(
    r"^aten::(_?scaled_dot_product\w*|_flash_attention\w*|_efficient_attention\w*|_cudnn_attention\w*)$|"
    r"^flash_attn|flash_attn_|^xformers|memory_efficient_attention|^aten::(_?softmax|layer_norm|rms_norm|"
    r"native_layer_norm|_fused_rms_norm)$",
)
_VARLEN = re.compile(r"varlen", re.IGNORECASE)
_ATTENTION_KERNEL = re.compile(r"flash_fwd|flash_bwd|fmha|attention", re.IGNORECASE)


@dataclass(frozen=True)
class ModelFamily:
    family: str  # "vision" | "language" | "recommender" | "unknown"
    source: str  # what it was read from ("run configuration", "Python modules", "ops", "kernels", "")
    signals: tuple[str, ...] = ()  # the names that decided it (a few)

    def __str__(self) -> str:
        return self.family


def model_family(trace) -> ModelFamily:
    """The model family the trace shows (memoised per trace); see the module docstring."""
    return trace.memo("facts: model family", lambda: _model_family(trace))


def family_of(trace) -> str:
    """model_family(trace).family: "vision", "language", "recommender" or "unknown"."""
    return model_family(trace).family


def _names(table, col: str = "name") -> list[str]:
    if table is None or not len(table) or col not in table.columns:
        return []
    return [str(c) for c in pd.Categorical(table[col]).categories]


def _hf_family(model_type: str) -> str | None:
    mt = model_type.strip().lower()
    if _HF_VISION.match(mt):
        return VISION
    if _HF_LANGUAGE.match(mt):
        return LANGUAGE
    return None


def _from_ops(names: list[str]) -> tuple[str, tuple[str, ...]]:
    rec = [n for n in names if _RECOMMENDER_OP.search(n)]
    vis = [n for n in names if _VISION_OP.search(n)]
    if not vis and not any(_CONV1D_OP.match(n) for n in names):
        vis = [n for n in names if _CONV_OP.match(n)]
    tok = [n for n in names if _TOKEN_OP.match(n)]
    att = [n for n in names if _ATTENTION_OP.search(n)]
    varlen = [n for n in att if _VARLEN.search(n)]
    if rec:
        return RECOMMENDER, tuple(rec[:3])
    language = bool(tok and att) or bool(varlen)
    if vis and not tok:
        return VISION, tuple(vis[:3])
    if language and not vis:
        return LANGUAGE, tuple((tok + att)[:3])
    return UNKNOWN, ()


def _model_family(trace) -> ModelFamily:
    rc = trace.meta.run_config
    cfg = rc.get("config") if isinstance(rc, dict) else None
    mt = cfg.get("model_type") if isinstance(cfg, dict) else None
    if isinstance(mt, str) and mt:
        fam = _hf_family(mt)
        if fam is not None:
            return ModelFamily(fam, "run configuration", (f"model_type={mt}",))

    py = _names(trace.python)
    if py:
        hf = {m.group(1) for n in py for m in [_HF_MODELS.search(n)] if m}
        fams = {f for f in (_hf_family(h) for h in hf) if f is not None}
        if any(_RECOMMENDER_MODULE.search(n) for n in py):
            fams.add(RECOMMENDER)
        if any(_VISION_MODULE.search(n) for n in py):
            fams.add(VISION)
        if len(fams) == 1:
            fam = fams.pop()
            sig = sorted(f"transformers/models/{h}/" for h in hf) or [
                n for n in py if _RECOMMENDER_MODULE.search(n) or _VISION_MODULE.search(n)
            ]
            return ModelFamily(fam, "Python modules", tuple(sig[:3]))

    ops = _names(trace.cpu_ops)
    if ops:
        fam, sig = _from_ops(ops)
        if fam != UNKNOWN:
            return ModelFamily(fam, "ops", sig)
        if any(_TOKEN_OP.match(n) or _ATTENTION_OP.search(n) or _VISION_OP.search(n) for n in ops):
            return ModelFamily(UNKNOWN, "ops", ())  # ops recorded, but they do not settle it

    kernels = _names(trace.kernels)
    if kernels:
        if any(_RECOMMENDER_KERNEL.search(n) for n in kernels):
            return ModelFamily(RECOMMENDER, "kernels", tuple(n for n in kernels if _RECOMMENDER_KERNEL.search(n))[:2])
        vis = [n for n in kernels if _VISION_KERNEL.search(n)]
        att = [n for n in kernels if _ATTENTION_KERNEL.search(n)]
        if vis and not att:
            return ModelFamily(VISION, "kernels", tuple(vis[:2]))
    return ModelFamily(UNKNOWN, "", ())
