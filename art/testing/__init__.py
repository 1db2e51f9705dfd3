"""Test helpers for applications built on art: a scripted LLM, fixtures, plan snapshots."""
