"""Generate tfapp's shipped demo classification data (seeded, reproducible).

    python scripts/make_demo_data.py   # writes tfapp/demo/reviews_{train,validation,test}.csv
    python scripts/make_demo_data.py --unlabelled 16000   # + reviews_unlabelled.txt (MLM)

Short English reviews of products, films, books, hotels, restaurants and services, with
columns ``text,label`` and labels ``positive``/``negative``. Two kinds of sentence:

* **plain** ones, the way people write reviews: an aspect and what it does ("the battery
  lasts all day", "the soup was bland"), short fragments ("great sound, comfortable fit"),
  first-person verdicts ("I want my money back"), events ("stopped working after a
  week"), superlatives and recommendations, alone or joined two or three of one polarity;
* **hard** ones that a bag of words cannot read: negations ("was not great"), contrast
  clauses ("the plot was dull, but the acting was superb": the clause after "but"
  decides), concessions ("although ..., overall ...") and idioms ("not bad at all").

About 5% of the labels are flipped on purpose, so nothing reaches 100%. Texts are written
in lower case or sentence case at random, and star ratings or smileys appear on both sides
of the ``but``, so neither is a shortcut. The plain sentences in tests/fixtures/plain/ were
written by hand before this generator, and it never writes them (a test checks).

``--unlabelled N`` also writes the masked-LM corpus of docs/hub.md: N unlabelled reviews of
2-5 sentences that share one polarity (drawn with their own seed, so the CSVs stay the same).
"""

from __future__ import annotations

import argparse
import csv
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import demo_lexicon as lex  # noqa: E402

# share of the reviews that need more than their words (negations, contrasts)
HARD_SHARE = 0.15
# probe_polarity.py reads the sentiment adjectives from here
POSITIVE, NEGATIVE = lex.POSITIVE, lex.NEGATIVE

__all__ = ["NEGATIVE", "POSITIVE", "main", "make_split", "review", "unlabelled_review"]


def _aspects(kind: str) -> list[tuple]:
    return [a for a in lex.ASPECTS if kind in a[1]]


def _item(rng: random.Random, avoid: str = "") -> tuple[str, str]:
    """(a thing reviewed, its kind), never ``avoid`` (a contrast names two things)."""
    while True:
        kind = rng.choice(list(lex.ITEMS))
        item = rng.choice(lex.ITEMS[kind])
        if item != avoid:
            return item, kind


def _was(subj: str, rng: random.Random) -> str:
    plural = subj.split()[0] in {"these", "the"} and subj.endswith(("s", "phones", "shoes"))
    present = rng.random() < 0.5
    if plural and not subj.endswith(("glass", "series", "lens")):
        return "are" if present else "were"
    return "is" if present else "was"


def _adj(rng: random.Random, positive: bool) -> str:
    word = rng.choice(POSITIVE if positive else NEGATIVE)
    if word.startswith("a ") or " " in word:
        return word
    return rng.choice(lex.INTENSIFIERS) + word


def _past(predicate: str) -> str:
    """"lasts all day" -> "lasted all day", "is dim" -> "was dim" (the first word)."""
    verb, _, rest = predicate.partition(" ")
    if verb in lex.PAST.values() or verb.endswith("ed"):
        return predicate
    if verb in lex.PAST:
        past = lex.PAST[verb]
    elif verb.endswith("ies"):
        past = verb[:-3] + "ied"
    elif verb.endswith(("ses", "xes", "zes", "ches", "shes")):
        past = verb[:-2] + "ed"
    elif verb.endswith("es") and not verb.endswith("ees"):
        past = verb[:-1] + "d"
    elif verb.endswith("s") and not verb.endswith("ss"):
        past = verb[:-1] + "ed"
    else:
        return predicate  # already past ("was delicious") or not a verb
    return f"{past} {rest}".strip()


def _aspect_clause(rng: random.Random, kind: str, positive: bool) -> str:
    """"the battery lasts all day", "the food was bland", "the screen flickered"."""
    noun, _, pos, neg = rng.choice(_aspects(kind))
    predicate = rng.choice(pos if positive else neg)
    return f"{noun} {_past(predicate) if rng.random() < 0.3 else predicate}"


