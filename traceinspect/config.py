"""Configuration as ruff does it: `[tool.traceinspect]` in a pyproject.toml, found by walking up from
the working directory to the repository root (never from the trace), or an explicit file; detectors
selected or ignored by code or name; per-detector thresholds typed from the detector's declared
options (detectors/base.py option()).

    [tool.traceinspect]
    select = ["TI1", "host-bound"]      # codes, code prefixes or names; default: all
    ignore = ["padding-waste"]
    [tool.traceinspect.launch-bound]
    min_idle_frac = 0.05

Unknown keys, unknown detectors and badly typed values are UsageErrors (exit 2) naming the file and
the key. Library code: the messages name settings, never command-line flags.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import UsageError

TABLE = ("tool", "traceinspect")
TOP_KEYS = ("select", "ignore", "strict")


@dataclass(frozen=True)
class Config:
    select: tuple[str, ...] = ()  # empty: every detector
    ignore: tuple[str, ...] = ()
    options: dict[str, dict[str, Any]] = field(default_factory=dict)  # detector name -> {option: value}
    source: str | None = None  # the file the settings came from, if any
    strict: bool = False  # as --strict: exit 4 when a detector fails or the trace quality is poor

    def runs(self, det) -> bool:
        """Whether this configuration runs `det` (a detector class or a catalogue entry: code and name)."""
        chosen = not self.select or any(_matches(det, s) for s in self.select)
        return chosen and not any(_matches(det, s) for s in self.ignore)

    def codes(self) -> tuple[str, ...]:
        """The codes of the detectors this configuration runs, in registry order (read from the
        catalogue: no detector module is loaded)."""
        from .catalogue import CATALOGUE

        return tuple(e.code for e in CATALOGUE if self.runs(e))

    def detectors(self) -> tuple:
        """The registry's detectors this configuration runs, in registry order."""
        from .detectors import ALL

        return tuple(d for d in ALL if self.runs(d))

    def make(self, cls):
        """An instance of detector class `cls` with this configuration's thresholds."""
        return cls(**self.options.get(cls.name, {}))

    def non_default(self) -> dict[str, Any]:
        """What a report shows: the settings that differ from the defaults (empty when none do)."""
        out: dict[str, Any] = {}
        if self.select:
            out["select"] = list(self.select)
        if self.ignore:
            out["ignore"] = list(self.ignore)
        for det, opts in sorted(self.options.items()):
            for k, v in sorted(opts.items()):
                out[f"{det}.{k}"] = v
        from .catalogue import CATALOGUE

        on = set(self.codes())
        off = [f"{e.code} {e.name}" for e in CATALOGUE if e.code not in on]
        if off:  # named, so a report that checked less says exactly what it did not check
            out["detectors_off"] = off
        if out and self.source:
            out["source"] = self.source
        return out


def _matches(det, sel: str) -> bool:
    s = sel.strip()
    return s == det.name or (s.upper().startswith("TI") and det.code.startswith(s.upper()))


def _known(sel: str) -> bool:
    from .catalogue import CATALOGUE

    return any(_matches(e, sel) for e in CATALOGUE)


def _detector(name: str):
    from .detectors import BY_KEY

    return BY_KEY.get(name) or BY_KEY.get(name.upper())


def find_pyproject(start: str | Path | None = None) -> Path | None:
    """The nearest pyproject.toml with a [tool.traceinspect] table, walking up from `start` (default:
    the working directory) to the repository root (the first directory holding `.git`), as ruff does.
    Never pass a trace's directory: traces come from strangers and tickets, and a pyproject.toml
    beside one must not switch detectors off."""
    import tomllib

    here = Path(start).resolve() if start is not None else Path.cwd()
    if here.is_file() or not here.exists():
        here = here.parent
    for d in (here, *here.parents):
        p = d / "pyproject.toml"
        if p.is_file():
            try:
                doc = tomllib.loads(p.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError):
                doc = None  # someone else's broken file is not our configuration
            if isinstance(doc, dict) and isinstance(doc.get("tool"), dict) and "traceinspect" in doc["tool"]:
                return p
        if (d / ".git").exists():
            return None  # the repository root ends the search
    return None


