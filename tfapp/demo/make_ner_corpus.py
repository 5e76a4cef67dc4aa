"""Write the NER demo: CoNLL files of train/validation/test sentences (seeded, reproducible).

    python tfapp/demo/make_ner_corpus.py

The sentences are authored here, not copied: invented people, towns, organisations and
dates in everyday templates, tagged IOB2 with PER, LOC, ORG and DATE. Words are split at
whitespace and punctuation the way the serving export splits raw text, so a sentence
typed into ``tfapp.predict`` is read like the training data. Test sentences use some
names that training never shows, so the score is not only memory.
"""

from __future__ import annotations

import random
from pathlib import Path

SEED = 2023
SIZES = {"train": 900, "validation": 200, "test": 200}

FIRST = ["Anna", "Bruno", "Clara", "Dmitri", "Elsa", "Farid", "Greta", "Hugo", "Ines", "Jonas",
         "Katya", "Lars", "Mira", "Nils", "Olga", "Pavel", "Rosa", "Sven", "Tilda", "Viktor"]
LAST = ["Berg", "Castell", "Dorn", "Falk", "Grau", "Holm", "Ivers", "Juhl", "Krantz", "Lind",
        "Moor", "Nord", "Ostby", "Quist", "Rask", "Strand", "Tell", "Vang", "Wold", "Yost"]
PLACES = ["Brindle", "Carrow Bay", "Dunmere", "Eastwick", "Falken", "Glenholt", "Harrowgate",
          "Kestrel Point", "Lowmoor", "Marrow Falls", "Northby", "Oakhollow", "Pinecrest",
          "Redwater", "Saltmarsh", "Thornfield", "Upton Vale", "Westmoor"]
ORGS = ["Acme Bakery", "Blue River Bank", "Corvid Labs", "Delta Freight", "Evergreen Clinic",
        "Fable Press", "Granite Works", "Harbor Radio", "Iris Textiles", "Juniper School",
        "Kite Airlines", "Lumen Energy", "Maple Council", "Nimbus Software"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
# names held back from training: validation and test use them beside the known ones
HELD_FIRST, HELD_LAST = ["Rosa", "Sven", "Tilda", "Viktor"], ["Vang", "Wold", "Yost"]
HELD_PLACES, HELD_ORGS = ["Upton Vale", "Westmoor"], ["Maple Council", "Nimbus Software"]

TEMPLATES = [
    "{PER} moved to {LOC} on {DATE} .",
    "{PER} works for {ORG} in {LOC} .",
    "On {DATE} , {ORG} opened a new office in {LOC} .",
    "{ORG} hired {PER} last year .",
    "{PER} and {PER} met in {LOC} .",
    "The mayor of {LOC} , {PER} , spoke on {DATE} .",
    "{PER} left {ORG} on {DATE} to join {ORG} .",
    "We drove from {LOC} to {LOC} with {PER} .",
    "{ORG} reported strong sales on {DATE} .",
    "A storm hit {LOC} on {DATE} and {ORG} closed early .",
    "{PER} was born in {LOC} .",
    "Tickets from {ORG} go on sale {DATE} .",
    "I saw {PER} at the market in {LOC} yesterday .",
    "The new bridge near {LOC} opens on {DATE} , says {PER} .",
    "{PER} {PER} and the team from {ORG} arrive soon .",
    "Nothing much happened in town today .",
    "The weather was calm and the roads were quiet .",
]


def _names(rng: random.Random, held: bool) -> dict[str, list[str]]:
    first = FIRST if held else [n for n in FIRST if n not in HELD_FIRST]
    last = LAST if held else [n for n in LAST if n not in HELD_LAST]
    places = PLACES if held else [p for p in PLACES if p not in HELD_PLACES]
    orgs = ORGS if held else [o for o in ORGS if o not in HELD_ORGS]

    def person() -> str:
        return rng.choice(first) + ("" if rng.random() < 0.3 else " " + rng.choice(last))

    def date() -> str:
        kind = rng.random()
        if kind < 0.3:
            return rng.choice(DAYS)
        if kind < 0.7:
            return f"{rng.randint(1, 28)} {rng.choice(MONTHS)}"
        return f"{rng.randint(1, 28)} {rng.choice(MONTHS)} {rng.randint(1990, 2030)}"

    return {"PER": person, "LOC": lambda: rng.choice(places), "ORG": lambda: rng.choice(orgs),
            "DATE": date}


def sentence(rng: random.Random, fill: dict) -> list[tuple[str, str]]:
    """One templated sentence as (word, IOB2 tag) pairs."""
    out: list[tuple[str, str]] = []
    for part in rng.choice(TEMPLATES).split():
        if part.startswith("{") and part.endswith("}"):
            kind = part[1:-1]
            words = fill[kind]().split()
            out += [(w, ("B-" if i == 0 else "I-") + kind) for i, w in enumerate(words)]
        else:
            out.append((part, "O"))
    return out


def main(out: Path | None = None) -> None:
    """Write ner_{train,validation,test}.conll into ``out`` (default: next to this file)."""
    rng = random.Random(SEED)
    here = out or Path(__file__).parent
    for split, n in SIZES.items():
        fill = _names(rng, held=split != "train")
        lines = ["-DOCSTART- O", ""]
        for _ in range(n):
            lines += [f"{w} {t}" for w, t in sentence(rng, fill)] + [""]
        (here / f"ner_{split}.conll").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
