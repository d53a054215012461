#!/bin/bash
# Start-up cost, fresh processes, best of 5 wall seconds: run from the repository root with PYTHONPATH=$PWD.
# Targets (issue 12): traceinspect --help under 0.2 s; import traceinspect.capture loads no pandas.
# best of 5 fresh-process wall times
best() { local b=999; for i in 1 2 3 4 5; do s=$(date +%s.%N); "$@" >/dev/null 2>&1; e=$(date +%s.%N); t=$(echo "$e - $s" | bc); (( $(echo "$t < $b" | bc) )) && b=$t; done; echo "$b"; }
echo "python3 -c pass:                     $(best python3 -c pass)"
echo "import traceinspect.capture:         $(best python3 -c 'import traceinspect.capture')"
echo "python3 -m traceinspect --help:      $(best python3 -m traceinspect --help)"
python3 -c 'import sys, traceinspect.capture; print("pandas loaded by capture:", "pandas" in sys.modules, "| analyze loaded:", "traceinspect.analyze" in sys.modules)'
