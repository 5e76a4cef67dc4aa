"""Shared command-line plumbing: config arguments, help text, logging, user errors.

Every entry point (``python -m tfapp.train`` ...) builds its parser with
``config_parser`` and runs its body through ``run_main`` (one that takes a config through
``run_config_command``, which also resolves it and answers ``--print-config``), so a user
mistake is one ``tfapp: error: ...`` line on stderr with exit code 2, never a traceback.
The ``tfapp`` console script dispatches ``tfapp <command> ...`` to those modules.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import shlex
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path

import tfapp  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from tfapp.config import (
    ConfigError,
    ExperimentConfig,
    config_reference,
    group_docs,
    load_config,
    to_yaml,
)
from tfapp.run_layout import RunLayout

EXIT_USER_ERROR = 2

# `tfapp <command>` -> module whose main(argv) runs it.
COMMANDS = {
    "train": "tfapp.train",
    "lr_find": "tfapp.lr_find",
    "tune": "tfapp.tune",
    "predict": "tfapp.predict",
    "evaluate": "tfapp.evaluate",
    "generate": "tfapp.generate",
    "hub": "tfapp.hub.__main__",
    "pretrain": "tfapp.pretrain",
    "prepare": "tfapp.prepare",
    "data_service": "tfapp.data_service",
    "profile": "tfapp.profile",
    "share": "tfapp.share",
    "doctor": "tfapp.doctor",
    "export-hf": "tfapp.export_hf",
}


# Modules that come with TensorFlow's extra ([cpu], [gpu], or the TPU recipe), not with tfapp.
TENSORFLOW_MODULES = ("tensorflow", "tf_keras", "tensorflow_text", "tensorflow_hub")


def missing_tensorflow_message(module: str) -> str:
    return (f"'{module}' is not installed: TensorFlow comes with an extra: pip install -e "
            "'.[cpu]' (or '.[gpu]'; on a TPU VM, Colab or Kaggle TPU follow docs/tpu.md, "
            "which keeps the TPU build); python -m tfapp.doctor checks the install")


def setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S")
    # absl (used by TensorFlow) otherwise duplicates every line with its own prefix.
    try:
        import absl.logging

        absl.logging.set_verbosity(absl.logging.ERROR)
    except ImportError:
        pass


def config_help() -> str:
    """The config reference for --help: every group with its keys, types and defaults."""
    groups = group_docs()
    lines = ["config keys (set in the YAML file or as key=value overrides):"]
    current = None
    for key, type_name, default, doc in config_reference(ExperimentConfig):
        group = key.split(".")[0] if "." in key else ""
        if group != current:
            current = group
            lines.append("")
            lines.append(f"  {group}: {groups[group]}" if group else "  (top level)")
        summary = doc.split(". ")[0].rstrip(".")
        lines.append(f"    {key} = {default}  [{type_name}]")
        lines.extend(textwrap.wrap(summary, width=88, initial_indent="        ",
                                   subsequent_indent="        "))
    return "\n".join(lines)


def config_parser(prog: str, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description=description, epilog=config_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", metavar="FILE",
                        help="experiment YAML (see configs/); default: the built-in defaults, "
                             "i.e. the BERT classifier on the shipped demo data")
    parser.add_argument("overrides", nargs="*", metavar="key=value",
                        help="dotted config overrides, e.g. trainer.epochs=3 data.batch_size=64")
    parser.add_argument("--print-config", action="store_true",
                        help="print the resolved config as YAML and exit")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return parser


def resolve_config(args: argparse.Namespace) -> ExperimentConfig:
    return load_config(args.config, args.overrides)


def run_config_command(parser: argparse.ArgumentParser, argv: Sequence[str] | None,
                       body: Callable[[ExperimentConfig, argparse.Namespace], int | None], *,
                       check: Callable[[argparse.Namespace], object] | None = None,
                       resume_module: str | None = None, search: bool = False) -> int:
    """Run a command that takes a config (a ``config_parser`` parser plus its own flags).

    Parses ``argv`` (flags may come between the overrides: ``... --start-over key=value``),
    sets up logging, then under ``run_main``: resolves the config, runs ``check(args)``
    (checks of the command's own flags that hold for ``--print-config`` too), prints the
    config and stops for ``--print-config``, else runs ``body(cfg, args)``. With
    ``resume_module`` an interruption ends with the command that resumes the run
    (``resume_line``; ``search``: a tuning search).
    """
    args = parser.parse_intermixed_args(argv)
    setup_logging(args.verbose)

    def run() -> int | None:
        cfg = resolve_config(args)
        if check is not None:
            check(args)
        if args.print_config:
            print(to_yaml(cfg), end="")
            return 0
        return body(cfg, args)

    def resume() -> str:
        return resume_line(resume_module, argv, resolve_config(args).run_dir, search=search)

    return run_main(run, resume=resume if resume_module is not None else None)


def resume_line(module: str, argv: Sequence[str] | None, run_dir: Path, *,
                search: bool = False) -> str:
    """What an interrupted run (``search``: a tuning search) kept and the exact command
    that resumes it: the same one, less ``--start-over`` (which would move it aside)."""
    args = [a for a in (sys.argv[1:] if argv is None else argv)
            if a not in ("--start-over", "--overwrite")]
    command = shlex.join(["python", "-m", module, *args])
    if search:
        return (f"the search in {run_dir} keeps its finished trials, and the trial that was "
                f"running its backup; continue it with: {command}")
    if RunLayout(run_dir).has_backup():
        return f"resume with: {command}"
    return f"no backup was written yet, so a rerun starts over: {command}"


def run_main(body: Callable[[], int | None], *,
             resume: Callable[[], str] | None = None) -> int:
    """Run an entry point's body; user errors become one line and exit code 2. An
    interruption (Ctrl-C, SIGTERM) is one line too, ending with ``resume()``: what was
    kept and the command that resumes."""
    try:
        return body() or 0
    except ConfigError as err:
        print(f"tfapp: error: {err}", file=sys.stderr)
        return EXIT_USER_ERROR
    except ModuleNotFoundError as err:
        if err.name not in TENSORFLOW_MODULES:
            raise
        print(f"tfapp: error: {missing_tensorflow_message(err.name)}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt as err:  # Ctrl-C (130), or SIGTERM after a backup (Preempted)
        parts = [str(err)] if str(err) else []
        if resume is not None:
            try:
                parts.append(resume())
            except Exception as hint_err:  # noqa: BLE001 (the line is printed regardless)
                parts.append(f"(could not tell how to resume: {hint_err})")
        print(f"tfapp: interrupted{': ' + '; '.join(parts) if parts else ''}", file=sys.stderr)
        return getattr(err, "exit_code", 130)
    except Exception as err:  # errors that carry an exit code (e.g. WorkerLost) are one line
        if not isinstance(getattr(err, "exit_code", None), int):
            raise
        print(f"tfapp: error: {err}", file=sys.stderr)
        return err.exit_code


def main(argv: Sequence[str] | None = None) -> int:
    """``tfapp <command> [args]``: the console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    usage = ("usage: tfapp <command> [args...]\n\ncommands:\n  " + "\n  ".join(COMMANDS)
             + "\n\n`tfapp <command> --help` describes each; "
               "`python -m tfapp.<command>` is the same.")
    if argv and argv[0] in ("-h", "--help"):
        print(usage)
        return 0
    if not argv:  # a mistake: the usage, then the one error line, both on stderr
        print(usage, file=sys.stderr)
        print(f"tfapp: error: no command given; choose one of: {', '.join(COMMANDS)}",
              file=sys.stderr)
        return EXIT_USER_ERROR
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"tfapp: error: unknown command '{command}'; choose one of: "
              f"{', '.join(COMMANDS)}", file=sys.stderr)
        return EXIT_USER_ERROR
    module = importlib.import_module(COMMANDS[command])
    return module.main(rest)


if __name__ == "__main__":
    sys.exit(main())
