"""The generator's test scores from per-text sums (no TensorFlow), whole or streamed.

The export's ``score`` function (``TextGenerator.score_lines`` / ``score_pairs``) gives,
per text, two sets of sums from one teacher-forced pass:

* **LM** (``lm_cross_entropy``, ``lm_tokens``): each token of the text scored once, from
  the left context the model can use -- a line is cut into consecutive chunks of
  ``target_words`` tokens (its words, then ``[END]``); each chunk is the decoder target of
  the window whose encoder reads the ``context_words`` tokens before it (``[START]`` first).
  ``lm_perplexity = exp(lm_cross_entropy / lm_tokens)``, over every word of the split
  plus one ``[END]`` per line, unknown words scored as the ``[UNK]`` token: what an
  n-gram tool (NLTK's ``LanguageModel.perplexity`` with the same vocabulary, ``<s>``
  padding on the left and one ``</s>`` on the right) counts. For pairs each target
  (``+ [END]``, cut to ``target_words``) is scored once given its source.
* **window** (``cross_entropy``, ``tokens``, ``correct``, ``examples``): every training
  window's target tokens, pooled as Keras's ``val_perplexity`` and ``val_token_accuracy``
  pool a validation pass (a token is counted once per window that holds it, with
  different contexts): ``perplexity`` (the *window perplexity*) and ``token_accuracy``.
"""

from __future__ import annotations

import math

import numpy as np

#: the scores of the test split that the logs, the card and TaskOutput carry
SUMMARY = ("lm_perplexity", "perplexity", "token_accuracy")


def generator_report(sums: dict) -> dict:
    """``{"lm_perplexity", "lm_cross_entropy", "lm_tokens", "perplexity",
    "token_accuracy", "cross_entropy", "texts", "examples", "tokens"}`` of per-text
    ``sums`` (sequences ``cross_entropy``, ``tokens``, ``correct``, ``examples`` and,
    from exports that have them, ``lm_cross_entropy``, ``lm_tokens``); the split must
    hold at least one token."""
    return totals_report({name: sum(values) for name, values in sums.items()},
                         len(sums["tokens"]))


class ScoreSums:
    """The sums of ``generator_report`` kept batch by batch (``update`` with each batch's
    per-text sums), so a streamed evaluation holds no list of texts: ``report()``."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = {}
        self.texts = 0

    def update(self, sums: dict) -> None:
        for name, values in sums.items():
            self.totals[name] = self.totals.get(name, 0.0) + float(
                np.sum(np.asarray(values, np.float64)))
        self.texts += len(sums["tokens"])

    def report(self) -> dict:
        return totals_report(self.totals, self.texts)


def totals_report(totals: dict, texts: int) -> dict:
    """``generator_report`` of the sums over all ``texts`` texts (``totals``: name ->
    the sum over the texts)."""
    tokens = float(totals["tokens"])
    if not tokens:
        raise ValueError("no target tokens to score")
    cross_entropy = float(totals["cross_entropy"]) / tokens
    out = {}
    if "lm_tokens" in totals:  # exports made before the LM scores lack them
        lm_tokens = float(totals["lm_tokens"])
        lm_cross_entropy = float(totals["lm_cross_entropy"]) / lm_tokens
        out = {"lm_perplexity": math.exp(lm_cross_entropy),
               "lm_cross_entropy": lm_cross_entropy, "lm_tokens": int(lm_tokens)}
    return {**out, "perplexity": math.exp(cross_entropy),
            "token_accuracy": float(totals["correct"]) / tokens,
            "cross_entropy": cross_entropy, "texts": texts,
            "examples": int(round(float(totals["examples"]))), "tokens": int(tokens)}


def format_generator_report(report: dict) -> str:
    """Two lines: the LM perplexity and what it counted; the window perplexity and token
    accuracy and what they were counted over."""
    lm = (f"LM perplexity {report['lm_perplexity']:.4f}  (cross-entropy "
          f"{report['lm_cross_entropy']:.4f} per token; each of {report['lm_tokens']} tokens "
          f"scored once, [END] included)\n" if "lm_perplexity" in report else "")
    return (f"{lm}window perplexity {report['perplexity']:.4f}  token accuracy "
            f"{report['token_accuracy']:.4f}  (cross-entropy {report['cross_entropy']:.4f} "
            f"per token; {report['tokens']} target tokens of {report['examples']} examples "
            f"from {report['texts']} texts)")
