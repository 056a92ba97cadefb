"""Benchmark workloads as typed, recorded objects: what requests a benchmark sends.

A workload is YAML (shipped ones in ``servedeck/bench/workloads/``, a project's own in
``<project>/workloads/NAME.yaml``, or any file path) read into one of four kinds, each seeded:

* ``single-stream``: the seed report's long-context single stream (cold and warm phases, one
  request at a time); its fields are :class:`servedeck.bench.client.Workload`'s and it runs
  through :func:`servedeck.bench.client.run_bench`, unchanged.
* ``chat``: many requests whose prompt and output lengths follow distributions
  (:class:`Lengths`): the multi-request workload the seed's verdict asks for.
* ``shared-prefix``: requests that share one of ``prefixes`` long prefixes (a system prompt, a
  document) followed by their own suffix: prefix caching under load.
* ``full-context``: requests that fill the served context (``context_fraction`` of the
  server's ``max_model_len`` including the output), sent ``concurrent`` at a time: "can this
  configuration hold N concurrent full-context requests?" made a measurement.

Every kind except ``single-stream`` is a :class:`RequestWorkload`: it makes, per load level,
``requests`` prompts from a corpus (the shipped ``corpus/default.txt``, or a text file the user
names), each sized exactly by the server's own tokenizer (``POST /tokenize``, as the
single-stream benchmark does: :func:`servedeck.bench.client.build_prompt`). Lengths and corpus
positions come from ``seed``; every prompt starts with a tag unique to the run and level, so
no prompt is in the prefix cache unless the workload shares it on purpose.

Errors name the file and the field (:class:`servedeck.errors.ServedeckError`).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator, model_validator

from servedeck.bench.client import CHAT_ENDPOINT, Workload
from servedeck.runs.records import TagPrefix
from servedeck.bench.slo import Slo
from servedeck.errors import ServedeckError

HERE = Path(__file__).resolve().parent
SHIPPED_DIR = HERE / "workloads"
"""Workloads that ship with servedeck (``NAME.yaml``)."""
CORPUS_DIR = HERE / "corpus"
"""Prompt corpora that ship with servedeck (``NAME.txt``)."""
DEFAULT_CORPUS = "default"
PROJECT_DIR_NAME = "workloads"
"""A project's own workloads: ``<project>/workloads/NAME.yaml`` (they shadow shipped names)."""


class Lengths(BaseModel):
    """A token-length distribution; drawn per request from the workload's seed.

    ``distribution``: ``fixed`` (``value``), ``uniform`` (integers ``min``..``max``), or
    ``lognormal`` (``median`` and ``sigma`` of the log, clipped to ``min``..``max``). YAML may
    give a bare integer for a fixed length.
    """

    model_config = ConfigDict(extra="forbid")
    distribution: Literal["fixed", "uniform", "lognormal"] = "fixed"
    value: int | None = Field(None, ge=1)
    min: int | None = Field(None, ge=1)
    max: int | None = Field(None, ge=1)
    median: float | None = Field(None, gt=0, allow_inf_nan=False)
    sigma: float | None = Field(None, ge=0, le=5, allow_inf_nan=False,
                                description="of the natural log (above 5, one draw in a hundred would be "
                                            "10^5 times the median)")

    @model_validator(mode="before")
    @classmethod
    def _bare_int(cls, v: Any) -> Any:
        if isinstance(v, int) and not isinstance(v, bool):
            return {"distribution": "fixed", "value": v}
        return v

    @model_validator(mode="after")
    def _complete(self) -> "Lengths":
        need = {"fixed": ("value",), "uniform": ("min", "max"), "lognormal": ("median", "sigma")}
        missing = [k for k in need[self.distribution] if getattr(self, k) is None]
        if missing:
            raise ValueError(f"a {self.distribution} length needs {', '.join(missing)}")
        unused = [k for k in ("value", "median", "sigma") if k not in need[self.distribution]
                  and getattr(self, k) is not None]
        unused += [k for k in ("min", "max") if self.distribution == "fixed" and getattr(self, k) is not None]
        if unused:  # a field of another distribution would be ignored without a word
            raise ValueError(f"a {self.distribution} length does not use {', '.join(unused)} "
                             f"(fixed: value; uniform: min, max; lognormal: median, sigma, and min/max to clip)")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min} is above max {self.max}")
        return self

    @property
    def upper(self) -> int | None:
        """The longest length this distribution can draw (None: unbounded lognormal)."""
        return self.value if self.distribution == "fixed" else self.max

    def draw(self, rng: Any, n: int) -> list[int]:
        """``n`` lengths drawn with ``rng`` (a ``numpy.random.Generator``)."""
        if self.distribution == "fixed":
            return [int(self.value)] * n  # type: ignore[arg-type]
        if self.distribution == "uniform":
            return [int(x) for x in rng.integers(self.min, self.max + 1, size=n)]  # type: ignore[operator]
        import numpy as np
        assert self.median is not None and self.sigma is not None  # a lognormal has both (_complete)
        raw = np.exp(np.log(self.median) + self.sigma * rng.standard_normal(n))
        lo = self.min or 1
        hi = self.max or int(raw.max()) + 1
        return [int(min(hi, max(lo, round(x)))) for x in raw]

    def describe(self) -> str:
        """``256``, ``uniform 64–512``, ``lognormal median 300 σ 0.6 [16–1500]``."""
        if self.distribution == "fixed":
            return str(self.value)
        if self.distribution == "uniform":
            return f"uniform {self.min}\u2013{self.max}"
        bounds = f" [{self.min or 1}\u2013{self.max or '∞'}]"
        return f"lognormal median {self.median:g} \u03c3 {self.sigma:g}{bounds}"


