"""The generator's test scores from per-text sums (no TensorFlow).

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

#: the scores of the test split that the logs, the card and TaskOutput carry
SUMMARY = ("lm_perplexity", "perplexity", "token_accuracy")


def generator_report(sums: dict) -> dict:
    """``{"lm_perplexity", "lm_cross_entropy", "lm_tokens", "perplexity",
    "token_accuracy", "cross_entropy", "texts", "examples", "tokens"}`` of per-text
    ``sums`` (sequences ``cross_entropy``, ``tokens``, ``correct``, ``examples`` and,
    from exports that have them, ``lm_cross_entropy``, ``lm_tokens``); the split must
    hold at least one token."""
    tokens = float(sum(sums["tokens"]))
    if not tokens:
        raise ValueError("no target tokens to score")
    cross_entropy = float(sum(sums["cross_entropy"])) / tokens
    out = {}
    if "lm_tokens" in sums:  # exports made before the LM scores lack them
        lm_tokens = float(sum(sums["lm_tokens"]))
        lm_cross_entropy = float(sum(sums["lm_cross_entropy"])) / lm_tokens
        out = {"lm_perplexity": math.exp(lm_cross_entropy),
               "lm_cross_entropy": lm_cross_entropy, "lm_tokens": int(lm_tokens)}
    return {**out, "perplexity": math.exp(cross_entropy),
            "token_accuracy": float(sum(sums["correct"])) / tokens,
            "cross_entropy": cross_entropy, "texts": len(sums["tokens"]),
            "examples": int(round(float(sum(sums["examples"])))), "tokens": int(tokens)}


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
