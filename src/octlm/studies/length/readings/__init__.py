"""Opt-in readings of a finished length study: context curve, long tokens, streaming."""