class _Common(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field("", description="set from the file name when empty")
    description: str = ""
    seed: int = Field(0, ge=0, description="lengths and corpus positions are drawn from it")


class SingleStreamWorkload(_Common):
    """The seed's single stream: :class:`servedeck.bench.client.Workload` under a name."""

    kind: Literal["single-stream"] = "single-stream"
    bench: Workload = Field(default_factory=Workload, description="the single-stream benchmark's settings")

    def to_bench_workload(self) -> Workload:
        """The :class:`Workload` :func:`servedeck.bench.client.run_bench` runs (seed applied)."""
        return self.bench.model_copy(update={"seed": self.seed}) if self.seed else self.bench


class RequestWorkload(_Common):
    """Fields every multi-request workload shares (module docstring)."""

    if TYPE_CHECKING:  # each kind of workload declares its own literal
        kind: str

    requests: int = Field(32, ge=1, description="requests per load level")
    warmup_requests: int = Field(1, ge=0, description="throwaway requests before the first level")
    endpoint: Literal["/v1/chat/completions", "/v1/completions"] = CHAT_ENDPOINT
    temperature: float = Field(0.0, ge=0.0)
    ignore_eos: bool = Field(True, description="outputs are exactly their drawn length")
    chat_template_kwargs: dict[str, Any] = Field(default_factory=dict)
    corpus: str = Field(DEFAULT_CORPUS, description="a shipped corpus name or a text file")
    tag_prefix: TagPrefix = "req"
    request_timeout_s: float = Field(600.0, gt=0)
    slo: Slo | None = Field(None, description="the SLO judged when none is given on the command line")
    load: str | None = Field(None, description="the load profile run when none is given "
                                               "(servedeck.bench.load.LoadProfile.parse)")

    @field_validator("load")
    @classmethod
    def _load_parses(cls, v: str | None) -> str | None:
        if v is not None:
            from servedeck.bench.load import LoadProfile
            try:
                LoadProfile.parse(v)
            except ServedeckError as exc:
                raise ValueError(exc.message) from None
        return v

    def with_requests(self, requests: int) -> "RequestWorkload":
        """This workload sending ``requests`` per level (``--requests``), validated as the file's
        own field is.

        Raises:
            ServedeckError: not a count this workload accepts (field ``--requests``).
        """
        try:
            return type(self).model_validate({**self.model_dump(), "requests": requests})
        except ValidationError as exc:
            raise ServedeckError(f"--requests {requests}: {exc.errors()[0]['msg']}", field="--requests") from None

    # ---- what each kind sends (filled by the subclasses)
    def lengths(self, rng: Any, n: int, max_model_len: int | None) -> list[tuple[int, int, int]]:
        """``(prompt_tokens, output_tokens, shared_prefix_tokens)`` of ``n`` requests."""
        raise NotImplementedError

    def prefix_group(self, index: int) -> int | None:
        """The shared prefix request ``index`` uses (None: its prompt is its own)."""
        return None

    def default_load(self) -> str:
        """The load profile run when neither the command line nor the file names one."""
        return self.load or "concurrency:1,2,4,8"

    def longest_request(self, max_model_len: int | None) -> int | None:
        """The most tokens (prompt + output) one request can take, when bounded."""
        return None


class ChatWorkload(RequestWorkload):
    """Independent requests with prompt and output lengths from distributions."""

    kind: Literal["chat"] = "chat"
    prompt_tokens: Lengths = Field(default_factory=lambda: Lengths(distribution="uniform", min=64, max=512))
    output_tokens: Lengths = Field(default_factory=lambda: Lengths(distribution="uniform", min=16, max=128))

    def lengths(self, rng: Any, n: int, max_model_len: int | None) -> list[tuple[int, int, int]]:
        return [(p, o, 0) for p, o in zip(self.prompt_tokens.draw(rng, n), self.output_tokens.draw(rng, n))]

    def longest_request(self, max_model_len: int | None) -> int | None:
        p, o = self.prompt_tokens.upper, self.output_tokens.upper
        return None if p is None or o is None else p + o


class SharedPrefixWorkload(RequestWorkload):
    """Requests sharing one of ``prefixes`` prefixes of ``prefix_tokens`` (request ``i`` uses
    prefix ``i mod prefixes``), each followed by its own suffix."""

    kind: Literal["shared-prefix"] = "shared-prefix"
    prefixes: int = Field(4, ge=1)
    prefix_tokens: int = Field(512, ge=16)
    suffix_tokens: Lengths = Field(default_factory=lambda: Lengths(distribution="uniform", min=32, max=128))
    output_tokens: Lengths = Field(default_factory=lambda: Lengths(value=64))

    def lengths(self, rng: Any, n: int, max_model_len: int | None) -> list[tuple[int, int, int]]:
        return [(self.prefix_tokens + s, o, self.prefix_tokens)
                for s, o in zip(self.suffix_tokens.draw(rng, n), self.output_tokens.draw(rng, n))]

    @model_validator(mode="after")
    def _prefixes_shared(self) -> "SharedPrefixWorkload":
        if self.requests <= self.prefixes:  # request i uses prefix i mod prefixes
            raise ValueError(f"{self.requests} requests a level over {self.prefixes} prefixes: no two requests "
                             f"share a prefix, so prefix caching is not measured (give more requests than prefixes)")
        return self

    def prefix_group(self, index: int) -> int | None:
        return index % self.prefixes

    def longest_request(self, max_model_len: int | None) -> int | None:
        s, o = self.suffix_tokens.upper, self.output_tokens.upper
        return None if s is None or o is None else self.prefix_tokens + s + o


class FullContextWorkload(RequestWorkload):
    """Requests of ``context_fraction × max_model_len`` tokens (prompt + ``output_tokens``),
    ``concurrent`` at a time: the default load is ``concurrency:<concurrent>`` and a level sends
    ``requests`` of them (default: one wave of ``concurrent``)."""

    kind: Literal["full-context"] = "full-context"
    concurrent: int = Field(2, ge=1, description="requests held at once (the default load)")
    output_tokens: int = Field(64, ge=2)
    context_fraction: float = Field(1.0, gt=0, le=1.0)
    requests: int = Field(0, ge=0, description="requests per level; 0 = one wave of `concurrent`")
    warmup_requests: int = 0

    @property
    def per_level(self) -> int:
        return self.requests or self.concurrent

    def prompt_tokens_for(self, max_model_len: int | None) -> int:
        """The prompt length that fills the context.

        Raises:
            ServedeckError: the server's ``max_model_len`` is unknown or too short.
        """
        if not max_model_len:
            raise ServedeckError("a full-context workload needs the server's max_model_len (GET /v1/models)",
                                 field="workload.context_fraction")
        prompt = int(self.context_fraction * max_model_len) - self.output_tokens
        if prompt < 16:
            raise ServedeckError(f"context_fraction {self.context_fraction} of max_model_len {max_model_len} "
                                 f"leaves {prompt} prompt tokens beside {self.output_tokens} output tokens",
                                 field="workload.output_tokens")
        return prompt

    def lengths(self, rng: Any, n: int, max_model_len: int | None) -> list[tuple[int, int, int]]:
        return [(self.prompt_tokens_for(max_model_len), self.output_tokens, 0)] * n

    def default_load(self) -> str:
        return self.load or f"concurrency:{self.concurrent}"

    def longest_request(self, max_model_len: int | None) -> int | None:
        return int(self.context_fraction * max_model_len) if max_model_len else None


AnyWorkload = Annotated[Union[SingleStreamWorkload, ChatWorkload, SharedPrefixWorkload, FullContextWorkload],
                        Field(discriminator="kind")]
KINDS = ("single-stream", "chat", "shared-prefix", "full-context")


@functools.lru_cache(maxsize=1)
def _adapter() -> TypeAdapter:
    return TypeAdapter(AnyWorkload)


def workload_from_dict(data: Any, *, name: str = "", source: str | None = None) -> Any:
    """Validate a workload document (a YAML mapping) into its kind's model.

    Raises:
        ServedeckError: not a mapping, no or unknown ``kind``, or a field is invalid (the
            message names ``source`` and the field path).
    """
    if not isinstance(data, dict):
        raise ServedeckError("a workload file must hold a mapping", file=source)
    kind = data.get("kind")
    if kind not in KINDS:
        raise ServedeckError(f"unknown workload kind {kind!r}", file=source, field="kind",
                             hint=f"kind is one of {', '.join(KINDS)}")
    try:
        w = _adapter().validate_python(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        path = ".".join(str(p) for p in err["loc"][1:]) or None  # None: the workload as a whole
        raise ServedeckError(f"invalid workload: {err['msg']}", file=source, field=path) from None
    if not w.name:
        w = w.model_copy(update={"name": name})
    if isinstance(w, RequestWorkload):  # a missing corpus is named now, not once a server is asked
        try:
            corpus_words(w.corpus)
        except ServedeckError as exc:
            raise ServedeckError(exc.message, file=exc.file or source, field="corpus", hint=exc.hint) from None
    return w


def _yaml(path: Path) -> Any:
    from servedeck.fsutil import read_bounded
    from servedeck.yamlio import LIMITS, load_data
    try:
        text = read_bounded(path, LIMITS.max_bytes, what="workload")  # not UTF-8: named with its line
    except OSError as exc:
        raise ServedeckError(f"cannot read the workload file: {exc.strerror}", file=str(path)) from None
    try:
        return load_data(text)
    except Exception as exc:  # ruamel's parser errors carry line and column
        raise ServedeckError(f"not valid YAML: {exc}", file=str(path)) from None


def shipped_workloads() -> dict[str, Path]:
    """``{name: path}`` of the shipped workloads."""
    return {p.stem: p for p in sorted(SHIPPED_DIR.glob("*.yaml"))}


def project_workloads(project_root: Path | None) -> dict[str, Path]:
    """``{name: path}`` of a project's own workloads (``<root>/workloads/*.yaml``)."""
    if project_root is None:
        return {}
    return {p.stem: p for p in sorted((Path(project_root) / PROJECT_DIR_NAME).glob("*.yaml"))}


def available_workloads(project_root: Path | None = None) -> dict[str, Path]:
    """Shipped workloads, shadowed by the project's own of the same name."""
    return {**shipped_workloads(), **project_workloads(project_root)}


def load_workload(ref: str | Path, project_root: Path | None = None) -> Any:
    """A workload by name (project first, then shipped) or by file path.

    Raises:
        ServedeckError: no such workload or file, or the file is invalid (file and field named).
    """
    text = str(ref)
    known = available_workloads(project_root)
    if text in known:
        path = known[text]
    else:
        path = Path(text)
        if not path.is_file():
            raise ServedeckError(f"no workload named {text!r} and no such file",
                                 hint=f"known workloads: {', '.join(known) or '(none)'}; or give a YAML file")
    return workload_from_dict(_yaml(path), name=path.stem, source=str(path))


@functools.lru_cache(maxsize=8)
def _corpus_words(path: str, mtime_ns: int, size: int) -> tuple[str, ...]:
    # keyed by the file's identity too: a file changed since is read again
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return tuple(w for line in lines if not line.lstrip().startswith("#") for w in line.split())


def corpus_words(corpus: str) -> tuple[str, ...]:
    """The words of a corpus: a shipped name (``default``) or a UTF-8 text file (lines
    starting with ``#`` skipped).

    Raises:
        ServedeckError: no such corpus, unreadable, or fewer than 100 words.
    """
    shipped = CORPUS_DIR / f"{corpus}.txt"
    path = shipped if shipped.is_file() else Path(corpus)
    if not path.is_file():
        names = ", ".join(p.stem for p in sorted(CORPUS_DIR.glob("*.txt")))
        raise ServedeckError(f"no corpus named {corpus!r} and no such file", field="workload.corpus",
                             hint=f"shipped corpora: {names}; or give a text file")
    try:
        st = path.stat()
        words = _corpus_words(str(path.resolve()), st.st_mtime_ns, st.st_size)
    except (OSError, UnicodeDecodeError) as exc:
        raise ServedeckError(f"cannot read the corpus: {exc}", file=str(path)) from None
    if len(words) < 100:
        raise ServedeckError(f"the corpus has {len(words)} words; prompts need at least 100", file=str(path))
    return words


def describe(w: Any) -> str:
    """One line: ``chat (seed 0): 32 requests/level, prompt uniform 64–512, output uniform 16–128``."""
    head = f"{w.kind} (seed {w.seed})"
    if isinstance(w, SingleStreamWorkload):
        b = w.bench
        return f"{head}: prompt {b.prompt_tokens}, output {b.max_tokens}, {b.repetitions} cold + warm"
    if isinstance(w, ChatWorkload):
        return (f"{head}: {w.requests} requests/level, prompt {w.prompt_tokens.describe()}, "
                f"output {w.output_tokens.describe()}")
    if isinstance(w, SharedPrefixWorkload):
        return (f"{head}: {w.requests} requests/level over {w.prefixes} prefixes of {w.prefix_tokens} tokens, "
                f"suffix {w.suffix_tokens.describe()}, output {w.output_tokens.describe()}")
    return (f"{head}: {w.per_level} requests/level of {w.context_fraction:g} × max_model_len "
            f"({w.output_tokens} output), {w.concurrent} at a time")
