"""smartcon's studies beyond one machine: sweeps and fleet surveys on Ray (see driver)."""

from .driver import main

__all__ = ["main"]
