"""Entity-level precision, recall and F1 (seqeval's strict mode) and token accuracy.

An entity counts as found when its type, first word and last word all match a gold
entity (``tags.spans``). Overall scores are micro averages over entities; per type, the
same within that type. Token accuracy is the share of words whose IOB2 tag is right.
No TensorFlow; the reference is seqeval's ``classification_report(mode="strict",
scheme=IOB2)``, which tfapp does not depend on.
"""

from __future__ import annotations

from tfapp.data.tags import spans


def _prf(tp: int, n_pred: int, n_gold: int) -> tuple[float, float, float]:
    p = tp / n_pred if n_pred else 0.0
    r = tp / n_gold if n_gold else 0.0
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)


def entity_report(gold: list[list[str]], pred: list[list[str]]) -> dict:
    """Scores of predicted IOB2 tag sentences ``pred`` against ``gold`` (same lengths).

    Returns ``{"precision", "recall", "f1", "token_accuracy", "sentences", "entities",
    "per_type": {type: {"precision", "recall", "f1", "support"}}}`` (support: gold
    entities of that type).
    """
    if len(gold) != len(pred):
        raise ValueError(f"{len(gold)} gold sentences but {len(pred)} predicted")
    tp: dict[str, int] = {}
    n_gold: dict[str, int] = {}
    n_pred: dict[str, int] = {}
    right = words = 0
    for g, p in zip(gold, pred, strict=True):
        if len(g) != len(p):
            raise ValueError(f"a sentence of {len(g)} gold tags has {len(p)} predicted")
        words += len(g)
        right += sum(a == b for a, b in zip(g, p, strict=True))
        gs, ps = set(spans(g)), set(spans(p))
        for kind, *_ in gs:
            n_gold[kind] = n_gold.get(kind, 0) + 1
        for kind, *_ in ps:
            n_pred[kind] = n_pred.get(kind, 0) + 1
        for kind, *_ in gs & ps:
            tp[kind] = tp.get(kind, 0) + 1
    per_type = {}
    for kind in sorted(set(n_gold) | set(n_pred)):
        p, r, f = _prf(tp.get(kind, 0), n_pred.get(kind, 0), n_gold.get(kind, 0))
        per_type[kind] = {"precision": p, "recall": r, "f1": f, "support": n_gold.get(kind, 0)}
    p, r, f = _prf(sum(tp.values()), sum(n_pred.values()), sum(n_gold.values()))
    return {"precision": p, "recall": r, "f1": f,
            "token_accuracy": right / words if words else 0.0,
            "sentences": len(gold), "entities": sum(n_gold.values()), "per_type": per_type}


def format_entity_report(report: dict) -> str:
    """The per-type table in the shape of the classifier's report, then the totals."""
    width = max(10, *(len(n) for n in report["per_type"])) if report["per_type"] else 10
    lines = [f"{'entity':<{width}}  precision  recall     f1  support"]
    for name, c in report["per_type"].items():
        lines.append(f"{name:<{width}}  {c['precision']:9.3f}  {c['recall']:6.3f}  "
                     f"{c['f1']:5.3f}  {c['support']:7d}")
    lines.append(f"entity precision {report['precision']:.4f}  recall {report['recall']:.4f}  "
                 f"F1 {report['f1']:.4f}  token accuracy {report['token_accuracy']:.4f}  "
                 f"({report['sentences']} sentences, {report['entities']} entities)")
    return "\n".join(lines)
