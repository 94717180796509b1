"""A clock tool: the current date and time in an IANA time zone."""

from __future__ import annotations

import datetime as _dt
import difflib
import functools
import zoneinfo

from agentrt.errors import ToolRetry
from agentrt.tool.base import tool

__all__ = ["current_time", "resolve_timezone"]

_UTC_NAMES = frozenset({"utc", "z", "zulu", "gmt", "etc/utc", "etc/gmt", "universal"})


@functools.lru_cache(maxsize=1)
def _zone_index() -> tuple[dict[str, str], dict[str, str]]:
    """Lower-cased zone name -> canonical name, and lower-cased city -> zone."""
    names = zoneinfo.available_timezones()
    by_lower = {name.lower(): name for name in names}
    cities: dict[str, str] = {}
    # Shortest first: where a city appears twice (America/Buenos_Aires and
    # America/Argentina/Buenos_Aires) the names are links to the same zone.
    for name in sorted(names, key=lambda n: (len(n), n), reverse=True):
        if "/" not in name or name.startswith(("Etc/", "SystemV/", "posix/", "right/")):
            continue
        cities[name.rsplit("/", 1)[1].replace("_", " ").lower()] = name
    return by_lower, cities


def resolve_timezone(name: str) -> zoneinfo.ZoneInfo | _dt.timezone:
    """Find the time zone a name refers to.

    Accepts IANA names in any case (``"Asia/Tokyo"``, ``"asia/tokyo"``), ``UTC``/``GMT``/``Z`` and
    the city part of an IANA name when it is unambiguous (``"Tokyo"``, ``"New York"``).

    Args:
        name: The time zone name.

    Returns:
        The time zone.

    Raises:
        ToolRetry: The name matches no time zone; the message suggests close names.
    """
    key = " ".join(name.strip().split())
    if key.lower() in _UTC_NAMES:
        return _dt.UTC
    if key and ".." not in key and not key.startswith("/"):
        try:
            return zoneinfo.ZoneInfo(key)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            pass
    by_lower, cities = _zone_index()
    lowered = key.lower()
    canonical = by_lower.get(lowered.replace(" ", "_")) or cities.get(lowered)
    if canonical is not None:
        return zoneinfo.ZoneInfo(canonical)
    close = difflib.get_close_matches(key, sorted(set(by_lower.values())), n=3, cutoff=0.6)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise ToolRetry(
        f"Unknown time zone {name!r}.{hint} Use an IANA time zone name such as 'UTC', 'Europe/Paris', "
        "'America/New_York' or 'Asia/Tokyo'."
    )


@tool(read_only=True)
def current_time(timezone: str = "UTC") -> str:
    """Get the current date and time in a time zone, as ISO-8601 with the UTC offset.

    Args:
        timezone: IANA time zone name, e.g. "UTC", "Europe/Paris", "America/New_York" or "Asia/Tokyo".
    """
    tz = resolve_timezone(timezone)
    return _now(tz).isoformat(timespec="seconds")


def _now(tz: _dt.tzinfo) -> _dt.datetime:
    # A seam for tests that need a fixed instant.
    return _dt.datetime.now(tz)
