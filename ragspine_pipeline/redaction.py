"""PII redaction of production traces before anything is persisted.

Each PII occurrence in a free-text field is replaced by a typed placeholder and counted per kind:

* ``[EMAIL]``: ``local@domain.tld`` (plus-addressing, subdomains, Unicode letters) by a regular expression
  anchored at a token start, so a long token without ``@`` is scanned once, not once per character.
* ``[IP]``: IPv4 dotted quads and IPv6 (``::`` compression, embedded IPv4) found by a loose pattern and kept
  only when the stdlib :mod:`ipaddress` parses them, so ``1.2.3``, ``12:30:45`` or a MAC address survive.
* ``[CARD]``: 13–19 digits written as one run or in card groupings (fours, or Amex 4-6-5) with spaces or
  dashes, kept only when the Luhn checksum holds, so order numbers, ``1702.0``, ``FY2025`` or
  ``2025-11-20`` survive.
* ``[PHONE]``: Google's ``phonenumbers`` (the libphonenumber port: maintained, pure Python, offline
  metadata, no model download) with ``PhoneNumberMatcher`` at leniency ``VALID``: a match must be a number
  that is valid for its country, which rejects dates, times, years and most bare figures. Numbers written
  with ``+`` and a country code are found in every region; numbers written without one are read in
  :data:`DEFAULT_PHONE_REGION` (``US``, where ``(415) 555-0132`` is read as a number; pass ``phone_region``
  for another market). Only digit runs long enough to hold a valid number are handed to the matcher, which
  keeps figure-dense retrieved context cheap (see :func:`_phone_windows`).

Kinds are applied in the order email, IP, card, phone: an email's digits are never read as a phone, an IP
never as a card, and the placeholders contain no digit so a later kind cannot match them.

Known limits, chosen on purpose: a four-part version ``1.2.3.4`` is a valid IPv4 address and is redacted;
a ten-digit bare figure that happens to be a valid US number (``4155550132``) is redacted as a phone;
national numbers of other countries written without ``+`` (``020 7946 0958``) are not found.

:func:`redact_trace` redacts only the free-text fields of a trace; ids, citations, chunk ids,
versions, tags, numbers and timestamps are copied unchanged.
"""

from __future__ import annotations

import copy
import functools
import ipaddress
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

import phonenumbers
from phonenumbers import COUNTRY_CODES_FOR_NON_GEO_REGIONS, PhoneMetadata

__all__ = ["DEFAULT_PHONE_REGION", "PII_KINDS", "redact_text", "redact_trace"]

DEFAULT_PHONE_REGION = "US"
PII_KINDS = ("EMAIL", "IP", "CARD", "PHONE")

# The lookbehinds anchor every candidate at a token start: a regex engine tries each start position, and
# without them a long run of word characters would be rescanned from every one of its characters.
_EMAIL = re.compile(
    r"(?<![\w.!#$%&'*+/=?^`{|}~-])[\w.!#$%&'*+/=?^`{|}~-]{1,64}"
    r"@(?:[^\W_](?:[\w-]{0,61}[^\W_])?\.)+[^\W\d_]{2,63}(?![\w-])"
)
_IPV4 = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w]|\.\d)")
_IPV6 = re.compile(
    r"(?<![\w:.])(?:[0-9A-Fa-f]{1,4}|(?=:))(?::[0-9A-Fa-f]{0,4}){2,7}"
    r"(?:(?<=:)\d{1,3}(?:\.\d{1,3}){3})?(?![\w:]|\.\d)"
)
# Card numbers as people write them: one run of digits, groups of four split by spaces or dashes (the last
# group may be shorter), or American Express / Diners 4-6-5 / 4-6-4. Looser groupings would let a date
# followed by an order number pass for a card one time in ten (the Luhn odds).
_CARD = re.compile(
    r"(?<![\w+.,-])(?:\d{13,19}|\d{4}(?:[ -]\d{4}){2,3}(?:[ -]\d{1,3})?|\d{4}[ -]\d{6}[ -]\d{4,5})"
    r"(?![\w]|[.,-]\d)"
)
# Digits joined the way people write phone numbers. After a "+" anything phone-like goes; a national number
# opens a parenthesis only at its start ("(415) 555-0132", "1 (415)" is caught by the window padding), so
# "4.2 (2025-11-20)" is two short runs, not one run long enough to be worth parsing.
_PHONE_RUN = re.compile(
    r"\(?[+＋]\s?\(?\d(?:[\s().\-/]{0,4}\d)*"
    r"|\(?\d(?:(?:\)\s?|\s?[.\-/–]\s?|\s{1,2})?\d)*"
)
_PHONE_PAD = 12


