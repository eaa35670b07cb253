"""Fast `isinstance` checks against runtime-checkable protocols on Python 3.11.

Haystack deep-copies every value passed between two components and first asks, for each leaf value, whether it is
a `Component` (a runtime-checkable `Protocol`). On Python 3.11 every such check walks the protocol's MRO again to
list its members (`typing._get_protocol_attrs`): about 50 microseconds a value, the largest share of a strategy's
orchestration overhead (a question passes thousands of values). Python 3.12 computes that list once per protocol;
`install()` gives 3.11 the same behaviour by caching it per class. A protocol's members are fixed when its class is
created, so the cached list is the list the check would compute.

Usage:
    from docqa import protocol_checks
    protocol_checks.install()   # idempotent; does nothing on Python 3.12 and later
"""

from __future__ import annotations

import functools
import sys
import typing

_installed = False


def install() -> None:
    """Cache each protocol's member list (Python 3.11 only)."""
    global _installed
    if _installed or sys.version_info >= (3, 12):
        return
    original = getattr(typing, "_get_protocol_attrs", None)
    if original is None:
        return
    typing._get_protocol_attrs = functools.lru_cache(maxsize=512)(original)  # type: ignore[attr-defined]
    _installed = True
