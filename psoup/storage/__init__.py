"""Durability: the write-ahead log, the data directory and recovery (docs/DURABILITY.md)."""
