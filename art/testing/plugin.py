"""pytest plugin (entry point `pytest11: art`): art's fixtures, imported lazily.

Loaded by every pytest run in an environment where art is installed, so this module
imports nothing heavy at import time.
"""
