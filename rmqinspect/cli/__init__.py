"""The typer command line: parses options, calls analyses, hands results to renderers."""
