"""Tag schemes, the scheme a file is written in, and strict entity spans (no TensorFlow).

Tags are ``O`` or ``PREFIX-TYPE``. Three schemes are read:

* ``iob2``: ``B-`` begins every entity, ``I-`` continues it;
* ``iob1``: ``I-`` begins an entity too; ``B-`` only separates two adjacent entities of
  one type;
* ``bioes``: ``B-`` begins, ``I-`` continues, ``E-`` ends a multi-word entity, ``S-`` is a
  one-word entity.

Which scheme a file is written in is read from its tags, not taken from
``data.tag_scheme`` (``SchemeEvidence``): data labelled in one scheme and read as another
lost entities silently (an IOB1 file read as IOB2 reads every entity that begins with
``I-`` as ``O``). The rule, over all the tags of one file:

* any ``E-`` or ``S-`` tag: the file is BIOES;
* else any ``I-`` that begins an entity (first in its sentence, after ``O``, or after a
  tag of another type): IOB1;
* else (``B-`` begins every entity): IOB2. IOB2 data is valid IOB1 too, and both readings
  give the same entities, so the two never conflict.

Entities are then read in the file's scheme (``read_entities``). B-/I- files are read the
IOB1 way, which holds every reading of both: ``B-`` begins an entity, an ``I-`` continues
one of its type or else begins one. A BIOES file is read strictly, and a sentence that is
not well-formed BIOES (a ``B-`` that never ``E-``nds, an ``I-``/``E-`` of another type
than its ``B-``, an ``I-`` or ``E-`` that continues nothing, as an IOB1 ``I-`` start does)
is refused, naming its token: there is no one right reading of it. Everything is written
as IOB2 internally (``from_spans``), so the model learns, and the scores count, exactly
the entities the file holds.

``spans`` reads tags the way seqeval's strict mode does (``mode="strict"``: an entity is
exactly its scheme's well-formed sequence); the scores read IOB2 predictions with it, and
``EntityCounts.converted`` counts the entities the configured scheme's strict reading
would have lost or cut.
"""

from __future__ import annotations

from dataclasses import dataclass

OUTSIDE = "O"
#: every prefix of the schemes tfapp reads: a file may be in any of them
_PREFIXES = "BIES"

Span = tuple[str, int, int]  # (type, first word, one past the last word)


def split_tag(tag: str) -> tuple[str, str]:
    """("O", "") or (prefix, type): "B-PER" -> ("B", "PER")."""
    if tag == OUTSIDE:
        return OUTSIDE, ""
    prefix, _, kind = tag.partition("-")
    return prefix, kind


def tag_problem(tag: str) -> str | None:
    """Why ``tag`` is a tag of none of the schemes, or None."""
    prefix, kind = split_tag(tag)
    if prefix == OUTSIDE:
        return None
    if len(prefix) != 1 or prefix not in _PREFIXES or not kind:
        return (f"tag '{tag}' is not an IOB1, IOB2 or BIOES tag (O, or B-, I-, E- or S- "
                "and the entity type, e.g. B-PER)")
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


def _begins_with_i(previous: str | None, tag: str, prefixes: str = "I") -> bool:
    """Whether ``tag`` is an ``I-`` (one of ``prefixes``) that begins an entity (IOB1):
    first in the sentence (``previous`` None), after O, after a tag of another type, or
    after an E-/S- that ended the entity."""
    prefix, kind = split_tag(tag)
    if prefix not in prefixes:
        return False
    if previous is None:
        return True
    before, before_kind = split_tag(previous)
    return before in (OUTSIDE, "E", "S") or before_kind != kind


@dataclass
class SchemeEvidence:
    """What the tags of one file show about their scheme, and where first (a place the
    caller gives: a line number). See the module docstring for the rule."""

    bioes: int | None = None  # the first E- or S- tag
    iob1: int | None = None  # the first I- that begins an entity

    def add(self, tags: list[str], where: list[int]) -> None:
        """Take in one sentence's ``tags``, ``where[i]`` being where tag ``i`` is."""
        previous = None
        for tag, at in zip(tags, where, strict=True):
            prefix = split_tag(tag)[0]
            if self.bioes is None and prefix in ("E", "S"):
                self.bioes = at
            if self.iob1 is None and _begins_with_i(previous, tag):
                self.iob1 = at
            previous = tag

    @property
    def scheme(self) -> str:
        if self.bioes is not None:
            return "bioes"
        return "iob1" if self.iob1 is not None else "iob2"


