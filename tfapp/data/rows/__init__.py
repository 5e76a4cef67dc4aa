"""What a row is (``spec.py``), its checks, the bad-row policy and the label and tag
vocabularies; ``read.py`` is the one front end every command reads user rows through."""
