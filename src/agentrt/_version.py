"""The package version for modules below the package root (importing `agentrt` itself loads every layer)."""

from __future__ import annotations

import functools

__all__ = ["source_tree_version", "version"]


@functools.cache
def version() -> str:
    """The version ``agentrt.__version__`` reports: installed metadata, else the checkout's pyproject.toml."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("agentrt")
    except PackageNotFoundError:
        return source_tree_version()


def source_tree_version() -> str:
    """The version in pyproject.toml beside a source checkout that was never installed."""
    import tomllib
    from pathlib import Path

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    try:
        with pyproject.open("rb") as file:
            return str(tomllib.load(file)["project"]["version"])
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return "0+unknown"
