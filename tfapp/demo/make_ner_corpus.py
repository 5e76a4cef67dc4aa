"""Write the NER demo: CoNLL files of train/validation/test sentences (seeded, reproducible).

    pip install "faker==40.63.0" && python tfapp/demo/make_ner_corpus.py

Everyday and news-like sentences about people, places, organisations and dates, tagged
IOB2 with PER, LOC, ORG and DATE. The sentence shapes are written here; the names come
from faker (its people and towns in 20 locales, so the tagger sees names from many
languages, not a short list it can memorise), organisation names are a name or a word
and a kind ("Harbor Radio", "Lindqvist Logistics"), and dates come in the forms people
write them ("Tuesday", "3 May", "May 2024", "2019"). Words are split at whitespace and at
each punctuation mark or symbol, the way the serving export splits raw text, so a
sentence typed into ``tfapp predict`` is read like the training data.

Validation and test draw their names from locales and words that training never uses,
so their scores measure names the model has not seen. No name of the hand-written
sentences in tests/fixtures/plain/entities.conll is ever drawn (a test checks).
"""

from __future__ import annotations

import random
import unicodedata
from collections.abc import Callable
from pathlib import Path

SEED = 2026
SIZES = {"train": 4000, "validation": 400, "test": 400}
FAKER_VERSION = "40.63.0"

# Locales whose names are written in the Latin alphabet; the last four are held out.
TRAIN_LOCALES = ["en_US", "en_GB", "de_DE", "fr_FR", "es_ES", "it_IT", "nl_NL", "pt_PT",
                 "pl_PL", "sv_SE", "da_DK", "fi_FI", "cs_CZ", "tr_TR", "en_IN", "ro_RO"]
HELD_LOCALES = ["no_NO", "hu_HU", "hr_HR", "en_IE"]

# Organisations: a stem (a surname, a place word or an invented word) and a kind.
ORG_KINDS = ["Bank", "Labs", "Airlines", "Airways", "Records", "Studios", "Foods", "Energy",
             "Systems", "Media", "Insurance", "Logistics", "College", "University", "Hospital",
             "Clinic", "Museum", "Library", "Council", "Radio", "Press", "Motors", "Bakery",
             "Textiles", "Software", "Freight", "Pharma", "Group", "Holdings", "Partners",
             "Capital", "Foundation", "Institute", "Academy", "School", "Theatre", "Hotels",
             "Telecom", "Electric", "Mining", "Brewery", "Games", "Robotics", "Solar",
             "Shipping", "Consulting", "Publishing", "Network", "Trust", "Orchestra"]
ORG_WORDS = ["Blue", "Red", "Green", "Silver", "Golden", "North", "South", "East", "West",
             "River", "Harbor", "Summit", "Maple", "Cedar", "Willow", "Granite", "Falcon",
             "Orion", "Nova", "Apex", "Bright", "Clear", "Iron", "Stone", "Ocean", "Lake",
             "Hill", "Valley", "Forest", "Star", "Sun", "Moon", "Cloud", "Pine", "Oak",
             "Meadow", "Crown", "Eagle", "Fox", "Kite", "Lumen", "Vertex", "Zenith", "Atlas"]
ORG_SUFFIXES = ["wood", "field", "view", "line", "gate", "brook", "stone", "ridge", "peak",
                "side", "way", "point", "haven", "dale", "crest", "water", "mark", "light"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]

