"""The host process (``quiesce host``): permissions, tools, process trees and every side
effect, served to the runtime over the host link.

It imports ``protocol``, ``runtime.link`` and ``runtime.proc``, nothing else of the
runtime, and the runtime never imports it (it starts it as a program, ``python -m host``).
"""
