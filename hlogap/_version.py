"""The package version, in a module of its own so that any stage can name it."""

__version__ = "0.1.0"
