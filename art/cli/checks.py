"""Checks of the command line's numeric options, run by typer before a command starts:
a bad value is a usage error (exit 2) naming the option, never a run half started."""

from __future__ import annotations

import math

import typer

__all__ = ["non_negative_seconds", "positive_seconds"]


def positive_seconds(value: float | None) -> float | None:
    """A number of seconds greater than 0 (None: the option was not given)."""
    if value is not None and not (math.isfinite(value) and value > 0):
        raise typer.BadParameter(f"{value:g} is not a number of seconds greater than 0")
    return value


def non_negative_seconds(value: float | None) -> float | None:
    """A number of seconds of at least 0 (None: the option was not given)."""
    if value is not None and not (math.isfinite(value) and value >= 0):
        raise typer.BadParameter(f"{value:g} is not a number of seconds of 0 or more")
    return value
