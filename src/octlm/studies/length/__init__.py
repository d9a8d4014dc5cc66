"""The length study over text: options, training its models, scoring, tables, the extension stage."""
