"""The plugin's backend: lists the traces under the logdir, analyses them in the background (the newest
BACKGROUND_MAX_TRACES from the first list request on, any other one when it is opened; with progress),
caches the reports, and serves the HTML report and diffs the renderers make.

Paths from the logdir are untrusted: a request names a trace by an id this module gave out when it listed
the logdir, never by a path, so nothing outside the listing can be opened. Names and errors leave as JSON
values (the frontend shows them as text) or inside the HTML report (escaped, no script, its CSP kept).
Holds no analysis logic: load, analyse and render are the library's.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import deque
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
# A list request queues the analysis of the newest BACKGROUND_MAX_TRACES listed traces (by modification
# time) of at most BACKGROUND_MAX_BYTES on disk, so the list shows their step time, top finding and trace
# quality without anyone opening them; any other trace is analysed when it is opened.
BACKGROUND_MAX_TRACES = 64
BACKGROUND_MAX_BYTES = 256 << 20  # a bigger file can take GiBs of memory to read: only on request


class TraceinspectPlugin(base_plugin.TBPlugin):
    plugin_name = PLUGIN_NAME

    def __init__(self, context):
        self._logdir = Path(context.logdir).resolve() if context.logdir else None
        self._lock = threading.Lock()
        self._listing: dict[str, dict] = {}
        self._listed_at = -1e9
        self._truncated = 0
        # id -> {"key", "entry", "state", "phase", "progress", "error", "report"}; state is new (not queued),
        # queued, running, done or broken (error holds its one line)
        self._jobs: dict[str, dict] = {}
        # one analysis at a time: a logdir of big traces must not take every core from the training job.
        # Queued jobs wait here, not in the pool: a trace the user opens goes before the background ones,
        # and the pool holds at most one task (_pump), so an exiting server does not first read them all.
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="traceinspect")
        self._wanted: deque[dict] = deque()  # opened by the user, in the order asked
        self._background: deque[dict] = deque()  # queued by a list request, newest first
        self._pumping = False  # a _pump is submitted or running
        self._idle = threading.Condition(self._lock)

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
    def _job(self, entry: dict, start: bool, background: bool = False) -> dict:
        """The job for a listed trace; queued (once) when `start`, behind the other opened traces but
        before the background ones unless `background`. A rewritten file gets a new job."""
        key = _file_key(entry)
        with self._lock:
            job = self._jobs.get(entry["id"])
            if job is None or job["key"] != key:
                job = {
                    "key": key,
                    "entry": entry,
                    "state": "new",
                    "phase": "",
                    "progress": 0.0,
                    "error": "",
                    "report": None,
                }
                self._jobs[entry["id"]] = job
            if start and job["state"] == "new":
                job["state"], job["phase"] = "queued", "waiting for another trace to finish"
                (self._background if background else self._wanted).append(job)
            elif start and not background and job["state"] == "queued" and _drop(self._background, job):
                self._wanted.append(job)  # queued in the background, now opened: it goes next
            self._schedule()
            return job

    def _queue_background(self, listing: dict[str, dict]) -> None:
        """Queue the newest BACKGROUND_MAX_TRACES listed traces (ties in listing order) of at most
        BACKGROUND_MAX_BYTES. One already analysed or queued is left as it is."""
        newest = sorted(listing.values(), key=lambda e: -e["mtime_ns"])
        picked = [e for e in newest if e["bytes"] <= BACKGROUND_MAX_BYTES][: max(0, BACKGROUND_MAX_TRACES)]
        for e in picked:
            self._job(e, start=True, background=True)

    def _schedule(self) -> None:
        """Submit the pump if a job waits and none is submitted (called with the lock held)."""
        if self._pumping or not (self._wanted or self._background):
            self._idle.notify_all()
            return
        try:
            self._pool.submit(self._pump)
            self._pumping = True
        except RuntimeError:  # the pool is shut down (the interpreter is exiting): nothing more starts
            self._idle.notify_all()

    def _pump(self) -> None:
        """Run the next job (an opened trace first), then submit itself again if more wait."""
        try:
            with self._lock:
                queue = self._wanted or self._background  # both empty after close()
                job = queue.popleft() if queue else None
                # skipped if a rewrite of the file replaced it meanwhile (the new job is queued on its own)
                current = job is not None and self._jobs.get(job["entry"]["id"]) is job
            if current:
                self._run(job["entry"], job)
        finally:
            with self._lock:
                self._pumping = False
                self._schedule()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until no job is queued or running (True), or `timeout` seconds pass (False)."""
        with self._lock:
            return self._idle.wait_for(lambda: not self._pumping, timeout)

    def close(self) -> None:
        """Drop the queued jobs and wait for the running one (tests; TensorBoard never calls it)."""
        with self._lock:
            self._wanted.clear()
            self._background.clear()
        self._pool.shutdown(wait=True)

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
            job["state"] = "broken"
        except TraceinspectError as e:
            msg = str(e).replace(path, entry["rel"])
            job["error"] = msg + (f" (hint: {e.hint})" if getattr(e, "hint", "") else "")
            job["state"] = "broken"
        except Exception as e:  # a bug must show in place, not break the tab
            job["error"] = f"{entry['rel']}: internal error: {type(e).__name__}: {e}"
            job["state"] = "broken"

    @staticmethod
    def _status(entry: dict, job: dict) -> dict:
        """A job as JSON; a done one with what its report says (every string as inert text): the median
        step time, the top finding (name and title, or the headline that says why there is none) and the
        trace quality (status and the report's trust line)."""
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

            st, v, q = rep.steps, rep.verdict, rep.trace_quality
            s["median_step_us"] = known(st.median_us)
            s["steps"] = known(st.count)
            s["top"] = inert_text(known(v.top) or "")
            s["top_title"] = inert_text(known(v.top_title) or "")
            s["headline"] = inert_text(known(v.top_title) or known(v.headline) or "")
            s["quality"] = inert_text(known(q.status) or "")
            s["quality_line"] = inert_text(known(q.line) or "")
        return s

    # --- routes ------------------------------------------------------------------------------------
    @wrappers.Request.application
    def _serve_js(self, request):
        return http_util.Respond(request, (STATIC / "index.js").read_text(encoding="utf-8"), "application/javascript")

    @wrappers.Request.application
    def _serve_traces(self, request):
        listing = self._list()
        self._queue_background(listing)  # a trace new to the logdir is queued now
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
            "background_max_traces": BACKGROUND_MAX_TRACES,
            "background_max_bytes": BACKGROUND_MAX_BYTES,
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
    """Every trace file under logdir, as {id, run, name, rel, path, bytes, mtime_ns}; run is the first directory
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
                st = os.stat(real)
            except OSError:
                continue
            out.append(
                {
                    "id": hashlib.sha256(rel.encode("utf-8", "surrogateescape")).hexdigest()[:16],
                    "run": parts[0] if len(parts) > 1 else ".",
                    "name": fn,
                    "rel": rel,
                    "path": real,
                    "bytes": st.st_size,
                    "mtime_ns": st.st_mtime_ns,
                }
            )
    return out


def _file_key(entry: dict) -> tuple:
    try:
        st = os.stat(entry["path"])
        return (st.st_size, st.st_mtime_ns)
    except OSError:
        return (None, None)


def _drop(queue: deque, job: dict) -> bool:
    """Remove `job` (by identity) from `queue`; whether it was there."""
    for i, j in enumerate(queue):
        if j is job:
            del queue[i]
            return True
    return False


def _unknown(request):
    return http_util.Respond(
        request,
        {"error": "unknown trace: reload the list (only listed traces can be opened)"},
        "application/json",
        code=404,
    )
