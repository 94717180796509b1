"""A unit conversion tool: length, area, mass, time, volume, speed, data size and temperature.

Every unit but the temperatures is a factor to its dimension's base unit (metre, square metre,
kilogram, second, litre, metre per second, byte); temperatures are affine (an offset as well as a
scale), so they go through kelvin. Units are found by symbol (case-sensitive first, so ``Mb``
megabit and ``MB`` megabyte differ), then by name or alias in any case, singular or plural.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from agentrt.errors import ToolRetry
from agentrt.tool.base import tool
from agentrt.tool.builtin.calculator import format_number

__all__ = ["Unit", "convert", "convert_units", "find_unit", "known_units"]


@dataclass(frozen=True, slots=True)
class Unit:
    """A unit of measure: its symbol, dimension and conversion to the dimension's base unit."""

    symbol: str
    dimension: str
    factor: float = 1.0
    """Base units per one of this unit."""
    offset: float = 0.0
    """Added after scaling (temperatures only): ``base = value * factor + offset``."""

    def to_base(self, value: float) -> float:
        """`value` in this unit, expressed in the base unit."""
        return value * self.factor + self.offset

    def from_base(self, value: float) -> float:
        """`value` in the base unit, expressed in this unit."""
        return (value - self.offset) / self.factor


# (symbol, factor, names and aliases); plurals of the names ending in a letter are added automatically.
_Table = list[tuple[str, float, tuple[str, ...]]]
_INCH = 0.0254
_FOOT = 0.3048
_MILE = 1609.344
_POUND = 0.45359237
_US_GALLON = 3.785411784
_DAY = 86400.0
_YEAR = 365.25 * _DAY  # Julian year

