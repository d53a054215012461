"""Where the time of one `analyze` goes, stage by stage, in one process.

    python bench/stages.py /tmp/traceinspect-bench/worker0-1G.pt.trace.json

Times the interpreter imports, the streaming read + typed decode + column extraction, the assembly
of the tables (categoricals, links), the timeline and the detectors; then repeats the load with the
column extraction stubbed out to split decode from extraction.
"""
import gc
import sys
import time

t00 = time.perf_counter()
import traceinspect.cli  # noqa: E402,F401
from traceinspect.analyze import analyze  # noqa: E402
from traceinspect.trace import stream as S  # noqa: E402
from traceinspect.trace.model import from_loaded  # noqa: E402

t0 = time.perf_counter()
path = sys.argv[1]
gc.disable()
ld = S.load_streaming(path, jobs=1)
t1 = time.perf_counter()
tr = from_loaded(ld)
t2 = time.perf_counter()
gc.enable()
tr.timeline
t3 = time.perf_counter()
analyze(tr)
t4 = time.perf_counter()
real_extract = S.extract
S.extract = lambda evs: real_extract([])
gc.disable()
ta = time.perf_counter()
S.load_streaming(path, jobs=1)
tb = time.perf_counter()
gc.enable()
S.extract = real_extract
print(f"imports {t0 - t00:.2f} s")
print(f"read + decode + extract {t1 - t0:.2f} s (read + decode alone {tb - ta:.2f} s)")
print(f"assemble + link {t2 - t1:.2f} s")
print(f"timeline {t3 - t2:.2f} s")
print(f"detectors + report {t4 - t3:.2f} s")
