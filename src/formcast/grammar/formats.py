"""String formats (``format`` keyword) as character-level grammar IR.

Each format is a regular language over decoded characters, written as a regex in the ECMA
subset ``regex.py`` understands (full match), plus a programmatic table for leap seconds.
``FORMATS[name].exact`` says whether the language is exactly the format's definition; when it
is looser (hostname IDNA rules), ``loose_reason`` says what the validator still has to check.

Sources: RFC 3339 (date, time, date-time, duration), RFC 5321 (email), RFC 1123 (hostname),
RFC 2673/4291 (ipv4/ipv6), RFC 4122 (uuid), RFC 3986 (uri, uri-reference), RFC 6901
(json-pointer), draft-handrews-relative-json-pointer.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Final

from formcast.grammar.ir import Expr, chars, lit, opt, plus, seq
from formcast.grammar.ir_kinds import CHOICE, LITERAL, SEQ
from formcast.grammar.json_text import union
from formcast.grammar.regex import regex_to_expr

_DEC_OCTET: Final = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
IPV4: Final = rf"{_DEC_OCTET}(?:\.{_DEC_OCTET}){{3}}"
_H16: Final = r"[0-9A-Fa-f]{1,4}"
_LS32: Final = rf"(?:{_H16}:{_H16}|{IPV4})"
IPV6: Final = (
    "(?:"
    rf"(?:{_H16}:){{6}}{_LS32}"
    rf"|::(?:{_H16}:){{5}}{_LS32}"
    rf"|(?:{_H16})?::(?:{_H16}:){{4}}{_LS32}"
    rf"|(?:(?:{_H16}:){{0,1}}{_H16})?::(?:{_H16}:){{3}}{_LS32}"
    rf"|(?:(?:{_H16}:){{0,2}}{_H16})?::(?:{_H16}:){{2}}{_LS32}"
    rf"|(?:(?:{_H16}:){{0,3}}{_H16})?::{_H16}:{_LS32}"
    rf"|(?:(?:{_H16}:){{0,4}}{_H16})?::{_LS32}"
    rf"|(?:(?:{_H16}:){{0,5}}{_H16})?::{_H16}"
    rf"|(?:(?:{_H16}:){{0,6}}{_H16})?::"
    ")"
)
_LABEL: Final = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
HOSTNAME: Final = rf"{_LABEL}(?:\.{_LABEL})*"

# Dates: exact month lengths and Gregorian leap years (divisible by 4, not by 100 unless by 400)
_MD_ANY: Final = r"(?:(?:0[1-9]|1[0-2])-(?:0[1-9]|1[0-9]|2[0-8])|(?:0[13-9]|1[0-2])-(?:29|30)|(?:0[13578]|1[02])-31)"
_LEAP_YEAR: Final = r"(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)"
DATE: Final = rf"(?:[0-9]{{4}}-{_MD_ANY}|{_LEAP_YEAR}-02-29)"

_OFFSET: Final = r"(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
_FRAC: Final = r"(?:\.[0-9]+)?"
TIME_NO_LEAP: Final = rf"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]{_FRAC}{_OFFSET}"

DURATION: Final = (
    r"P(?:(?:[0-9]+D|[0-9]+M(?:[0-9]+D)?|[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?)"
    r"(?:T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S))?"
    r"|T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)"
    r"|[0-9]+W)"
)

_ATEXT: Final = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
_DOT_ATOM: Final = rf"{_ATEXT}+(?:\.{_ATEXT}+)*"
_QUOTED: Final = r'"(?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\[\x20-\x7e])*"'
_DOMAIN: Final = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
EMAIL: Final = rf"(?:{_DOT_ATOM}|{_QUOTED})@(?:{_DOMAIN}|\[{IPV4}\]|\[IPv6:{IPV6}\])"

UUID: Final = r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"

# RFC 3986, ASCII only (non-ASCII must be percent-encoded in a URI)
_PCT: Final = r"%[0-9A-Fa-f]{2}"
_UNRESERVED: Final = r"A-Za-z0-9\-._~"
_SUB_DELIMS: Final = r"!$&'()*+,;="
_PCHAR: Final = rf"(?:[{_UNRESERVED}{_SUB_DELIMS}:@]|{_PCT})"
_SCHEME: Final = r"[A-Za-z][A-Za-z0-9+\-.]*"
_USERINFO: Final = rf"(?:[{_UNRESERVED}{_SUB_DELIMS}:]|{_PCT})*"
_IPVFUTURE: Final = rf"v[0-9A-Fa-f]+\.[{_UNRESERVED}{_SUB_DELIMS}:]+"
_HOST: Final = rf"(?:\[(?:{IPV6}|{_IPVFUTURE})\]|(?:[{_UNRESERVED}{_SUB_DELIMS}]|{_PCT})*)"
_AUTHORITY: Final = rf"(?:{_USERINFO}@)?{_HOST}(?::[0-9]*)?"
_SEGMENT: Final = rf"{_PCHAR}*"
_SEGMENT_NZ: Final = rf"{_PCHAR}+"
_SEGMENT_NZ_NC: Final = rf"(?:[{_UNRESERVED}{_SUB_DELIMS}@]|{_PCT})+"
_PATH_ABEMPTY: Final = rf"(?:/{_SEGMENT})*"
_HIER: Final = (rf"(?://{_AUTHORITY}{_PATH_ABEMPTY}|/(?:{_SEGMENT_NZ}(?:/{_SEGMENT})*)?"
         rf"|{_SEGMENT_NZ}(?:/{_SEGMENT})*|)")
_QUERY: Final = rf"(?:{_PCHAR}|[/?])*"
URI: Final = rf"{_SCHEME}:{_HIER}(?:\?{_QUERY})?(?:#{_QUERY})?"
_RELATIVE: Final = (rf"(?://{_AUTHORITY}{_PATH_ABEMPTY}|/(?:{_SEGMENT_NZ}(?:/{_SEGMENT})*)?"
             rf"|{_SEGMENT_NZ_NC}(?:/{_SEGMENT})*|)")
URI_REFERENCE: Final = rf"(?:{URI}|{_RELATIVE}(?:\?{_QUERY})?(?:#{_QUERY})?)"

JSON_POINTER: Final = r"(?:/(?:[^~/]|~[01])*)*"
RELATIVE_JSON_POINTER: Final = rf"(?:0|[1-9][0-9]*)(?:#|{JSON_POINTER})"


@dataclass(frozen=True)
class Format:
    name: str
    regex: str | None  # full-match regex, or None when built programmatically
    exact: bool = True
    loose_reason: str = ""


FORMATS: Final[dict[str, Format]] = {f.name: f for f in [
    Format("date", DATE),
    Format("time", None),
    Format("date-time", None),
    Format("duration", DURATION),
    Format("email", EMAIL),
    Format("hostname", HOSTNAME, exact=False,
           loose_reason="hostname labels are checked for RFC 1123 syntax only; the 253-character "
                        "total length and IDNA rules for xn-- labels are left to the validator"),
    Format("ipv4", IPV4),
    Format("ipv6", IPV6),
    Format("uuid", UUID),
    Format("uri", URI),
    Format("uri-reference", URI_REFERENCE),
    Format("json-pointer", JSON_POINTER),
    Format("relative-json-pointer", RELATIVE_JSON_POINTER),
]}

# Formats JSON Schema defines that have no grammar here: asserting them needs the validator.
UNSUPPORTED_FORMATS: Final = {
    "idn-email": "internationalised e-mail addresses (RFC 6531) are not compiled",
    "idn-hostname": "IDNA hostnames (RFC 5890) are not compiled",
    "iri": "IRIs (RFC 3987) are not compiled",
    "iri-reference": "IRI references (RFC 3987) are not compiled",
    "uri-template": "URI templates (RFC 6570) are not compiled",
    "regex": "'is a valid ECMA-262 regex' is not a regular language",
}


@cache
def format_expr(name: str) -> Expr | None:
    """The character-level IR of format ``name`` (full match), or None when unknown."""
    fmt = FORMATS.get(name)
    if fmt is None:
        return None
    if name == "time":
        return _time()
    if name == "date-time":
        return seq(regex_to_expr(DATE), chars("Tt"), _time())
    assert fmt.regex is not None
    return regex_to_expr(fmt.regex)


@cache
def _time() -> Expr:
    return union([regex_to_expr(TIME_NO_LEAP), leap_seconds()])


@cache
def leap_seconds() -> Expr:
    """``HH:MM:60`` is only a real time when it is 23:59 in UTC, so the offset that follows is
    fixed by the local time. A table of the 1440 local minutes and their offsets.

    Built with the IR classes directly: the pieces are already in the form ``seq``/``choice``/
    ``union`` would give (every alternative is distinct, no literal is next to another), and
    the first date-time compile in a process would otherwise spend ~10 ms normalising them.
    Every alternative is plain ASCII text and the sets [0-9] and [Zz]: inside a JSON string
    each is spelled as itself, which ``json_strings.format_body`` relies on."""
    frac = opt(seq(lit("."), plus(chars([("0", "9")]))))
    zulu: tuple[Expr, ...] = (chars("Zz"), LITERAL(b"+00:00"), LITERAL(b"-00:00"))
    alts = []
    utc_leap = 23 * 60 + 59
    for local in range(24 * 60):
        diff = (local - utc_leap) % (24 * 60)  # offset = local - UTC, modulo a day
        if diff == 0:
            offsets = zulu
        else:
            neg = 24 * 60 - diff
            offsets = (LITERAL(f"+{diff // 60:02d}:{diff % 60:02d}".encode()),
                       LITERAL(f"-{neg // 60:02d}:{neg % 60:02d}".encode()))
        time = LITERAL(f"{local // 60:02d}:{local % 60:02d}:60".encode())
        alts.append(SEQ((time, frac, CHOICE(offsets))))
    return CHOICE(tuple(alts))