_DIMENSIONS: dict[str, _Table] = {
    "length": [
        ("m", 1.0, ("meter", "metre")),
        ("km", 1000.0, ("kilometer", "kilometre", "kms")),
        ("cm", 0.01, ("centimeter", "centimetre")),
        ("mm", 0.001, ("millimeter", "millimetre")),
        ("µm", 1e-6, ("um", "micrometer", "micrometre", "micron")),
        ("nm", 1e-9, ("nanometer", "nanometre")),
        ("mi", _MILE, ("mile", "statute mile")),
        ("yd", 0.9144, ("yard",)),
        ("ft", _FOOT, ("foot", "feet", "'")),
        ("in", _INCH, ("inch", "inches", '"')),
        ("nmi", 1852.0, ("nautical mile", "NM")),
        ("ly", 9460730472580800.0, ("light year", "light-year", "lightyear")),
        ("au", 149597870700.0, ("AU", "astronomical unit")),
    ],
    "area": [
        ("m²", 1.0, ("m2", "m^2", "sq m", "square meter", "square metre")),
        ("km²", 1e6, ("km2", "km^2", "sq km", "square kilometer", "square kilometre")),
        ("cm²", 1e-4, ("cm2", "cm^2", "sq cm", "square centimeter", "square centimetre")),
        ("ha", 1e4, ("hectare",)),
        ("acre", 4046.8564224, ("ac",)),
        ("ft²", _FOOT**2, ("ft2", "ft^2", "sq ft", "square foot", "square feet")),
        ("in²", _INCH**2, ("in2", "in^2", "sq in", "square inch", "square inches")),
        ("mi²", _MILE**2, ("mi2", "mi^2", "sq mi", "square mile")),
    ],
    "mass": [
        ("kg", 1.0, ("kilogram", "kilo", "kgs")),
        ("g", 0.001, ("gram", "gramme")),
        ("mg", 1e-6, ("milligram",)),
        ("µg", 1e-9, ("ug", "mcg", "microgram")),
        ("t", 1000.0, ("tonne", "metric ton", "ton")),
        ("lb", _POUND, ("pound", "lbs")),
        ("oz", _POUND / 16, ("ounce",)),
        ("st", 6.35029318, ("stone",)),
        ("short ton", 907.18474, ("us ton",)),
        ("long ton", 1016.0469088, ("imperial ton", "uk ton")),
    ],
    "time": [
        ("s", 1.0, ("sec", "second", "secs")),
        ("ms", 1e-3, ("millisecond", "msec")),
        ("µs", 1e-6, ("us", "microsecond")),
        ("ns", 1e-9, ("nanosecond",)),
        ("min", 60.0, ("minute", "mins")),
        ("h", 3600.0, ("hr", "hour", "hrs")),
        ("d", _DAY, ("day",)),
        ("wk", 7 * _DAY, ("week", "wks")),
        ("mo", _YEAR / 12, ("month",)),
        ("yr", _YEAR, ("year", "y", "yrs")),
        ("decade", 10 * _YEAR, ()),
        ("century", 100 * _YEAR, ("centuries",)),
    ],
    "volume": [
        ("L", 1.0, ("l", "liter", "litre", "ltr")),
        ("mL", 1e-3, ("ml", "milliliter", "millilitre", "cc", "cm3", "cm^3", "cm³")),
        ("cL", 1e-2, ("cl", "centiliter", "centilitre")),
        ("dL", 0.1, ("dl", "deciliter", "decilitre")),
        ("m³", 1000.0, ("m3", "m^3", "cubic meter", "cubic metre")),
        ("gal", _US_GALLON, ("gallon", "us gallon", "gals")),
        ("imp gal", 4.54609, ("imperial gallon", "uk gallon")),
        ("qt", _US_GALLON / 4, ("quart", "us quart")),
        ("pt", _US_GALLON / 8, ("pint", "us pint")),
        ("cup", _US_GALLON / 16, ("us cup",)),
        ("fl oz", _US_GALLON / 128, ("floz", "fluid ounce", "us fluid ounce")),
        ("tbsp", _US_GALLON / 256, ("tablespoon",)),
        ("tsp", _US_GALLON / 768, ("teaspoon",)),
        ("ft³", _FOOT**3 * 1000, ("ft3", "ft^3", "cu ft", "cubic foot", "cubic feet")),
        ("in³", _INCH**3 * 1000, ("in3", "in^3", "cu in", "cubic inch", "cubic inches")),
    ],
    "speed": [
        ("m/s", 1.0, ("mps", "meter per second", "meters per second", "metre per second", "metres per second")),
        (
            "km/h",
            1000 / 3600,
            (
                "kph",
                "kmh",
                "km/hr",
                "kmph",
                "kilometer per hour",
                "kilometers per hour",
                "kilometre per hour",
                "kilometres per hour",
            ),
        ),
        ("mph", _MILE / 3600, ("mi/h", "mi/hr", "mile per hour", "miles per hour")),
        ("kn", 1852 / 3600, ("kt", "knot", "kts")),
        ("ft/s", _FOOT, ("fps", "foot per second", "feet per second")),
    ],
    "data size": [
        ("B", 1.0, ("byte", "octet")),
        ("bit", 0.125, ("b",)),
        ("kB", 1e3, ("KB", "kilobyte")),
        ("MB", 1e6, ("megabyte",)),
        ("GB", 1e9, ("gigabyte",)),
        ("TB", 1e12, ("terabyte",)),
        ("PB", 1e15, ("petabyte",)),
        ("KiB", 1024.0, ("kibibyte",)),
        ("MiB", 1024.0**2, ("mebibyte",)),
        ("GiB", 1024.0**3, ("gibibyte",)),
        ("TiB", 1024.0**4, ("tebibyte",)),
        ("PiB", 1024.0**5, ("pebibyte",)),
        ("kbit", 125.0, ("Kb", "kilobit")),
        ("Mbit", 125e3, ("Mb", "megabit")),
        ("Gbit", 125e6, ("Gb", "gigabit")),
        ("Tbit", 125e9, ("Tb", "terabit")),
    ],
}
_TEMPERATURES: list[tuple[str, float, float, tuple[str, ...]]] = [
    # symbol, factor, offset (kelvin = value * factor + offset), aliases
    ("°C", 1.0, 273.15, ("C", "degC", "deg C", "celsius", "centigrade", "degree celsius", "degrees celsius", "℃")),
    (
        "°F",
        5 / 9,
        273.15 - 32 * 5 / 9,
        ("F", "degF", "deg F", "fahrenheit", "degree fahrenheit", "degrees fahrenheit", "℉"),
    ),
    ("K", 1.0, 0.0, ("kelvin", "kelvins", "degK")),
    ("°R", 5 / 9, 0.0, ("R", "rankine", "degR")),
]
# Plurals that are not name + "s".
_IRREGULAR = {"foot": "feet", "inch": "inches", "century": "centuries", "square foot": "square feet"}


def _build() -> tuple[dict[str, Unit], dict[str, Unit], dict[str, list[str]]]:
    exact: dict[str, Unit] = {}
    folded: dict[str, Unit] = {}
    listing: dict[str, list[str]] = {}

    def add(unit: Unit, names: tuple[str, ...]) -> None:
        listing.setdefault(unit.dimension, []).append(unit.symbol)
        exact.setdefault(unit.symbol, unit)
        for name in (unit.symbol, *names):
            exact.setdefault(name, unit)
            forms = [name]
            if name[-1:].isalpha() and len(name) > 2 and name.lower() == name:
                forms.append(_IRREGULAR.get(name, name + "s"))
            for form in forms:
                exact.setdefault(form, unit)
                folded.setdefault(_fold(form), unit)

    for dimension, table in _DIMENSIONS.items():
        for symbol, factor, names in table:
            add(Unit(symbol, dimension, factor), names)
    for symbol, factor, offset, names in _TEMPERATURES:
        add(Unit(symbol, "temperature", factor, offset), names)
    return exact, folded, listing


