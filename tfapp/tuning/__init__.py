"""Hyperparameter search (``python -m tfapp.tune``): ``space`` (config space -> KerasTuner
hyperparameters -> trial configs), ``tuner`` (the BaseTuner whose trials are training
runs), ``distributed`` (chief/worker roles, the oracle server), ``results`` (table, CSV,
JSON, best_params.yaml)."""
