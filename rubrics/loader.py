"""Load, validate and render rubric files.

Every file under ``rubrics/library`` is validated when loaded: its YAML against ``RubricFile``,
each template compiled in a sandboxed Jinja environment with ``StrictUndefined``, its variables
checked against the task's allowed set, and the response fence checked by rendering a probe. A
broken rubric is a ``RubricInvalid`` at start naming the file and field, never a surprise at the
first request.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from jinja2 import StrictUndefined, Template, TemplateError, meta
from jinja2.sandbox import SandboxedEnvironment
from pydantic import ValidationError

from bonusjudge_client.validation import first_error
from core.errors import RubricInvalid, RubricNotFound
from core.text import Language
from rubrics.schema import TASK_VARIABLES, Rubric, RubricFile

LIBRARY = Path(__file__).with_name("library")
"""The folder of shipped rubric files."""

_PROBE = "PROBE-RESPONSE-7d1c"


def fence_tag(text: str, label: str) -> str:
    """The marker tag for ``text``: derived from the text's own hash.

    A response cannot close its fence early, because writing the closing marker would require
    the response to contain the hash of itself.
    """
    digest = hashlib.sha256(f"{label}\0{text}".encode()).hexdigest()[:16]
    return f"{label.upper()}-{digest}"


def fence(text: str, label: str = "response") -> str:
    """Wrap untrusted text in hash-tagged marker lines (the ``fence`` template filter)."""
    tag = fence_tag(text, label)
    return f"<<<BEGIN {tag}>>>\n{text}\n<<<END {tag}>>>"


def numbered(points: Sequence[str]) -> str:
    """Number the bonus points 1..n, one per line (the ``numbered`` template filter)."""
    return "\n".join(f"{i}. {p.strip()}" for i, p in enumerate(points, start=1))


def _environment() -> SandboxedEnvironment:
    env = SandboxedEnvironment(
        undefined=StrictUndefined,
        autoescape=False,
        keep_trailing_newline=False,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["fence"] = fence
    env.filters["numbered"] = numbered
    return env


_ENV = _environment()


@dataclass(frozen=True)
class RenderedPrompt:
    """The messages of one judge call, with the rubric and language they came from."""

    rubric: Rubric
    language: Language
    messages: list[dict[str, str]]


def _probe_variables(task: str) -> dict[str, Any]:
    return {
        "question": "Q?",
        "reference": "REF",
        "points": ["P1", "P2"],
        "response": _PROBE,
        "context": "CTX",
        "book_name": "BOOK",
        "domain": None,
        "choices": ["a", "b"],
        "labels": ["A", "B"],
    }


def _validate_templates(rubric: Rubric) -> None:
    allowed = TASK_VARIABLES[rubric.task]
    for language, prompt in rubric.prompts.items():
        for part in ("system", "user"):
            source = getattr(prompt, part)
            field = f"prompts.{language}.{part}"
            try:
                names = meta.find_undeclared_variables(_ENV.parse(source))
            except TemplateError as exc:
                raise RubricInvalid(
                    f"{rubric.path}: {field}: template error: {exc}", path=rubric.path, field=field
                ) from exc
            unknown = sorted(names - allowed - {"loop"})
            if unknown:
                raise RubricInvalid(
                    f"{rubric.path}: {field}: unknown variable(s) {unknown} for task "
                    f"{rubric.task} (allowed: {sorted(allowed)})",
                    path=rubric.path,
                    field=field,
                )
        if "response" in allowed:
            messages = _render(rubric, language, _probe_variables(rubric.task))
            if rubric.output == "structured" and fence(_PROBE) not in messages[1]["content"]:
                # Structured rubrics are ours: they must fence the response as data.
                raise RubricInvalid(
                    f"{rubric.path}: prompts.{language}.user: the response must be placed with "
                    "`{{ response | fence }}`",
                    path=rubric.path,
                    field=f"prompts.{language}.user",
                )
            if _PROBE in messages[0]["content"]:
                raise RubricInvalid(
                    f"{rubric.path}: prompts.{language}.system: the response must not appear in "
                    "the system message",
                    path=rubric.path,
                    field=f"prompts.{language}.system",
                )


@lru_cache(maxsize=256)
def _compiled(source: str) -> Template:
    # Jinja's from_string compiles on every call (~10 ms per template, two per judge call); the
    # templates are immutable rubric text, so compile each once per process.
    return _ENV.from_string(source)


def _render(
    rubric: Rubric, language: Language, variables: Mapping[str, Any]
) -> list[dict[str, str]]:
    prompt = rubric.prompts[language]
    try:
        system = _compiled(prompt.system).render(**variables).strip()
        user = _compiled(prompt.user).render(**variables).strip()
    except TemplateError as exc:
        raise RubricInvalid(
            f"{rubric.path}: prompts.{language}: render error: {exc}",
            path=rubric.path,
            field=f"prompts.{language}",
        ) from exc
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def load_rubric_file(path: Path) -> Rubric:
    """Load and validate one rubric file.

    Raises:
        RubricInvalid: naming the file and the offending field.
    """
    raw = path.read_bytes()
    try:
        data = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise RubricInvalid(f"{path}: not valid YAML: {exc}", path=str(path)) from exc
    if not isinstance(data, dict):
        raise RubricInvalid(f"{path}: a rubric file must be a mapping", path=str(path))
    try:
        content = RubricFile.model_validate(data)
    except ValidationError as exc:
        field, message = first_error(exc)
        raise RubricInvalid(f"{path}: {message}", path=str(path), field=field) from exc
    if content.output == "text" and content.parser is None:
        raise RubricInvalid(
            f"{path}: parser: a text rubric needs a parser", path=str(path), field="parser"
        )
    rubric = Rubric(
        **content.model_dump(),
        path=str(path),
        hash=hashlib.sha256(raw).hexdigest()[:16],
    )
    _validate_templates(rubric)
    return rubric


class RubricLibrary:
    """All rubrics of a folder, validated, indexed by id and by (family, task)."""

    def __init__(self, rubrics: Sequence[Rubric]) -> None:
        self._by_id: dict[str, Rubric] = {}
        self._by_family: dict[tuple[str, str], Rubric] = {}
        for rubric in rubrics:
            if rubric.id in self._by_id:
                raise RubricInvalid(
                    f"{rubric.path}: id: duplicate rubric id {rubric.id!r} (also in "
                    f"{self._by_id[rubric.id].path})",
                    path=rubric.path,
                    field="id",
                )
            self._by_id[rubric.id] = rubric
            key = (rubric.family, rubric.task)
            if key in self._by_family:
                raise RubricInvalid(
                    f"{rubric.path}: family: {rubric.family!r} already has a {rubric.task} rubric",
                    path=rubric.path,
                    field="family",
                )
            self._by_family[key] = rubric
        # Asked for every item graded (for_task): computed once, the library never changes.
        self._families = frozenset(family for family, _ in self._by_family)

    @classmethod
    def from_folder(cls, folder: Path = LIBRARY) -> RubricLibrary:
        """Load every ``*.yaml`` file of ``folder`` (validated)."""
        return cls([load_rubric_file(p) for p in sorted(folder.glob("*.yaml"))])

    def __iter__(self) -> Any:
        return iter(self._by_id.values())

    def get(self, rubric_id: str) -> Rubric:
        """The rubric with this id.

        Raises:
            RubricNotFound: if there is none.
        """
        try:
            return self._by_id[rubric_id]
        except KeyError:
            raise RubricNotFound(
                f"unknown rubric {rubric_id!r}; known: {', '.join(sorted(self._by_id))}",
                rubric_id=rubric_id,
            ) from None

    @property
    def families(self) -> list[str]:
        """The rubric families available."""
        return sorted(self._families)

    def for_task(self, family: str, task: str) -> Rubric:
        """The rubric of ``family`` for ``task``; extraction falls back to the ``chartom`` one.

        Raises:
            RubricNotFound: if the family is unknown or lacks the task.
        """
        if family not in self._families:
            raise RubricNotFound(
                f"unknown rubric family {family!r}; known: {', '.join(self.families)}",
                rubric_id=family,
            )
        rubric = self._by_family.get((family, task))
        if rubric is None and task == "extract_points":
            # Point extraction is shared: the faithful family has no published prompt for it.
            rubric = self._by_family.get(("chartom", task))
        if rubric is None:
            raise RubricNotFound(f"rubric family {family!r} has no {task} rubric", rubric_id=family)
        return rubric

    def render(
        self, rubric: Rubric, language: Language, variables: Mapping[str, Any]
    ) -> RenderedPrompt:
        """Render a rubric's messages in ``language`` (or its fallback language)."""
        use = language
        if use not in rubric.prompts:
            if rubric.fallback_language is None or rubric.fallback_language not in rubric.prompts:
                raise RubricNotFound(
                    f"rubric {rubric.id!r} has no {language} prompt",
                    rubric_id=rubric.id,
                    field="language",
                )
            use = rubric.fallback_language
        full = {name: None for name in TASK_VARIABLES[rubric.task]}
        full.update(variables)
        return RenderedPrompt(rubric=rubric, language=use, messages=_render(rubric, use, full))


@lru_cache(maxsize=4)
def load_library(folder: str | None = None) -> RubricLibrary:
    """The rubric library of ``folder`` (default: the shipped one), loaded once per process."""
    return RubricLibrary.from_folder(Path(folder) if folder else LIBRARY)
