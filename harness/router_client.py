"""Requests to the router, and the error text of its answers.

The local adapter (``fleet.router_http``) takes plain HTTP.  A deployed API Gateway (``terraform/``) requires
IAM auth: every request is signed with SigV4 for the ``execute-api`` service, with credentials from the
standard chain (environment, shared files with ``profile``, instance or task roles), by botocore's signer.
A URL whose host is ``<api>.execute-api.<region>.amazonaws.com`` is signed by default, in the host's region;
``sign=True`` signs any other URL (a custom domain in front of the API: then the region must be given).

API Gateway answers its own refusals with ``{"message": ...}``; the router with ``{"error": ...}``.
``error_text`` reads either, so a refused request prints why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

EXECUTE_API_HOST = re.compile(r"^[a-z0-9]+\.execute-api\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?$")
SERVICE = "execute-api"


class SigningError(Exception):
    """A request to sign could not be: no credentials, or no region; the message says what to give."""


@dataclass(frozen=True)
class Signer:
    """Signs requests to one API with SigV4 (``execute-api``) in ``region``."""

    region: str
    credentials: Any  # botocore.credentials.Credentials

    def headers(self, method: str, url: str, body: bytes | None, headers: dict[str, str]) -> dict[str, str]:
        """``headers`` plus the signature's (Authorization, X-Amz-Date, X-Amz-Security-Token for a session)."""
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        request = AWSRequest(method=method, url=url, data=body or b"", headers=dict(headers))
        SigV4Auth(self.credentials, SERVICE, self.region).add_auth(request)
        return dict(request.headers.items())


def execute_api_region(url: str) -> str | None:
    """The region of an API Gateway default endpoint URL; None for any other host."""
    match = EXECUTE_API_HOST.match((urlsplit(url).hostname or "").lower())
    return match.group(1) if match else None


def signer_for(url: str, sign: bool | None = None, region: str | None = None,
               profile: str | None = None) -> Signer | None:
    """The signer for requests to ``url``: None when not signing (``sign`` None: sign an API Gateway default
    endpoint only).  ``region`` overrides the host's; ``profile`` names a shared-credentials profile."""
    host_region = execute_api_region(url)
    if sign is False or (sign is None and host_region is None):
        return None
    chosen = region or host_region
    if not chosen:
        raise SigningError(f"cannot sign requests to {url}: its host names no region; give --region")
    import botocore.session
    from botocore.exceptions import BotoCoreError

    try:
        credentials = botocore.session.Session(profile=profile).get_credentials()
    except BotoCoreError as exc:  # e.g. a profile that does not exist
        raise SigningError(f"cannot sign requests to {url}: {exc}") from None
    if credentials is None:
        raise SigningError(f"cannot sign requests to {url}: no AWS credentials found (environment, shared "
                           "credentials file, or a role); name a profile with --aws-profile")
    return Signer(chosen, credentials)


def error_text(payload: Any) -> str:
    """Why an answer refused the request: the router's ``error``, API Gateway's ``message``, else the body."""
    if isinstance(payload, dict):
        for key in ("error", "message", "Message"):
            if isinstance(payload.get(key), str):
                return str(payload[key])
    return "no reason given" if payload is None else str(payload)
