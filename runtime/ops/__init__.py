"""Operator tooling: a control socket on the runtime, and the ``quiesce ops`` client."""
