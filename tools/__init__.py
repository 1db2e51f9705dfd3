"""art.tools: the built-in tools, each an IToolExecutor."""
