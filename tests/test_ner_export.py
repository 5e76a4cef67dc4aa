"""The NER serving export: words read at their first piece across windows, strict entity
joining, and character (not byte) offsets that slice the input to each entity's text."""

from __future__ import annotations

import pytest

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "zoe", "muller", "visit", "##s", "oslo",
         ".", "anna", "berg", "bruno", "lind", "and"]
TAGS = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
# the tag a stub model gives each piece id: zoe/anna/bruno B-PER, muller/berg I-PER,
# oslo B-LOC, lind I-LOC (with no B-LOC before it: no entity), the rest O
PIECE_TAG = {"zoe": 3, "anna": 3, "bruno": 3, "muller": 4, "berg": 4, "oslo": 1, "lind": 2}


def _stub_model(seq_length: int):
    """A 'model' tagging each piece by its id alone, so the right tags come out only when
    serving reads every word at its own first piece in the right window."""
    import tensorflow as tf

    table = tf.constant([PIECE_TAG.get(tok, 0) for tok in VOCAB], tf.int32)
    ids = tf.keras.Input(shape=(seq_length,), dtype=tf.int32, name="input_word_ids")
    mask = tf.keras.Input(shape=(seq_length,), dtype=tf.int32, name="input_mask")
    types = tf.keras.Input(shape=(seq_length,), dtype=tf.int32, name="input_type_ids")
    probs = tf.keras.layers.Lambda(
        lambda x: 0.1 + 0.5 * tf.one_hot(tf.gather(table, x), len(TAGS)))(ids)
    return tf.keras.Model({"input_word_ids": ids, "input_mask": mask, "input_type_ids": types},
                          probs)


@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("\n".join(VOCAB) + "\n")
    return str(path)


TEXTS = ["Zoë Müller visits Oslo.", "Anna Berg and Bruno lind", "", "Oslo"]
EXPECTED = [[("PER", "Zoë Müller", 0, 10), ("LOC", "Oslo", 18, 22)],
            [("PER", "Anna Berg", 0, 9), ("PER", "Bruno", 14, 19)],  # adjacent PERs; lind: none
            [], [("LOC", "Oslo", 0, 4)]]


@pytest.mark.parametrize("seq_length", [16, 4])  # 4: two pieces a window, so 2-3 windows
def test_entities_and_character_offsets(vocab_file, seq_length, tmp_path):
    from tfapp.data.text.bert_preprocess import FastBertPacker
    from tfapp.tasks.ner.export import NerServing, export_ner
    from tfapp.tasks.ner.serving import entities_of as entities

    import tensorflow as tf

    serving = NerServing(_stub_model(seq_length), FastBertPacker(vocab_file),
                         seq_length=seq_length, tag_names=TAGS)
    out = {k: v.numpy() for k, v in serving.serve(tf.constant(TEXTS)).items()}
    for i, text in enumerate(TEXTS):
        got = entities(out, i)
        assert [(e["type"], e["text"], e["start"], e["end"]) for e in got] == EXPECTED[i]
        assert all(text[e["start"]:e["end"]] == e["text"] for e in got)
        assert all(e["score"] == pytest.approx(0.6) for e in got)
    assert out["entity_start"].shape == (4, 2)  # padded to the most entities in the batch
    if seq_length != 4:
        return  # one reload is enough
    path = export_ner(serving, tmp_path / "export", metadata={"task": "ner"})
    # Traced once, by the save: a concrete function taken before it would be traced again
    # in the save's context (tag_words is not called before the export; serve is, above).
    assert serving.tag_words.experimental_get_tracing_count() == 1
    loaded = tf.saved_model.load(str(path))
    again = loaded.signatures["serving_default"](text=tf.constant(TEXTS[:1]))
    assert [e["text"] for e in entities({k: v.numpy() for k, v in again.items()}, 0)] == \
        ["Zoë Müller", "Oslo"]
    # Words as a tagged file has them: each word's raw tag, lind's stray I-LOC kept.
    tagged = loaded.signatures["tag_words"](
        words=tf.constant([["Bruno", "lind", "visits"], ["Oslo", "", ""]]),
        num_words=tf.constant([3, 1]))
    assert tagged["tag"].numpy().astype(str).tolist() == [["B-PER", "I-LOC", "O"],
                                                          ["B-LOC", "", ""]]
    assert tagged["tag_score"].numpy()[0].tolist() == pytest.approx([0.6] * 3)

    # evaluate --output on a tagged file: each sentence's words, the export's tags and the
    # gold tags, one row per sentence, in order; the token accuracy recomputed from the
    # file (7 of 8 words: lind's gold B-LOC tagged I-LOC) is the report's.
    from pathlib import Path

    from tfapp.errors import ConfigError
    from tfapp.scoring import evaluate_to
    from tfapp.tasks.ner.serving import LoadedTagger

    conll = tmp_path / "test.conll"
    conll.write_text("Zoë B-PER\nMüller I-PER\nvisits O\nOslo B-LOC\n. O\n\n"
                     "Bruno B-PER\nlind B-LOC\nvisits O\n")
    out = tmp_path / "rows.jsonl"
    report = evaluate_to(LoadedTagger(path), str(conll), Path(tmp_path / "no-params.yaml"), {},
                         str(out), part_rows=1).result
    import json

    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows == [{"words": ["Zoë", "Müller", "visits", "Oslo", "."],
                     "tags": ["B-PER", "I-PER", "O", "B-LOC", "O"],
                     "gold_tags": ["B-PER", "I-PER", "O", "B-LOC", "O"]},
                    {"words": ["Bruno", "lind", "visits"], "tags": ["B-PER", "I-LOC", "O"],
                     "gold_tags": ["B-PER", "B-LOC", "O"]}]
    right = sum(t == g for r in rows for t, g in zip(r["tags"], r["gold_tags"], strict=True))
    assert right / sum(len(r["words"]) for r in rows) == report["token_accuracy"] == 7 / 8
    assert report["sentences"] == 2
    # --keep: a sentence of tagged words has no input columns to carry; refused in one
    # line before any part, and the output folder is not made (a rerun without --keep
    # would find another job's marker there).
    with pytest.raises(ConfigError, match=r"^--keep id: an NER export evaluates sentences"):
        evaluate_to(LoadedTagger(path), str(conll), Path(tmp_path / "no-params.yaml"), {},
                    str(tmp_path / "kept.jsonl/"), keep=["id"])
    assert not (tmp_path / "kept.jsonl").exists()

