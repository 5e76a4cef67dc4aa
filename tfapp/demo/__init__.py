"""The demo data shipped inside the package: labelled reviews (the classifier's default
data and the builtin BERT's corpus), unlabelled reviews (masked-LM adaptation) and the
generator's corpus. The one place that says where they are."""

from pathlib import Path

DEMO_DIR = Path(__file__).resolve().parent
