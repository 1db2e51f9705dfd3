"""One run: its phases, the DAG executor, one step's path, failure policies, human in the
loop, synthesis."""
