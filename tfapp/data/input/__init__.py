"""Prepared shards -> model batches: a task's splits, the shard parse and per-file counts,
the step plan, the stream, length buckets, stores, the final stages, and the one reader
and entry point every task's input goes through (``reader.py``)."""
