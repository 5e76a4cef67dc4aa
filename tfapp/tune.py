"""Search hyperparameters with KerasTuner: ``python -m tfapp.tune --config FILE``.

The search space is the config's ``tune.space`` (dotted config key -> hyperparameter);
every trial is an ordinary training run of the config with the sampled values. The search
directory (output_dir/name) keeps the oracle state: re-running the same command continues
an interrupted search. See docs/tuning.md.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from types import SimpleNamespace

import tfapp  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from tfapp import cli
from tfapp.atomic import write_text
from tfapp.config import ConfigError, ExperimentConfig, load_config, to_yaml
from tfapp.run_layout import aside_path
from tfapp.tasks import get_task

import click


def _same_but_max_trials(cfg: ExperimentConfig) -> str:
    return to_yaml(dataclasses.replace(cfg, tune=dataclasses.replace(cfg.tune, max_trials=1)))


def check_same_search(cfg: ExperimentConfig, role: str, start_over: bool) -> None:
    """A search directory resumes only the search that made it (same config; a larger
    tune.max_trials is fine: it runs that many trials in all). ``start_over`` moves it
    aside (never deletes it) and starts a new search."""
    search_dir = cfg.run_dir
    stored = search_dir / "search.yaml"
    if start_over and role != "worker" and search_dir.exists():
        # Only a search tfapp made (its search.yaml) or an empty folder is moved: a trained
        # run, or anything else, of the same name stays where it is.
        if not stored.is_file() and any(search_dir.iterdir()):
            raise ConfigError(f"--start-over: {search_dir} is not a tfapp search (no "
                              "search.yaml) and is not empty; nothing was changed; set name= "
                              "for the search, or move that folder away")
        aside = aside_path(search_dir)
        search_dir.rename(aside)
        print(f"--start-over: the earlier search was moved to {aside} (nothing was deleted)",
              flush=True)
    current = to_yaml(cfg)
    if stored.is_file():
        if stored.read_text() == current:
            return
        if _same_but_max_trials(load_config(stored)) != _same_but_max_trials(cfg):
            raise ConfigError(f"{search_dir} holds a different search (its search.yaml differs "
                              "from this config in more than tune.max_trials); nothing was "
                              "changed; pass --start-over to start it again (the search is "
                              "moved aside, nothing is deleted), or set name= for a new "
                              "search")
    if role != "worker":
        write_text(stored, current)  # workers may read it at any moment


@cli.command(
    "tune",
    """Search hyperparameters: the config's tune.space, with KerasTuner.

    Each trial trains the config with the sampled values. Writes oracle state, trials,
    results.csv/json and best_params.yaml into output_dir/name; re-running continues a
    stopped search. See docs/tuning.md.""",
    config=True, resume_module="tfapp.tune", search=True)
@click.option("--start-over", "--overwrite", "start_over", is_flag=True,
              help="Start a new search: the search directory is moved to "
                   "NAME.old-<date>-<time> beside it (nothing is deleted).")
@click.option("--chief", is_flag=True,
              help="Distributed: serve the oracle (run no trials) at --oracle.")
@click.option("--worker", metavar="ID",
              help="Distributed: run trials for the chief at --oracle as worker ID (one "
                   "process per ID).")
@click.option("--oracle", metavar="HOST:PORT",
              help="Distributed: the chief's address, HOST:PORT or PORT (default "
                   "127.0.0.1:8000, this machine only; the chief refuses any other address "
                   "unless TFAPP_ORACLE_TOKEN holds a secret, which every worker then sends).")
@click.option("--top", type=int, default=10, metavar="N", show_default=True,
              help="Trials shown in the results table.")
def command(cfg: ExperimentConfig, args: SimpleNamespace) -> int:
    if not cfg.tune.space:
        raise ConfigError("tune.space is empty: declare what to search, e.g. "
                          "tune.space={optimizer.learning_rate: {type: float, min: 1e-4, "
                          "max: 1e-2, sampling: log}} (see configs/classifier_tune.yaml)")
    from tfapp.tuning import distributed

    role = distributed.configure(args.chief, args.worker, args.oracle)
    check_same_search(cfg, role, args.start_over)
    return _search(cfg, role, args.top)


def main(argv: Sequence[str] | None = None) -> int:
    return cli.run(command, argv, "python -m tfapp.tune")


# The longest a worker waits for the chief to answer before saying so (and exiting).
CHIEF_WAIT_S = 60.0


def _search(cfg: ExperimentConfig, role: str, top: int) -> int:
    from tfapp.tuning import distributed

    if role == "worker":  # KerasTuner's client would wait up to an hour for a chief
        distributed.wait_for_chief(min(CHIEF_WAIT_S, cfg.tune.worker_timeout_s))
    # TensorFlow and KerasTuner load only past the config checks (and a worker's chief).
    from tfapp.tuning import results
    from tfapp.tuning.space import objective
    from tfapp.tuning.tuner import ConfigTuner, build_oracle, failure, last_line, read_record

    import grpc
    from keras_tuner import errors as kt_errors

    obj = objective(cfg, get_task(cfg.task).default_monitor)
    tuner = ConfigTuner(cfg, build_oracle(cfg, obj))
    try:
        tuner.search()
    except kt_errors.FatalError as err:
        raise ConfigError(str(err).strip().splitlines()[-1]) from None
    except grpc.RpcError as err:  # a worker the chief refused (token, id) midway
        refused = distributed.refusal(err)
        if refused is None:
            raise
        raise refused from None
    if role == "worker":
        print(f"worker {tuner.tuner_id}: no trials left; the chief writes the results")
        return 0
    search_dir = cfg.run_dir
    rows = results.collect(tuner.oracle, search_dir)
    print(f"\nsearch {cfg.name}: {cfg.tune.tuner}, {len(rows)} trials, best first")
    print(results.format_table(rows, obj, top))
    paths = results.write_results(rows, obj, search_dir)
    best = results.write_best_params(cfg, rows, obj, search_dir)
    print(f"\nresults:         {paths['csv']}, {paths['json']}")
    if best:
        print(f"best config:     {best}  (python -m tfapp.train --config {best})")
        exported = next((r["exported"] for r in rows[0]["runs"] if r.get("exported")), None)
        if exported:
            print(f"best model:      {exported}")
    print(f"TensorBoard:     tensorboard --logdir {search_dir}  (HParams tab)")
    # Set by the oracle (tuner._StopsAfterFailures), the single process's or the chief's.
    stopped = tuner.oracle.stopped_after
    if stopped:
        failed, last = stopped
        # A chief's oracle has no message (KerasTuner's Trial proto has none): the record
        # the worker wrote says why.
        reason = (read_record(search_dir, last.trial_id).get("error")
                  or last_line(failure(last.message)))
        raise ConfigError(f"{cfg.tune.tuner} search stopped after {failed} failed trials in a "
                          f"row; the last, trial {last.trial_id}, failed with: {reason} (the "
                          f"table of all trials is in {paths['csv']}; fix the cause and re-run "
                          "the same command to go on)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