def _like(rng: random.Random, obj: str, positive: bool) -> str:
    """"I loved it", "my son loves this one", "everyone hates the hotel"."""
    subject, singular = rng.choice(lex.SUBJECTS)
    subject = subject.format(person=_neutral(rng, lex.PEOPLE))
    words = rng.choice(lex.LIKE_POS if positive else lex.LIKE_NEG).split()
    if singular:  # "am" -> "is"; a present-tense verb takes -s ("really like" -> "likes")
        i = 1 if words[0] == "really" else 0
        verb = words[i]
        if verb == "am":
            words[i] = "is"
        elif verb in lex.PRESENT:
            words[i] = verb + ("es" if verb.endswith(("sh", "ch", "s", "x")) else "s")
    return f"{subject} {' '.join(words)} {obj}"


def _fragment(rng: random.Random, kind: str, positive: bool) -> str:
    """"great battery life", "terrible service", "a wonderful film"."""
    adj = rng.choice([w for w in (POSITIVE if positive else NEGATIVE) if " " not in w])
    if rng.random() < 0.5:
        noun = _neutral(rng, lex.NOUNS[kind])
        return (f"a {adj} {noun}" if rng.random() < 0.3 and not noun.endswith("s")
                and adj[0] not in "aeiou" else f"{adj} {noun}")
    noun = rng.choice(_aspects(kind))[0].removeprefix("the ")
    if noun in {"it", "cleaning it", "customer service"}:
        noun = "customer service" if noun == "customer service" else lex.NOUNS[kind][0]
    return f"{adj} {'battery life' if noun == 'battery' else noun}"


def _plain_clause(rng: random.Random, kind: str, item: str, positive: bool) -> str:
    """One plain clause of one polarity about ``item`` (of ``kind``)."""
    shape = rng.choices(["aspect", "item_adj", "fragment", "like", "event", "verdict",
                         "best", "experience"], weights=[28, 12, 14, 10, 6, 10, 6, 14])[0]
    if shape == "aspect":
        return _aspect_clause(rng, kind, positive)
    if shape == "item_adj":
        if rng.random() < 0.25:  # any noun can be judged: "the design is lovely"
            item = "the " + _neutral(rng, lex.THINGS + lex.PLACES)
        return f"{item} {_was(item, rng)} {_adj(rng, positive)}"
    if shape == "fragment":
        return _fragment(rng, kind, positive)
    if shape == "experience":
        return rng.choice(lex.EXPERIENCE_POS if positive else lex.EXPERIENCE_NEG)
    if shape == "like":
        return _like(rng, rng.choice(["it", "this one", item]), positive)
    if shape == "event" and kind in lex.PRODUCT_KINDS:
        if positive:
            return f"{item} " + rng.choice(lex.EVENTS_POS).format(n=rng.choice(lex.NUMBERS))
        return f"{rng.choice([item, 'it'])} " + rng.choice(lex.EVENTS_NEG).format(
            span=rng.choice(lex.SPANS))
    if shape == "best":
        noun = rng.choice(lex.NOUNS[kind])
        ever = lex.EVER.get(kind, "owned" if kind in lex.PRODUCT_KINDS else "had")
        best = "best" if positive else "worst"
        return rng.choice([f"the {best} {noun} I have ever {ever}", f"{best} {noun} ever",
                           f"one of the {best} {noun}s I have {ever}"
                           if not noun.endswith("s") else f"{best} {noun} in years"])
    return rng.choice(lex.VERDICT_POS if positive else lex.VERDICT_NEG)


def _novel_word(rng: random.Random) -> str:
    """A made-up word ("dravelon", "mistoks"): it stands for the words of a user's text
    that the demo never shows, so that the model learns to read past them."""
    word = "".join(rng.choice("bcdfghjklmnprstvwz") + rng.choice("aeiou")
                   for _ in range(rng.randint(1, 3)))
    return word + rng.choice(["", "", "n", "r", "s", "t", "l", "ks", "ing", "ed", "er"])


