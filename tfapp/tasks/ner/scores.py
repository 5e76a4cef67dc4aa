"""Entity-level precision, recall and F1 by seqeval, and token accuracy (no TensorFlow).

The headline scores are seqeval's strict IOB2 mode (``mode="strict", scheme=IOB2``): an
entity counts as found when its type, first word and last word all match a gold entity,
and an ``I-`` tag without its ``B-`` starts nothing (``tfapp.data.text.tags.spans`` reads tags
the same way). Overall scores are micro averages over entities; per type, the same within
that type. Beside them, ``default_mode`` holds seqeval's default (conlleval) mode, in which
a stray ``I-`` opens an entity: the figure Hugging Face's ``run_ner`` prints, for
comparison only.

Token accuracy is the share of words whose predicted tag equals the gold one, both as the
model tags them (its argmax at each word's first word piece, before any IOB2 repair):
seqeval's ``accuracy_score``, as ``run_ner`` reports it. The training reports and
``evaluate`` both score those raw word tags, so they print the same numbers.
"""

from __future__ import annotations

import warnings

#: how the headline entity scores are counted, as the reports name it
MODE = "seqeval strict IOB2"


def _seqeval_report(gold: list[list[str]], pred: list[list[str]], strict: bool) -> dict:
    """seqeval's ``classification_report`` as a dict (per type, and ``micro avg``)."""
    import numpy as np
    from seqeval.metrics import classification_report
    from seqeval.scheme import IOB2

    mode = {"mode": "strict", "scheme": IOB2} if strict else {}
    # No entity at all leaves the macro average an empty mean (a numpy warning); the micro
    # average, the one used, is 0 then.
    with warnings.catch_warnings(), np.errstate(invalid="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        return classification_report(gold, pred, output_dict=True, zero_division=0, **mode)


def _scores(row: dict) -> dict:
    return {"precision": float(row["precision"]), "recall": float(row["recall"]),
            "f1": float(row["f1-score"])}


def entity_report(gold: list[list[str]], pred: list[list[str]]) -> dict:
    """Scores of predicted IOB2 tag sentences ``pred`` against ``gold`` (same lengths).

    Returns ``{"precision", "recall", "f1", "mode", "default_mode": {"precision",
    "recall", "f1"}, "token_accuracy", "sentences", "entities", "per_type": {type:
    {"precision", "recall", "f1", "support"}}}`` (support: gold entities of that type;
    the unprefixed scores are strict, ``mode`` says so).
    """
    if len(gold) != len(pred):
        raise ValueError(f"{len(gold)} gold sentences but {len(pred)} predicted")
    right = words = 0
    for g, p in zip(gold, pred, strict=True):
        if len(g) != len(p):
            raise ValueError(f"a sentence of {len(g)} gold tags has {len(p)} predicted")
        words += len(g)
        right += sum(a == b for a, b in zip(g, p, strict=True))
    strict = _seqeval_report(gold, pred, strict=True)
    per_type = {kind: {**_scores(row), "support": int(row["support"])}
                for kind, row in sorted(strict.items()) if not kind.endswith(" avg")}
    return {**_scores(strict["micro avg"]), "mode": MODE,
            "default_mode": _scores(_seqeval_report(gold, pred, strict=False)["micro avg"]),
            "token_accuracy": right / words if words else 0.0,
            "sentences": len(gold), "entities": int(strict["micro avg"]["support"]),
            "per_type": per_type}


class EntityTally:
    """``entity_report`` from counts, so an evaluation holds no list of sentences:
    ``update(gold, pred)`` per batch of sentences, ``report()`` at the end. Entities never
    cross a sentence, so counting each batch's entities as seqeval does (its strict IOB2
    entities, and its default mode's) and summing gives seqeval's scores on all the
    sentences at once."""

    def __init__(self) -> None:
        from collections import Counter

        self.strict = {k: Counter() for k in ("tp", "pred", "gold")}
        self.default = {k: Counter() for k in ("tp", "pred", "gold")}
        self.right = self.words = self.sentences = 0

    @staticmethod
    def _count(into: dict, gold: set, pred: set) -> None:
        for key, found in (("gold", gold), ("pred", pred), ("tp", gold & pred)):
            for entity in found:
                into[key][entity[0]] += 1

    def update(self, gold: list[list[str]], pred: list[list[str]]) -> None:
        from seqeval.metrics.sequence_labeling import get_entities
        from seqeval.scheme import IOB2, Entities

        if len(gold) != len(pred):
            raise ValueError(f"{len(gold)} gold sentences but {len(pred)} predicted")
        for g, p in zip(gold, pred, strict=True):
            if len(g) != len(p):
                raise ValueError(f"a sentence of {len(g)} gold tags has {len(p)} predicted")
            self.words += len(g)
            self.right += sum(a == b for a, b in zip(g, p, strict=True))
        self.sentences += len(gold)

        def strict(tags):
            return {(e.tag, e.sent_id, e.start, e.end)
                    for sentence in Entities(tags, IOB2).entities for e in sentence}

        self._count(self.strict, strict(gold), strict(pred))
        self._count(self.default, set(get_entities(gold)), set(get_entities(pred)))

    @staticmethod
    def _scores(tp: int, pred: int, gold: int) -> dict:
        precision = tp / pred if pred else 0.0
        recall = tp / gold if gold else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        return {"precision": precision, "recall": recall, "f1": f1}

    def report(self) -> dict:
        """The dict ``entity_report`` returns for all the sentences counted."""
        s, d = self.strict, self.default
        types = sorted(set(s["gold"]) | set(s["pred"]))
        per_type = {t: {**self._scores(s["tp"][t], s["pred"][t], s["gold"][t]),
                        "support": s["gold"][t]} for t in types}
        total = {k: sum(v.values()) for k, v in s.items()}
        return {**self._scores(total["tp"], total["pred"], total["gold"]), "mode": MODE,
                "default_mode": self._scores(*(sum(d[k].values())
                                               for k in ("tp", "pred", "gold"))),
                "token_accuracy": self.right / self.words if self.words else 0.0,
                "sentences": self.sentences, "entities": total["gold"],
                "per_type": per_type}


def format_entity_report(report: dict) -> str:
    """The per-type table in the shape of the classifier's report, then the totals."""
    width = max(10, *(len(n) for n in report["per_type"])) if report["per_type"] else 10
    lines = [f"{'entity':<{width}}  precision  recall     f1  support"]
    for name, c in report["per_type"].items():
        lines.append(f"{name:<{width}}  {c['precision']:9.3f}  {c['recall']:6.3f}  "
                     f"{c['f1']:5.3f}  {c['support']:7d}")
    lines.append(f"entity precision {report['precision']:.4f}  recall {report['recall']:.4f}  "
                 f"F1 {report['f1']:.4f} ({report.get('mode', MODE)})  token accuracy "
                 f"{report['token_accuracy']:.4f}  ({report['sentences']} sentences, "
                 f"{report['entities']} entities)")
    if "default_mode" in report:
        lines.append(f"entity F1 {report['default_mode']['f1']:.4f} in seqeval's default "
                     "mode (a stray I- opens an entity; what Hugging Face run_ner prints)")
    return "\n".join(lines)
