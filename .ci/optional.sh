# Optional test suites for .ci/run (sourced; tests/test_ci.py runs it with a fake pip).
#
#   optional SUITE COMMAND...   run COMMAND (an install); when it fails, SUITE's tests skip and the
#                               suite is counted in SKIPPED, unless .ci/expected-optional lists SUITE:
#                               it installed before, so a failure now is a regression (BROKEN)
#   optional_summary            print the visible count of skipped suites; return 1 when one broke
#
# EXPECTED_OPTIONAL overrides the list's path (tests).
SKIPPED=()
BROKEN=()
EXPECTED_OPTIONAL="${EXPECTED_OPTIONAL:-$(dirname "${BASH_SOURCE[0]}")/expected-optional}"

expected_optional() {   # SUITE: listed on a line of its own (comments and blanks ignored); no pipe,
  [ -f "$EXPECTED_OPTIONAL" ] || return 1   # so that pipefail cannot turn a match into a failure
  local line
  while IFS= read -r line || [ -n "$line" ]; do
    line="${line%%#*}"
    line="${line//[[:space:]]/}"
    [ "$line" = "$1" ] && return 0
  done < "$EXPECTED_OPTIONAL"
  return 1
}

optional() {
  local suite="$1"
  shift
  if "$@" >/dev/null 2>&1; then
    return 0
  fi
  if expected_optional "$suite"; then
    echo "CI: optional suite '$suite' failed to install, and .ci/expected-optional says it installed before" >&2
    BROKEN+=("$suite")
  else
    echo "CI: optional suite '$suite' not installed; its tests skip" >&2
    SKIPPED+=("$suite")
  fi
  return 0
}

optional_summary() {
  echo "CI: ${#SKIPPED[@]} optional suite(s) skipped${SKIPPED[*]:+: ${SKIPPED[*]}}" >&2
  if [ "${#BROKEN[@]}" -gt 0 ]; then
    echo "CI: FAILED: ${#BROKEN[@]} optional suite(s) that installed before failed to install: ${BROKEN[*]}" \
         "(fix the install, or remove the suite from .ci/expected-optional on purpose)" >&2
    return 1
  fi
  return 0
}
