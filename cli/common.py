"""What the ``bonusjudge`` subcommands share: the parser, the judge options and the logging.

The judge options are not spelled out here. ``add_model_options`` derives each one from a field
of the configuration models in ``judge.config``: the flag from the field's name, the help from
its ``description``, the choices from its ``Literal`` type and the value type from its
annotation. A new judge setting, or a new structured-output mode, is written once, on the model.
"""

from __future__ import annotations

import argparse
import os
import types
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NoReturn, Union, get_args, get_origin, overload

if TYPE_CHECKING:
    # Imported where used instead: ``bonusjudge --help`` builds its parser from this module and
    # must not pay for pydantic and the configuration models (see ``cli.main``).
    from pydantic import BaseModel
    from pydantic.fields import FieldInfo

    from core.errors import InputError
    from judge.config import Settings, SettingsT

PROG = "bonusjudge"
"""The command's name, as users type it and as every error line starts."""

NOISY_LOGGERS = (
    "LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm", "instructor", "httpx", "httpcore",
    "bonusjudge.direct", "transformers", "huggingface_hub", "urllib3", "jieba", "filelock",
)
"""Libraries whose logs stay off the terminal unless ``--verbose``: what matters from them (re-asks,
retries by reason) is counted once in the closing lines."""

JUDGE_FIELDS = (
    "model", "api_base", "mode", "transport", "temperature", "max_tokens", "rubric", "metrics",
    "encoder", "encoder_layer", "length_control", "concurrency", "max_connections", "timeout",
    "max_outage", "cache",
    "calibration",
)
"""The ``JudgeConfig`` fields every judging subcommand takes as options, in help order.

``context_window`` (``grade --context``) is read too when a subcommand adds it.
"""

CASCADE_FIELDS = ("judge", "cascade_agreement")
"""The cascade judge's ``JudgeConfig`` fields (``--judge cascade``, ``--cascade-agreement``),
options of ``grade`` and ``serve`` after ``--model``: ``calibrate`` has a ``--judge`` of its own
(the judge models it calibrates), so it does not take them."""

EXIT_BAD_LINES = 1
"""The exit code of a run that skipped invalid input lines, with ``--fail-on-bad-lines``."""

FAIL_ON_BAD_LINES_HELP = "exit with status 1 when any input line was skipped"
"""Help of ``--fail-on-bad-lines``, the same for every subcommand that reads an input file."""

VERBOSE_HELP = "show library logs (re-asks and failed requests of either transport, transformers)"
"""Help of ``--verbose``, accepted before and after the subcommand."""


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors, like every other mistake.

    ``bonusjudge: error: ...`` and exit 2; argparse's default prints the whole usage first.
    Subparsers are built from the same class, so every subcommand answers the same way.
    """

    def error(self, message: str) -> NoReturn:
        """Print the one-line error and exit 2."""
        command = self.prog.removeprefix(PROG).strip()
        where = f" {command}" if command else ""
        self.exit(2, f"{PROG}{where}: error: {message} (see --help)\n")


def configure_logging(*, verbose: bool) -> None:
    """Library logs and warnings on the terminal only with ``--verbose``."""
    import logging
    import warnings

    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG if verbose else logging.CRITICAL)
    if not verbose:
        warnings.filterwarnings("ignore")


def check_outputs(
    files: Mapping[str, Path | None], folders: Mapping[str, Path | None] | None = None
) -> None:
    """Check every output path of a subcommand before anything is created or judged.

    The one rule of ``grade``, ``calibrate`` and ``mcq``: a missing folder on the way is
    created when the output is written (:func:`write_output`, ``ResultWriter``), so only the
    nearest existing folder must be writable; anything else is refused here, naming the option,
    before the first judge call spends money on results that could not be saved.

    Args:
        files: Option name (``out``, ``summary``) -> output file, None when not given.
        folders: Option name -> output folder (``calibrate --out``).

    Raises:
        ConfigError: (the option) a path cannot be written.
    """
    from judge.io import check_output_path

    for field, path in files.items():
        if path is not None:
            check_output_path(path, field)
    for field, path in (folders or {}).items():
        if path is not None:
            check_output_path(path, field, folder=True)


def no_items(path: Path, invalid: int) -> InputError:
    """The error of an input with no item to process: an empty file, or only invalid lines.

    ``grade``, ``grade --estimate`` and ``mcq`` refuse such an input (exit 2) instead of printing
    an empty table: a file of the wrong format, or the wrong file, is a mistake to name.

    Args:
        path: The input file.
        invalid: Its lines that could not be read (already reported, one per line).
    """
    from core.errors import InputError

    why = f"all {invalid} line(s) are invalid" if invalid else "the file is empty"
    return InputError(f"input: no item in {path} ({why})", field="input")


def write_output(path: Path, text: str, field: str) -> None:
    """Write a whole output file, creating its missing folders as ``--out`` has them created.

    Raises:
        ConfigError: (``field``) the file cannot be written; the message names the option.
    """
    from core.errors import ConfigError

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"{field}: cannot write {path}: {exc.strerror or exc}", field=field
        ) from exc


def pct(value: float | None) -> str:
    """A rate as a percentage with one decimal, ``-`` when there is none."""
    return "-" if value is None else f"{100 * value:.1f}%"


# -- options derived from the configuration models ------------------------------------------------


def _without_none(annotation: Any) -> Any:
    """``X | None`` as ``X``: an option left out is None, whatever its field's type."""
    if get_origin(annotation) in (Union, types.UnionType):
        rest = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(rest) == 1:
            return rest[0]
    return annotation


