"""Seq2seq text generation: text lines or pairs -> Seq2Seq -> a strings-in, strings-out
SavedModel.

* ``task.py``: ``GeneratorTask`` (inputs, model, losses and metrics, the test report);
* ``export.py``: ``TextGenerator`` (the SavedModel's functions) and the export;
* ``samples.py``: ``TextSamples``, the epoch samples callback;
* ``card.py``: the export's model card;
* ``serving.py``: the export behind ``tfapp.serving`` (loading, ``evaluate``);
* ``scores.py``: the test scores from per-text sums (no TensorFlow).

The data pipeline is ``tfapp.data.examples.generator``, the model ``tfapp.models.seq2seq``, the
decoding loops ``tfapp.models.decoding``.
"""
