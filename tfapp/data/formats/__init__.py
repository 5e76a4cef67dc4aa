"""User data files -> parsed rows: one module per format, one detection, one dispatch
table (``read.py``). Every command reads user files through here."""