def read_entities(tags: list[str], scheme: str) -> tuple[list[Span], tuple[int, str] | None]:
    """The entities of one sentence whose file is written in ``scheme`` (as detected), or
    none and ``(index, why)`` of the token that makes it no well-formed sentence of that
    scheme (or no tag of any scheme: ``tag_problem``)."""
    for i, tag in enumerate(tags):
        why = tag_problem(tag)
        if why:
            return [], (i, why)
    if scheme != "bioes":
        # B-/I- only: the IOB1 reading is that of IOB2 too, where IOB2's is defined
        return spans(tags, "iob1"), None
    start, kind = None, ""  # the open entity, if any
    for i, tag in enumerate(tags):
        prefix, t = split_tag(tag)
        if start is not None:
            if prefix in ("O", "B", "S"):
                return [], (start, _never_ends(tags[start], tag))
            if t != kind:
                return [], (i, f"tag '{tag}' changes the type of the BIOES entity that "
                               f"'{tags[start]}' begins (its B-, I- and E- tags have one "
                               "type)")
            if prefix == "E":
                start = None
            continue
        if prefix == "B":
            start, kind = i, t
        elif prefix == "I":
            return [], (i, f"tag '{tag}' begins an entity, as in IOB1, in a file of BIOES "
                           "tags (E-, S-), where an entity begins with B- or S-; write the "
                           "file in one scheme")
        elif prefix == "E":
            return [], (i, f"tag '{tag}' ends no entity (no B-{t} before it: a BIOES "
                           f"entity is B-{t} ... E-{t}, or S-{t} for one word)")
    if start is not None:
        return [], (start, _never_ends(tags[start], None))
    return spans(tags, "bioes"), None  # well-formed: the strict reading is the whole one


def _never_ends(begin: str, after: str | None) -> str:
    kind = split_tag(begin)[1]
    where = (f"next comes '{after}', not I-{kind} or E-{kind}" if after
             else f"the sentence ends before an E-{kind}")
    return (f"tag '{begin}' begins a BIOES entity that never ends ({where}; a one-word "
            f"entity is S-{kind})")


def begun(tags: list[str]) -> int:
    """How many entities ``tags`` begin, well-formed or not (what a refused sentence
    drops): every B-/S-, and every I-/E- that continues no tag of its type."""
    return sum(split_tag(tag)[0] in ("B", "S") or _begins_with_i(previous, tag, "IE")
               for previous, tag in zip([None, *tags], tags, strict=False))


@dataclass
class EntityCounts:
    """The entities of one file: its scheme (as detected) and how many were read (kept),
    converted (read, but not as ``data.tag_scheme``'s strict reading reads them: it would
    have lost or cut them) and refused (in sentences refused for their tags)."""

    scheme: str = "iob2"
    read: int = 0
    converted: int = 0
    refused: int = 0
    first_converted: int | None = None  # where (a line) the first converted entity is

    def add(self, tags: list[str], found: list[Span], configured: str,
            where: list[int]) -> None:
        """Count one kept sentence: ``found`` read from ``tags``, ``where[i]`` being where
        tag ``i`` is."""
        self.read += len(found)
        strict = set(spans(tags, configured))
        changed = [s for s in found if s not in strict]
        self.converted += len(changed)
        if changed and self.first_converted is None:
            self.first_converted = where[changed[0][1]]

    def describe(self, name: str, configured: str) -> str:
        """One line for the log: ``name: ...``."""
        text = (f"{name}: {self.scheme.upper()} tags (data.tag_scheme={configured}): "
                f"{self.read} entities read, {self.converted} converted, {self.refused} "
                "refused")
        if self.converted:
            text += (f" (converted: read as {self.scheme.upper()}, which data.tag_scheme="
                     f"{configured} would read as O or cut, first at line "
                     f"{self.first_converted}; set data.tag_scheme={self.scheme} to say "
                     "what the data is)")
        return text


def tag_names(entity_types: list[str]) -> list[str]:
    """The model's labels: O first, then B-/I- of each type in sorted order."""
    return [OUTSIDE] + [f"{p}-{t}" for t in sorted(set(entity_types)) for p in "BI"]
