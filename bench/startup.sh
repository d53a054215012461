#!/bin/bash
# Start-up cost and analyze vs the raw decode: see bench/startup.py (this wrapper is kept for old notes).
# Run from the repository root: bench/startup.sh [--trace FILE] [--runs 5]
exec python3 "$(dirname "$0")/startup.py" "$@"