def option_flag(model: type[BaseModel], name: str) -> str:
    """The command-line flag of a model field: ``max_tokens`` is ``--max-tokens``.

    A switch on by default is ``--no-<field>`` (``cache``: ``--no-cache``): giving it turns the
    switch off.
    """
    flag = "--" + name.replace("_", "-")
    info = model.model_fields[name]
    if _without_none(info.annotation) is bool and info.default is True:
        return "--no-" + flag.removeprefix("--")
    return flag


def _help(info: FieldInfo, *notes: str) -> str:
    """The field's description as help text, with notes (list syntax, default) in parentheses."""
    text = (info.description or "").strip().removesuffix(".")
    extra = "; ".join(note for note in notes if note)
    if extra:
        text = f"{text} ({extra})" if text else extra
    return text.replace("%", "%%")  # argparse %-formats help strings


def _default_note(info: FieldInfo) -> str:
    from pydantic_core import PydanticUndefined

    default = info.default
    if default is None or default is PydanticUndefined or isinstance(default, bool):
        return ""  # None: the settings decide; a factory: computed at run time
    if isinstance(default, tuple | list):
        return "default: " + ",".join(map(str, default))
    return f"default: {default}"


def _option_spec(
    model: type[BaseModel], name: str, choices: Sequence[Any] | None
) -> tuple[str, dict[str, Any]]:
    """The flag and ``add_argument`` keywords of one field.

    Raises:
        TypeError: the field's type has no command-line spelling (e.g. a secret).
    """
    info = model.model_fields[name]
    annotation = _without_none(info.annotation)
    spec: dict[str, Any] = {"dest": name, "default": None}
    if annotation is bool:
        if info.default is True:
            description = (info.description or "").strip().removesuffix(".")
            spec.update(action="store_false", help=f"do not {description[:1].lower()}"
                        f"{description[1:]}")
        else:
            spec.update(action="store_true", help=_help(info))
        return option_flag(model, name), spec
    origin = get_origin(annotation)
    if origin is Literal:
        values = get_args(annotation)
        spec.update(type=type(values[0]), choices=values, help=_help(info, _default_note(info)))
    elif origin in (tuple, list):
        # A list is given as one comma-separated value; the model's validator splits and checks
        # it, so a wrong name gets the same message as from a settings file.
        (item, *_) = get_args(annotation)
        names = get_args(item) if get_origin(item) is Literal else ()
        hint = "comma list of " + ", ".join(map(str, names)) if names else "comma list"
        spec.update(type=str, metavar=name.upper(), help=_help(info, hint, _default_note(info)))
    elif annotation in (str, int, float, Path):
        spec.update(type=annotation, help=_help(info, _default_note(info)))
    else:
        raise TypeError(f"{model.__name__}.{name}: no command-line option for {annotation!r}")
    if choices is not None:
        spec["choices"] = tuple(choices)
    return option_flag(model, name), spec


