"""The version of art (the `art-pes` distribution), for the modules that report it."""

__all__ = ["__version__"]

__version__ = "0.1.0"
