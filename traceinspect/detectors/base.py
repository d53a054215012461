"""Detector base class: documented thresholds, the doc page contract, finding helpers, and fix-text
wording fitted to the run (model family, the optimizer stepped).

A detector reads a Trace and yields Finding | Skipped. It never prints, logs, renders or writes.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Iterable, Iterator

import numpy as np
import pandas as pd

from ..catalogue import BY_CODE
from ..facts import claims
from ..facts.model_family import LANGUAGE, RECOMMENDER, VISION, family_of
from ..facts.optimizer import stepped_optimizer
from ..facts.profiler_overhead import ProfilerOverhead
from ..facts.steps import in_steps, step_kernels  # noqa: F401  (detectors import them from here)
from ..facts.run import config_value, detect_framework  # noqa: F401  (detectors import them from here)
from ..findings import EventRef, Evidence, Finding, Skipped
from ..trace import intervals as iv
from ..trace.model import Trace

DOC_SECTIONS = (
    "What it detects",
    "Why it costs time",
    "How time lost is estimated",
    "How to fix",
    "False positives",
    "References",
)


def option(default, doc: str):
    """A documented, overridable threshold: `min_share: float = option(0.05, "...")`."""
    return dataclasses.field(default=default, metadata={"doc": doc})


@dataclass(frozen=True)
class Context:
    """Facts about the run shared by detectors (computed once per trace)."""

    framework: str  # "hf_trainer" | "trl" | "lightning" | "accelerate" | "plain" | "unknown"
    n_steps: int
    window_us: float  # sum of analysed step durations
    # the run's batch plan (whatif/batch.py, a layer above): given by analyze, called only when needed
    batch_plan: Callable[[], Any] | None = None
    # (kernels, per-kernel GPU saving) -> (step time given back over the window, its share of the saving):
    # the replay's (whatif.engine.step_saving, a layer above), given by analyze
    replayed_saving: Callable[[pd.DataFrame, np.ndarray], tuple[float, float]] | None = None

    @staticmethod
    def of(
        trace: Trace,
        batch_plan: Callable[[], Any] | None = None,
        replayed_saving: Callable[[pd.DataFrame, np.ndarray], tuple[float, float]] | None = None,
    ) -> "Context":
        return Context(
            framework=detect_framework(trace),
            n_steps=len(trace.steps),
            window_us=trace.window_us,
            batch_plan=batch_plan,
            replayed_saving=replayed_saving,
        )

    def step_saving(self, kin: pd.DataFrame, delta: np.ndarray) -> tuple[float, float]:
        """What the per-kernel GPU savings `delta` of the kernels `kin` give back as step time over the
        window, and its share of their sum: the replay's. A Context built without the replay (a detector
        run on its own) counts the GPU saving whole."""
        if self.replayed_saving is not None:
            return self.replayed_saving(kin, delta)
        total = float(np.sum(delta))
        return total, 1.0 if total > 0 else 0.0


@dataclass(frozen=True)
class Claim:
    """The GPU work behind a finding's time lost (the idle time it claims is Finding.claim_sets): intervals
    on the tables' clock (us from the trace origin) and the part of time_lost_us each carries, a share of
    the interval (a kernel that would run faster). Read by `annotate`, which draws the intervals into the
    trace; never by renderers."""

    what: str  # what the intervals are, e.g. "fp32 GEMM/convolution kernel"
    start_us: np.ndarray
    end_us: np.ndarray
    lost_us: np.ndarray


class Detector:
    """Base class. Subclasses are frozen dataclasses whose fields are thresholds made with option()."""

    code: ClassVar[str]
    name: ClassVar[str]
    summary: ClassVar[str]
    # builders it must fire on / stay silent on, as "module.function" in tests/ (e.g. "builders.build_healthy")
    fires_on: ClassVar[tuple[str, ...]] = ()
    silent_on: ClassVar[tuple[str, ...]] = ()
    # explicit time claims, resolved in facts/claims.py (its ORDER says who comes first in each part)
    claims_parts: ClassVar[tuple[str, ...]] = ()  # the timeline idle parts its findings may claim
    reserves: ClassVar[tuple[str, ...]] = ()  # the parts where reserved() intervals go to it first
    provides: ClassVar[dict[str, str]] = {}  # fact name -> method computing it by this detector's thresholds

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        if "code" in cls.__dict__ and "name" not in cls.__dict__:
            # a registry detector: its name and summary are written once, in traceinspect/catalogue.py
            # (a class outside the catalogue, such as a test's, declares all three itself)
            entry = BY_CODE[cls.code]
            cls.name, cls.summary = entry.name, entry.summary
        claims.register(cls)

    def reserved(self, trace: Trace) -> iv.Set:
        """The intervals whose GPU idle this detector owns in every part of `reserves`, ahead of the
        detectors after it in facts.claims.ORDER (read through facts.claims.reserved, never directly)."""
        return iv.EMPTY

    def detect(self, trace: Trace, ctx: Context) -> Iterator[Finding | Skipped]:  # pragma: no cover
        raise NotImplementedError

    def claims(self, trace: Trace, ctx: Context, finding: Finding) -> Claim | None:
        """The GPU work behind `finding` (one this detector yielded on this trace) beyond the idle time it
        claims, or None (annotate then draws the idle claims, or else the finding's exemplar events)."""
        return None

    # --- helpers ------------------------------------------------------------------------------------
    def skip(self, reason: str) -> Skipped:
        return Skipped(code=self.code, name=self.name, reason=reason)

    def declined(self, reason: str) -> Skipped:
        """The detector saw its signature, measured it, and does not report it (below a threshold): it
        was checked, so a user (and diff) can tell it from a detector that did not apply."""
        return Skipped(code=self.code, name=self.name, reason=reason, checked=True)

    def finding(
        self,
        ctx: Context,
        *,
        title: str,
        time_lost_us: float,
        confidence: str,
        evidence: Iterable[Evidence],
        fix: str,
        events: Iterable[EventRef] = (),
        upper_bound: bool = False,
        idle_claims: dict | None = None,
    ) -> Finding:
        """idle_claims: the GPU idle time, per timeline idle part, that time_lost_us consists of (the
        explained-time account adds these up, so they must not overlap another detector's claim): per
        part, the claimed interval set, or (set, factor) when only a share factor <= 1 of it is claimed.
        time_lost_us is the cost now; what a cause would cost once other fixes are in is the re-diagnosis's
        (a replay, verdict.rediagnose), never a detector's own estimate."""
        lost = float(max(0.0, min(time_lost_us, ctx.window_us)))  # never more than the window
        sets = {}
        undeclared = set(idle_claims or {}) - set(self.claims_parts)
        if undeclared:
            raise ValueError(f"{self.name} claims {sorted(undeclared)}, not declared in claims_parts")
        for p, v in (idle_claims or {}).items():
            if isinstance(v, tuple) and len(v) == 2 and isinstance(v[1], (int, float)):
                (s, e), factor = v
            else:
                (s, e), factor = v, 1.0
            sets[p] = (np.asarray(s, dtype=float), np.asarray(e, dtype=float), float(factor))
        claims = {p: float((e - s).sum()) * f for p, (s, e, f) in sets.items()}
        claims = {p: v for p, v in claims.items() if v > 0}
        total = sum(claims.values())
        if total > lost > 0 or (lost == 0 and total > 0):  # a claim never exceeds the time lost
            k = lost / total
            claims = {p: v * k for p, v in claims.items()}
            sets = {p: (s, e, f * k) for p, (s, e, f) in sets.items()}
        return Finding(
            code=self.code,
            name=self.name,
            title=title,
            time_lost_us=lost,
            time_lost_frac=lost / ctx.window_us if ctx.window_us > 0 else 0.0,
            time_lost_per_step_us=lost / ctx.n_steps if ctx.n_steps else 0.0,
            confidence=confidence,
            evidence=tuple(evidence),
            fix=fix,
            events=tuple(events),
            upper_bound=upper_bound,
            idle_claims_us=claims,
            claim_sets={p: sets[p] for p in claims},
        )

    @classmethod
    def options(cls) -> list[tuple[str, object, str]]:
        return [(f.name, f.default, f.metadata.get("doc", "")) for f in dataclasses.fields(cls)]

    @classmethod
    def doc(cls) -> str:
        return inspect.cleandoc(cls.__doc__ or "")


def current(trace: Trace, key: str) -> str:
    """' (now: key=value)' when the capture recorded the setting, else ''."""
    v = config_value(trace, key)
    if v is None:
        return ""
    return f" (now: {key}={v!r})" if isinstance(v, str) else f" (now: {key}={v})"


def window_label(trace: Trace) -> str:
    st = trace.steps
    if trace.step_source == "ProfilerStep" and len(st):
        a, b = int(st["step"].iloc[0]), int(st["step"].iloc[-1])
        return f"ProfilerStep#{a}..#{b} ({len(st)} steps)" if a != b else f"ProfilerStep#{a}"
    return f"{len(st)} step(s) from {trace.step_source}"


def events_from(df: pd.DataFrame, trace: Trace, kind: str, n: int = 3, by: str = "dur_us") -> tuple[EventRef, ...]:
    """The n longest rows of a table as exemplar events."""
    if df is None or len(df) == 0:
        return ()
    top = df.nlargest(n, by) if by in df.columns else df.head(n)
    out = []
    for row in top.itertuples(index=False):
        out.append(
            EventRef(
                name=str(row.name),
                ts_us=round(float(row.ts_us), 3),
                dur_us=round(float(row.dur_us), 3),
                track=trace.track(row, kind),
            )
        )
    return tuple(out)


MAX_PROMISE = 0.9  # an estimate never promises more than 90% of the step back


def projected_step(median_us: float, saved_per_step_us: float) -> float:
    """The median step once saved_per_step_us is recovered (the verdict's rule, shared so numbers agree)."""
    return median_us - min(max(saved_per_step_us, 0.0), MAX_PROMISE * median_us)


def fmt_us(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:.2f} s"
    if us >= 1e3:
        return f"{us / 1e3:.1f} ms"
    return f"{us:.0f} us"


def pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def overhead_evidence(ov: ProfilerOverhead, window: str) -> list[Evidence]:
    """The profiler-overhead estimate (facts/profiler_overhead.py) as evidence: the total, then one line
    per setting that was on (how it is known, what it recorded, the measured cost per unit)."""
    if not ov.settings:
        return []
    out = [
        Evidence(
            label="profiler overhead estimate: host time the profiler's settings added (an upper bound on "
            f"the GPU idle time they cause; per-unit costs from {ov.measured_with})",
            value=round(ov.us_per_step / 1e3, 3),
            unit="ms/step",
            window=window,
        )
    ]
    for s in ov.settings:
        out.append(
            Evidence(
                label=f"of which {s.setting} ({s.source}): {s.units_per_step:,.0f} {s.unit}/step x {s.us_per_unit:g} us",
                value=round(s.us_per_step / 1e3, 3),
                unit="ms/step",
                window=window,
            )
        )
    return out


def overhead_fix(ov: ProfilerOverhead, settings: tuple[str, ...], min_frac: float, fix: str) -> str:
    """`fix` behind a re-capture: the finding could be the profiler's own overhead (`settings`, the
    costliest ones whose estimate takes the claim under the detector's `min_frac` threshold)."""
    us = sum(s.us_per_step for s in ov.settings if s.setting in settings)
    names = " and ".join(settings)
    rest = fix[0].lower() + fix[1:] if fix else ""
    return (
        f"Re-capture without {names} before acting on this: the estimated host overhead of {names} "
        f"({fmt_us(us)} per step) alone could lift this claim over the {100 * min_frac:g}% threshold; "
        f"if it persists, {rest}"
    )


# --- fix texts fitted to the run ----------------------------------------------------------------
# The input work a DataLoader does for the model family the trace shows (facts/model_family.py) and the
# fused step of the optimizer the trace shows stepped (facts/optimizer.py). Numbers in fix texts are the
# run's own (the trace, the capture's run configuration) or labelled as examples; a family or optimizer
# the trace does not show gets generic wording, never a guess.

# torch.optim classes with a fused CUDA implementation (fused=True), and the other torch.optim classes
TORCH_FUSED = {"Adam", "AdamW", "SGD"}
TORCH_OPTIM = TORCH_FUSED | {
    "Adadelta",
    "Adafactor",
    "Adagrad",
    "Adamax",
    "ASGD",
    "NAdam",
    "RAdam",
    "RMSprop",
    "Rprop",
    "SparseAdam",
}

# (single-process loader: what to add to "load batches in background workers", multi-process loader:
# what makes each worker's batch cheaper), per model family
_PREP = {
    LANGUAGE: (
        "and pre-tokenize the dataset once (dataset.map(tokenize, batched=True)) so a batch is only read and collated",
        "and pre-tokenize the dataset once instead of tokenizing in __getitem__",
    ),
    VISION: (
        "so image decoding and augmentation run off the training thread (or decode and augment on the GPU: "
        'torchvision.io.decode_jpeg(..., device="cuda"), NVIDIA DALI)',
        "and make each sample cheaper: cache decoded, resized images, or decode and augment on the GPU "
        '(torchvision.io.decode_jpeg(..., device="cuda"), NVIDIA DALI)',
    ),
    RECOMMENDER: (
        "and preprocess the sparse features once, offline (id hashing, lengths), so a batch is only read and collated",
        "and preprocess the sparse features once, offline, instead of per sample in __getitem__",
    ),
}
_PREP_GENERIC = (
    "and do costly per-sample preprocessing once, up front, rather than in __getitem__",
    "and move costly per-sample preprocessing out of __getitem__ (do it once and cache the result)",
)


def dataloader_prep(trace, single_process: bool) -> str:
    """The clause on the per-sample input work, for the model family the trace shows."""
    single, multi = _PREP.get(family_of(trace), _PREP_GENERIC)
    return single if single_process else multi


_TOKENIZE = re.compile(r"tokeniz", re.IGNORECASE)
_IMAGE = re.compile(r"torchvision/transforms|albumentations|PIL/|image_processing|decode_(jpeg|image)", re.IGNORECASE)
_FEATURES = re.compile(r"feature_extraction|processing_utils", re.IGNORECASE)
_AUGMENT = re.compile(r"augment", re.IGNORECASE)


def preprocessing_kinds(trace, names) -> str:
    """What the host's input preprocessing is, from the span names that matched it (tokenizers, image
    transforms, feature extractors), else from the model family; generic when neither says."""
    names = [str(n) for n in names]
    kinds = []
    if any(_TOKENIZE.search(n) for n in names):
        kinds.append("tokenization")
    if any(_IMAGE.search(n) for n in names):
        kinds.append("image decoding / augmentation")
    elif any(_AUGMENT.search(n) for n in names):
        kinds.append("augmentation")
    if any(_FEATURES.search(n) for n in names):
        kinds.append("feature extraction")
    if not kinds:
        fam = family_of(trace)
        kinds = (
            ["tokenization"]
            if fam == LANGUAGE
            else ["image decoding / augmentation"]
            if fam == VISION
            else ["sparse-feature preprocessing"]
            if fam == RECOMMENDER
            else ["decoding, tokenization or augmentation"]
        )
    return ", ".join(kinds)


def fused_step(cls: str | None, impl: str | None, framework: str, trace=None) -> str | None:
    """How to fuse the optimizer step the trace shows (class `cls`, implementation `impl`), as the
    object of "use ...": None when it is already fused or runs on the CPU. Without a recorded class
    the wording is generic (an HF run whose capture recorded optim=adamw_* gets the fused AdamW)."""
    hf = framework in ("hf_trainer", "trl")
    optim = config_value(trace, "optim") if trace is not None else None
    now = f" (now: optim={optim!r})" if isinstance(optim, str) else ""
    if cls is None:
        if isinstance(optim, str) and "fused" in optim:
            return None
        if hf and isinstance(optim, str) and optim.startswith("adamw"):
            return f'the fused AdamW: optim="adamw_torch_fused"{now}'
        if hf:
            return 'a fused optimizer step (for AdamW: optim="adamw_torch_fused" in TrainingArguments)' + now
        return "a fused or multi-tensor optimizer step (fused=True, else foreach=True, on your torch.optim optimizer)"
    if impl in ("fused", "cpu"):
        return None
    if hf and cls == "AdamW":
        return f'your optimizer (AdamW) fused: optim="adamw_torch_fused"{now}'
    if cls in TORCH_FUSED:
        return f"your optimizer ({cls}) fused: torch.optim.{cls}(params, ..., fused=True)"
    if cls in TORCH_OPTIM:
        return f"your optimizer ({cls}) with fused=True where your PyTorch version offers it for CUDA" + (
            " (it runs foreach now), or torch.compile its step" if impl == "foreach" else ", else foreach=True"
        )
    return f"a fused or multi-tensor step for your optimizer ({cls}), or torch.compile its step"


def stepped_fused_step(trace, framework: str) -> str | None:
    """fused_step for the optimizer the trace shows stepped (generic when none is recorded)."""
    opt = stepped_optimizer(trace)
    cls, impl = opt if opt is not None else (None, None)
    return fused_step(cls, impl, framework, trace)


def preprocess_culprit(kinds: str) -> tuple[str, str]:
    """host-bound's input-preprocessing culprit for `kinds` (preprocessing_kinds): what it is, and its fix."""
    once = " (or pre-tokenize once with dataset.map)" if kinds.startswith("tokenization") else ""
    return (
        f"input preprocessing ({kinds}) on the launching thread, outside DataLoader workers",
        f"move the {kinds} into the Dataset / its transforms{once} so DataLoader workers run it in parallel "
        "with the GPU",
    )
