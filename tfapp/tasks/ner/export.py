"""Serving export of a trained tagger: raw strings in, entities out.

``serve(text)`` (the ``serving_default`` signature) splits each string into words at
whitespace and punctuation (each punctuation mark a word, as CoNLL files write them),
tokenises, windows and tags them as training did (``tfapp.data.examples.ner``),
reads each word's tag at its first piece and joins ``B-``/``I-`` runs into entities
(strict IOB2: an ``I-`` without its ``B-`` starts nothing). It returns, padded to the
most entities of any string in the batch:

* ``entity_type`` [n, E] string, ``entity_text`` [n, E] string (the input's own text);
* ``entity_start`` / ``entity_end`` [n, E] int32: *character* offsets (Unicode code
  points, Python's ``str`` indexing: ``text[start:end] == entity_text``), not bytes;
* ``entity_score`` [n, E] float32: the mean probability of the entity's words' tags;
* ``num_entities`` [n] int32: how many of the E columns are real.

``tag_words(words, num_words)`` (the ``tag_words`` signature) tags text already split
into words, as tagged files are: ``words`` [n, W] string (row i's first ``num_words[i]``
are its words, the rest padding), and returns each word's raw tag (``tag`` [n, W]
string: the argmax at its first word piece, no IOB2 repair, "" past ``num_words``) and
that tag's probability (``tag_score`` [n, W] float32). It is how ``evaluate`` scores an
export: the words and tags the training reports scored, word for word.

Like the classifier's export it reloads with ``tensorflow`` and ``tensorflow_text`` only.
"""

from __future__ import annotations

import os
from pathlib import Path

from tfapp.data.input.lengths import trim_to_longest
from tfapp.data.text.tags import OUTSIDE, split_tag
from tfapp.data.text.windows import cut_windows, windows_per_sentence, word_pieces
from tfapp.model_card import CARD_FILE
from tfapp.models.serving_module import ServingModule
from tfapp.tasks.ner.serving import FORMAT

import tensorflow as tf
import tensorflow_text as tf_text

#: a word is a run of anything but whitespace and punctuation/symbols; each of those is one
WORD_SPLIT = r"\s+|[\p{P}\p{S}]"
KEEP = r"[\p{P}\p{S}]"


def split_words(text: tf.Tensor) -> tuple[tf.RaggedTensor, tf.RaggedTensor, tf.RaggedTensor]:
    """(words, begin bytes, end bytes), each ``[n, (words)]``, of strings ``text`` ``[n]``."""
    return tf_text.regex_split_with_offsets(text, WORD_SPLIT, KEEP)


