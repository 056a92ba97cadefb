"""How YAML 1.1 readers resolve plain scalars, for quoting decisions and the yaml11 rules.

Docker Compose's Go YAML reader, PyYAML (``safe_load``, which the exl3xpu launcher uses for
``--set`` values) and many tools still apply YAML 1.1 implicit typing, where ``yes``/``on``
are booleans, ``22:22`` is a base-60 integer (1342) and ``0123`` is octal. The regular
expressions are the YAML 1.1 type repository's (yaml.org/type/{bool,int,float,null,timestamp},
2005), as implemented by PyYAML's ``resolver.py`` (6.0).
"""

from __future__ import annotations

import re

_BOOL_11 = re.compile(r"^(?:yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF|y|Y|n|N)$")
_INT_11 = re.compile(r"""^(?:[-+]?0b[0-1_]+
    |[-+]?0[0-7_]+
    |[-+]?(?:0|[1-9][0-9_]*)
    |[-+]?0x[0-9a-fA-F_]+
    |[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+)$""", re.X)
_FLOAT_11 = re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?
    |\.[0-9_]+(?:[eE][-+][0-9]+)?
    |[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""", re.X)
_NULL = re.compile(r"^(?:~|null|Null|NULL|)$")
_TIMESTAMP = re.compile(r"^(?:[0-9]{4}-[0-9]{2}-[0-9]{2}"
                        r"|[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}(?:[Tt]|[ \t]+)[0-9]{1,2}:[0-9]{2}:[0-9]{2}"
                        r"(?:\.[0-9]*)?(?:[ \t]*(?:Z|[-+][0-9]{1,2}(?::[0-9]{2})?))?)$")
_SEXAGESIMAL = re.compile(r"^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$")
# YAML 1.2 core schema
_BOOL_12 = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_INT_12 = re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$")
_FLOAT_12 = re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                       r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$")
# characters that keep a plain scalar plain in flow and block context for our values
_PLAIN_SAFE = re.compile(r"^[A-Za-z0-9_./@+\-][A-Za-z0-9_./@+:=,\-]*$")


def yaml11_type(text: str) -> str:
    """The type a YAML 1.1 reader gives the plain scalar ``text``:
    ``bool``, ``int``, ``float``, ``null``, ``timestamp`` or ``str``."""
    if _BOOL_11.match(text):
        return "bool"
    if _NULL.match(text):
        return "null"
    if _INT_11.match(text):
        return "int"
    if _FLOAT_11.match(text):
        return "float"
    if _TIMESTAMP.match(text):
        return "timestamp"
    return "str"


def yaml12_type(text: str) -> str:
    """The type a YAML 1.2 core-schema reader gives the plain scalar ``text``."""
    if _BOOL_12.match(text):
        return "bool"
    if _NULL.match(text):
        return "null"
    if _INT_12.match(text):
        return "int"
    if _FLOAT_12.match(text):
        return "float"
    return "str"


def is_sexagesimal(text: str) -> bool:
    """True for ``22:22``-style base-60 numbers (YAML 1.1 reads ``2122:22`` as 127342)."""
    return bool(_SEXAGESIMAL.match(text))


def plain_is_string(text: str) -> bool:
    """True when ``text`` can be written as a plain (unquoted) scalar and every YAML 1.1
    and 1.2 reader reads it back as the same string."""
    return (bool(_PLAIN_SAFE.match(text)) and yaml11_type(text) == "str"
            and yaml12_type(text) == "str" and not text.startswith("-") or
            (text.startswith("--") and bool(_PLAIN_SAFE.match(text))))