def _fold(name: str) -> str:
    text = " ".join(name.replace("degrees ", "degree ").split()).lower()
    return text.removesuffix(".")


_EXACT, _FOLDED, _LISTING = _build()


def known_units() -> dict[str, list[str]]:
    """The unit symbols known, by dimension."""
    return {dimension: list(symbols) for dimension, symbols in _LISTING.items()}


def _known_text() -> str:
    return "; ".join(f"{dimension}: {', '.join(symbols)}" for dimension, symbols in _LISTING.items())


def find_unit(name: str) -> Unit | None:
    """The unit a symbol, name or alias refers to (``"km"``, ``"kilometres"``, ``"°C"``), or None.

    Args:
        name: The unit as written.

    Returns:
        The unit, or None when the name is unknown.
    """
    text = " ".join(name.strip().split())
    unit = _EXACT.get(text)
    if unit is not None:
        return unit
    folded = _fold(text)
    unit = _FOLDED.get(folded)
    if unit is None and folded.startswith("degree "):
        unit = _FOLDED.get(folded.removeprefix("degree "))
    if unit is None and folded.startswith("°"):
        unit = _FOLDED.get(folded[1:])
    return unit


def _lookup(name: str, role: str) -> Unit:
    unit = find_unit(name)
    if unit is None:
        raise ToolRetry(f"Unknown {role} unit {name!r}. Known units: {_known_text()}.")
    return unit


def convert(value: float, from_unit: str, to_unit: str) -> float:
    """Convert `value` between two units of the same dimension.

    Args:
        value: The quantity in `from_unit`.
        from_unit: The unit of `value`.
        to_unit: The unit wanted.

    Returns:
        The quantity in `to_unit`.

    Raises:
        ToolRetry: A unit is unknown, the units measure different dimensions, or the value is not
            a finite number or lies below absolute zero.
    """
    return _convert(value, from_unit, to_unit)[0]


def _convert(value: float, from_unit: str, to_unit: str) -> tuple[float, Unit, Unit]:
    if not math.isfinite(value):
        raise ToolRetry(f"The value must be a finite number, not {value!r}.")
    source = _lookup(from_unit, "source")
    target = _lookup(to_unit, "target")
    if source.dimension != target.dimension:
        raise ToolRetry(
            f"Cannot convert {source.symbol} ({source.dimension}) to {target.symbol} ({target.dimension}): "
            f"both units must measure the same thing. {target.dimension} units: "
            f"{', '.join(_LISTING[target.dimension])}; "
            f"{source.dimension} units: {', '.join(_LISTING[source.dimension])}."
        )
    base = source.to_base(value)
    if source.dimension == "temperature" and base < -1e-9:
        raise ToolRetry(f"{format_number(value)} {source.symbol} is below absolute zero (0 K); check the value.")
    result = target.from_base(base)
    if not math.isfinite(result):
        raise ToolRetry(f"{format_number(value)} {source.symbol} in {target.symbol} is too large to represent.")
    return result, source, target


@tool(read_only=True, idempotent=True)
def convert_units(value: float, from_unit: str, to_unit: str) -> str:
    """Convert a quantity from one unit to another of the same kind.

    Knows length (m, km, cm, mm, mi, yd, ft, in, nmi ...), area (m², km², ha, acre, ft² ...), mass
    (kg, g, mg, t, lb, oz, st ...), time (s, ms, min, h, d, wk, mo, yr ...), volume (L, mL, m³, gal,
    qt, pt, cup, fl oz, tbsp, tsp ...), speed (m/s, km/h, mph, kn, ft/s), data size (bit, B, kB, MB,
    GB, TB, KiB, MiB, GiB, TiB, Mbit, Gbit ...) and temperature (°C, °F, K, °R). Units may also be
    written as names, e.g. "kilometers", "pounds", "celsius".

    Args:
        value: The quantity to convert.
        from_unit: The unit of the value, e.g. "mi" or "miles".
        to_unit: The unit to convert to, e.g. "km" or "kilometers".
    """
    result, source, target = _convert(value, from_unit, to_unit)
    return f"{format_number(value, 10)} {source.symbol} = {format_number(result, 10)} {target.symbol}"
