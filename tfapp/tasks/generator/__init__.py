"""Seq2seq text generation: text lines or pairs -> Seq2Seq -> a strings-in, strings-out
SavedModel.

* ``config.py``: which config keys the task cannot honour (no TensorFlow import);
* ``task.py``: ``GeneratorTask`` (inputs, model, losses and metrics, samples, export).

The data pipeline is ``tfapp.data.text_lines``, the model ``tfapp.models.seq2seq``, the
decoding loops ``tfapp.models.decoding``.
"""
