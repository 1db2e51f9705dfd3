"""Tools: the IToolExecutor contract, @art.tool, the registry, and the one path every call takes."""
