"""A TLS client certificate's subject as a principal name (Kafka's ``SslPrincipalMapper`` and
the X.500 name Java prints with ``X500Principal.getName()``).

``ssl.principal.mapping.rules`` is a comma-separated list, tried in order; the first rule that
applies gives the name:

    DEFAULT                          the distinguished name as it is
    RULE:pattern/replacement/        when ``pattern`` matches the whole DN, the DN with every
    RULE:pattern/replacement/L       match of ``pattern`` replaced (Java's ``replaceAll``:
    RULE:pattern/replacement/U       ``$1`` is a group, ``\\`` escapes), lower- or upper-cased

A rule that does not parse is refused when the listener starts (``Invalid rule: ...``, Kafka's
message); a DN that no rule maps fails that connection's authentication (``No rules apply to
...``), as Kafka's principal builder fails it.

The DN is RFC 2253 as Java writes it: RDNs most specific first (``CN=alice,OU=eng,O=acme,C=US``),
the keywords CN, C, L, ST, O, OU, STREET, DC and UID by name, any other attribute as its dotted
OID with ``#`` and the hex of its DER value (``1.2.840.113549.1.9.1=#16...`` for an e-mail
address), the characters ``,+"\\<>;`` escaped with a backslash, as are a leading ``#`` or space
and a trailing space.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.x509.name import _ASN1Type
from cryptography.x509.oid import NameOID

from storage_core.errors import InvalidConfigError

DEFAULT_SSL_PRINCIPAL_MAPPING_RULES = "DEFAULT"
MAX_RULES = 1_000

_RULE_PATTERN = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE_PATTERN + r")\s*(,\s*|$)")
_RULE_PARSER = re.compile(_RULE_PATTERN)
_BACK_REFERENCE = re.compile(r"\$(\d+)")

_RFC2253_KEYWORDS = {
    NameOID.COMMON_NAME: "CN",
    NameOID.COUNTRY_NAME: "C",
    NameOID.LOCALITY_NAME: "L",
    NameOID.STATE_OR_PROVINCE_NAME: "ST",
    NameOID.ORGANIZATION_NAME: "O",
    NameOID.ORGANIZATIONAL_UNIT_NAME: "OU",
    NameOID.STREET_ADDRESS: "STREET",
    NameOID.DOMAIN_COMPONENT: "DC",
    NameOID.USER_ID: "UID",
}
_ESCAPED = frozenset(',+"\\<>;')


class InvalidSslPrincipalMappingRuleError(InvalidConfigError):
    """``ssl.principal.mapping.rules`` holds a rule that does not parse."""


class NoMatchingRuleError(Exception):
    """No rule of ``ssl.principal.mapping.rules`` maps a certificate's DN."""


@dataclass(frozen=True, slots=True)
class _Rule:
    is_default: bool
    pattern: re.Pattern[str] | None = None
    replacement: str = ""
    to_lower_case: bool = False
    to_upper_case: bool = False

    def apply(self, distinguished_name: str) -> str | None:
        if self.is_default or self.pattern is None:
            return distinguished_name
        if self.pattern.fullmatch(distinguished_name) is None:
            return None
        replacement = _escape_literal_back_references(self.replacement, self.pattern.groups)
        result = self.pattern.sub(
            lambda m: _expand_java_replacement(replacement, m), distinguished_name
        )
        if self.to_lower_case:
            return result.lower()
        if self.to_upper_case:
            return result.upper()
        return result

    def __str__(self) -> str:
        if self.is_default:
            return "DEFAULT"
        text = f"RULE:{self.pattern.pattern if self.pattern else ''}/{self.replacement}"
        return text + ("/L" if self.to_lower_case else "/U" if self.to_upper_case else "")


class SslPrincipalMapper:
    """The parsed ``ssl.principal.mapping.rules``. Immutable; safe to share between threads."""

    def __init__(self, rules: str | None = None) -> None:
        self._rules = _parse_rules(_split_rules(rules))

    def get_name(self, distinguished_name: str) -> str:
        """The principal name for ``distinguished_name``; ``NoMatchingRuleError`` if none."""
        for rule in self._rules:
            name = rule.apply(distinguished_name)
            if name is not None:
                return name
        rules = "[" + ", ".join(str(r) for r in self._rules) + "]"
        raise NoMatchingRuleError(f"No rules apply to {distinguished_name}, rules {rules}")

    def __str__(self) -> str:
        return "SslPrincipalMapper(rules = [" + ", ".join(str(r) for r in self._rules) + "])"


