"""The generator's test scores from per-text sums (no TensorFlow).

The export's ``score`` function (``TextGenerator.score_lines`` / ``score_pairs``) gives,
per text, the summed cross-entropy of its target tokens under teacher forcing, the token
count, the tokens whose argmax is right and the examples (windows or pairs) made of it.
The report pools them over every token of the split, as Keras's ``val_perplexity`` and
``val_token_accuracy`` pool a validation pass: perplexity is ``exp(cross-entropy /
tokens)``, token accuracy ``correct / tokens`` (padding never counts).
"""

from __future__ import annotations

import math

#: the scores of the test split that the logs, the card and TaskOutput carry
SUMMARY = ("perplexity", "token_accuracy")


def generator_report(sums: dict) -> dict:
    """``{"perplexity", "token_accuracy", "cross_entropy", "texts", "examples", "tokens"}``
    of per-text ``sums`` (sequences ``cross_entropy``, ``tokens``, ``correct``,
    ``examples``); the split must hold at least one token."""
    tokens = float(sum(sums["tokens"]))
    if not tokens:
        raise ValueError("no target tokens to score")
    cross_entropy = float(sum(sums["cross_entropy"])) / tokens
    return {"perplexity": math.exp(cross_entropy),
            "token_accuracy": float(sum(sums["correct"])) / tokens,
            "cross_entropy": cross_entropy, "texts": len(sums["tokens"]),
            "examples": int(round(float(sum(sums["examples"])))), "tokens": int(tokens)}


def format_generator_report(report: dict) -> str:
    """One line: perplexity, token accuracy and what they were counted over."""
    return (f"perplexity {report['perplexity']:.4f}  token accuracy "
            f"{report['token_accuracy']:.4f}  (cross-entropy {report['cross_entropy']:.4f} "
            f"per token; {report['tokens']} target tokens of {report['examples']} examples "
            f"from {report['texts']} texts)")
