"""Repository-level pytest configuration.

The Hypothesis profiles (``ci``, ``dev``, ``fuzz``) live in :mod:`gradspec.profiles` and are
chosen with ``--gradspec-profile`` by gradspec's own pytest plugin, so the same profiles serve
this repository and users' projects.  Registering them here as well makes them available even
when the plugin's entry point is not installed (running from a source tree).
"""

from gradspec.profiles import register_profiles

register_profiles()
