"""Private helpers: not part of gradspec's public API."""
