"""Text for a person at a terminal or in a notebook, said the same by the CLI and the magics.

Terminal-safe text (:func:`plain`), ids and stores (:func:`id_arg`,
:func:`store_arg`), list limits (:func:`limit_arg`), seconds
and counts (:func:`seconds_arg`, :func:`count_arg`), and the refusal of a
second answer naming who gave the first (:func:`already_answered`).
"""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

from iterion_nb.errors import StoreError
from iterion_nb.store.location import check_store_spec

#: The most runs one listing returns (REST ``?limit=``, ``runs list --limit``, ``%iterion runs``).
MAX_LIST_LIMIT = 10_000
#: The longest timeout an option takes (about 31 years; leave it out to wait without end).
MAX_SECONDS = 999_999_999

# C0 and C1 controls, DEL, and the marks that reorder text on screen (bidi overrides)
CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def plain(text: Any) -> str:
    r"""``text`` for a terminal: control characters shown escaped (``\x1b``, ``\n``).

    Kept on one line, and unable to move the cursor, recolour the terminal
    or set its title; ``--json`` output is not passed through this.
    """
    return CONTROLS.sub(_escaped, str(text))


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


#: A lone surrogate: how Python holds a byte that is not UTF-8 (from a terminal, a file name).
SURROGATES = re.compile("[\ud800-\udfff]")


def clean_text(text: Any) -> bool:
    """Whether ``text`` is a str a store can keep and a screen shows as it is.

    UTF-8 (no lone surrogate) and no control character (see :data:`CONTROLS`).
    """
    return isinstance(text, str) and not CONTROLS.search(text) and not SURROGATES.search(text)


def id_arg(text: str) -> str:
    """A run or question id (or a name such as ``--as``): UTF-8 text, no control characters.

    A byte that is not UTF-8 reaches Python as a lone surrogate, which no store
    can look up or keep: refused here, with the bytes shown, before a store opens
    (the CLI's arguments and the magics' alike).
    """
    if not text:
        raise argparse.ArgumentTypeError("must not be empty")
    if SURROGATES.search(text):
        shown = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        raise argparse.ArgumentTypeError(f"is not UTF-8 text: '{plain(shown)}'")
    if CONTROLS.search(text):
        raise argparse.ArgumentTypeError(f"holds a control character: '{plain(text)}'")
    return text


def store_arg(text: str) -> str:
    """``--store``: a path or URL, not nothing (as an unset ``$VARIABLE`` gives), well formed."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            "is empty: name a store (a path or a postgresql:// URL); was a variable unset?"
        )
    try:
        check_store_spec(text)
    except StoreError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    except ValueError:  # never argparse's "invalid value: '…'", which shows a password
        raise argparse.ArgumentTypeError("cannot be read as a store's path or URL") from None
    return text


def clip(text: str, width: int = 200) -> str:
    """``text`` cut to ``width`` characters, saying so (``--json`` shows it whole)."""
    return text if len(text) <= width else text[: width - 1] + "…"


def limit_arg(text: str) -> int:
    """``--limit``: a whole number from 1 to :data:`MAX_LIST_LIMIT`."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_LIST_LIMIT:
        raise argparse.ArgumentTypeError(
            f"must be a whole number from 1 to {MAX_LIST_LIMIT:,}, not {text!r}"
        )
    return value


def seconds_arg(text: str) -> float:
    """A timeout in seconds, more than 0 (``runs follow --timeout``, ``%iterion wait``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0:  # (NaN too)
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got {text}")
    if value > MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"at most {MAX_SECONDS:,} seconds, got {text}")
    return value


def count_arg(text: str) -> int:
    """A count to wait for (``%iterion questions --wait N``): a whole number, 0 or more."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a whole number, 0 or more, not {text!r}")
    return value


def already_answered(question: dict[str, Any]) -> str:
    """A second answer's refusal: who answered the question (as the REST API shows it), and what."""
    given = question["answers"]
    if isinstance(given, str):
        # the option's id, as `(options: formal|casual)` lists them and the record holds it,
        # then its label when that differs
        labels = {o["id"]: o["label"] for o in question.get("options") or []}
        label = labels.get(given)
        shown = repr(clip(given)) + (f" ({clip(label)!r})" if label and label != given else "")
    else:
        shown = clip(json.dumps(given, ensure_ascii=False))
    who, shown = plain(question.get("answered_by") or "someone"), plain(shown)
    return f"question '{question['id']}' is already answered by {who}: {shown} — nothing sent"
