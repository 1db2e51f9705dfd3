"""art's benchmark suite: `python -m benchmarks` (see docs/performance.md).

LLM calls are played by `art.testing.ScriptedModel` with a configurable latency and
tools sleep a configurable time or return at once, so every figure measures the
engine, not a provider. The same DAG workloads run on LangGraph when it is installed
(`pip install -e ".[bench]"`).
"""
