"""Write the generator's demo corpus and pairs file (seeded, so rerunning reproduces them).

    python tfapp/demo/make_generator_corpus.py

The text is authored here, not copied: a small world of villagers, each with their own
tasks, places and times of day. A model that learned the corpus continues "the baker"
with a baker's work and "the fisherman" with a fisherman's, which is easy to judge by eye.
"""

from __future__ import annotations

import random
from pathlib import Path

SEED = 1234
LINES = 2400
PAIRS = 600

# subject -> (actions, places): actions are what only that subject does.
WORLD = {
    "the old fisherman": (["mends his nets", "sails out on the grey water",
                           "counts the silver fish", "sings to the gulls"],
                          ["by the harbour", "on the long pier", "beyond the breakwater"]),
    "the baker": (["kneads the bread", "lights the great oven", "sells warm loaves",
                   "dusts the table with flour"], ["in the warm kitchen", "behind the shop",
                                                   "at the market stall"]),
    "the young shepherd": (["counts the sheep", "plays a reed pipe", "leads the flock home",
                            "watches for the fox"], ["on the green hill", "in the high meadow",
                                                     "along the stone wall"]),
    "the blacksmith": (["hammers the glowing iron", "shoes the brown horse",
                        "sharpens the farmer's scythe", "mends the broken gate"],
                       ["at the forge", "near the smoky anvil", "in the yard"]),
    "the miller": (["grinds the golden wheat", "opens the sluice gate", "carries sacks of flour",
                    "oils the creaking wheel"], ["at the water mill", "by the weir",
                                                 "under the turning sails"]),
    "the weaver": (["spins the soft wool", "weaves a blue cloth", "dyes the yarn red",
                    "sews a winter coat"], ["at her loom", "by the bright window",
                                            "in the quiet room"]),
    "the little girl": (["chases the yellow butterflies", "picks wild flowers",
                         "feeds the ducks", "reads a story book"], ["in the garden",
                                                                    "by the pond",
                                                                    "under the apple tree"]),
    "the schoolteacher": (["writes on the blackboard", "rings the brass bell",
                           "reads a poem aloud", "marks the copy books"],
                          ["in the schoolhouse", "at her desk", "in front of the class"]),
    "the farmer": (["ploughs the dark field", "milks the patient cows", "gathers the hay",
                    "mends the fence"], ["on the farm", "in the barn", "across the valley"]),
    "the innkeeper": (["pours the cider", "sweeps the floor", "lights the lanterns",
                       "welcomes the travellers"], ["at the inn", "by the fire",
                                                    "at the crossroads"]),
    "the gardener": (["waters the roses", "plants the beans", "prunes the hedge",
                      "digs the potato bed"], ["in the walled garden", "by the greenhouse",
                                               "along the gravel path"]),
    "the doctor": (["visits the sick child", "mixes a bitter tonic",
                    "listens to the old man's chest", "rides to the next village"],
                   ["in the cottage", "on the muddy lane", "at the surgery"]),
}
TIMES = ["at dawn", "in the morning", "at noon", "in the afternoon", "at dusk",
         "every evening", "before the rain", "when the bells ring"]
WEATHER = ["the wind blows from the sea", "the sun is warm on the roofs",
           "the rain falls softly", "the mist lies over the fields",
           "the snow covers the lanes", "the stars come out one by one"]


def corpus_lines(rng: random.Random, n: int) -> list[str]:
    subjects = list(WORLD)
    lines = []
    for _ in range(n):
        who = rng.choice(subjects)
        actions, places = WORLD[who]
        kind = rng.random()
        if kind < 0.55:
            line = f"{who} {rng.choice(actions)} {rng.choice(places)} {rng.choice(TIMES)}."
        elif kind < 0.8:
            line = f"{rng.choice(TIMES).capitalize()}, {who} {rng.choice(actions)}."
        elif kind < 0.92:
            line = f"{rng.choice(WEATHER).capitalize()}, and {who} {rng.choice(actions)}."
        else:
            line = f"{who} {rng.choice(actions)}, then {rng.choice(actions)}!"
        lines.append(line[0].upper() + line[1:])
    return lines


def pairs(rng: random.Random, n: int) -> list[tuple[str, str]]:
    out = []
    subjects = list(WORLD)
    for _ in range(n):
        who = rng.choice(subjects)
        actions, places = WORLD[who]
        if rng.random() < 0.5:
            out.append((f"what does {who} do?", f"{who} {rng.choice(actions)}."))
        else:
            out.append((f"where is {who}?", f"{who} is {rng.choice(places)}."))
    return out


def main() -> None:
    rng = random.Random(SEED)
    here = Path(__file__).parent
    lines = corpus_lines(rng, LINES)
    header = ["# tfapp generator demo corpus: authored and generated by make_generator_corpus.py",
              "# (seed 1234). Lines starting with '#' are dropped by configs/generator.yaml."]
    (here / "generator_corpus.txt").write_text("\n".join(header + lines) + "\n")
    rows = ["source\ttarget"] + [f"{s}\t{t}" for s, t in pairs(rng, PAIRS)]
    (here / "generator_pairs.tsv").write_text("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