def _luhn_valid(digits: str) -> bool:
    """The Luhn check: double every second digit from the right (minus 9 above 9); the sum ends in 0."""
    total = 0
    for position, char in enumerate(reversed(digits)):
        value = int(char)
        if position % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def _is_ip(candidate: str) -> bool:
    # A bare "::" is a valid address but in prose it is punctuation (a C++ scope, a Haskell signature).
    if candidate.strip(":") == "":
        return False
    try:
        ipaddress.ip_address(candidate)
    except ValueError:
        return False
    return True


def _is_card(candidate: str) -> bool:
    return _luhn_valid(candidate.replace(" ", "").replace("-", ""))


def _substitute(
    pattern: re.Pattern[str],
    text: str,
    kind: str,
    counts: Counter[str],
    keep: Callable[[str], bool] | None = None,
) -> str:
    """Replace the matches of ``pattern`` that ``keep`` accepts (all when None) by ``[kind]``; count them."""

    def replace(match: re.Match[str]) -> str:
        if keep is not None and not keep(match.group()):
            return match.group()
        counts[kind] += 1
        return f"[{kind}]"

    return pattern.sub(replace, text)


@functools.cache
def _min_international_digits() -> int:
    """The fewest digits a valid number written with ``+`` can have (country code included, any region).
    From the library's own metadata, so it follows its updates; it loads every region's, so it is only
    asked for when a number is written with ``+``."""
    metadata = [PhoneMetadata.metadata_for_region(code) for code in phonenumbers.SUPPORTED_REGIONS]
    metadata += [PhoneMetadata.metadata_for_nongeo_region(code) for code in COUNTRY_CODES_FOR_NON_GEO_REGIONS]
    return min(
        len(str(md.country_code)) + min(n for n in md.general_desc.possible_length if n > 0)
        for md in metadata
        if md is not None and any(n > 0 for n in md.general_desc.possible_length)
    )


@functools.cache
def _min_national_digits(region: str) -> int:
    """The fewest digits a valid number written without ``+`` in ``region`` can have (an unknown region:
    the matcher only finds numbers written with ``+``, so the international minimum)."""
    home = PhoneMetadata.metadata_for_region(region)
    if home is None:
        return _min_international_digits()
    return min((n for n in home.general_desc.possible_length if n > 0), default=1)


def _phone_windows(text: str, region: str) -> list[tuple[int, int]]:
    """The parts of ``text`` worth handing to ``PhoneNumberMatcher``: digit runs with enough digits, padded.

    The matcher validates every digit group it meets against the metadata (a fraction of a millisecond
    each), so a retrieved context full of dates and figures would cost seconds per trace. A run of digits
    joined by short phone punctuation with fewer digits than the shortest valid number cannot hold one and
    is skipped. Windows are padded so the matcher still sees the characters around a number (it rejects
    numbers glued to letters) and an extension, and overlapping windows are merged.
    """
    windows: list[tuple[int, int]] = []
    for run in _PHONE_RUN.finditer(text):
        digits = sum(map(str.isdigit, run.group()))
        written_with_plus = "+" in run.group()[:2] or "＋" in run.group()[:2]
        if digits < (_min_international_digits() if written_with_plus else _min_national_digits(region)):
            continue
        start, end = max(0, run.start() - _PHONE_PAD), min(len(text), run.end() + _PHONE_PAD)
        if windows and start <= windows[-1][1]:
            windows[-1] = (windows[-1][0], end)
        else:
            windows.append((start, end))
    return windows


