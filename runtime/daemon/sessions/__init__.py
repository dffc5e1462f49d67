"""The daemon's sessions: each session (``session.py``), the store of them (``store.py``),
the requests on them (``requests.py``), their host tools (``tools.py``), what operators see
of a session's calls (``ops_view.py``), what its stop waits on (``stop_waiting.py``), what a
session picker shows of one (``picker.py``) and of the logs not loaded (``listing.py``)."""
