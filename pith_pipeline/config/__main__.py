"""`python -m pith_pipeline.config`: the table as Markdown, for docs/pages/configuration.md."""

from pith_pipeline.config.table import markdown_table

print(markdown_table(), end="")
