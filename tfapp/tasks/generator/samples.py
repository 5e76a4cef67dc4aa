"""``TextSamples``: the generator's epoch samples (greedy text of a few prompts after each
epoch, in the log and TensorBoard's Text tab), under the run's repetition control
(``generation.no_repeat_ngram_size``, ``generation.repetition_penalty``): greedy, so an
epoch's text differs from the last one's only by what the model learned."""

from __future__ import annotations

import logging
from pathlib import Path

import tfapp  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)

import tensorflow as tf

log = logging.getLogger("tfapp")


class TextSamples(tf.keras.callbacks.Callback):
    """After each epoch: decode ``prompts`` and write them to TensorBoard's Text tab."""

    def __init__(self, prompts: list[str], make_generator, log_dir: str | Path | None):
        super().__init__()
        self.prompts = prompts
        self.make_generator = make_generator  # model -> TextGenerator at its weights
        self.log_dir = log_dir
        self._writer = None
        self.last: list[str] = []

    def on_train_begin(self, logs=None):
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is not None and int(optimizer.iterations.numpy()) == 0:  # not resumed
            # Step 0: the untrained model's text, to compare every epoch against.
            self.on_epoch_end(-1)

    def on_epoch_end(self, epoch, logs=None):
        generator = self.make_generator(self.model)
        g = generator.generation
        texts = generator.greedy(tf.constant(self.prompts), tf.constant(generator.max_length),
                                 tf.constant(g.no_repeat_ngram_size),
                                 tf.constant(g.repetition_penalty))["text"]
        self.last = [t.decode("utf-8") for t in texts.numpy()]
        rows = [f"| prompt | greedy continuation (no_repeat_ngram_size "
                f"{g.no_repeat_ngram_size}, repetition_penalty {g.repetition_penalty:g}) |",
                "|---|---|"]
        rows += [f"| {p or '(empty)'} | {t} |" for p, t in zip(self.prompts, self.last,
                                                               strict=True)]
        log.info("epoch %d samples: %s", epoch + 1,
                 " / ".join(f"{p!r} -> {t!r}" for p, t in zip(self.prompts, self.last,
                                                              strict=True)))
        if self.log_dir is not None:
            if self._writer is None:
                self._writer = tf.summary.create_file_writer(str(self.log_dir))
            with self._writer.as_default():
                tf.summary.text("generated_text", "\n".join(rows), step=epoch + 1)
            self._writer.flush()
