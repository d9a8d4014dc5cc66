"""The synthetic task study: generators, options and presets, training, tables and ranking."""
