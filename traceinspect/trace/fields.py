"""The one declaration of every `args` field the readers take from a Kineto event.

Each entry names the field (the `Args` attribute and, for numbers, the native scanner's column of the
same name), the JSON key in `args`, its type and default, and the table columns it fills. From it come
the msgspec `Args` struct (`trace/load.py`), the scanner's column lists and `present` bits
(`trace/tables.py`) and the field list of docs/tables.md. The C scanner's key table (`_scan.c`
`parse_args`, its column enum and names) is checked against it by `tests/test_fields.py`, as are
both extraction functions (every declared column must carry the field's value from both readers).

Adding a field: one `Field(...)` here, the C enum entry, name and key line (the test says which is
missing), and the line in `tables._columnize` that puts it in its table column (both readers go
through it; `tables._event_columns` fills int and float fields from this list by itself).
Old spellings of a key are fields of their own with `old_of` set: the reader prefers the new one.
"""

from __future__ import annotations

from dataclasses import dataclass

# kind -> (Python type in Args, native scan column dtype); "raw" stays undecoded JSON (msgspec.Raw)
KINDS = ("int", "float", "str", "dims", "raw")


@dataclass(frozen=True)
class Field:
    name: str  # Args attribute; for int/float also the scan column
    key: str  # JSON key inside an event's "args"
    kind: str  # one of KINDS
    columns: tuple[str, ...]  # "table.column" it fills (the Tables kinds of tables._columnize)
    doc: str
    old_of: str | None = None  # an older spelling of this field: read only when the newer is absent
    nan_absent: bool = False  # float: an absent key is NaN in the columns (0 is a value of its own), not 0.0

    @property
    def default(self):
        """The value an absent key has in the columns (ints: -1, floats: 0.0 or NaN where nan_absent,
        strings: None)."""
        if self.nan_absent:
            return float("nan")
        return {"int": -1, "float": 0.0, "str": None, "dims": 0, "raw": None}[self.kind]


ARGS: tuple[Field, ...] = (
    Field(
        "correlation",
        "correlation",
        "int",
        ("kernel.correlation", "memcpy.correlation", "runtime.correlation"),
        "links a GPU event to the runtime call that launched it",
    ),
    Field(
        "external_id",
        "External id",
        "int",
        ("kernel.external_id", "memcpy.external_id", "runtime.external_id", "cpu_op.external_id"),
        "links runtime calls and GPU work to the CPU op",
    ),
    Field(
        "external_id_old",
        "external id",
        "int",
        ("cpu_op.external_id",),
        "the lower-case spelling of older Kineto",
        old_of="external_id",
    ),
    Field("device", "device", "int", ("kernel.device", "memcpy.device"), "GPU index (falls back to the event's pid)"),
    Field("stream", "stream", "int", ("kernel.stream", "memcpy.stream"), "stream id (falls back to the event's tid)"),
    Field("cbid", "cbid", "int", ("runtime.cbid",), "CUPTI runtime callback id"),
    Field("cid", "cid", "int", ("runtime.cbid",), "ROCm roctracer callback id", old_of="cbid"),
    Field("nbytes", "bytes", "float", ("memcpy.size_bytes",), "bytes copied or set"),
    Field("grid", "grid", "dims", ("kernel.grid_blocks",), "launch grid, [x, y, z]"),
    Field("block", "block", "dims", ("kernel.block_threads",), "threads per block, [x, y, z]"),
    Field("collective", "Collective name", "str", ("kernel.collective",), "NCCL/RCCL collective"),
    Field("in_msg_nelems", "In msg nelems", "int", ("kernel.in_msg_nelems",), "collective input elements"),
    Field("out_msg_nelems", "Out msg nelems", "int", ("kernel.out_msg_nelems",), "collective output elements"),
    Field("group_size", "Group size", "int", ("kernel.group_size",), "ranks in the collective's group"),
    Field("dtype", "dtype", "str", ("kernel.comm_dtype",), "collective element type"),
    Field("input_dims", "Input Dims", "raw", ("cpu_op.input_dims_raw",), "op input shapes (record_shapes)"),
    Field("input_dims_old", "Input dims", "raw", ("cpu_op.input_dims_raw",), "older spelling", old_of="input_dims"),
    Field("input_type", "Input type", "raw", ("cpu_op.input_type_raw",), "op input dtypes"),
    Field("name", "name", "str", (), 'process_name / thread_name of ph "M" events (thread names)'),
    Field("mem_bytes", "Bytes", "float", ("memory.alloc_bytes",), "[memory] instant: bytes allocated (<0 freed)"),
    Field(
        "total_allocated",
        "Total Allocated",
        "float",
        ("memory.total_allocated_bytes",),
        "[memory] instant: allocated after the event",
    ),
    Field(
        "total_reserved",
        "Total Reserved",
        "float",
        ("memory.total_reserved_bytes",),
        "[memory] instant: reserved by the caching allocator",
    ),
    Field("device_type", "Device Type", "int", ("memory.device_type",), "[memory] instant: 0 CPU, 1 CUDA"),
    Field("device_id", "Device Id", "int", ("memory.device_id",), "[memory] instant: device index"),
    Field(
        "wait_on_stream",
        "wait_on_stream",
        "int",
        ("sync.wait_on_stream",),
        "cuda_sync: the stream whose recorded event a Stream Wait Event waits on (-1 none)",
    ),
    Field(
        "wait_on_record",
        "wait_on_cuda_event_record_corr_id",
        "int",
        ("sync.wait_record_corr",),
        "cuda_sync: correlation id of the cudaEventRecord call whose event is waited on (-1 none)",
    ),
    Field(
        "flops",
        "flops",
        "float",
        ("cpu_op.flops",),
        "FLOPs torch.profiler(with_flops=True) recorded for the op (matrix ops: mm, addmm, bmm, conv, ...)",
        nan_absent=True,
    ),
)

