"""Train the classifier in-process through tfapp's driver and save what the tests compare.

Usage: python tests/workers/classifier_fit.py OUT.npz key=value ...
Saves the trained weights, per-epoch losses, replicas and whether this process was chief.
"""

import sys

from tfapp.config import load_config
from tfapp.tasks import get_task
from tfapp.training.driver import train

import numpy as np

cfg = load_config(None, sys.argv[2:])
result = train(cfg, task=get_task(cfg.task))
np.savez(sys.argv[1], *result.model.get_weights(), losses=np.array(result.history["loss"]),
         replicas=result.model.distribute_strategy.num_replicas_in_sync)
