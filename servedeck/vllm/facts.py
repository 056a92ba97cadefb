"""vLLM's own facts about one release: the ``vllm serve`` argument surface, name registries,
JSON-valued config fields and the ``VLLM_*`` variables it reads.

Produced by :mod:`servedeck.vllm.introspect` (run inside an image) and stored per digest in the
catalog, or shipped as tables under ``servedeck/vllm/tables/vllm-<version>.json`` (each with its
``source``): extracted from the project's CPU image (``invoke image-facts IMAGE --table``), or
from a release's own wheel by the same extractor (``python -m devtools.release_tables``). Rules and the renderer ask
:func:`table_for` for the facts of an image: its own per-digest
facts, else the shipped table of its release or the nearest older one.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from servedeck.errors import ServedeckError

TABLES_DIR = Path(__file__).resolve().parent / "tables"


class ServeArg(BaseModel):
    """One ``vllm serve`` argparse action.

    Attributes:
        options: the option strings vLLM's help shows, as the release documents them, e.g.
            ``["--enable-prefix-caching", "--disable-prefix-caching"]`` (empty for the positional).
        hidden: option strings the parser accepts for this action without showing them in help
            (vLLM 0.33's ``EnableDisableAction``, ``vllm/utils/argparse_utils.py``, keeps
            ``--no-enable-x`` and ``--no-disable-x`` for backwards compatibility).
        dest: argparse dest, e.g. ``max_model_len``.
        type: name of the argparse type function (``int``, ``human_readable_int``,
            ``parse_dataclass``, ...), or None.
        type_wraps: the type functions a wrapper of vLLM's holds, outermost first
            (``optional_type(json.loads)`` → ``["loads"]``); empty for a plain one.
        choices: allowed values, or None.
        default: the default (JSON-able; repr text for objects).
        nargs: argparse nargs (None, ``"?"``, ``"+"``, 0 ...).
        takes_value: False for store_true/false style actions.
        stores: for an action that takes no value, what each of its option strings (shown or
            hidden) stores in ``dest``: ``{"--enable-x": true, "--disable-x": false}``.
        deprecated: True when vLLM marks the flag deprecated.
    """

    model_config = ConfigDict(extra="ignore")

    options: list[str]
    hidden: list[str] = Field(default_factory=list)
    dest: str
    type: str | None = None
    type_wraps: list[str] = Field(default_factory=list)
    choices: list[Any] | None = None
    default: Any = None
    nargs: Any = None
    takes_value: bool = True
    stores: dict[str, Any] = Field(default_factory=dict)
    deprecated: bool = False

    @property
    def accepted(self) -> list[str]:
        """Every option string the parser takes for this action: shown, then hidden."""
        return [*self.options, *self.hidden]

    def stored(self, option: str) -> Any:
        """What ``option`` (one of :attr:`accepted`) stores when it takes no value: from
        :attr:`stores`; for facts extracted without it, the conventions of argparse's
        ``BooleanOptionalAction`` (``--no-x`` stores False) and vLLM 0.33's
        ``EnableDisableAction`` (``--disable-x`` of dest ``enable_x`` stores False)."""
        if option in self.stores:
            return self.stores[option]
        name = self.dest.replace("_", "-")
        if option.startswith("--no-") or (name.startswith("enable-") and option == "--disable-" + name[7:]):
            return False
        return True

    def unsetting(self) -> list[str]:
        """The shown option strings that store False, as the release documents them
        (``--disable-prefix-caching`` in vLLM 0.33, ``--no-enable-prefix-caching`` up to 0.32)."""
        if self.takes_value:
            return []
        return [o for o in self.options if o.startswith("--") and self.stored(o) is False]


class JsonConfig(BaseModel):
    """A JSON-valued flag's config class.

    Attributes:
        class_: the class (dotted name), ``class`` in the file.
        fields: field name → annotation text.
        validation: how vLLM validates the flag's value: ``json`` (``parse_dataclass``:
            ``TypeAdapter(cls).validate_json`` on the text) or ``python`` (the dict of
            ``json.loads`` given to the class); None when not extracted.
        schema_: the class's JSON Schema as pydantic gives it, with the verdicts of vLLM's own
            field validators on probe values (``x-probes``, see
            :func:`servedeck.vllm.introspect.config_schema`); ``schema`` in the file; None when
            not extracted. :mod:`servedeck.vllm.config_values` judges values with it.
    """

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    class_: str = Field(alias="class")
    fields: dict[str, str]
    validation: Literal["json", "python"] | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")


class VllmFacts(BaseModel):
    """Facts of one vLLM release (see the module docstring for where each comes from).

    Attributes:
        vllm_version: ``vllm.__version__``.
        source: where these facts were read (image digest + extractor, or release files).
        allow_abbrev: the parser takes a unique prefix of a long option for the option
            (argparse's ``allow_abbrev``, on in every release so far).
        json_human_numbers: the release expands bare ``80m`` / ``16K`` numbers in the JSON text
            of a config flag before parsing it (``_expand_json_human_readable_numbers``,
            ``vllm/engine/arg_utils.py``, vLLM 0.33).
        serve_args: the argument surface of ``vllm serve``.
        json_configs: dest of a JSON-valued flag → its config class and fields.
        tool_call_parsers, reasoning_parsers, speculative_methods, kv_cache_dtypes: registries.
        env_vars: ``VLLM_*`` variables the release reads; None when not extracted.
    """

    model_config = ConfigDict(extra="ignore")

    vllm_version: str
    source: str = ""
    allow_abbrev: bool = True
    json_human_numbers: bool = False
    serve_args: list[ServeArg] = Field(default_factory=list)
    json_configs: dict[str, JsonConfig] = Field(default_factory=dict)
    tool_call_parsers: list[str] = Field(default_factory=list)
    reasoning_parsers: list[str] = Field(default_factory=list)
    speculative_methods: list[str] = Field(default_factory=list)
    kv_cache_dtypes: list[str] = Field(default_factory=list)
    env_vars: list[str] | None = None

    @functools.cached_property
    def by_option(self) -> dict[str, ServeArg]:
        """Every option string the parser accepts (``--max-model-len``, aliases, hidden
        strings such as vLLM 0.33's ``--no-enable-prefix-caching``) → its action."""
        return {o: a for a in self.serve_args for o in a.accepted}

    def abbreviated(self, name: str) -> list[str]:
        """The long options ``--name`` abbreviates (argparse ``allow_abbrev``: a prefix of
        accepted option strings, ``--max-model`` → ``["--max-model-len"]``); empty when the
        parser takes no abbreviations or ``name`` is an option itself. One: the parser reads it
        as that option; several: argparse exits ("ambiguous option")."""
        option = name if name.startswith("-") else "--" + name
        if not self.allow_abbrev or not option.startswith("--") or option in self.by_option:
            return []
        head = option.split("=", 1)[0]
        return sorted(o for o in self.by_option if o.startswith(head) and o.startswith("--"))

    def option(self, name: str) -> ServeArg | None:
        """The action for ``name`` given without dashes (``max-model-len``) or with them.

        vLLM's ``FlexibleArgumentParser`` also accepts underscores (``--max_model_len``)."""
        if not name.startswith("-"):
            name = ("--" if len(name) > 1 else "-") + name
        hit = self.by_option.get(name)
        if hit is None and "_" in name:
            hit = self.by_option.get(name.replace("_", "-"))
        return hit


def parse_version(text: str) -> tuple[int, int, int]:
    """Parse ``"0.26.1.dev0+g568afb3a1.d20260907.xpu"`` → ``(0, 26, 1)``.

    Raises:
        ServedeckError: when the text does not start with ``MAJOR.MINOR``.
    """
    parts = []
    for piece in text.split(".")[:3]:
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(int(digits))
    if len(parts) < 2:
        raise ServedeckError(f"cannot read a vLLM version from {text!r}",
                             hint="write it as MAJOR.MINOR[.PATCH], e.g. 0.26.1")
    while len(parts) < 3:
        parts.append(0)
    return (parts[0], parts[1], parts[2])


def release_of(text: str | None) -> tuple[int, int, int] | None:
    """:func:`parse_version` of ``text``, or None when ``text`` is None, empty or unreadable."""
    if not text:
        return None
    try:
        return parse_version(text)
    except ServedeckError:
        return None


def load_facts(path: Path) -> VllmFacts:
    """Read one facts JSON file.

    Raises:
        ServedeckError: the file is missing or not a facts document.
    """
    try:
        return VllmFacts.model_validate_json(path.read_bytes())  # parsed by pydantic-core: no dict pass
    except (OSError, ValueError) as exc:
        raise ServedeckError(f"cannot read vLLM facts: {exc}", file=str(path),
                             hint="re-extract them: invoke image-facts IMAGE") from None


def image_vllm_facts(catalog: Any, digest: str | None) -> VllmFacts | None:
    """The extracted facts of image ``digest`` that ``catalog``
    (:class:`servedeck.model.catalog.Catalog`) points at, or None when none were extracted.

    Raises:
        ServedeckError: the entry names a facts file that cannot be read.
    """
    path = catalog.vllm_facts_path(digest)
    return load_facts(path) if path is not None else None


def write_table(facts: VllmFacts) -> Path:
    """Write ``facts`` as the shipped table ``tables/vllm-<MAJOR.MINOR.PATCH>.json`` (atomic);
    returns its path."""
    from servedeck.fsutil import atomic_write
    path = TABLES_DIR / ("vllm-" + ".".join(map(str, parse_version(facts.vllm_version))) + ".json")
    TABLES_DIR.mkdir(parents=True, exist_ok=True)
    atomic_write(path, facts.model_dump_json(indent=1, by_alias=True) + "\n")
    shipped_tables.cache_clear()
    return path


@functools.lru_cache(maxsize=None)
def shipped_tables() -> dict[tuple[int, int, int], VllmFacts]:
    """Every shipped table (``servedeck/vllm/tables/vllm-*.json``) by parsed version."""
    out = {}
    for path in sorted(TABLES_DIR.glob("vllm-*.json")):
        f = load_facts(path)
        out[parse_version(f.vllm_version)] = f
    return dict(sorted(out.items()))


def newest_table(need: str = "serve_args") -> VllmFacts | None:
    """The newest shipped table whose ``need`` field is filled, or None."""
    tables = [f for f in shipped_tables().values() if getattr(f, need)]
    return tables[-1] if tables else None


def bracket(want: tuple[int, int, int], need: str) -> tuple[VllmFacts | None, VllmFacts | None]:
    """The shipped tables with ``need`` filled around release ``want``: (the same release or the
    nearest older one, the nearest newer one); None where there is none."""
    tables = [(v, f) for v, f in shipped_tables().items() if getattr(f, need)]
    older = [f for v, f in tables if v <= want]
    newer = [f for v, f in tables if v > want]
    return (older[-1] if older else None), (newer[0] if newer else None)


@dataclass(frozen=True)
class TableChoice:
    """The vLLM release facts that judge (or spell) an image's command.

    Attributes:
        facts: :class:`VllmFacts`.
        basis: human text naming the release and where its facts come from.
        exact: True when the facts belong to the image itself or to the same vLLM release
            (a rejection is then certain: error); False for the nearest other release (warning).
        newer: for an inexact choice, the nearest NEWER shipped table with the same facts (None
            when there is none): a name it knows may have been added between the two releases,
            so rules do not call it unknown.
    """

    facts: VllmFacts
    basis: str
    exact: bool
    newer: VllmFacts | None = None

    def maybe_added(self, known: Any) -> bool:
        """True when the choice is inexact and ``known(newer_facts)`` holds: the name may exist
        in the image's release (added after the older table's), so it is not judged."""
        return not self.exact and self.newer is not None and bool(known(self.newer))


def table_for(version: str | None, need: str, own: VllmFacts | None = None) -> TableChoice | None:
    """The one selection of the facts for an image, used by the check rules and the renderer.

    Args:
        version: the image's vLLM version (``"0.32.0"``), or None when unknown.
        need: the :class:`VllmFacts` field that must be filled (``serve_args``, ``env_vars``,
            ``json_configs``, ``reasoning_parsers`` ...).
        own: the facts extracted from the image itself (the catalog's, per digest), if any.

    Returns:
        ``own`` when it has ``need``; else the shipped table of the same release; else the
        nearest OLDER shipped table (a newer one would judge names that the image's older
        release still had); None when nothing fits or ``version`` cannot be read.
    """
    if own is not None and getattr(own, need):
        return TableChoice(own, f"vLLM {own.vllm_version} ({own.source})", True)
    if version is None:
        return None
    try:
        want = parse_version(version)
    except ServedeckError:
        return None
    f, newer = bracket(want, need)
    if f is None:
        return None
    exact = parse_version(f.vllm_version) == want
    how = "" if exact else f", the nearest older release with a table, for {version}"
    return TableChoice(f, f"vLLM {f.vllm_version} ({f.source}{how})", exact, None if exact else newer)