def _neutral(rng: random.Random, words: list[str]) -> str:
    return _novel_word(rng) if rng.random() < 0.3 else rng.choice(words)


def _context(rng: random.Random) -> str:
    """A phrase without polarity ("for my daughter", "of the decade")."""
    return rng.choice(lex.CONTEXT).format(
        person=_neutral(rng, lex.PEOPLE), time=_neutral(rng, lex.TIMES),
        place=_neutral(rng, lex.PLACES), thing=_neutral(rng, lex.THINGS))


def _join(clauses: list[str], rng: random.Random) -> str:
    if len(clauses) == 1:
        return clauses[0]
    glue = rng.choice([", ", " and ", ". ", ", ", " - "])
    if glue == " and ":
        return ", ".join(clauses[:-1]) + " and " + clauses[-1]
    if glue == ". ":
        return ". ".join([clauses[0]] + [c[0].upper() + c[1:] for c in clauses[1:]])
    return glue.join(clauses)


def _hard(rng: random.Random, positive: bool) -> str:
    """A sentence whose label needs more than its words: negation, contrast, idioms."""
    item, kind = _item(rng)
    was = _was(item, rng)
    shape = rng.choices(["negated", "contrast", "although", "verb_neg", "idiom"],
                        weights=[26, 30, 14, 14, 16])[0]
    if shape == "negated":  # "not great" is negative, "not bad" is positive
        word = rng.choice(lex.NOT_NEGATIVE if positive else
                          [w for w in POSITIVE if " " not in w])
        return f"{item} {was} not {word}"
    if shape == "contrast":  # the clause after "but" decides
        other, other_kind = _item(rng, avoid=item)
        first = _plain_clause(rng, kind, item, not positive)
        return f"{first}, but {_plain_clause(rng, other_kind, other, positive)}"
    if shape == "although":
        return (f"although {_aspect_clause(rng, kind, not positive)}, "
                f"overall it was {_adj(rng, positive)}")
    if shape == "verb_neg":
        if positive:
            return rng.choice([f"I did not expect much from {item}, but I loved it",
                               f"I was not sure about {item}, but I loved it",
                               f"I did not hate {item}, I loved it"])
        return f"I {rng.choice(['did not enjoy', 'did not like', 'would not recommend'])} {item}"
    idiom = rng.choice(lex.IDIOMS_POS if positive else lex.IDIOMS_NEG)
    return f"{item} {idiom}" if idiom.startswith("exceeded") else f"{item} {was} {idiom}"


def review(rng: random.Random, label: bool | None = None) -> tuple[str, bool]:
    """One (text, is_positive) pair; ``label`` fixes its polarity (None: drawn here)."""
    if label is None:
        label = rng.random() < 0.5
    if rng.random() < HARD_SHARE:
        body = _hard(rng, label)
    else:
        item, kind = _item(rng)
        n = rng.choices([1, 2, 3], weights=[50, 38, 12])[0]
        clauses = [_plain_clause(rng, kind, item, label) for _ in range(n)]
        body = _join([c + " " + _context(rng) if rng.random() < 0.3 else c for c in clauses],
                     rng)
    text = rng.choice(lex.OPENERS) + body + rng.choice(lex.ENDINGS)
    if rng.random() < 0.6:  # sentence case; the rest stays as typed, in lower case
        text = text[0].upper() + text[1:]
    return text, label


def neutral_statement(rng: random.Random) -> str:
    """A sentence that says nothing good or bad ("I bought the kettle for my son")."""
    item, kind = _item(rng)
    text = rng.choice(lex.NEUTRAL).format(
        item=item, noun=_neutral(rng, lex.NOUNS[kind]), context=_context(rng),
        person=_neutral(rng, lex.PEOPLE), thing=_neutral(rng, lex.THINGS),
        place=_neutral(rng, lex.PLACES), color=rng.choice(lex.COLORS),
        day=rng.choice(lex.DAYS), span=rng.choice(lex.SPANS))
    text = rng.choice(lex.OPENERS) + text + rng.choice(lex.ENDINGS)
    return text[0].upper() + text[1:] if rng.random() < 0.6 else text


