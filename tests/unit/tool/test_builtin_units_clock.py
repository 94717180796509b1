"""Unit conversion and the clock tool."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from agentrt.errors import ToolRetry
from agentrt.tool.builtin import clock as clock_module
from agentrt.tool.builtin import convert_units, current_time
from agentrt.tool.builtin.units import convert, find_unit, known_units


# -- units ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "src", "dst", "expected"),
    [
        (5, "mi", "km", 8.04672),
        (5, "miles", "kilometers", 8.04672),
        (1, "km", "m", 1000),
        (12, "in", "ft", 1),
        (3, "feet", "inches", 36),
        (1, "mile", "feet", 5280),
        (100, "cm", "m", 1),
        (1, "nmi", "m", 1852),
        (1, "kg", "lb", 2.2046226218),
        (1, "lbs", "g", 453.59237),
        (16, "oz", "lb", 1),
        (1, "t", "kg", 1000),
        (1, "h", "s", 3600),
        (90, "minutes", "hours", 1.5),
        (1, "week", "days", 7),
        (1, "year", "days", 365.25),
        (1, "gal", "L", 3.785411784),
        (1000, "ml", "l", 1),
        (1, "m3", "L", 1000),
        (1, "cup", "tbsp", 16),
        (60, "mph", "km/h", 96.56064),
        (10, "m/s", "km/h", 36),
        (1, "knot", "km/h", 1.852),
        (1, "GiB", "MiB", 1024),
        (1, "GB", "MB", 1000),
        (8, "bit", "B", 1),
        (100, "Mbit", "MB", 12.5),
        (1, "MB", "Mb", 8),
        (1, "ha", "m2", 10000),
        (1, "acre", "m²", 4046.8564224),
    ],
)
def test_converts_numerically(value: float, src: str, dst: str, expected: float) -> None:
    assert convert(value, src, dst) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize(
    ("value", "src", "dst", "expected"),
    [
        (0, "°C", "°F", 32),
        (100, "C", "F", 212),
        (-40, "celsius", "fahrenheit", -40),
        (98.6, "degrees Fahrenheit", "degrees Celsius", 37),
        (0, "K", "C", -273.15),
        (25, "°C", "K", 298.15),
        (32, "F", "K", 273.15),
        (491.67, "°R", "°F", 32),
        (0, "℃", "℉", 32),
    ],
)
def test_temperature_is_affine(value: float, src: str, dst: str, expected: float) -> None:
    assert convert(value, src, dst) == pytest.approx(expected, abs=1e-9)


def test_temperature_round_trip_and_differences_are_not_scaled_only() -> None:
    # An affine conversion: 10 °C is not 10 * 9/5 °F.
    assert convert(10, "C", "F") == pytest.approx(50)
    assert convert(convert(123.4, "F", "C"), "C", "F") == pytest.approx(123.4)


def test_below_absolute_zero_is_refused() -> None:
    with pytest.raises(ToolRetry, match="absolute zero"):
        convert(-300, "C", "K")


def test_aliases_resolve_to_one_unit() -> None:
    for name in ("km", "kilometer", "kilometers", "kilometre", "KM", "Kilometres"):
        assert find_unit(name) == find_unit("km"), name
    for name in ("lb", "lbs", "pound", "pounds"):
        assert find_unit(name) == find_unit("lb"), name
    for name in ("°C", "C", "celsius", "Celsius", "degrees celsius", "degC"):
        assert find_unit(name) == find_unit("°C"), name
    assert find_unit("Mb") != find_unit("MB")  # megabit vs megabyte: symbols are case-sensitive first
    assert find_unit("furlong") is None


def test_incompatible_dimensions_are_refused_with_the_known_units() -> None:
    with pytest.raises(ToolRetry) as info:
        convert(1, "km", "kg")
    message = info.value.message
    assert "length" in message and "mass" in message
    assert "lb" in message and "mi" in message
    with pytest.raises(ToolRetry, match="temperature"):
        convert(1, "C", "m")


def test_unknown_units_are_refused_with_the_known_units() -> None:
    with pytest.raises(ToolRetry) as info:
        convert(1, "furlong", "m")
    message = info.value.message
    assert "'furlong'" in message
    for dimension in known_units():
        assert dimension in message
    with pytest.raises(ToolRetry, match="target unit 'parsec'"):
        convert(1, "m", "parsec")


def test_non_finite_values_are_refused() -> None:
    with pytest.raises(ToolRetry, match="finite"):
        convert(float("nan"), "m", "km")


def test_convert_units_tool_output_and_schema() -> None:
    assert convert_units(5, "miles", "km") == "5 mi = 8.04672 km"
    assert convert_units(100, "celsius", "F") == "100 °C = 212 °F"
    assert convert_units.read_only
    props = convert_units.schema().parameters["properties"]
    assert props["value"]["type"] == "number"
    assert set(convert_units.schema().parameters["required"]) == {"value", "from_unit", "to_unit"}


async def test_convert_units_validates_arguments_through_the_tool_path() -> None:
    from agentrt.context import RuntimeContext

    result = await convert_units.invoke({"value": 2, "from_unit": "kg", "to_unit": "g"}, RuntimeContext())
    assert result == "2 kg = 2000 g"


# -- clock ------------------------------------------------------------------------------------------
ISO = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}[+-]\d{2}:\d{2}$")


def test_current_time_is_iso_8601_with_the_zone_offset() -> None:
    utc = current_time()
    assert ISO.match(utc), utc
    assert utc.endswith("+00:00")
    tokyo = current_time("Asia/Tokyo")  # no daylight saving time: always +09:00
    assert ISO.match(tokyo), tokyo
    assert tokyo.endswith("+09:00")
    assert current_time("Asia/Kolkata").endswith("+05:30")


def test_current_time_is_now() -> None:
    before = dt.datetime.now(dt.UTC).replace(microsecond=0)
    value = dt.datetime.fromisoformat(current_time("Europe/Paris"))
    after = dt.datetime.now(dt.UTC)
    assert before <= value <= after


def test_current_time_with_a_fixed_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    fixed = dt.datetime(2024, 7, 1, 12, 0, 0, tzinfo=dt.UTC)
    monkeypatch.setattr(clock_module, "_now", lambda tz: fixed.astimezone(tz))
    assert current_time("America/New_York") == "2024-07-01T08:00:00-04:00"  # daylight saving time
    assert current_time("Europe/London") == "2024-07-01T13:00:00+01:00"
    assert current_time("UTC") == "2024-07-01T12:00:00+00:00"


@pytest.mark.parametrize("name", ["asia/tokyo", "Tokyo", "  Asia/Tokyo "])
def test_current_time_accepts_loose_zone_names(name: str) -> None:
    assert current_time(name).endswith("+09:00")


@pytest.mark.parametrize("name", ["utc", "GMT", "Z"])
def test_utc_aliases(name: str) -> None:
    assert current_time(name).endswith("+00:00")


def test_unknown_zone_is_named_with_suggestions() -> None:
    with pytest.raises(ToolRetry) as info:
        current_time("Asia/Tokio")
    assert "'Asia/Tokio'" in info.value.message
    assert "Asia/Tokyo" in info.value.message
    with pytest.raises(ToolRetry, match="'Atlantis'"):
        current_time("Atlantis")


@pytest.mark.parametrize("name", ["../../etc/passwd", "/etc/localtime", ""])
def test_path_like_zone_names_are_refused(name: str) -> None:
    with pytest.raises(ToolRetry, match="Unknown time zone"):
        current_time(name)


def test_clock_is_read_only() -> None:
    assert current_time.read_only
    assert current_time.schema().parameters["properties"]["timezone"]["default"] == "UTC"
