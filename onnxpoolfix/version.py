"""The package version: a leaf module, so that the report, the inspection and the CLI can read it without
importing the package's ``__init__`` (which imports them)."""
__version__ = "0.1.0"
