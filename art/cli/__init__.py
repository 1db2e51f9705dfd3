"""The `art` command line (typer + rich) over the public API."""
