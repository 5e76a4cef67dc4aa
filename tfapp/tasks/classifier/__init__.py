"""Text classification: TF-Hub BERT (or CNN/RNN baselines) fine-tuned on labelled text.

* ``config.py``: which config keys the task cannot honour (no TensorFlow import);
* ``task.py``: ``ClassifierTask`` (inputs, model, loss and metrics, report, export);
* ``export.py``: the serving SavedModel (raw strings in, probabilities and labels out).

The data pipeline is ``tfapp.data.examples.classification``, the models ``tfapp.models.classifier``.
"""
