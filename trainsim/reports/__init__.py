"""What a person reads: tables, plots, HTML/Markdown reports, traces, validation, and the CLI."""