class NerServing(ServingModule):
    """``serve(text)``: entities of each string (see the module docstring)."""

    def __init__(self, model: tf.keras.Model, preprocessor: tf.Module, *, seq_length: int,
                 tag_names: list[str]):
        super().__init__(model, preprocessor, name="ner_serving")
        self.tag_names = tf.Variable(tag_names, trainable=False, name="tag_names")
        self._seq_length = int(seq_length)
        parts = [split_tag(t) for t in tag_names]
        types = sorted({kind for prefix, kind in parts if prefix != OUTSIDE})
        self.entity_types = tf.Variable(types or [""], trainable=False, name="entity_types")
        # per tag id: 0 O, 1 B, 2 I; and its entity type id
        self._kind = tf.constant([{"B": 1, "I": 2}.get(p, 0) for p, _ in parts], tf.int32)
        self._type = tf.constant([types.index(k) if k else 0 for _, k in parts], tf.int32)

    def _word_tags(self, words: tf.RaggedTensor) -> tuple[tf.RaggedTensor, tf.RaggedTensor]:
        """(tag id, probability) of each word ``[n, (words)]``, read at its first piece."""
        tokenize, size = self.tokenizer.tokenize, self._seq_length - 2
        counts = word_pieces(tokenize, words.flat_values).row_lengths()  # [words]
        per_text = tf.RaggedTensor.from_row_lengths(counts, words.row_lengths())
        total = tf.reduce_sum(per_text, axis=1)
        windows = windows_per_sentence(total, self._seq_length)  # [n]
        text_of_window = tf.repeat(tf.range(tf.shape(windows, tf.int64)[0]), windows)
        within = tf.ragged.range(windows).flat_values
        features = cut_windows(tokenize, self.tokenizer.bert_pack_inputs,
                               tf.gather(words, text_of_window), within,
                               self._seq_length)["features"]
        # Computed only as far as the longest window (every word's first piece is inside
        # its window's real length, so the gather below reads the same positions).
        features = trim_to_longest(features, self._seq_length)
        probs = tf.cast(self.model(features), tf.float32)  # [windows, L, C]
        first = tf.math.cumsum(per_text, axis=1, exclusive=True).flat_values  # [words]
        text_of_word = tf.cast(words.value_rowids(), tf.int64)
        row = tf.gather(tf.math.cumsum(windows, exclusive=True), text_of_word) + first // size
        word_probs = tf.gather_nd(probs, tf.stack([row, 1 + first % size], axis=1))
        tag = tf.where(counts > 0, tf.argmax(word_probs, axis=-1, output_type=tf.int32), 0)
        score = tf.where(counts > 0, tf.reduce_max(word_probs, axis=-1), 0.0)
        return (tf.RaggedTensor.from_row_lengths(tag, words.row_lengths()),
                tf.RaggedTensor.from_row_lengths(score, words.row_lengths()))

    def _entity_ids(self, tags: tf.Tensor, valid: tf.Tensor) -> tf.Tensor:
        """Entity number within its string of each word ``[n, W]`` (-1: in none)."""
        kind, etype = tf.gather(self._kind, tags), tf.gather(self._type, tags)

        def step(state, elems):
            open_, type_, count, _ = state
            k, t, v = elems
            begin = (k == 1) & v
            cont = (k == 2) & v & open_ & (t == type_)
            count = count + tf.cast(begin, tf.int32)
            inside = begin | cont
            return inside, tf.where(begin, t, type_), count, tf.where(inside, count - 1, -1)

        n = tf.shape(tags)[0]
        zeros = tf.zeros([n], tf.int32)
        init = (tf.zeros([n], tf.bool), zeros, zeros, zeros)
        *_, ids = tf.scan(step, (tf.transpose(kind), tf.transpose(etype), tf.transpose(valid)),
                          initializer=init)
        return tf.transpose(ids)

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.string, name="words"),
                                  tf.TensorSpec([None], tf.int32, name="num_words")])
    def tag_words(self, words: tf.Tensor, num_words: tf.Tensor) -> dict[str, tf.Tensor]:
        tags, scores = self._word_tags(tf.RaggedTensor.from_tensor(words, lengths=num_words))
        return {"tag": tf.gather(self.tag_names, tags).to_tensor(""),
                "tag_score": scores.to_tensor(0.0)}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def serve(self, text: tf.Tensor) -> dict[str, tf.Tensor]:
        words, begins, ends = split_words(text)
        tags, scores = self._word_tags(words)
        valid = tf.sequence_mask(words.row_lengths())
        ids = self._entity_ids(tags.to_tensor(), valid)  # [n, W]
        width = tf.shape(ids, tf.int64)[1]
        n = tf.shape(text, tf.int64)[0]
        segment = tf.where(ids >= 0, tf.range(n)[:, None] * width + tf.cast(ids, tf.int64), -1)
        keep = segment >= 0
        seg = tf.boolean_mask(segment, keep)
        segments = n * width
        found = tf.math.unsorted_segment_sum(tf.ones_like(seg), seg, segments) > 0
        begin = tf.boolean_mask(tf.math.unsorted_segment_min(
            tf.boolean_mask(begins.to_tensor(), keep), seg, segments), found)
        end = tf.boolean_mask(tf.math.unsorted_segment_max(
            tf.boolean_mask(ends.to_tensor(), keep), seg, segments), found)
        score = tf.boolean_mask(tf.math.unsorted_segment_mean(
            tf.boolean_mask(scores.to_tensor(), keep), seg, segments), found)
        etype = tf.boolean_mask(tf.math.unsorted_segment_max(
            tf.gather(self._type, tf.boolean_mask(tags.to_tensor(), keep)), seg, segments),
            found)
        row = tf.boolean_mask(tf.range(segments), found) // tf.maximum(width, 1)
        source = tf.gather(text, row)
        prefix_chars = tf.strings.length(tf.strings.substr(source, tf.zeros_like(begin), begin),
                                         unit="UTF8_CHAR")
        entity = tf.strings.substr(source, begin, end - begin)
        chars = tf.strings.length(entity, unit="UTF8_CHAR")

        def padded(values, default):
            return tf.RaggedTensor.from_value_rowids(values, row, nrows=n).to_tensor(default)

        return {"entity_type": padded(tf.gather(self.entity_types, etype), ""),
                "entity_text": padded(entity, ""),
                "entity_start": padded(prefix_chars, -1),
                "entity_end": padded(prefix_chars + chars, -1),
                "entity_score": padded(score, 0.0),
                "num_entities": tf.cast(tf.math.bincount(tf.cast(row, tf.int32),
                                                         minlength=tf.cast(n, tf.int32)),
                                        tf.int32)}


def export_ner(serving: NerServing, export_dir: str | os.PathLike, *, metadata: dict,
               card: str = "") -> Path:
    """The serving SavedModel, its metadata and its model card (``README.md``)."""
    # The tf.functions, not their concrete functions: save traces them itself (in its save
    # context, which keys the trace cache), so one traced before saving is traced again.
    return FORMAT.write(serving, export_dir,
                        signatures={"serving_default": serving.serve,
                                    "tag_words": serving.tag_words},
                        metadata=metadata, files={CARD_FILE: card} if card else None)

