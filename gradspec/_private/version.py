"""gradspec's version string, at the bottom layer so that reports can name it without importing the package facade."""

__version__ = "0.1.0"  # keep equal to pyproject.toml's [project] version