def _typed(where: str, key: str, value: Any, default: Any) -> Any:
    """`value` as the type of the option's default (bool, int, float, str); a string (from a
    key=value setting) is parsed. Raises UsageError naming the key."""
    kind = type(default)
    try:
        if isinstance(value, str) and kind is not str:
            low = value.strip().lower()
            if kind is bool:
                if low not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError
                return low in ("true", "1", "yes")
            value = int(low) if kind is int else float(low)
        if kind is bool:
            if not isinstance(value, bool):
                raise ValueError
            return value
        if kind is int:
            if isinstance(value, bool) or not (
                isinstance(value, int) or isinstance(value, float) and value.is_integer()
            ):
                raise ValueError
            return int(value)
        if kind is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
                raise ValueError
            return float(value)
        if not isinstance(value, kind):
            raise ValueError
        return value
    except (ValueError, OverflowError):
        raise UsageError(
            f"{where}: {key} must be a {kind.__name__} (like {default!r}), not {repr(value)}",
            hint="see 'traceinspect detectors' for each detector's options",
        ) from None


def _names(where: str, key: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [v for v in value.split(",") if v.strip()]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UsageError(f"{where}: {key} must be a list of detector codes or names")
    for v in value:
        if not _known(v):
            raise UsageError(
                f"{where}: {key}: unknown detector {repr(v)}",
                hint="see 'traceinspect detectors' for the codes and names",
            )
    return tuple(v.strip() for v in value)


def _option(where: str, det_key: str, opt: str, value: Any, options: dict) -> None:
    det = _detector(det_key)
    if det is None:
        raise UsageError(
            f"{where}: unknown detector {repr(det_key)}", hint="see 'traceinspect detectors' for the codes and names"
        )
    declared = {name: default for name, default, _ in det.options()}
    if opt not in declared:
        raise UsageError(
            f"{where}: unknown option {repr(f'{det_key}.{opt}')} ({det.name} has: {', '.join(declared) or 'none'})"
        )
    options.setdefault(det.name, {})[opt] = _typed(where, f"{det_key}.{opt}", value, declared[opt])


def from_table(table: Any, where: str) -> Config:
    """A Config from the [tool.traceinspect] table of the file `where`."""
    if not isinstance(table, dict):
        raise UsageError(f"{where}: [tool.traceinspect] must be a table")
    select = ignore = ()
    strict = False
    options: dict[str, dict[str, Any]] = {}
    for key, value in table.items():
        if key == "strict":
            if not isinstance(value, bool):
                raise UsageError(f"{where}: strict must be true or false, not {repr(value)}")
            strict = value
        elif key == "select":
            select = _names(where, key, value)
        elif key == "ignore":
            ignore = _names(where, key, value)
        elif isinstance(value, dict) and _detector(key) is not None:
            for opt, v in value.items():
                _option(where, key, opt, v, options)
        else:
            raise UsageError(
                f"{where}: unknown key {repr(key)} in [tool.traceinspect]",
                hint="keys are select, ignore, strict and one table per detector name",
            )
    return Config(select=select, ignore=ignore, options=options, source=where, strict=strict)


def load(config_file: str | Path | None = None, start: str | Path | None = None) -> Config:
    """The configuration: the explicit file (a pyproject.toml or a TOML file whose [tool.traceinspect],
    or top level, holds the settings), else the nearest pyproject.toml from `start` (default: the
    working directory) up to the repository root, else defaults."""
    import tomllib

    path = Path(config_file) if config_file is not None else find_pyproject(start)
    if path is None:
        return Config()
    where = str(path)
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{where}: configuration file not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{where}: cannot read the configuration ({str(e)})") from None
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{where}: not valid TOML ({str(e)})") from None
    except RecursionError:
        raise UsageError(f"{where}: nested too deeply to be a configuration") from None
    tool = doc.get("tool")
    if isinstance(tool, dict) and "traceinspect" in tool:
        table = tool["traceinspect"]
    elif config_file is not None:  # a dedicated file: the settings at its top level
        table = {k: v for k, v in doc.items() if k != "tool"}
    else:
        table = {}
    return from_table(table, where)


def override(base: Config, *, select=None, ignore=None, settings=()) -> Config:
    """`base` with command-line style overrides: `select`/`ignore` lists replace the file's, and each
    setting "detector.option=value" is typed from the detector's declared option."""
    where = "settings"
    options = {k: dict(v) for k, v in base.options.items()}
    for s in settings:
        key, eq, value = s.partition("=")
        det_key, dot, opt = key.strip().partition(".")
        if not eq or not dot or not det_key or not opt:
            raise UsageError(
                f"setting {repr(s)} is not detector.option=value", hint="for example launch-bound.min_idle_frac=0.05"
            )
        _option(where, det_key, opt.strip(), value.strip(), options)
    given = bool(select or ignore or settings)
    source = base.source if not given else "command line" if not base.source else f"{base.source} + command line"
    return dataclasses.replace(
        base,
        source=source,
        select=_names(where, "select", list(select)) if select else base.select,
        ignore=_names(where, "ignore", list(ignore)) if ignore else base.ignore,
        options=options,
    )
