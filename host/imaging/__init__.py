"""The default offline image backend (a separate program: ``python -m host.imaging.render``)."""

MAX_PIXELS = 4096 * 4096
"""The largest image (width x height) GenerateImages asks for and the renderer draws."""