def _substitute_phones(text: str, region: str, counts: Counter[str]) -> str:
    pieces: list[str] = []
    end = 0
    for window_start, window_end in _phone_windows(text, region):
        window = text[window_start:window_end]
        for match in phonenumbers.PhoneNumberMatcher(window, region, leniency=phonenumbers.Leniency.VALID):
            pieces += [text[end : window_start + match.start], "[PHONE]"]
            end = window_start + match.end
            counts["PHONE"] += 1
    return "".join(pieces) + text[end:] if pieces else text


def redact_text(text: str, *, phone_region: str = DEFAULT_PHONE_REGION) -> tuple[str, Counter[str]]:
    """``text`` with every email, IP address, payment card and phone number replaced by ``[EMAIL]``,
    ``[IP]``, ``[CARD]`` or ``[PHONE]``, and the number of replacements per kind (kinds with none absent).

    ``phone_region`` is the ISO 3166 region used to read phone numbers written without ``+`` and a
    country code. See the module docstring for what each kind matches and deliberately leaves alone.
    """
    counts: Counter[str] = Counter()
    if not text:
        return text, counts
    text = _substitute(_EMAIL, text, "EMAIL", counts)
    text = _substitute(_IPV6, text, "IP", counts, keep=_is_ip)
    text = _substitute(_IPV4, text, "IP", counts, keep=_is_ip)
    text = _substitute(_CARD, text, "CARD", counts, keep=_is_card)
    text = _substitute_phones(text, phone_region, counts)
    return text, counts


def redact_trace(trace: dict, *, phone_region: str = DEFAULT_PHONE_REGION) -> tuple[dict, Counter[str]]:
    """A copy of ``trace`` with its free-text fields redacted by :func:`redact_text`, and the counts per kind.

    Redacted: ``question`` / ``q``; ``answer`` when it is text; in ``answer`` and ``answer_json`` objects
    their ``claim``, ``support_phrases`` and, for every entry of ``claims``, its ``text`` and
    ``support_phrases``; ``outcome.narrative_answer``, every string at any depth inside
    ``outcome.retrieved_context``, and the ``text`` of every passage of ``contexts``. Every other field
    (ids, citations, versions, tags, numbers, timestamps) is copied unchanged. ``trace`` is not mutated.
    """
    counts: Counter[str] = Counter()

    def clean(value: Any) -> Any:
        """Redact a string, or every string at any depth of a list or object; other values unchanged."""
        if isinstance(value, str):
            redacted, found = redact_text(value, phone_region=phone_region)
            counts.update(found)
            return redacted
        if isinstance(value, list):
            return [clean(item) for item in value]
        if isinstance(value, dict):
            return {key: clean(item) for key, item in value.items()}
        return value

    def clean_fields(obj: dict, fields: tuple[str, ...]) -> None:
        for field in fields:
            if field in obj:
                obj[field] = clean(obj[field])

    redacted = copy.deepcopy(trace)
    clean_fields(redacted, ("question", "q"))
    if isinstance(redacted.get("answer"), str):
        clean_fields(redacted, ("answer",))
    for key in ("answer", "answer_json"):
        answer = redacted.get(key)
        if not isinstance(answer, dict):
            continue
        clean_fields(answer, ("claim", "support_phrases"))
        for claim in answer.get("claims") or ():
            if isinstance(claim, dict):
                clean_fields(claim, ("text", "support_phrases"))
    outcome = redacted.get("outcome")
    if isinstance(outcome, dict):
        clean_fields(outcome, ("narrative_answer", "retrieved_context"))
    contexts = redacted.get("contexts")
    for passage in contexts if isinstance(contexts, list) else ():
        if isinstance(passage, dict):
            clean_fields(passage, ("text",))
    return redacted, counts


def redact_line(text: str) -> str:
    """``text`` redacted (the raw text of a quarantined line: it is persisted too)."""
    return redact_text(text)[0]
