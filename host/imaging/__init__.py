"""The default offline image backend (a separate program: ``python -m host.imaging.render``)."""
