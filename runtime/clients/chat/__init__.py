"""``quiesce chat``: a terminal client of ``quiesce serve``."""
