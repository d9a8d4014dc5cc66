"""What every study shares: its folder and files, seeds, the bootstrap, progress records, rows, shards."""
