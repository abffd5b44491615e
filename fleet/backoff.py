"""Reconnect backoff: the delay before each retry, under a policy chosen by name.

The policies are the formulas of the AWS Architecture Blog's "Exponential Backoff and Jitter" (Marc
Brooker), over a base and a cap, with ``n`` the retries since the last success (0 for the first) and
``v = min(cap, base·2^n)`` the exponential ceiling:

- ``none``: no backoff, every retry waits the base (the published design's fixed delay; the blog's
  "no backoff" retries at once);
- ``exponential``: ``v``, without jitter;
- ``full`` (full jitter): ``uniform(0, v)``;
- ``equal`` (equal jitter): ``v/2 + uniform(0, v/2)``;
- ``decorrelated`` (decorrelated jitter): ``min(cap, uniform(base, previous·3))``, ``previous`` being
  this policy's last delay (the base before the first).

Each policy is a pure function of a ``Step`` and a ``random.Random`` handed in: no clock is read, so a
seeded generator replays its draws exactly.  ``Backoff`` keeps the state between retries and honours the
upstream's ``Retry-After``: a retry waits at least what the upstream asked for, capped at the cap, and never
less than the policy's own delay.  ``fleet.connection`` reconnects with it; ``fleet.profiles`` says which
policy a profile takes when the setting leaves it to the profile.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from fleet.errors import ConfigError

# The exponent stops here: any cap is reached long before, and 2.0 ** 1024 overflows a float.
MAX_EXPONENT = 64


@dataclass(frozen=True)
class Step:
    """What a policy decides from: the retry number ``attempt`` (0 for the first since the last success),
    the policy's previous delay ``previous_s`` (the base before the first), the base and the cap."""

    attempt: int
    previous_s: float
    base_s: float
    cap_s: float

    @property
    def ceiling_s(self) -> float:
        """The exponential ceiling ``min(cap, base·2^attempt)``."""
        return min(self.cap_s, self.base_s * 2.0 ** min(self.attempt, MAX_EXPONENT))


Policy = Callable[[Step, random.Random], float]


def fixed(step: Step, rng: random.Random) -> float:
    return step.base_s


def exponential(step: Step, rng: random.Random) -> float:
    return step.ceiling_s


def full_jitter(step: Step, rng: random.Random) -> float:
    return rng.uniform(0.0, step.ceiling_s)


def equal_jitter(step: Step, rng: random.Random) -> float:
    half = step.ceiling_s / 2
    return half + rng.uniform(0.0, half)


def decorrelated_jitter(step: Step, rng: random.Random) -> float:
    return min(step.cap_s, rng.uniform(step.base_s, step.previous_s * 3))


POLICIES: Mapping[str, Policy] = {
    "none": fixed,
    "exponential": exponential,
    "full": full_jitter,
    "equal": equal_jitter,
    "decorrelated": decorrelated_jitter,
}


def honour_retry_after(delay_s: float, retry_after_s: float | None, cap_s: float) -> float:
    """The policy's ``delay_s``, raised to what the upstream asked for (capped at ``cap_s``) if it asked."""
    if retry_after_s is None:
        return delay_s
    return max(delay_s, min(retry_after_s, cap_s))


class Backoff:
    """The delays before successive retries under the policy ``name``; ``reset`` after a success."""

    def __init__(self, name: str, base_s: float, cap_s: float, rng: random.Random) -> None:
        if name not in POLICIES:
            raise ConfigError(f"unknown reconnect policy {name!r}: one of {', '.join(POLICIES)}")
        self.name = name
        self.policy = POLICIES[name]
        self.base_s = base_s
        self.cap_s = cap_s
        self.rng = rng
        self.attempt = 0
        self.previous_s = base_s

    def next_delay(self, retry_after_s: float | None = None) -> float:
        """The delay before the next retry; ``retry_after_s``: what the upstream asked for, if it did."""
        delay = self.policy(Step(self.attempt, self.previous_s, self.base_s, self.cap_s), self.rng)
        self.attempt += 1
        self.previous_s = delay
        return honour_retry_after(delay, retry_after_s, self.cap_s)

    def reset(self) -> None:
        self.attempt = 0
        self.previous_s = self.base_s
