"""One module per ``octlm`` subcommand: its flags (``add_parser``) and what it runs."""