def _split_rules(text: str | None) -> list[str]:
    if text is None:
        text = DEFAULT_SSL_PRINCIPAL_MAPPING_RULES
    rules = [m.group(1) for m in _RULE_SPLITTER.finditer(text.strip())]
    if len(rules) > MAX_RULES:
        raise InvalidSslPrincipalMappingRuleError(
            f"ssl.principal.mapping.rules holds {len(rules)} rules; at most {MAX_RULES}"
        )
    return rules


def _parse_rules(rules: list[str]) -> list[_Rule]:
    parsed = []
    for rule in rules:
        match = _RULE_PARSER.match(rule)
        if match is None:
            raise InvalidSslPrincipalMappingRuleError(f"Invalid rule: {rule}")
        if match.end() != len(rule):
            raise InvalidSslPrincipalMappingRuleError(
                f"Invalid rule: `{rule}`, unmatched substring: `{rule[match.end() :]}`"
            )
        if match.group(1) is not None:
            parsed.append(_Rule(is_default=True))
        elif match.group(2) is not None:
            try:
                pattern = re.compile(match.group(2))
            except re.error as error:
                raise InvalidSslPrincipalMappingRuleError(
                    f"Invalid rule: `{rule}`: the pattern does not compile: {error}"
                ) from None
            parsed.append(
                _Rule(
                    is_default=False,
                    pattern=pattern,
                    replacement=match.group(4),
                    to_lower_case=match.group(6) == "L",
                    to_upper_case=match.group(6) == "U",
                )
            )
        # an empty rule is ignored
    return parsed


def _escape_literal_back_references(unescaped: str, groups: int) -> str:
    """Kafka's (from NiFi): a ``$n`` naming a group the pattern lacks stays literal text."""
    if groups == 0:
        return unescaped
    value = unescaped
    for match in _BACK_REFERENCE.finditer(unescaped):
        number = match.group(1)
        if number.startswith("0"):
            continue
        index = int(number)
        while index > groups and index >= 10:
            index //= 10
        if index > groups:
            start = value.find("$" + number)
            value = value[:start] + "\\" + value[start:]
    return value


def _expand_java_replacement(replacement: str, match: re.Match[str]) -> str:
    """Java's ``Matcher.appendReplacement``: ``\\x`` is ``x``, ``$n`` is group n (the longest
    number that names a group)."""
    out: list[str] = []
    groups = match.re.groups
    i = 0
    while i < len(replacement):
        char = replacement[i]
        if char == "\\" and i + 1 < len(replacement):
            out.append(replacement[i + 1])
            i += 2
        elif char == "$" and i + 1 < len(replacement) and replacement[i + 1].isdigit():
            number = int(replacement[i + 1])
            i += 2
            while i < len(replacement) and replacement[i].isdigit():
                longer = number * 10 + int(replacement[i])
                if longer > groups:
                    break
                number = longer
                i += 1
            if number > groups:
                raise NoMatchingRuleError(f"No group {number} in {match.re.pattern}")
            out.append(match.group(number) or "")
        else:
            out.append(char)
            i += 1
    return "".join(out)


# ---------------------------------------------------------------------------- distinguished names
def distinguished_name(der_certificate: bytes) -> str:
    """The certificate's subject in RFC 2253 as Java's ``X500Principal.getName()`` prints it."""
    subject = x509.load_der_x509_certificate(der_certificate).subject
    return ",".join("+".join(_attribute(a) for a in rdn) for rdn in reversed(list(subject.rdns)))


def _attribute(attribute: x509.NameAttribute[Any]) -> str:
    keyword = _RFC2253_KEYWORDS.get(attribute.oid)
    value = attribute.value
    if keyword is None or not isinstance(value, str):
        return f"{attribute.oid.dotted_string}=#{_der_value(attribute).hex()}"
    return f"{keyword}={_escape(value)}"


def _escape(value: str) -> str:
    out = []
    for index, char in enumerate(value):
        if (
            char in _ESCAPED
            or (index == 0 and char in "# ")
            or (index == len(value) - 1 and char == " ")
        ):
            out.append("\\" + char)
        else:
            out.append(char)
    return "".join(out)


def _der_value(attribute: x509.NameAttribute[Any]) -> bytes:
    value = attribute.value
    if isinstance(value, bytes):
        body, tag = value, 0x03
    else:
        asn1_type = getattr(attribute, "_type", _ASN1Type.UTF8String)
        body, tag = value.encode("utf-8"), int(asn1_type.value)
        if asn1_type is _ASN1Type.BMPString:
            body = value.encode("utf-16-be")
    length = len(body)
    if length < 0x80:
        encoded_length = bytes([length])
    else:
        size = length.to_bytes((length.bit_length() + 7) // 8, "big")
        encoded_length = bytes([0x80 | len(size)]) + size
    return bytes([tag]) + encoded_length + body
