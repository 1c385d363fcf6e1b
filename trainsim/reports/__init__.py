"""What a person reads: tables, plots, HTML/Markdown what-if reports and Chrome/Perfetto traces."""
