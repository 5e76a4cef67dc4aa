"""Entity counts as a streaming Keras metric, so fit's own validation pass scores entities.

Per entity type: true positives, predicted and gold entities, read as seqeval's strict
IOB2 mode reads them (``tfapp.tasks.ner.scores``: an entity is ``B-X I-X*``; an ``I-``
without its ``B-`` starts nothing; a predicted entity counts when its type, first and
last word equal a gold one's). Each replica counts the windows of its own batch, and the
counts are summed when read, as every metric's are; nothing is copied to the host in a
step.

A window is scored on its own: the words are the labelled positions (each word's first
piece), in order. The counts equal seqeval's on the whole sentences except where a
sentence is cut into several windows and an entity runs across the cut (it is judged by
its part in the window it begins in) and for words without word pieces (they have no
position; the reports tag them O). The run's reports (``finish``) stay seqeval's own.
"""

from __future__ import annotations

from tfapp.data.text.tags import OUTSIDE, split_tag

import numpy as np
import tensorflow as tf

#: the per-type counts of ``EntityCounts``, as its variables are named
COUNTS = ("true_positives", "predicted", "gold")


def entity_types(tag_names: list[str]) -> list[str]:
    """The entity types of ``tag_names``, sorted."""
    return sorted({split_tag(t)[1] for t in tag_names if t != OUTSIDE})


def micro_scores(counts: dict[str, np.ndarray]) -> dict[str, float]:
    """Micro precision, recall and F1 of per-type counts (0 where a denominator is 0, as
    the reports' ``zero_division=0``)."""
    tp, predicted, gold = (float(np.sum(counts[k])) for k in COUNTS)
    precision = tp / predicted if predicted else 0.0
    recall = tp / gold if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


@tf.keras.utils.register_keras_serializable(package="tfapp")
class EntityCounts(tf.keras.metrics.Metric):
    """Strict IOB2 entity counts per type (module docstring) of tag probabilities
    ``[batch, seq_length, tags]`` against labels ``[batch, seq_length]`` (the tag id at
    each word's first piece, negative elsewhere).

    ``result()`` is an empty dict: the counts are no log scalars, and no step reads them;
    ``counts()`` reads them once an evaluation is done (``EntityF1``).
    """

    def __init__(self, tag_names: list[str], name: str = "entity_counts", **kwargs):
        super().__init__(name=name, **kwargs)
        self.tag_names = list(tag_names)
        self.types = entity_types(self.tag_names)
        shape = (len(self.types),)
        # float32, not int: an int32 variable lives in host memory on a GPU (a copy a step)
        for key in COUNTS:
            setattr(self, key, self.add_weight(name=key, shape=shape, initializer="zeros",
                                               dtype=tf.float32))

    def _tables(self) -> tuple[list[bool], list[bool], list[int]]:
        """Per tag id, and one more for "no word": begins (B-), inside (I-), type index
        (len(types) for O and for no word)."""
        index = {t: i for i, t in enumerate(self.types)}
        none = len(self.types)
        kinds = [split_tag(t) for t in self.tag_names]
        return ([p == "B" for p, _ in kinds] + [False], [p == "I" for p, _ in kinds] + [False],
                [index.get(t, none) if p != OUTSIDE else none for p, t in kinds] + [none])

    def update_state(self, y_true, y_pred, sample_weight=None):
        del sample_weight  # entities are counted, not weighted
        begins, inside, kind = (tf.constant(v) for v in self._tables())
        none = len(self.types)
        labels = tf.cast(y_true, tf.int32)
        predicted = tf.argmax(y_pred, axis=-1, output_type=tf.int32)
        # Words to the front of each row, in order (a stable sort; static shapes for XLA),
        # so the word before a word is the position before it.
        order = tf.argsort(tf.cast(labels < 0, tf.int32), axis=1, stable=True)
        labels = tf.gather(labels, order, batch_dims=1)
        predicted = tf.gather(predicted, order, batch_dims=1)
        no_word = len(self.tag_names)
        gold = tf.where(labels >= 0, labels, no_word)
        pred = tf.where(labels >= 0, predicted, no_word)

        def links(tags):
            """Whether each word continues the run of the word before: an I- of its type
            (the first word of a row continues nothing)."""
            k = tf.gather(kind, tags)
            before = tf.concat([tf.fill([tf.shape(k)[0], 1], none), k[:, :-1]], axis=1)
            return tf.gather(inside, tags) & tf.equal(k, before)

        gold_links, pred_links = links(gold), links(pred)
        # Runs of linked words, numbered over the whole batch; a gold run that starts with
        # a B- is a gold entity.
        rows, length = tf.shape(gold)[0], tf.shape(gold)[1]
        run = (tf.cumsum(tf.cast(~gold_links, tf.int32), axis=1) - 1
               + tf.range(rows)[:, None] * length)
        runs = rows * length
        # A gold entity is found when every word of it is predicted as it is, and the
        # prediction does not continue it into the word after it.
        wrong = tf.cast(tf.not_equal(pred, gold), tf.float32)
        extends = tf.cast(~gold_links & pred_links, tf.float32)  # charged to the run before
        errors = (tf.math.unsorted_segment_sum(wrong, run, runs)
                  + tf.math.unsorted_segment_sum(extends, tf.maximum(run - 1, 0), runs))
        gold_begins = tf.gather(begins, gold)
        found = gold_begins & tf.equal(tf.gather(errors, run), 0.0)

        def per_type(flags, tags):
            return tf.math.unsorted_segment_sum(
                tf.cast(flags, tf.float32), tf.where(flags, tf.gather(kind, tags), none),
                none + 1)[:none]

        return tf.group(self.true_positives.assign_add(per_type(found, gold)),
                        self.predicted.assign_add(per_type(tf.gather(begins, pred), pred)),
                        self.gold.assign_add(per_type(gold_begins, gold)))

    def result(self):
        return {}

    def reset_state(self):
        # Keras's default assigns a scalar 0, which a non-scalar variable refuses.
        for v in self.variables:
            v.assign(tf.zeros_like(v))

    def counts(self) -> dict[str, np.ndarray]:
        """Per-type counts so far, summed over replicas (call outside a step)."""
        return {key: np.rint(getattr(self, key).numpy()).astype(np.int64) for key in COUNTS}

    def get_config(self):
        return {**super().get_config(), "tag_names": self.tag_names}
