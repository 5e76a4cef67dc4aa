"""Tag schemes and strict entity spans (no TensorFlow).

Tags are ``O`` or ``PREFIX-TYPE``. Three schemes are read:

* ``iob2``: ``B-`` begins every entity, ``I-`` continues it;
* ``iob1``: ``I-`` begins an entity too; ``B-`` only separates two adjacent entities of
  one type;
* ``bioes``: ``B-`` begins, ``I-`` continues, ``E-`` ends a multi-word entity, ``S-`` is a
  one-word entity.

Spans are read the way seqeval's strict mode reads them (``mode="strict"``: an entity is
exactly its scheme's well-formed sequence; an ``I-`` with no ``B-`` before it, or a
BIOES ``B-`` that never ``E-``nds, is no entity). Everything is converted to IOB2
internally (``to_iob2``): the spans of the source scheme written as IOB2, so the
model learns, and the scores count, exactly the entities the source scheme holds.
"""

from __future__ import annotations

SCHEMES = ("iob1", "iob2", "bioes")
OUTSIDE = "O"
_PREFIXES = {"iob1": "BI", "iob2": "BI", "bioes": "BIES"}

Span = tuple[str, int, int]  # (type, first word, one past the last word)


def split_tag(tag: str) -> tuple[str, str]:
    """("O", "") or (prefix, type): "B-PER" -> ("B", "PER")."""
    if tag == OUTSIDE:
        return OUTSIDE, ""
    prefix, _, kind = tag.partition("-")
    return prefix, kind


def tag_problem(tag: str, scheme: str) -> str | None:
    """Why ``tag`` is not a tag of ``scheme``, or None."""
    prefix, kind = split_tag(tag)
    if prefix == OUTSIDE:
        return None
    allowed = _PREFIXES[scheme]
    if len(prefix) != 1 or prefix not in allowed or not kind:
        shown = ", ".join(f"{p}-TYPE" for p in allowed)
        return (f"tag '{tag}' is not a tag of the {scheme.upper()} scheme (O, {shown}; set "
                "data.tag_scheme to the scheme of the data)")
    return None


def spans(tags: list[str], scheme: str = "iob2") -> list[Span]:
    """The strict entity spans of one sentence's ``tags`` in ``scheme``."""
    out: list[Span] = []
    start, kind = None, ""  # the open entity, if any
    for i, tag in enumerate(tags):
        prefix, t = split_tag(tag)
        if scheme == "bioes":
            if prefix == "S":
                out.append((t, i, i + 1))
                start = None
            elif prefix == "B":
                start, kind = i, t
            elif prefix == "I" and start is not None and t == kind:
                pass
            elif prefix == "E" and start is not None and t == kind:
                out.append((t, start, i + 1))
                start = None
            else:  # O, or an I-/E- that continues nothing: any open entity is invalid
                start = None
            continue
        continues = start is not None and prefix == "I" and t == kind
        if start is not None and not continues:
            out.append((kind, start, i))
            start = None
        if prefix == "B" or (scheme == "iob1" and prefix == "I" and start is None):
            start, kind = i, t
    if start is not None and scheme != "bioes":
        out.append((kind, start, len(tags)))
    return out


def from_spans(found: list[Span], length: int) -> list[str]:
    """IOB2 tags of ``length`` words holding the entities ``found``."""
    tags = [OUTSIDE] * length
    for kind, start, end in found:
        tags[start] = f"B-{kind}"
        for i in range(start + 1, end):
            tags[i] = f"I-{kind}"
    return tags


def to_iob2(tags: list[str], scheme: str) -> list[str]:
    """``tags`` of ``scheme`` as IOB2 (malformed fragments, which hold no entity, are O)."""
    return from_spans(spans(tags, scheme), len(tags))


def tag_names(entity_types: list[str]) -> list[str]:
    """The model's labels: O first, then B-/I- of each type in sorted order."""
    return [OUTSIDE] + [f"{p}-{t}" for t in sorted(set(entity_types)) for p in "BI"]
