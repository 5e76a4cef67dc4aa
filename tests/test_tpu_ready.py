"""TPU readiness: what reaches the device is fixed-shape numbers, never strings.

A TPU (and XLA anywhere) compiles the training step for the exact shapes and dtypes it
is fed; a string or an unknown dimension would fail to compile or recompile every step.
Here each task's real training pipeline is checked for that, and the step is compiled
with XLA on the CPU (``jit_compile=True``), which rejects strings as a TPU would.
"""

from __future__ import annotations

from tfapp.config import load_config
from tfapp.tasks import get_task
from tfapp.training.context import RunContext

import pytest
import tensorflow as tf

CASES = {
    "classifier-bert": ("configs/classifier_local.yaml", []),
    "classifier-cnn": ("configs/classifier_local.yaml", ["model.kind=cnn"]),
    "classifier-fixed": ("configs/classifier_local.yaml", ["data.length_buckets=0"]),
    "generator": ("configs/generator_local.yaml", []),  # target_words 8: one bucket
    "generator-buckets": ("configs/generator_local.yaml",
                          ["data.target_words=16", "data.length_buckets=8"]),
}
#: the inputs of each case cut to a length bucket: [batch, None]; the rest fixed
BUCKETED = {"classifier-bert": 3, "classifier-cnn": 3, "generator-buckets": 2}


def _task(tmp_path, config, overrides):
    cfg = load_config(config, [*overrides, f"output_dir={tmp_path}", "trainer.epochs=1"])
    task = get_task(cfg.task)(RunContext.create(cfg, task=get_task(cfg.task)))
    return cfg, task, task.build_inputs()


@pytest.mark.parametrize("case", list(CASES))
def test_training_batches_are_fixed_shape_numbers(tmp_path, case):
    cfg, _, inputs = _task(tmp_path, *CASES[case])
    bucketed = 0
    for spec in tf.nest.flatten(inputs.train.element_spec):
        assert isinstance(spec, tf.TensorSpec), spec
        assert spec.dtype.is_integer or spec.dtype.is_floating or spec.dtype.is_bool, spec
        assert spec.shape[0] == cfg.data.batch_size, spec  # drop_remainder
        if not spec.shape.is_fully_defined():
            # a length bucket's: at most data.length_buckets of them (tests/test_lengths.py)
            assert spec.shape.as_list() == [cfg.data.batch_size, None], spec
            bucketed += 1
    assert bucketed == BUCKETED.get(case, 0)


@pytest.mark.xla_cpu
@pytest.mark.parametrize("case", ["classifier-cnn", "generator", "generator-buckets"])
def test_the_training_step_compiles_with_xla(tmp_path, case):
    # The Hub BERT is left out: its restored graph recompiles every step under XLA on CPU
    # (slow, see runtime.default_jit_compile); its inputs are checked above.
    _, task, inputs = _task(tmp_path, *CASES[case])
    model = task.build_model(inputs)
    model.compile(optimizer=tf.keras.optimizers.Adam(1e-3), loss=task.build_losses(inputs),
                  metrics=task.build_metrics(inputs), jit_compile=True)
    history = model.fit(inputs.train, steps_per_epoch=2, epochs=1, verbose=0).history
    assert all(tf.math.is_finite(v[-1]) for v in history.values())


@pytest.mark.xla_cpu
def test_the_accumulating_training_step_compiles_with_xla(tmp_path):
    """Gradient accumulation's conditional update inside one XLA program (as a TPU runs
    it): 4 batches, 2 updates, and the weights moved."""
    from tfapp.training.accumulation import wrap_for_accumulation

    _, task, inputs = _task(tmp_path, *CASES["classifier-cnn"])
    model = wrap_for_accumulation(task.build_model(inputs), 2)
    model.compile(optimizer=tf.keras.optimizers.Adam(1e-2), loss=task.build_losses(inputs),
                  jit_compile=True)
    start = [w.numpy() for w in model.trainable_weights]
    model.fit(inputs.train, steps_per_epoch=4, epochs=1, verbose=0)
    assert int(model.optimizer.iterations.numpy()) == 2
    assert any(abs(w.numpy() - s).max() > 1e-4
               for w, s in zip(model.trainable_weights, start, strict=True))
