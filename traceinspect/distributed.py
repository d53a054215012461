"""Optional Dask backend: map the per-rank analysis (a pure function file -> report dict) over a
Dask cluster; the reduction into one report stays local (multirank.reduce_ranks).

Install with `pip install -e '.[dask]' in the traceinspect checkout`; use with `traceinspect analyze DIR --scheduler ADDRESS`.
The files must be readable at the same paths on the workers (a shared filesystem).
"""

from __future__ import annotations

from typing import Callable, Iterable

from .errors import UsageError


def dask_mapper(address: str) -> Callable:
    try:
        from distributed import Client
    except ImportError:
        raise UsageError(
            "needs the optional extra: pip install -e '.[dask]' in the traceinspect checkout",
            param="scheduler",
            value=address,
        ) from None

    def mapper(fn: Callable, items: Iterable) -> list:
        try:
            client = Client(address, timeout="10s")
        except OSError as e:
            raise UsageError(f": cannot connect ({e})", param="scheduler", value=address) from None
        try:
            futures = client.map(fn, list(items), pure=False)
            return client.gather(futures)
        finally:
            client.close()

    return mapper
