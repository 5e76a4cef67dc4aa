"""The demo data shipped inside the package: labelled reviews (the classifier's default
data and the builtin BERT's corpus), unlabelled reviews (masked-LM adaptation) and the
generator's corpus. The one place that says where they are."""

from pathlib import Path

DEMO_DIR = Path(__file__).resolve().parent

#: what a run on the demo data suggests trying on its export, per task (the README's and
#: --help's examples too; tests check that the default models answer them right)
EXAMPLES: dict[str, tuple[str, ...]] = {
    "classifier": ("great battery life", "broke in a week"),
    "ner": ("Anna Berg moved to Brindle on 3 May .",),
    "generator": ("the old man",),
}
