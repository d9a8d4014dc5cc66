"""The leaderboard: every position scheme and the named variants of today's designs under one protocol, per column
the best row and every other row's distance from it with its 95% interval (docs/leaderboard.md)."""
