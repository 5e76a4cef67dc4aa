"""tfapp: TF-Hub BERT classifiers and seq2seq generators on tf.data, tf.distribute and XLA.

Importing tfapp selects the Keras 2 API (the ``tf-keras`` package) as ``tf.keras``.
TensorFlow reads ``TF_USE_LEGACY_KERAS`` once, when it is first imported, so this
must run before anything imports TensorFlow; every entry point imports tfapp first.
"""

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
# TensorFlow's C++ INFO/WARNING lines drown the run header on every start; errors stay.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

__version__ = "0.1.0"
