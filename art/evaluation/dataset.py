"""An evaluation dataset: cases (a query, optional history) and what each run must show.

A dataset is a YAML or JSON file::

    name: shop questions
    tools: shop_tools.py:TOOLS      # what `art eval` runs with by default (next to the file)
    cases:
      - name: price-in-euros
        query: What does one GLOBEX share cost in euros?
        expect:
          tools: [stock_price, convert_currency]  # must be used
          tools_not: [weather]                     # must not be
          args:
            - {tool: stock_price, arg: symbol, equals: GLOBEX}
            - {tool: convert_currency, arg: amount, reference: true}
          values: [80.96]                          # the answer must hold them
          max_llm_calls: 2

Anything a dataset cannot mean (an unknown key, a negative budget, two cases of one
name) is refused when it is read, naming the case and the field.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError, model_validator

__all__ = [
    "ArgExpectation",
    "Case",
    "Dataset",
    "DatasetError",
    "Expectations",
    "HistoryMessage",
    "Judge",
    "load_dataset",
]


class DatasetError(ValueError):
    """A dataset file that cannot be read or does not describe cases."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ArgExpectation(_Strict):
    """An argument a step of `tool` must be given: `arg` (any argument when omitted)
    equal to `equals`, holding the text `contains` (spaces ignored), or holding a
    `{{sN.output}}` reference (`reference: true`) or not (`false`)."""

    tool: str = Field(min_length=1)
    arg: str | None = None
    equals: JsonValue = None
    contains: str | None = None
    reference: bool | None = None

    @model_validator(mode="after")
    def _says_something(self) -> ArgExpectation:
        if (
            "equals" not in self.model_fields_set
            and self.contains is None
            and (self.reference is None and self.arg is None)
        ):
            raise ValueError("say what the argument must be: arg, equals, contains or reference")
        return self

    def describe(self) -> str:
        where = f"{self.tool}.{self.arg}" if self.arg else f"an argument of {self.tool}"
        if "equals" in self.model_fields_set:
            return f"{where} = {json.dumps(self.equals)}"
        if self.contains is not None:
            return f"{where} containing {self.contains!r}"
        if self.reference is not None:
            return f"{where} {'holding' if self.reference else 'without'} a reference"
        return where


class Expectations(_Strict):
    """What a case's run must show; every field is optional."""

    tools: list[str] = Field(default_factory=list)
    tools_not: list[str] = Field(default_factory=list)
    args: list[ArgExpectation] = Field(default_factory=list)
    values: list[str | float] = Field(default_factory=list)
    plan_snapshot: str | None = None  # a .plan.md file, relative to the dataset file
    max_llm_calls: int | None = Field(default=None, ge=1)
    max_cost_usd: float | None = Field(default=None, ge=0)
    max_latency_s: float | None = Field(default=None, gt=0)


class HistoryMessage(_Strict):
    """An earlier turn of the case's thread."""

    role: Literal["user", "assistant"]
    content: str


class Judge(_Strict):
    """An LLM judging the answer against `rubric` (run only with `judge=True`/`--judge`)."""

    rubric: str = Field(min_length=1)
    model: str | None = None  # default: the evaluated instance's model


class Case(_Strict):
    """One question of a dataset."""

    name: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.:-]+$")
    query: str = Field(min_length=1)
    history: list[HistoryMessage] = Field(default_factory=list)
    expect: Expectations = Field(default_factory=Expectations)
    judge: Judge | None = None


class Dataset(_Strict):
    """Named cases, and the `--tools` specs they are meant to run with."""

    name: str = ""
    tools: list[str] = Field(default_factory=list)
    cases: list[Case] = Field(min_length=1)
    # Where the file was read from: plan snapshots are found next to it.
    directory: Path | None = Field(default=None, exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _one_tools_spec(cls, value: object) -> object:
        if isinstance(value, Mapping) and isinstance(value.get("tools"), str):
            return {**value, "tools": [value["tools"]]}
        return value

    def tool_specs(self) -> list[str]:
        """`tools` with each file path made absolute: a relative one is read next to the
        dataset file when a file is there (else from the working directory)."""
        specs = []
        for spec in self.tools:
            target, sep, attr = spec.rpartition(":")
            if sep and self.directory is not None and target.endswith(".py"):
                beside = self.directory / target
                if beside.is_file():
                    spec = f"{beside}:{attr}"
            specs.append(spec)
        return specs

    @model_validator(mode="after")
    def _unique_names(self) -> Dataset:
        seen: set[str] = set()
        for case in self.cases:
            if case.name in seen:
                raise ValueError(f"two cases are named {case.name!r}")
            seen.add(case.name)
        return self


def load_dataset(source: str | Path | Mapping[str, object] | Dataset) -> Dataset:
    """The dataset in a YAML or JSON file (or already read into a mapping)."""
    if isinstance(source, Dataset):
        return source
    directory: Path | None = None
    if isinstance(source, Mapping):
        data: object = source
        where = "the dataset"
    else:
        path = Path(source)
        where = str(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise DatasetError(f"cannot read the dataset {where}: {exc.strerror or exc}") from None
        data = _parse(text, path)
        directory = path.resolve().parent
    if not isinstance(data, Mapping):
        raise DatasetError(f"{where}: expected a mapping with a 'cases' list")
    try:
        dataset = Dataset.model_validate({**data, "directory": directory})
    except ValidationError as exc:
        raise DatasetError(f"{where}: {_problems(exc, data)}") from None
    return dataset


def _parse(text: str, path: Path) -> object:
    try:
        if path.suffix.lower() == ".json":
            return json.loads(text)
        import yaml  # type: ignore[import-untyped]  # PyYAML ships no type information

        return yaml.safe_load(text)
    except ValueError as exc:  # json.JSONDecodeError and yaml.YAMLError's message
        raise DatasetError(f"{path}: not valid JSON: {exc}") from None
    except Exception as exc:  # yaml.YAMLError
        raise DatasetError(f"{path}: not valid YAML: {exc}") from None


def _problems(error: ValidationError, data: Mapping[str, object]) -> str:
    """Each problem with the case it is in named (`cases[3] (price-in-euros).expect...`)."""
    raw = data.get("cases")
    cases: list[Any] = raw if isinstance(raw, list) else []
    lines = []
    for item in error.errors():
        location = list(item["loc"])
        where = ".".join(str(part) for part in location) or "the dataset"
        if len(location) >= 2 and location[0] == "cases" and isinstance(location[1], int):
            index = location[1]
            name = (
                cases[index].get("name")
                if index < len(cases) and isinstance(cases[index], Mapping)
                else None
            )
            rest = ".".join(str(part) for part in location[2:])
            where = (
                f"case {index + 1}" + (f" ({name})" if name else "") + (f": {rest}" if rest else "")
            )
        lines.append(f"{where}: {item['msg']}")
    return "; ".join(lines)