TEMPLATES = [
    # people
    "{PER} moved to {LOC} in {DATE} .",
    "{PER} visited {LOC} on {DATE} .",
    "{PER} lives in {LOC} with her two children .",
    "{PER} lives near {LOC} .",
    "{PER} was born in {LOC} .",
    "{PER} was born in {LOC} on {DATE} .",
    "{PER} works at {ORG} .",
    "{PER} works for {ORG} in {LOC} .",
    "{PER} joined {ORG} in {DATE} .",
    "{PER} left {ORG} on {DATE} to join {ORG} .",
    "{PER} founded {ORG} in {DATE} .",
    "{PER} is the new director of {ORG} .",
    "{PER} , a nurse from {LOC} , won the award .",
    "{PER} met {PER} in {LOC} .",
    "{PER} and {PER} got married in {LOC} on {DATE} .",
    "{PER} called {PER} on {DATE} .",
    "I had dinner with {PER} in {LOC} .",
    "We met {PER} at the station in {LOC} .",
    "My sister {PER} studies at {ORG} .",
    "Yesterday {PER} flew from {LOC} to {LOC} .",
    "{PER} drove from {LOC} to {LOC} on {DATE} .",
    "{PER} spoke to reporters in {LOC} on {DATE} .",
    "{PER} signed a contract with {ORG} .",
    "{PER} will give a talk at {ORG} on {DATE} .",
    "According to {PER} , {ORG} will hire more staff .",
    "{PER} told {ORG} that the plan had changed .",
    "Ask {PER} about the trip to {LOC} .",
    "{PER} teaches history at {ORG} .",
    "{PER} retired from {ORG} in {DATE} .",
    "{PER} runs a small cafe in {LOC} .",
    "{PER} won the race in {LOC} on {DATE} .",
    "Thanks to {PER} , the school in {LOC} has a new library .",
    "{PER} and her husband travelled to {LOC} last summer .",
    "{PER} wrote a book about {LOC} .",
    "The letter from {PER} arrived on {DATE} .",
    "Please send the report to {PER} before {DATE} .",
    "{PER} has been the coach of {ORG} since {DATE} .",
    # organisations
    "{ORG} opened a new office in {LOC} on {DATE} .",
    "{ORG} hired {PER} last year .",
    "{ORG} reported strong sales in {DATE} .",
    "{ORG} moved its headquarters to {LOC} .",
    "{ORG} announced a deal with {ORG} on {DATE} .",
    "{ORG} will close its store in {LOC} .",
    "Shares of {ORG} fell sharply on {DATE} .",
    "Workers at {ORG} went on strike on {DATE} .",
    "{ORG} , based in {LOC} , makes furniture .",
    "A spokesman for {ORG} declined to comment .",
    "Tickets from {ORG} go on sale on {DATE} .",
    "{ORG} cancelled all flights to {LOC} .",
    "{ORG} bought {ORG} in {DATE} .",
    "{ORG} named {PER} as its new chief executive .",
    "The new factory of {ORG} in {LOC} employs three hundred people .",
    "{ORG} and {ORG} will merge next year .",
    # places
    "A storm hit {LOC} on {DATE} .",
    "The road between {LOC} and {LOC} is closed .",
    "The festival in {LOC} starts on {DATE} .",
    "It rained all day in {LOC} .",
    "The mayor of {LOC} , {PER} , spoke on {DATE} .",
    "The museum in {LOC} reopens in {DATE} .",
    "Flights from {LOC} to {LOC} were delayed on {DATE} .",
    "We spent our holiday in {LOC} .",
    "The city of {LOC} signed a deal with {ORG} .",
    "Prices in {LOC} rose sharply in {DATE} .",
    "The train to {LOC} leaves on {DATE} .",
    "Heavy snow closed the airport in {LOC} .",
    "Thousands of people marched through {LOC} on {DATE} .",
    "The bridge near {LOC} opens on {DATE} , says {PER} .",
    "{PER} {PER} and the team from {ORG} arrive in {LOC} soon .",
    "On {DATE} , {PER} opened a shop in {LOC} .",
    "In {DATE} , {ORG} built a school in {LOC} .",
    "In {LOC} , {PER} is known as a great cook .",
    # nothing to tag
    "Nothing much happened in town today .",
    "The weather was calm and the roads were quiet .",
    "She bought bread and milk on the way home .",
    "The meeting was moved to next week .",
    "He said the food was good and the service was quick .",
    "We walked along the river after lunch .",
    "The children played in the park all afternoon .",
    "Most shops were closed because of the holiday .",
]


def words_of(text: str) -> list[str]:
    """Split like the serving export: at whitespace, and each punctuation mark or symbol
    is a word of its own."""
    out, word = [], ""
    for ch in text:
        if ch.isspace() or unicodedata.category(ch)[0] in "PS":
            if word:
                out.append(word)
            word = ""
            if not ch.isspace():
                out.append(ch)
        else:
            word += ch
    return out + ([word] if word else [])


