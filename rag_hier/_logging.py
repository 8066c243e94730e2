"""Progress-bar helper shared by every long-running operation."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def progress(
    iterable: Iterable[T], *, show_progress_bar: bool, desc: str, total: int | None = None, unit: str = "it"
) -> Iterator[T]:
    """Wrap ``iterable`` in a tqdm progress bar when ``show_progress_bar`` is true."""
    if not show_progress_bar:
        yield from iterable
        return
    from tqdm.auto import tqdm

    yield from tqdm(iterable, desc=desc, total=total, unit=unit, dynamic_ncols=True)
