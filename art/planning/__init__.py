"""The plan phase: plans and references, the planner (prompt, LLM call, repair), streamed plans."""
