"""Writes the reader-agreement corpus (one small file per disagreement between the native scanner and
the Python reader found in issue 11 and by tests/test_differential.py) and EXPECT.json, what both
readers must give. Run from the repository root: python tests/corpus/readers/make_corpus.py"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).parent

# one launch and its kernel: correlation 7, 5 us launch at ts 90, kernel of 40 us at ts 100
LAUNCH = b'{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 90, "dur": 5, "args": {"correlation": 7}}'


def kernel(
    extra_args: bytes = b"", extra: bytes = b"", dur: bytes = b"40", corr: bytes = b"7", tid: bytes = b"7"
) -> bytes:
    return (
        b'{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": '
        + tid
        + b', "ts": 100, "dur": '
        + dur
        + extra
        + b', "args": {"correlation": '
        + corr
        + b', "device": 0, "stream": 7'
        + extra_args
        + b"}}"
    )


def doc(*events: bytes, after: bytes = b"") -> bytes:
    return b'{"schemaVersion": 1, "traceEvents": [' + b", ".join(events) + b"]" + after + b"}"


CASES: dict[str, tuple[bytes, dict]] = {
    # repeated key after a number that needs the slow conversion: the last value (5000) wins
    "dup_key_slow_number": (
        doc(LAUNCH, kernel(dur=b'1.00000000000000000000001, "dur": 5000')),
        {"values": {"kernels.dur_us": [5000.0]}},
    ),
    # ... and a later null makes it absent: the kernel has no duration and is left out
    "dup_key_null": (
        doc(LAUNCH, kernel(dur=b'1.00000000000000000000001, "dur": null')),
        {"values": {"kernels.dur_us": []}, "warnings": ["1 complete events had no 'dur'"]},
    ),
    # every occurrence is validated (as msgspec does): an out-of-range first value makes the event
    # invalid even though a later value replaces it; it is dropped, and counted
    "dup_key_out_of_range_first": (
        doc(LAUNCH, kernel(dur=b'1e400, "dur": 40')),
        {"values": {"kernels.dur_us": []}, "warnings": ["1 events had fields of unexpected types and were dropped"]},
    ),
    "dup_key_in_args": (doc(LAUNCH, kernel(corr=b'9, "correlation": 7')), {"values": {"kernels.correlation": [7]}}),
    # a repeated top-level traceEvents: the last array (one kernel of 2 us) is the trace
    "dup_top_level_events": (
        doc(LAUNCH, kernel(), after=b', "traceEvents": [' + kernel(dur=b"2") + b"]"),
        {"values": {"kernels.dur_us": [2.0]}},
    ),
    # a metadata key before the events and again, null, after them: null wins (as in one piece)
    "dup_top_level_null_after": (
        b'{"baseTimeNanoseconds": 5, ' + doc(LAUNCH, kernel(), after=b', "baseTimeNanoseconds": null')[1:],
        {"meta": {"base_time_ns": None}, "values": {"kernels.dur_us": [40.0]}},
    ),
    "dup_top_level_value_after": (
        b'{"baseTimeNanoseconds": 5, ' + doc(LAUNCH, kernel(), after=b', "baseTimeNanoseconds": 17')[1:],
        {"meta": {"base_time_ns": 17}},
    ),
    "dup_top_level_events_escaped": (
        doc(LAUNCH, kernel(), after=b', "trace\\u0045vents": [' + kernel(dur=b"2") + b"]"),
        {"values": {"kernels.dur_us": [2.0]}},
    ),
    # INT64_MIN is a value, not "absent" (absent would be -1)
    "int64_min_correlation": (
        doc(kernel(corr=b"-9223372036854775808")),
        {"values": {"kernels.correlation": [-9223372036854775808]}},
    ),
    # beyond int64 in args: that event's args are ignored (correlation -1, stream from tid 7), and counted
    "beyond_int64_correlation": (
        doc(LAUNCH, kernel(corr=b"18446744073709551616")),
        {
            "values": {"kernels.correlation": [-1], "kernels.stream": [7]},
            "warnings": ["1 events had fields of unexpected types (or integers beyond int64) that were ignored"],
        },
    ),
    # beyond int64 in tid: that field alone is ignored (the event kept, with its args), and counted
    "beyond_int64_tid": (
        doc(LAUNCH, kernel(tid=b"18446744073709551616")),
        {
            "values": {"kernels.dur_us": [40.0], "kernels.stream": [7], "kernels.correlation": [7]},
            "warnings": ["1 events had fields of unexpected types (or integers beyond int64) that were ignored"],
        },
    ),
    # escapes are checked in every string, also in keys and values nobody reads
    "invalid_escape_skipped": (doc(LAUNCH, kernel(extra=b', "zz": "\\q"')), {"error": "invalid escaped character"}),
    "invalid_hex_escape": (
        doc(LAUNCH, kernel(extra=b', "name2": "\\u12g4"')),
        {"error": "invalid character in unicode escape"},
    ),
    "lone_low_surrogate": (doc(LAUNCH, kernel(extra=b', "zz": "\\udc00"')), {"error": "invalid utf-16 surrogate pair"}),
    "lone_surrogate_middle": (
        doc(LAUNCH, kernel(extra=b', "zz": "\\ud800x"')),
        {"error": "unexpected end of hex escape"},
    ),
    # at the very end msgspec says "truncated": it is a lone surrogate, not a cut file
    "lone_surrogate_end": (
        doc(LAUNCH, kernel(), after=b', "zz": "\\ud800"'),
        {"error": "unexpected end of escaped utf-16 surrogate pair (byte {after_escape})"},
    ),
    # UTF-8 is checked in the strings the reader decodes ...
    "overlong_utf8_name": (
        doc(LAUNCH, kernel().replace(b'"name": "k"', b'"name": "\xc0\xaf"')),
        {"error": "Invalid UTF-8"},
    ),
    "surrogate_utf8_ph": (
        doc(LAUNCH, kernel().replace(b'"ph": "X"', b'"ph": "\xed\xa0\x80"')),
        {"error": "Invalid UTF-8"},
    ),
    "truncated_utf8_in_deferred_event": (
        doc(LAUNCH, kernel(extra=b', "n\\u0061me": "\xe2\x82"')),
        {"error": "Invalid UTF-8"},
    ),
    # ... and, as msgspec does, not in values it skips
    "invalid_utf8_skipped": (doc(LAUNCH, kernel(extra=b', "zz": "\xff"')), {"values": {"kernels.dur_us": [40.0]}}),
    # nesting: 128 levels is the limit (document 1, events 2, event 3, args 4, then 124 lists)
    "depth_at_limit": (
        doc(LAUNCH, kernel(extra_args=b', "deep": ' + b"[" * 124 + b"]" * 124)),
        {"values": {"kernels.dur_us": [40.0]}},
    ),
    "depth_over_limit": (
        doc(LAUNCH, kernel(extra_args=b', "deep": ' + b"[" * 125 + b"]" * 125)),
        {"error": "is nested deeper than 128 levels at byte {level_129} of its JSON"},
    ),
    "open_brackets": (b"[" * 100_000, {"error": "is nested deeper than 128 levels at byte 128 of its JSON"}),
    # a long fraction (the UBSan finding was an int overflow counting its digits)
    "long_fraction": (
        doc(LAUNCH, kernel(extra=b', "ts2": 0.' + b"0" * 5000 + b"1")),
        {"values": {"kernels.dur_us": [40.0]}},
    ),
}

if __name__ == "__main__":
    expect = {}
    for name, (data, exp) in CASES.items():
        if "error" in exp:  # byte offsets derived from the bytes: just after the last \ud800 escape, and the
            # 125th of the run of '[' (document, events, event and args make 4 levels before it)
            after_escape = data.rfind(b"\\ud800") + 6
            level_129 = data.find(b"[" * 125) + 124
            exp = {"error": exp["error"].format(after_escape=after_escape, level_129=level_129)}
        (HERE / f"{name}.json").write_bytes(data)
        expect[f"{name}.json"] = exp
    (HERE / "EXPECT.json").write_text(json.dumps(expect, indent=1, sort_keys=True) + "\n")