BY_NAME = {f.name: f for f in ARGS}

# the native scanner's event-level int64 columns that have a `present` bit before the args ints
EVENT_INTS = ("pid", "tid", "id")
SCAN_INT_FIELDS = tuple(f.name for f in ARGS if f.kind == "int")
SCAN_FLOAT_FIELDS = tuple(f.name for f in ARGS if f.kind == "float")
# bit k of the scan's `present` column: the k-th int64 column holds a value (not absent or null)
PRESENT_BIT = {c: k for k, c in enumerate(EVENT_INTS + SCAN_INT_FIELDS)}


def args_struct(module: str):
    """The msgspec Struct of `args`: one typed pass skips every other key without building objects."""
    from typing import Annotated, Union

    import msgspec
    from msgspec import Raw

    int64 = Annotated[int, msgspec.Meta(ge=-(1 << 63), le=(1 << 63) - 1)]
    empty = Raw(b"")
    types = {
        "int": Union[int64, None],
        "float": Union[float, None],
        "str": Union[str, None],
        "dims": Union[list, None],
        "raw": Raw,
    }
    spec = []
    for f in ARGS:
        default = empty if f.kind == "raw" else None
        spec.append((f.name, types[f.kind], msgspec.field(default=default, name=f.key)))
    return msgspec.defstruct("Args", spec, gc=False, module=module)


def markdown_table() -> str:
    """The field list of docs/tables.md (between its `fields:begin` / `fields:end` markers)."""
    rows = ["| `args` key | type | read into | notes |", "|---|---|---|---|"]
    for f in ARGS:
        into = ", ".join(f"`{c}`" for c in f.columns) or "thread names"
        note = (
            f.doc
            + (f" (used where `{BY_NAME[f.old_of].key}` is absent)" if f.old_of else "")
            + ("; NaN where absent" if f.nan_absent else "")
        )
        rows.append(f"| `{f.key}` | {f.kind} | {into} | {note} |")
    return "\n".join(rows) + "\n"