def held_out_words(path: Path | None = None) -> set[str]:
    """Every word of a named entity in the hand-written sentences the default tagger is
    judged on, except the generic organisation kinds ("Bank") and dates."""
    path = path or (Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "plain"
                    / "entities.conll")
    if not path.is_file():
        return set()
    words = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1][2:] in {"PER", "LOC", "ORG"}:
            words.add(parts[0])
    return words - set(ORG_KINDS)


def _fillers(rng: random.Random, locales: list[str], words: list[str], avoid: set[str]
             ) -> dict[str, Callable[[], str]]:
    from faker import Faker

    fakers = []
    for locale in locales:
        fake = Faker(locale)
        fake.seed_instance(rng.randrange(2**31))
        # it_IT builds its city list from a set, in an order that PYTHONHASHSEED decides:
        # sorted, the corpus is the same in every process.
        for provider in fake.providers:
            if isinstance(getattr(provider, "cities", None), list):
                provider.cities = sorted(provider.cities)
        fakers.append(fake)

    def drawn(draw: Callable[[], str]) -> str:
        while True:
            text = draw()
            if not avoid & set(words_of(text)):
                return text

    def person() -> str:
        fake = rng.choice(fakers)
        kind = rng.random()
        if kind < 0.2:
            return drawn(fake.first_name)
        if kind < 0.3:
            return drawn(fake.last_name)
        return drawn(lambda: f"{fake.first_name()} {fake.last_name()}")

    def place() -> str:
        fake = rng.choice(fakers)
        return drawn(fake.country if rng.random() < 0.15 else fake.city)

    def org() -> str:
        kind = rng.random()
        if kind < 0.35:
            stem = rng.choice(fakers).last_name()
        elif kind < 0.7:
            stem = rng.choice(words) + rng.choice(ORG_SUFFIXES)
        else:
            stem = rng.choice(words) + " " + rng.choice(words)
        return drawn(lambda: f"{stem} {rng.choice(ORG_KINDS)}") if not avoid & set(
            words_of(stem)) else org()

    def date() -> str:
        kind, month = rng.random(), rng.choice(MONTHS)
        day, year = rng.randint(1, 28), rng.randint(1950, 2030)
        if kind < 0.2:
            return rng.choice(DAYS)
        if kind < 0.4:
            return f"{day} {month}"
        if kind < 0.5:
            return f"{month} {day}"
        if kind < 0.65:
            return f"{day} {month} {year}"
        if kind < 0.8:
            return f"{month} {year}"
        if kind < 0.9:
            return str(year)
        return month

    return {"PER": person, "LOC": place, "ORG": org, "DATE": date}


def sentence(rng: random.Random, fill: dict[str, Callable[[], str]]) -> list[tuple[str, str]]:
    """One sentence as (word, IOB2 tag) pairs."""
    out: list[tuple[str, str]] = []
    for part in rng.choice(TEMPLATES).split():
        if part.startswith("{") and part.endswith("}"):
            kind = part[1:-1]
            words = words_of(fill[kind]())
            out += [(w, ("B-" if i == 0 else "I-") + kind) for i, w in enumerate(words)]
        else:
            out.append((part, "O"))
    return out


def main(out: Path | None = None) -> None:
    """Write ner_{train,validation,test}.conll into ``out`` (default: next to this file)."""
    import faker

    if faker.VERSION != FAKER_VERSION:  # another version draws other names
        raise SystemExit(f"make_ner_corpus: needs faker=={FAKER_VERSION} (found "
                         f"{faker.VERSION}) to write the shipped files again")
    rng = random.Random(SEED)
    here = out or Path(__file__).parent
    avoid = held_out_words()
    half = len(ORG_WORDS) * 3 // 4
    for split, n in SIZES.items():
        train = split == "train"
        fill = _fillers(rng, TRAIN_LOCALES if train else HELD_LOCALES,
                        ORG_WORDS[:half] if train else ORG_WORDS[half:], avoid)
        lines = ["-DOCSTART- O", ""]
        for _ in range(n):
            lines += [f"{w} {t}" for w, t in sentence(rng, fill)] + [""]
        (here / f"ner_{split}.conll").write_text("\n".join(lines), encoding="utf-8")


if __name__ == "__main__":
    main()
