"""Generate tfapp's shipped demo classification data (seeded, reproducible).

    python scripts/make_demo_data.py   # writes tfapp/demo/reviews_{train,validation,test}.csv
    python scripts/make_demo_data.py --unlabelled 16000   # + reviews_unlabelled.txt (MLM)

Short English product and movie reviews with columns ``text,label`` and labels
``positive``/``negative``. They come from templates with plain cues ("the battery was
great"), negations ("was not great"), contrast clauses ("the plot was dull, but the acting
was superb": the clause after "but" decides) and idioms ("not bad at all"), and ~8% of
labels are flipped on purpose. A bag of words cannot read negation or contrast, and
nothing can predict the flipped labels, so a small model learns the data visibly (far
above the majority class) without reaching 100%.

``--unlabelled N`` also writes the masked-LM corpus of docs/hub.md: N unlabelled reviews of
2-5 sentences that share one polarity (drawn with their own seed, so the CSVs stay the same).
"""

from __future__ import annotations

import argparse
import csv
import random
from pathlib import Path

SUBJECTS = {
    "movie": ["the movie", "this film", "the plot", "the acting", "the soundtrack", "the ending",
              "the dialogue", "the cast", "the special effects", "the script"],
    "product": ["this phone", "the battery", "the blender", "these headphones", "the camera",
                "the keyboard", "this backpack", "the charger", "the screen", "the coffee maker"],
    "other": ["this book", "the service", "the delivery", "the hotel room", "the restaurant"],
}
POSITIVE = ["great", "wonderful", "excellent", "delightful", "superb", "charming", "reliable",
            "impressive", "brilliant", "enjoyable", "fantastic", "solid", "lovely", "sturdy"]
NEGATIVE = ["terrible", "awful", "boring", "disappointing", "dull", "flimsy", "mediocre",
            "frustrating", "poor", "clumsy", "cheap", "annoying", "weak", "sloppy"]
INTENSIFIERS = ["", "", "", "really ", "very ", "absolutely ", "quite ", "truly "]
LIKE_POS = ["loved", "enjoyed", "liked", "would recommend", "adore", "appreciated"]
LIKE_NEG = {"movie": ["hated", "disliked", "regret watching", "walked out of", "gave up on"],
            "product": ["hated", "disliked", "regret buying", "returned", "gave up on"],
            "other": ["hated", "disliked", "regret choosing", "complained about"]}
IDIOMS_POS = ["not bad at all", "worth every penny", "exceeded my expectations",
              "a pleasant surprise", "better than I expected", "a joy to use"]
IDIOMS_NEG = ["not worth the money", "a waste of time", "fell apart after a week",
              "not good at all", "worse than I expected", "stopped working quickly"]
OPENERS = ["", "", "", "Honestly, ", "Overall, ", "In short, ", "To be fair, ", "Well, "]
ENDINGS = [".", ".", ".", "!", "!!", " :)", ", five stars.", ", one star."]


def _subject(rng: random.Random, avoid: str = "") -> tuple[str, str]:
    """(subject, its kind), never ``avoid`` (a contrast names two different things)."""
    while True:
        kind = rng.choice(list(SUBJECTS))
        subj = rng.choice(SUBJECTS[kind])
        if subj != avoid:
            return subj, kind


def _was(subj: str) -> str:
    return "were" if subj.split()[0] == "these" or subj.endswith("effects") else "was"


def _adj(rng: random.Random, positive: bool) -> str:
    return rng.choice(INTENSIFIERS) + rng.choice(POSITIVE if positive else NEGATIVE)


def _ending(rng: random.Random, positive: bool) -> str:
    end = rng.choice(ENDINGS)
    # A star rating is a strong cue; keep it consistent with the true label.
    if end in (", five stars.", " :)") and not positive or end == ", one star." and positive:
        return "."
    return end


def review(rng: random.Random, label: bool | None = None) -> tuple[str, bool]:
    """One (text, is_positive) pair from a randomly chosen template; ``label`` fixes its
    polarity (None: drawn here -- the shipped CSVs' sequence of rng calls)."""
    if label is None:
        label = rng.random() < 0.5
    kind = rng.choices(["plain", "negated", "contrast", "although", "verb", "verb_neg", "idiom"],
                       weights=[26, 16, 18, 10, 14, 8, 8])[0]
    subj, group = _subject(rng)
    was = _was(subj)
    if kind == "plain":
        body = f"{subj} {was} {_adj(rng, label)}"
    elif kind == "negated":  # "not great" is negative, "not terrible" leans positive
        body = f"{subj} {was} not {rng.choice(NEGATIVE if label else POSITIVE)}"
    elif kind == "contrast":  # the clause after "but" decides
        other, _ = _subject(rng, avoid=subj)
        body = (f"{subj} {was} {_adj(rng, not label)}, "
                f"but {other} {_was(other)} {_adj(rng, label)}")
    elif kind == "although":
        body = (f"although {subj} {was} {_adj(rng, not label)}, "
                f"overall it was {_adj(rng, label)}")
    elif kind == "verb":
        body = f"I {rng.choice(LIKE_POS if label else LIKE_NEG[group])} {subj}"
    elif kind == "verb_neg":
        verb = rng.choice(["did not enjoy", "did not like", "would not recommend"])
        if label:
            pronoun = "them" if was == "were" else "it"
            body = f"I did not hate {subj}, I {rng.choice(['loved', 'enjoyed'])} {pronoun}"
        else:
            body = f"I {verb} {subj}"
    else:
        idiom = rng.choice(IDIOMS_POS if label else IDIOMS_NEG)
        body = f"{subj} {idiom}" if idiom.split()[0] in {"fell", "stopped",
                                                         "exceeded"} else f"{subj} {was} {idiom}"
    text = rng.choice(OPENERS) + body + _ending(rng, label)
    return text[0].upper() + text[1:], label


def make_split(rng: random.Random, n: int, noise: float) -> list[tuple[str, str]]:
    rows = []
    for _ in range(n):
        text, positive = review(rng)
        if rng.random() < noise:  # deliberate label noise: caps accuracy below 100%
            positive = not positive
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
        while text in avoid:  # never a held-out text, not even as one sentence
            text, _ = review(rng, positive)
        parts.append(text)
    return " ".join(parts)


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
    parser.add_argument("--seed", type=int, default=20261122)
    parser.add_argument("--noise", type=float, default=0.08)
    parser.add_argument("--train", type=int, default=1500)
    parser.add_argument("--validation", type=int, default=300)
    parser.add_argument("--test", type=int, default=300)
    parser.add_argument("--unlabelled", type=int, default=0, metavar="N",
                        help="also write N unlabelled multi-sentence reviews, one per line, to "
                             "reviews_unlabelled.txt (the masked-LM corpus; default 0: none)")
    parser.add_argument("--unlabelled-seed", type=int, default=7)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    held_out: set[str] = set()
    for split in ("train", "validation", "test"):
        rows = make_split(rng, getattr(args, split), args.noise)
        write_csv(rows, args.out / f"reviews_{split}.csv")
        pos = sum(label == "positive" for _, label in rows)
        print(f"{args.out / f'reviews_{split}.csv'}: {len(rows)} rows, {pos} positive")
        if split != "train":
            held_out.update(text for text, _ in rows)
    if args.unlabelled > 0:
        # Own rng: the labelled CSVs stay the same whether or not this corpus is written.
        urng = random.Random(args.unlabelled_seed)
        path = args.out / "reviews_unlabelled.txt"
        lines = [unlabelled_review(urng, held_out) for _ in range(args.unlabelled)]
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        print(f"{path}: {len(lines)} unlabelled reviews, {path.stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
