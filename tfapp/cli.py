"""The command line: one click command suite, ``tfapp <command>``, and its shared plumbing.

Every command is a click command built with ``command`` beside its body (``tfapp/train.py``
...): ``-v/--verbose`` and ``-q/--quiet`` on each, and for the commands that take a config
(``config=True``) repeatable ``--config FILE``, ``key=value`` overrides anywhere among the
flags, ``--print-config`` and ``--print-config --sources``. ``python -m tfapp.X`` runs the
same command through ``run``, and so does ``tfapp X`` through the ``SUITE`` group (``main``,
the console script). A user mistake is one ``tfapp: error: ...`` line on stderr with exit
code 2, never a traceback: click's usage errors too (``run`` turns them into that line).

Why click: it is already installed with tfapp (wandb depends on it), imports in a few
milliseconds with no TensorFlow (``--help`` stays fast), has shell completion for bash,
zsh and fish built in, and lets ``run`` own the error format; argparse needed a parser per
command and a hand-written dispatcher, typer and cyclopts add rich (slower to import).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import logging
import re
import shlex
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NamedTuple

import tfapp
from tfapp import console
from tfapp.config import (
    ConfigError,
    ExperimentConfig,
    config_reference,
    load_config,
    to_yaml,
)
from tfapp.run_layout import RunLayout

import click
import yaml

EXIT_USER_ERROR = 2
#: the console script's name: its shell completion reads ``_TFAPP_COMPLETE``
PROG = "tfapp"


class Entry(NamedTuple):
    module: str  # its ``command`` attribute is the click command
    summary: str  # one line for ``tfapp --help`` (the command's own --help says more)


# `tfapp <command>` -> where it lives. The summaries are here so that `tfapp --help` lists
# them without importing every command module.
COMMANDS = {
    "train": Entry("tfapp.train", "Train the experiment a config describes."),
    "lr-find": Entry("tfapp.lr_find", "Find a learning rate with an LR range test."),
    "tune": Entry("tfapp.tune", "Search hyperparameters (tune.space) with KerasTuner."),
    "prepare": Entry("tfapp.prepare", "Prepare a config's data once into TFRecord shards."),
    "predict": Entry("tfapp.predict", "Classify texts, or tag their entities, with an export."),
    "beam-predict": Entry("tfapp.beam_predict", "Score files as an Apache Beam pipeline ([beam])."),
    "evaluate": Entry("tfapp.evaluate", "Score an export on a labelled or tagged file."),
    "generate": Entry("tfapp.generate", "Write text with a trained generator."),
    "pretrain": Entry("tfapp.pretrain", "Continue masked-LM pretraining of a BERT Hub module."),
    "hub": Entry("tfapp.hub.__main__", "Build, convert and resolve TF-Hub BERT modules."),
    "share": Entry("tfapp.share", "Write an HTML report of runs and sync their W&B runs."),
    "profile": Entry("tfapp.profile", "Capture and summarise a running job's profile."),
    "data-service": Entry("tfapp.data_service", "Start a tf.data service for tfapp pipelines."),
    "export-hf": Entry("tfapp.export_hf", "Write a classifier or NER run as a HF checkpoint."),
    "doctor": Entry("tfapp.doctor", "Say what tfapp sees here and what it would do."),
    "completion": Entry("tfapp.cli", "Print the shell completion script for bash, zsh or fish."),
}
#: other spellings that run the same command (the module names' underscores)
ALIASES = {"lr_find": "lr-find", "data_service": "data-service", "export_hf": "export-hf",
           "beam_predict": "beam-predict"}


# Modules that come with TensorFlow's extra ([cpu], [gpu], or the TPU recipe), not with tfapp.
TENSORFLOW_MODULES = ("tensorflow", "tf_keras", "tensorflow_text", "tensorflow_hub")


def missing_tensorflow_message(module: str) -> str:
    return (f"'{module}' is not installed: TensorFlow comes with an extra: pip install -e "
            "'.[cpu]' (or '.[gpu]'; on a TPU VM, Colab or Kaggle TPU follow docs/tpu.md, "
            "which keeps the TPU build); python -m tfapp.doctor checks the install")


def setup_logging(verbose: bool = False, quiet: bool = False) -> None:
    level = logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(message)s",
                        datefmt="%H:%M:%S")
    logging.getLogger().setLevel(level)  # also when logging was set up before
    # absl (used by TensorFlow) otherwise duplicates every line with its own prefix.
    try:
        import absl.logging

        absl.logging.set_verbosity(absl.logging.ERROR)
    except ImportError:
        pass


# --------------------------------------------------------------------------- help text


_LITERAL = re.compile(r"``((?:(?!\n\n).)+?)``", re.DOTALL)  # may wrap, not span paragraphs
_ROLE = re.compile(r":[a-z]+:`([^`]+)`")
_INTERPRETED = re.compile(r"`([^`]+?)`")  # reStructuredText's default role: `x`
_BULLET = re.compile(r"^(\s*)\* ", re.MULTILINE)
_LITERAL_BLOCK = re.compile(r"(\S)::$|\s*::$", re.MULTILINE)


def plain(text: str) -> str:
    """reStructuredText as plain terminal text: a command's help is its module docstring,
    written for the docs (``x`` and `x` -> x, :role:`x` -> x, `*` bullets -> `-`, a
    literal block's ``::`` -> ``:``)."""
    text = _INTERPRETED.sub(r"\1", _ROLE.sub(r"\1", _LITERAL.sub(r"\1", text)))
    text = _BULLET.sub(r"\1- ", text)
    return _LITERAL_BLOCK.sub(lambda m: f"{m.group(1)}:" if m.group(1) else "", text)


def _fill(text: str, indent: str = "") -> str:
    """``text`` for a terminal: plain paragraphs wrapped at 88 columns, indented blocks
    (commands, examples, tables) kept line for line, reStructuredText markup dropped
    (``plain``). Nothing is cut short."""
    out = []
    for para in plain(inspect.cleandoc(text)).split("\n\n"):
        lines = para.splitlines()
        if any(line.startswith((" ", "*", "-")) for line in lines):
            out.append("\n".join(indent + line for line in lines))
        else:
            out.append(textwrap.fill(" ".join(lines), width=88, initial_indent=indent,
                                     subsequent_indent=indent))
    return "\n\n".join(out)


#: where a config command's help sends the reader for the config keys
CONFIG_KEYS_HELP = """Config keys: set them in a --config YAML file or as KEY=VALUE arguments
(trainer.epochs=3, data.train_files=my.csv). --print-config prints every key with its
value (--sources: where each value came from; task=ner --print-config: another task's
keys); docs/config.md describes each key."""


#: -h as well as --help (as argparse had it); option help in up to 100 columns
CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class Command(click.Command):
    """A tfapp command: help written whole (``_fill``); config commands end theirs with where
    the config keys are described (``CONFIG_KEYS_HELP``). Keeps the arguments it was given
    (``ctx.meta['tfapp.argv']``) for the command that resumes an interrupted run."""

    def __init__(self, *args: Any, takes_config: bool = False, **kwargs: Any) -> None:
        kwargs.setdefault("context_settings", CONTEXT)
        super().__init__(*args, **kwargs)
        self.takes_config = takes_config

    def make_context(self, info_name: str | None, args: list[str],
                     parent: click.Context | None = None, **extra: Any) -> click.Context:
        given = list(args)
        ctx = super().make_context(info_name, args, parent, **extra)
        ctx.meta["tfapp.argv"] = given
        return ctx

    def format_help_text(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        if self.help:
            formatter.write("\n" + _fill(self.help, "  ") + "\n")

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        if self.epilog:
            formatter.write("\n" + _fill(self.epilog, "  ") + "\n")
        if self.takes_config:
            formatter.write("\n" + _fill(CONFIG_KEYS_HELP, "  ") + "\n")


class Group(click.Group):
    """A group of tfapp commands (``tfapp hub``, ``tfapp profile``): help written whole."""

    command_class = Command

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("context_settings", CONTEXT)
        kwargs.setdefault("no_args_is_help", False)
        super().__init__(*args, **kwargs)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args and not ctx.resilient_parsing:  # one line, not click's help screen
            raise click.UsageError("no command given; choose one of: "
                                   f"{', '.join(self.list_commands(ctx))}", ctx)
        return super().parse_args(ctx, args)

    def format_help_text(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        if self.help:
            formatter.write("\n" + _fill(self.help, "  ") + "\n")


def _logging_params() -> list[click.Parameter]:
    return [click.Option(["-v", "--verbose"], is_flag=True,
                         help="Debug logging, and TensorFlow's own start-up log lines."),
            click.Option(["-q", "--quiet"], is_flag=True,
                         help="Only warnings and errors.")]


def _config_params() -> list[click.Parameter]:
    return [
        click.Option(["--config", "configs"], multiple=True, metavar="FILE",
                     help="Experiment YAML (see configs/). Repeat it to layer files: they "
                          "merge in order, a later file's keys win. Default: the built-in "
                          "defaults, i.e. the BERT classifier on the shipped demo data."),
        click.Option(["--print-config"], is_flag=True,
                     help="Print the resolved config as YAML and exit."),
        click.Option(["--sources"], is_flag=True,
                     help="With --print-config: end each key's line with where its value "
                          "came from (default, a --config file, or override)."),
        click.Argument(["overrides"], nargs=-1, metavar="[KEY=VALUE]..."),
    ]


def file_output_options(*, shard_verb: str, batch_help: str
                        ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: the ``--data FILES --output OUT`` flags that ``predict`` and ``generate``
    share (one writer: ``tfapp.scoring.score_files``), below the command's own ``--data``
    and ``--text-column``. ``shard_verb`` says what a shard does with its parts (score,
    write); ``batch_help`` what ``--batch-size`` counts."""
    options = [
        click.option("--output", metavar="OUT",
                     help="With --data: OUT.jsonl, OUT.csv or OUT.parquet (a file), or such "
                          "a name ending in / (a folder of part files)."),
        keep_option(),
        click.option("--format", type=click.Choice(["auto", "csv", "tsv", "jsonl", "text",
                                                    "tfrecord", "parquet"]),
                     help="With --data: the files' format (default: from each file's "
                          "extension)."),
        click.option("--on-bad-rows", type=click.Choice(["fail", "skip"]),
                     help="With --data: a row that cannot be read stops the run (fail) or is "
                          "left out and counted (skip); default: the run's data.on_bad_rows."),
        click.option("--shard", default="0/1", metavar="I/N", show_default=True,
                     help=f"With --data: {shard_verb} parts I, I+N, ... (one process of N; "
                          "--output OUT/)."),
        click.option("--batch-size", type=int, default=256, show_default=True,
                     help=f"With --data: {batch_help}."),
        click.option("--part-rows", type=int, default=10000, show_default=True,
                     help="With --data: input rows per part file (what a rerun after a kill "
                          "skips at once)."),
    ]

    def decorate(body: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):  # click applies decorators bottom-up
            body = option(body)
        return body

    return decorate


def keep_option() -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: ``--keep COL,...`` (read by ``tfapp.parts.keep_columns``), the input
    columns carried into a command's per-row output: predict's and generate's
    (``file_output_options``) and evaluate's."""
    return click.option("--keep", metavar="COL,...",
                        help="With --output: input columns carried into the output, ahead of "
                             "the rest of each row (an id).")


def check_file_output_counts(args: SimpleNamespace) -> None:
    """``--batch-size`` and ``--part-rows`` of ``file_output_options``: at least 1."""
    for flag, value in (("--batch-size", args.batch_size), ("--part-rows", args.part_rows)):
        if value < 1:
            raise ConfigError(f"{flag} {value}: must be at least 1")


def command(name: str, help: str, *, config: bool = False, epilog: str | None = None,
            check: Callable[[SimpleNamespace], object] | None = None,
            resume_module: str | None = None, search: bool = False,
            ) -> Callable[[Callable[..., int | None]], Command]:
    """Decorator: ``body`` (with its own ``@click.option``s below this decorator) becomes the
    tfapp command ``name``. The body gets the parsed flags as one namespace ``args``; with
    ``config`` it is ``body(cfg, args)`` and runs through ``run_config_command``."""

    def decorate(body: Callable[..., int | None]) -> Command:
        own = list(reversed(getattr(body, "__click_params__", [])))
        params = (_config_params() if config else []) + own + _logging_params()

        def callback(**values: Any) -> int:
            args = SimpleNamespace(**values)
            setup_logging(args.verbose, args.quiet)
            if config:
                args.config = list(args.configs)
                return run_config_command(args, body, check=check,
                                          resume_module=resume_module, search=search)
            return run_main(lambda: body(args))

        summary = COMMANDS[name].summary if name in COMMANDS else help.split("\n")[0]
        return Command(name, callback=callback, params=params, help=help, epilog=epilog,
                       short_help=summary, takes_config=config)

    return decorate


# --------------------------------------------------------------------------- configs


def resolve_config(args: SimpleNamespace) -> ExperimentConfig:
    return load_config(args.config or None, args.overrides)


def dotted_keys(node: Any, prefix: str = "") -> list[str]:
    """Every dotted key a YAML mapping (a file, or parsed overrides) sets."""
    if isinstance(node, dict) and node:
        return [key for k, v in node.items() for key in dotted_keys(v, f"{prefix}{k}.")]
    return [prefix[:-1]] if prefix else []


def _leaves(obj: Any, prefix: str = "") -> list[str]:
    """The config's leaf keys (a mapping-valued key such as tune.space is one leaf)."""
    keys = []
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        key = f"{prefix}{f.name}"
        keys.extend(_leaves(value, key + ".") if dataclasses.is_dataclass(value) else [key])
    return keys


def config_sources(cfg: ExperimentConfig, paths: Sequence[str],
                   overrides: Sequence[str]) -> dict[str, str]:
    """Leaf key -> where its value came from: ``default``, the last ``--config`` file that
    set it, or ``override`` (a key=value argument); later ones win, as they do in
    ``load_config`` (which also names the run after the first file)."""
    from omegaconf import OmegaConf

    layers: list[tuple[str, list[str]]] = []
    for path in paths:
        loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        layers.append((str(path), dotted_keys(loaded)))
    for item in overrides:
        parsed = OmegaConf.to_container(OmegaConf.from_dotlist([item]), resolve=False)
        layers.append(("override", dotted_keys(parsed)))
    sources = {}
    for leaf in _leaves(cfg):
        sources[leaf] = "default"
        for where, keys in layers:
            if any(k == leaf or k.startswith(leaf + ".") for k in keys):
                sources[leaf] = where
    if sources.get("name") == "default" and paths:
        sources["name"] = f"{paths[0]} (its file name)"
    return sources


def with_sources(text: str, sources: dict[str, str]) -> str:
    """The YAML ``text`` of a config with ``# source`` after each leaf key's line."""
    out, stack = [], []  # stack: (indent, key) of the mappings the line is inside
    for line in text.splitlines():
        stripped = line.lstrip(" ")
        indent = len(line) - len(stripped)
        key = stripped.split(":", 1)[0] if ":" in stripped and not stripped.startswith(
            ("-", "#", "'", '"')) else None
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if key is None:
            out.append(line)
            continue
        dotted = ".".join([k for _, k in stack] + [key])
        stack.append((indent, key))
        out.append(f"{line}  # {sources[dotted]}" if dotted in sources else line)
    return "\n".join(out) + "\n"


def run_config_command(args: SimpleNamespace, body: Callable[..., int | None], *,
                       check: Callable[[SimpleNamespace], object] | None = None,
                       resume_module: str | None = None, search: bool = False) -> int:
    """Run a command that takes a config: under ``run_main``, resolve the config, run
    ``check(args)`` (checks of the command's own flags that hold for ``--print-config``
    too), print the config (``--sources``: with where each value came from) and stop for
    ``--print-config``, else run ``body(cfg, args)``. With ``resume_module`` an interruption
    ends with the command that resumes the run (``resume_line``; ``search``: a search)."""
    argv = click.get_current_context().meta.get("tfapp.argv")

    def run() -> int | None:
        cfg = resolve_config(args)
        if check is not None:
            check(args)
        if args.sources and not args.print_config:
            raise ConfigError("--sources goes with --print-config: --print-config --sources")
        if args.print_config:
            text = to_yaml(cfg)
            if args.sources:
                text = with_sources(text, config_sources(cfg, args.config, args.overrides))
            print(text, end="")
            return 0
        return body(cfg, args)

    def resume() -> str:
        return resume_line(resume_module, argv, resolve_config(args).run_dir, search=search)

    return run_main(run, resume=resume if resume_module is not None else None)


def resume_line(module: str, argv: Sequence[str] | None, run_dir: Path, *,
                search: bool = False) -> str:
    """What an interrupted run (``search``: a tuning search) kept and the exact command
    that resumes it: the same one, less ``--start-over`` (which would move it aside), as
    it was typed (``tfapp train ...`` or ``python -m tfapp.train ...``: click's command
    path; ``python -m MODULE`` outside a click command)."""
    args = [a for a in (sys.argv[1:] if argv is None else argv)
            if a not in ("--start-over", "--overwrite")]
    ctx = click.get_current_context(silent=True)
    prefix = shlex.split(ctx.command_path) if ctx is not None else ["python", "-m", module]
    command = shlex.join([*prefix, *args])
    if search:
        return (f"the search in {run_dir} keeps its finished trials, and the trial that was "
                f"running its backup; continue it with: {command}")
    if RunLayout(run_dir).has_backup():
        return f"resume with: {command}"
    return f"no backup was written yet, so a rerun starts over: {command}"


# --------------------------------------------------------------------------- running


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


def _flag_hint(err: click.UsageError) -> str:
    """For ``--epochs 3`` to a command that takes a config: the key it probably meant."""
    takes_config = err.ctx is not None and any(p.name == "overrides" and isinstance(
        err.ctx.command, Command) and err.ctx.command.takes_config for p in err.ctx.command.params)
    if not isinstance(err, click.NoSuchOption) or not takes_config:
        return ""
    leaf = err.option_name.lstrip("-").replace("-", "_")
    keys = [key for key, *_ in config_reference(ExperimentConfig)
            if key.rsplit(".", 1)[-1] == leaf]
    return f"; config keys are key=value arguments, e.g. {keys[0]}=..." if keys else ""


def usage_error_line(err: click.UsageError) -> str:
    """click's usage error as tfapp's one line: what is wrong and where help is."""
    message = " ".join(err.format_message().split()).rstrip(".")
    message = message[:1].lower() + message[1:]
    where = f"; see: {err.ctx.command_path} --help" if err.ctx is not None else ""
    return f"tfapp: error: {message}{_flag_hint(err)}{where}"


def run(cmd: click.Command, argv: Sequence[str] | None = None,
        prog_name: str | None = None) -> int:
    """Run the click command ``cmd`` on ``argv`` (default: ``sys.argv[1:]``) as
    ``prog_name``; returns the exit code. Usage errors are one line and exit code 2."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        return cmd.main(args, prog_name=prog_name, standalone_mode=False) or 0
    except click.UsageError as err:
        print(usage_error_line(err), file=sys.stderr)
        return EXIT_USER_ERROR
    except click.ClickException as err:
        print(f"tfapp: error: {' '.join(err.format_message().split())}", file=sys.stderr)
        return err.exit_code
    except click.Abort:  # Ctrl-C while click itself read input
        print("tfapp: interrupted", file=sys.stderr)
        return 130


def parse(cmd: click.Command, argv: Sequence[str]) -> SimpleNamespace:
    """The flags ``argv`` gives ``cmd``, parsed but not run (what its body gets as ``args``)."""
    return SimpleNamespace(**cmd.make_context(cmd.name, list(argv)).params)


# --------------------------------------------------------------------------- the suite


class Suite(Group):
    """``tfapp``: its commands are imported only when one runs (``--help`` stays fast)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        name = ALIASES.get(name, name)
        if name == "completion":
            return completion
        if name not in COMMANDS:
            return None
        return importlib.import_module(COMMANDS[name].module).command

    def resolve_command(self, ctx: click.Context, args: list[str]
                        ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0]
        if self.get_command(ctx, name) is None and not name.startswith("-"):
            import difflib

            close = difflib.get_close_matches(name, [*COMMANDS, *ALIASES], n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise click.UsageError(f"unknown command '{name}'{hint} Choose one of: "
                                   f"{', '.join(COMMANDS)}", ctx)
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, entry.summary) for name, entry in COMMANDS.items()])


SUITE = Suite(
    PROG,
    help="""tfapp: train, tune and serve TF-Hub BERT classifiers, taggers and seq2seq
    generators.

    tfapp COMMAND --help describes each command; python -m tfapp.COMMAND (with underscores
    there: lr_find, data_service, export_hf, beam_predict) is the same command. Shell completion:
    eval "$(tfapp completion bash)" (or zsh, fish).""")
click.version_option(tfapp.__version__, "--version", prog_name=PROG,
                     message="%(prog)s %(version)s", help="Print tfapp's version and exit.")(SUITE)


@command("completion", COMMANDS["completion"].summary + """

    Enable it in the current shell with:

      eval "$(tfapp completion bash)"     # bash, e.g. in ~/.bashrc
      eval "$(tfapp completion zsh)"      # zsh, e.g. in ~/.zshrc
      tfapp completion fish | source     # fish""")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(args: SimpleNamespace) -> int:
    from click.shell_completion import get_completion_class

    cls = get_completion_class(args.shell)
    print(cls(SUITE, {}, PROG, f"_{PROG.upper()}_COMPLETE").source())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``tfapp <command> [args]``: the console script."""
    args = list(sys.argv[1:] if argv is None else argv)
    if argv is None and console.wanted(script=True):
        # As `python -m tfapp.X` does on import: TensorFlow's C++ start-up notices are
        # filtered out before anything imports TensorFlow.
        console.quiet_stderr()
    if not args:  # a mistake: the usage, then the one error line, both on stderr
        print(SUITE.get_help(click.Context(SUITE, info_name=PROG, **CONTEXT)), file=sys.stderr)
    return run(SUITE, args, PROG)


if __name__ == "__main__":
    sys.exit(main())