def add_model_options(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    model: type[BaseModel],
    fields: Iterable[str],
    *,
    flags: Mapping[str, str] | None = None,
    choices: Mapping[str, Sequence[Any]] | None = None,
) -> list[argparse.Action]:
    """Add one option per model field, derived from the field.

    The option stores into ``args.<field>`` and defaults to None (not given: the settings
    decide). A ``Literal`` field takes exactly its values; a tuple field one comma-separated
    value; a bool field is a switch (``--no-<field>`` when it is on by default).

    Args:
        parser: The parser or argument group to add to.
        model: The pydantic model holding the fields (``JudgeConfig``, ``Settings``...).
        fields: Field names, in the order the help lists them.
        flags: A flag other than ``--<field-name>`` for some fields (``context_window``:
            ``--context``).
        choices: Allowed values for a field whose type does not list them (an ``int`` checked
            by a validator).

    Returns:
        The actions added, in order.
    """
    actions = []
    for name in fields:
        flag, spec = _option_spec(model, name, (choices or {}).get(name))
        actions.append(parser.add_argument((flags or {}).get(name, flag), **spec))
    return actions


def add_judge_options(
    parser: argparse.ArgumentParser, *, metrics: bool = True, cascade: bool = True
) -> list[argparse.Action]:
    """The judge options shared by ``grade``, ``serve`` and ``calibrate``.

    Args:
        parser: The subcommand's parser.
        metrics: Whether to add ``--metrics`` (``calibrate`` has its own).
        cascade: Whether to add the cascade's options (:data:`CASCADE_FIELDS`; ``calibrate``'s
            ``--judge`` is another option).

    Returns:
        Every action of the ``judge`` group, in order.
    """
    from judge.config import JudgeConfig, Settings

    group = parser.add_argument_group(
        "judge", "over the settings file (--settings) and BONUSJUDGE_JUDGE__* variables"
    )
    fields = [name for name in JUDGE_FIELDS if metrics or name != "metrics"]
    if cascade:
        fields[1:1] = CASCADE_FIELDS
        # settings_from_args reads them only where they are this parser's options.
        parser.set_defaults(cascade_options=True)
    cut = fields.index("api_base") + 1
    actions = add_model_options(group, JudgeConfig, fields[:cut])
    actions.append(add_api_key_env_option(group))
    cut_cache = fields.index("cache")
    actions += add_model_options(group, JudgeConfig, fields[cut:cut_cache])
    actions += add_model_options(group, Settings, ["cache_dir", "cache_url"])
    actions += add_model_options(group, JudgeConfig, fields[cut_cache:])
    actions.append(group.add_argument("--settings", type=Path, help="JSON settings file"))
    # Not a judge setting, but accepted after the subcommand too; SUPPRESS keeps the subparser
    # from resetting a --verbose given before it.
    actions.append(group.add_argument(
        "--verbose", action="store_true", default=argparse.SUPPRESS, help=VERBOSE_HELP
    ))
    return actions


def add_api_key_env_option(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
) -> argparse.Action:
    """Add ``--api-key-env``: the judge's key is read from a variable, never from the command line.

    Every subcommand that takes a judge model has it, since the judge's messages about missing
    or refused credentials suggest it; :func:`api_key_from_env` reads it.
    """
    return parser.add_argument(
        "--api-key-env",
        help="name of the environment variable holding the provider's API key",
    )


def add_fail_on_bad_lines_option(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
) -> argparse.Action:
    """Add ``--fail-on-bad-lines``: exit :data:`EXIT_BAD_LINES` when input lines were skipped.

    ``grade`` and ``mcq`` both skip (and report) invalid lines and go on; a pipeline that wants
    every line graded asks for the exit status instead of reading stderr. The run still
    writes what it graded.
    """
    return parser.add_argument(
        "--fail-on-bad-lines", action="store_true", help=FAIL_ON_BAD_LINES_HELP
    )


def known_judges() -> tuple[str, ...]:
    """The judge names bonusjudge itself answers to as a model, besides litellm's model strings.

    The embedded matcher only: the fake provider is a Python object for tests, and the stand-in
    judge is an OpenAI-compatible server whose model name is free (``openai/NAME``).
    """
    from judge.config import EMBEDDED_JUDGE

    return (EMBEDDED_JUDGE,)


