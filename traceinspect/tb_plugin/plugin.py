"""The plugin's backend: lists the traces under the logdir, analyses each on first view (in the background,
with progress), caches the report, and serves the HTML report and diffs the renderers make.

Paths from the logdir are untrusted: a request names a trace by an id this module gave out when it listed
the logdir, never by a path, so nothing outside the listing can be opened. Names and errors leave as JSON
values (the frontend shows them as text) or inside the HTML report (escaped, no script, its CSP kept).
Holds no analysis logic: load, analyse and render are the library's.
"""

from __future__ import annotations

import hashlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from ..errors import TraceinspectError
from ..inert import text as inert_text

PLUGIN_NAME = "traceinspect"
STATIC = Path(__file__).resolve().parent / "static"
# the layouts tensorboard_trace_handler writes: <run>/<worker>.<ts>.pt.trace.json[.gz], and the old
# profiler plugin's <run>/plugins/profile/<ts>/<worker>.pt.trace.json[.gz]
SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz")
MAX_TRACES = 2000  # a logdir with more is listed up to this many (the rest named in a warning)
LIST_TTL_S = 5.0  # how long a listing is reused before the logdir is walked again


class TraceinspectPlugin(base_plugin.TBPlugin):
    plugin_name = PLUGIN_NAME

    def __init__(self, context):
        self._logdir = Path(context.logdir).resolve() if context.logdir else None
        self._lock = threading.Lock()
        self._listing: dict[str, dict] = {}
        self._listed_at = -1e9
        self._truncated = 0
        self._jobs: dict[str, dict] = {}  # id -> {"key", "state", "phase", "progress", "error", "report"}
        # one analysis at a time: a logdir of big traces must not take every core from the training job
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="traceinspect")

    # --- TensorBoard API ---------------------------------------------------------------------------
    def get_plugin_apps(self):
        return {
            "/index.js": self._serve_js,
            "/traces": self._serve_traces,
            "/analyze": self._serve_analyze,
            "/report": self._serve_report,
            "/diff": self._serve_diff,
        }

    def is_active(self):
        return bool(self._list())

    def frontend_metadata(self):
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name="traceinspect", disable_reload=True)

    # --- listing -----------------------------------------------------------------------------------
    def _list(self) -> dict[str, dict]:
        import time

        with self._lock:
            if time.monotonic() - self._listed_at < LIST_TTL_S:
                return self._listing
        found = scan_logdir(self._logdir) if self._logdir else []
        listing = {e["id"]: e for e in found[:MAX_TRACES]}
        with self._lock:
            self._listing, self._truncated, self._listed_at = listing, max(0, len(found) - MAX_TRACES), time.monotonic()
            return listing

    def _entry(self, request, arg: str = "trace") -> dict | None:
        return self._list().get(str(request.args.get(arg, "")))

    # --- analysis ----------------------------------------------------------------------------------
    def _job(self, entry: dict, start: bool) -> dict:
        """The job for a listed trace; started (once) when `start`. A rewritten file gets a new job."""
        key = _file_key(entry)
        with self._lock:
            job = self._jobs.get(entry["id"])
            if job is None or job["key"] != key:
                job = {"key": key, "state": "new", "phase": "", "progress": 0.0, "error": "", "report": None}
                self._jobs[entry["id"]] = job
            if start and job["state"] == "new":
                job["state"], job["phase"] = "queued", "waiting for another trace to finish"
                self._pool.submit(self._run, entry, job)
            return job

    def _run(self, entry: dict, job: dict) -> None:
        from .. import cache
        from ..analyze import analyze
        from ..trace import hardware
        from ..trace.model import load_trace
        from ..trace.stream import native_enabled

        path = entry["path"]
        try:
            key = cache.key_for(
                path, {"steps": None, "native": native_enabled(), "hardware": hardware.override_signature()}
            )
            from ..report import Report

            report = cache.load(key)  # a Report: the cache checked its shape (a bad entry is a miss)
            if report is None:
                job["state"], job["phase"] = "running", "reading"

                def progress(frac: float) -> None:
                    job["progress"] = max(0.0, min(1.0, float(frac)))

                trace = load_trace(path, progress=progress)
                job["phase"], job["progress"] = "analysing", 1.0
                fresh = analyze(trace).to_dict()
                cache.store(key, fresh)
                report = Report.from_dict(fresh)  # the same form a cache hit has
            job["report"] = report
            job["state"] = "done"
        except MemoryError:
            job["error"] = f"{entry['rel']}: out of memory while reading the trace"
            job["state"] = "error"
        except TraceinspectError as e:
            msg = str(e).replace(path, entry["rel"])
            job["error"] = msg + (f" (hint: {e.hint})" if getattr(e, "hint", "") else "")
            job["state"] = "error"
        except Exception as e:  # a bug must show in place, not break the tab
            job["error"] = f"{entry['rel']}: internal error: {type(e).__name__}: {e}"
            job["state"] = "error"

    @staticmethod
    def _status(entry: dict, job: dict) -> dict:
        s = {
            "id": entry["id"],
            "state": job["state"],
            "phase": job["phase"],
            "progress": round(job["progress"], 3),
            "error": inert_text(job["error"]) if job["error"] else "",
        }
        rep = job["report"]
        if rep is not None:
            from ..report import known

            st, v = rep.steps, rep.verdict
            s["median_step_us"] = known(st.median_us)
            s["steps"] = known(st.count)
            s["top"] = known(v.top) or ""
            s["headline"] = inert_text(known(v.top_title) or known(v.headline) or "")
        return s

    # --- routes ------------------------------------------------------------------------------------
    @wrappers.Request.application
    def _serve_js(self, request):
        return http_util.Respond(request, (STATIC / "index.js").read_text(encoding="utf-8"), "application/javascript")

    @wrappers.Request.application
    def _serve_traces(self, request):
        listing = self._list()
        runs: dict[str, list] = {}
        for e in listing.values():
            runs.setdefault(e["run"], []).append(
                {
                    "name": inert_text(e["name"]),
                    "rel": inert_text(e["rel"]),
                    "bytes": e["bytes"],
                    **self._status(e, self._job(e, start=False)),
                }
            )
        body = {
            "runs": [{"run": inert_text(r), "traces": t} for r, t in sorted(runs.items())],
            "truncated": self._truncated,
        }
        return http_util.Respond(request, body, "application/json")

    @wrappers.Request.application
    def _serve_analyze(self, request):
        entry = self._entry(request)
        if entry is None:
            return _unknown(request)
        return http_util.Respond(request, self._status(entry, self._job(entry, start=True)), "application/json")

    @wrappers.Request.application
    def _serve_report(self, request):
        from ..render.html import render

        entry = self._entry(request)
        if entry is None:
            return _unknown(request)
        job = self._job(entry, start=True)
        if job["state"] != "done":
            return http_util.Respond(request, self._status(entry, job), "application/json", code=409)
        return http_util.Respond(request, render(job["report"]), "text/html")

    @wrappers.Request.application
    def _serve_diff(self, request):
        from ..diff import diff
        from ..render.html import render_diff

        a, b = self._entry(request, "a"), self._entry(request, "b")
        if a is None or b is None:
            return _unknown(request)
        ja, jb = self._job(a, start=True), self._job(b, start=True)
        if ja["state"] != "done" or jb["state"] != "done":
            return http_util.Respond(
                request, {"a": self._status(a, ja), "b": self._status(b, jb)}, "application/json", code=409
            )
        d = diff(ja["report"], jb["report"])
        return http_util.Respond(request, render_diff(d), "text/html")


