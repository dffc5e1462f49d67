"""``quiesce ops``: the operator's client of the daemons' control sockets.

| module | concept |
|---|---|
| ``client`` | finding this user's daemons (stale ones cleaned); ``OpsClient`` |
| ``targets`` | which daemon or session a command means |
| ``render`` | the human-readable tables and lines of ``quiesce ops`` |
| ``cli`` | the ``quiesce ops`` command |
"""