def closest_judge(model: str) -> str | None:
    """The known judge name ``model`` most likely misspells, or None when it misspells none.

    Only a model without a provider prefix can be one (``openai/embedded-matcher`` names a
    model on a server): it is compared case- and punctuation-blind (rapidfuzz's ``ratio``,
    80 or more: ``embeded-matcher`` scores 97, ``embedding-matcher`` 85, ``gpt-4o`` 9), and one
    word of a name counts too (``embedded``, ``matcher``).
    """
    if not model or "/" in model or model in known_judges():
        return None
    from rapidfuzz import fuzz, process, utils

    wanted = utils.default_process(model)
    for name in known_judges():
        if wanted and wanted in utils.default_process(name).split():
            return name
    match = process.extractOne(
        model, known_judges(), scorer=fuzz.ratio, processor=utils.default_process,
        score_cutoff=80,
    )
    return None if match is None else match[0]


def check_judge_name(model: str | None, option: str, field: str) -> None:
    """Refuse a judge model that misspells a judge bonusjudge knows, suggesting the name.

    Checked where the judge's preflight runs (``grade``, ``serve``, ``calibrate --judge``,
    ``mcq --llm-model``), before it: litellm would refuse the name for lack of a provider
    prefix, which hides the typo.

    Args:
        model: The model given (None: none given).
        option: The option that named it, for the message (``--model``).
        field: The setting it fills (``model``), for the error's ``field``.

    Raises:
        ConfigError: (``field``) ``model`` is close to a known judge name but not one.
    """
    best = closest_judge(model or "")
    if best is None:
        return
    from core.errors import ConfigError

    raise ConfigError(
        f"unknown model {model!r} ({option}): did you mean {best}? (an LLM judge is a litellm "
        "model string with its provider prefix, e.g. openai/gpt-4o)",
        field=field,
    )


def api_key_from_env(args: argparse.Namespace) -> str | None:
    """The API key in the variable ``--api-key-env`` names; None when the option is not given.

    Raises:
        ConfigError: (``api_key_env``) the variable is not set, or set but empty; the message
            says which.
    """
    from core.errors import ConfigError, unset_variable

    name = getattr(args, "api_key_env", None)
    if not name:
        return None
    problem = unset_variable(name)
    if problem is not None:
        raise ConfigError(f"--api-key-env {name}: {problem}", field="api_key_env")
    return os.environ[name]


@overload
def settings_from_args(args: argparse.Namespace) -> Settings: ...


@overload
def settings_from_args(
    args: argparse.Namespace, model: type[SettingsT], **overrides: Any
) -> SettingsT: ...


def settings_from_args(
    args: argparse.Namespace, model: type[Settings] | None = None, **overrides: Any
) -> Settings:
    """Settings from the environment / settings file, with the command-line options on top.

    Args:
        args: The parsed command line (the judge options, ``--cache-dir``, ``--settings``...).
        model: The settings to build: the engine's ``Settings`` (the default: every command
            that grades) or the service's ``ServiceSettings`` (``serve``). The engine's skip the
            service's names in a shared settings file, unread; any other unknown name is refused.
        overrides: Further settings of ``model`` from the command line (None: not given).

    Raises:
        ConfigError: ``--api-key-env`` names a variable that is not set or is empty, a setting
            is invalid, or the judge model misspells a known judge (:func:`check_judge_name`).
    """
    from api.settings import SERVICE_ONLY
    from judge.config import Settings, load_settings

    judge: dict[str, Any] = {}
    cascade = CASCADE_FIELDS if getattr(args, "cascade_options", False) else ()
    for name in (*JUDGE_FIELDS, *cascade, "context_window"):
        value = getattr(args, name, None)
        if value is not None:
            judge[name] = value
    secret = api_key_from_env(args)
    if secret is not None:
        judge["api_key"] = secret
    chosen = model if model is not None else Settings
    settings = load_settings(
        getattr(args, "settings", None),
        model=chosen,
        also_known=SERVICE_ONLY - set(chosen.model_fields),
        judge=judge or None,
        cache_dir=getattr(args, "cache_dir", None),
        cache_url=getattr(args, "cache_url", None),
        **overrides,
    )
    # The settings' model, whether --model, the settings file or BONUSJUDGE_JUDGE__MODEL named it.
    given = "--model" if getattr(args, "model", None) else "the judge.model setting"
    check_judge_name(settings.judge.model, given, "model")
    return settings
