"""The ``octlm`` command line: the program (:mod:`octlm.cli.program`) and one module a subcommand
(:mod:`octlm.cli.commands`)."""

from octlm.cli.program import (
    Formatter,
    add_common,
    add_dataclass_options,
    build_parser,
    given_options,
    main,
    options_from,
)

__all__ = ["Formatter", "add_common", "add_dataclass_options", "build_parser", "given_options", "main", "options_from"]