def scan_logdir(logdir: Path) -> list[dict]:
    """Every trace file under logdir, as {id, run, name, rel, path, bytes}; run is the first directory
    below logdir ("." for files at its top). Links that lead outside the logdir are not followed."""
    out = []
    root = os.path.realpath(logdir)
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for fn in sorted(filenames):
            if not fn.endswith(SUFFIXES):
                continue
            full = os.path.join(dirpath, fn)
            real = os.path.realpath(full)
            if os.path.commonpath([root, real]) != root or not os.path.isfile(real):
                continue
            rel = os.path.relpath(full, root)
            parts = Path(rel).parts
            try:
                size = os.path.getsize(real)
            except OSError:
                continue
            out.append(
                {
                    "id": hashlib.sha256(rel.encode("utf-8", "surrogateescape")).hexdigest()[:16],
                    "run": parts[0] if len(parts) > 1 else ".",
                    "name": fn,
                    "rel": rel,
                    "path": real,
                    "bytes": size,
                }
            )
    return out


def _file_key(entry: dict) -> tuple:
    try:
        st = os.stat(entry["path"])
        return (st.st_size, st.st_mtime_ns)
    except OSError:
        return (None, None)


def _unknown(request):
    return http_util.Respond(
        request,
        {"error": "unknown trace: reload the list (only listed traces can be opened)"},
        "application/json",
        code=404,
    )
