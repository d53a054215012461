"""Where the time of one `analyze` goes, stage by stage, in one process.

    python bench/stages.py /tmp/traceinspect-bench/worker0-1G.pt.trace.json [--python-decoder]

Times the interpreter imports, the streaming read + decode into columns (the native scanner when it
is built, else msgspec + Python extraction; --python-decoder forces the latter, as
TRACEINSPECT_NATIVE=0 does), the assembly of the tables (categoricals, links), the timeline and
the detectors.
"""

import gc
import os
import sys
import time

if "--python-decoder" in sys.argv:
    os.environ["TRACEINSPECT_NATIVE"] = "0"
    sys.argv.remove("--python-decoder")

t00 = time.perf_counter()
import traceinspect.cli  # noqa: E402,F401
from traceinspect.analyze import analyze  # noqa: E402
from traceinspect.trace import stream as S  # noqa: E402
from traceinspect.trace.model import default_jobs, from_loaded  # noqa: E402

t0 = time.perf_counter()
path = sys.argv[1]
gc.disable()
ld = S.load_streaming(path, jobs=default_jobs(path))  # as `analyze` does without -j
t1 = time.perf_counter()
tr = from_loaded(ld)
t2 = time.perf_counter()
gc.enable()
tr.timeline
t3 = time.perf_counter()
analyze(tr)
t4 = time.perf_counter()
decoder = "native scanner" if S.native_enabled() else "msgspec + Python extraction"
print(f"imports {t0 - t00:.2f} s")
print(f"read + decode into columns ({decoder}, {default_jobs(path)} way) {t1 - t0:.2f} s")
print(f"assemble + link {t2 - t1:.2f} s")
print(f"timeline {t3 - t2:.2f} s")
print(f"detectors + report {t4 - t3:.2f} s")
print(f"total {t4 - t00:.2f} s")
