"""Credentials never reach a manifest, a log line or an error message."""

from __future__ import annotations

import re

_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.\-]*://)(?P<user>[^:/@\s]*)(?::[^@/\s]*)?@")
_PASSWORD_KV = re.compile(r"(password\s*=\s*)(\S+)", re.IGNORECASE)


def redact(uri: str) -> str:
    """`mongodb://bob:secret@host` -> `mongodb://bob:***@host`; `password=x` -> `password=***`."""
    def _userinfo(m: re.Match) -> str:
        has_password = ":" in m.group(0)[len(m.group("scheme")) :].rstrip("@")
        return f"{m.group('scheme')}{m.group('user')}{':***' if has_password else ''}@"

    return _PASSWORD_KV.sub(r"\1***", _USERINFO.sub(_userinfo, uri))
