"""The daemon's hooks: its configuration (``config``), a hook's protocol (``answer``), one
run on the host (``run``) and a turn's hooks as the registry's stages (``stages``)."""