def make_split(rng: random.Random, n: int, noise: float, neutral: float = 0.0,
               avoid: set[str] = frozenset()) -> list[tuple[str, str]]:
    """``n`` labelled rows: reviews, a share ``noise`` of them with the wrong label, and a
    share ``neutral`` of statements without a verdict, labelled at random (so a model
    learns that such words carry no polarity, instead of reading one into them)."""
    rows = []
    while len(rows) < n:
        if rng.random() < neutral:
            text, positive = neutral_statement(rng), rng.random() < 0.5
        else:
            text, positive = review(rng)
            if rng.random() < noise:  # deliberate label noise: caps accuracy below 100%
                positive = not positive
        if text.lower() not in avoid:
            rows.append((text, "positive" if positive else "negative"))
    return rows


def unlabelled_review(rng: random.Random, avoid: set[str],
                      sentences: tuple[int, int] = (2, 5)) -> str:
    """A multi-sentence review without its label: one polarity drawn per review, shared by all
    its sentences (as in real reviews), none of them a text in ``avoid``.

    Why shared: within one templated sentence the sentiment adjective is unpredictable from
    its context, so masked-LM on single sentences learns no polarity (docs/hub.md); here a
    masked adjective is predictable from the review's other sentences.
    """
    positive = rng.random() < 0.5
    parts: list[str] = []
    for _ in range(rng.randint(*sentences)):
        text, _ = review(rng, positive)
        while text.lower() in avoid:  # never a held-out text, not even as one sentence
            text, _ = review(rng, positive)
        parts.append(text)
    return " ".join(parts)


def plain_texts() -> set[str]:
    """The hand-written plain sentences the default model is judged on (lower case)."""
    path = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "plain" / "reviews.csv"
    if not path.is_file():
        return set()
    with path.open(encoding="utf-8", newline="") as fh:
        return {row["text"].lower() for row in csv.DictReader(fh)}


def write_csv(rows: list[tuple[str, str]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(["text", "label"])
        writer.writerows(rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path,
                        default=Path(__file__).resolve().parent.parent / "tfapp" / "demo")
    parser.add_argument("--seed", type=int, default=20261129)
    parser.add_argument("--noise", type=float, default=0.05)
    parser.add_argument("--neutral", type=float, default=0.1,
                        help="share of the training rows that are statements without a "
                             "verdict, labelled at random")
    parser.add_argument("--train", type=int, default=20000)
    parser.add_argument("--validation", type=int, default=500)
    parser.add_argument("--test", type=int, default=500)
    parser.add_argument("--unlabelled", type=int, default=0, metavar="N",
                        help="also write N unlabelled multi-sentence reviews, one per line, to "
                             "reviews_unlabelled.txt (the masked-LM corpus; default 0: none)")
    parser.add_argument("--unlabelled-seed", type=int, default=7)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    held_out = plain_texts()
    for split in ("train", "validation", "test"):
        rows = make_split(rng, getattr(args, split), args.noise,
                          args.neutral if split == "train" else 0.0, held_out)
        write_csv(rows, args.out / f"reviews_{split}.csv")
        pos = sum(label == "positive" for _, label in rows)
        print(f"{args.out / f'reviews_{split}.csv'}: {len(rows)} rows, {pos} positive")
        if split != "train":
            held_out.update(text.lower() for text, _ in rows)
    if args.unlabelled > 0:
        # Own rng: the labelled CSVs stay the same whether or not this corpus is written.
        urng = random.Random(args.unlabelled_seed)
        path = args.out / "reviews_unlabelled.txt"
        lines = [unlabelled_review(urng, held_out) for _ in range(args.unlabelled)]
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        print(f"{path}: {len(lines)} unlabelled reviews, {path.stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
