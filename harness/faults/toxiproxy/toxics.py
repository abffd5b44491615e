"""The toxics of the embedded Toxiproxy-compatible server, and the registry that builds them from JSON.

A toxic is a small dataclass: its integer attributes (the JSON ``attributes`` object, same names and units
as Toxiproxy v2) and a ``pipe`` step that receives one chunk of bytes and passes on what it lets through by
awaiting ``out``.  Three optional hooks cover what is not a per-chunk step: ``start`` (the toxic begins to
affect a link: timers), ``removed`` (the toxic was deleted while the link is open) and ``at_eof`` (the
source closed; the close is about to be passed on).  Everything a toxic may do to its link (wait, keep
per-link state, draw random numbers, close or reset the connection) goes through ``ToxicContext``, which
the link implements (``link.ToxicStub``), so this module does no I/O.

Attributes are integers, except where a toxic's dataclass field is typed ``str`` (only our HTTP-aware
toxics, ``aws_toxics``, have such fields).  A toxic may restrict the streams it can be added to
(``streams``) and draw its toxicity per request instead of per connection (``request_toxicity``: the link
then always applies it and the toxic draws ``ctx.rng.random() < ctx.toxicity`` itself).

``stream`` is Toxiproxy's direction: ``upstream`` is client -> server, ``downstream`` server -> client.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

UPSTREAM = "upstream"
DOWNSTREAM = "downstream"
STREAMS = (UPSTREAM, DOWNSTREAM)

# Attributes are Go int64 in Toxiproxy; we refuse what would not fit, and negative values.
MAX_ATTRIBUTE = 2**63 - 1


@dataclass(slots=True)
class Chunk:
    """Bytes read from a link's source, and when (event-loop time, seconds) they were read."""

    data: bytes
    t: float


Emit = Callable[[Chunk], Awaitable[None]]


class ToxicContext(Protocol):
    """What a toxic may use on the link it is applied to (one per toxic, link and update)."""

    state: dict[str, Any]  # per link; kept when the toxic is updated
    rng: random.Random  # reproducible under the server's -seed
    toxicity: float  # the toxic's toxicity, for toxics that draw it per request

    def now(self) -> float: ...

    async def sleep_until(self, deadline: float) -> None:
        """Wait until loop time ``deadline``; returns at once when the toxic is removed or updated."""

    def call_later(self, seconds: float, callback: Callable[[], None]) -> None:
        """Run ``callback`` after ``seconds`` unless the toxic is removed or updated first."""

    def close(self) -> None:
        """Close the whole connection gracefully (what Toxiproxy's ``stub.Close()`` amounts to)."""

    def reset(self) -> None:
        """Abort the whole connection with a TCP RST on both sides."""

    async def reply(self, data: bytes) -> None:
        """Send ``data`` back to the peer this link reads from (an upstream link's client)."""

    def delay_reply(self, seconds: float) -> None:
        """Hold the other direction's next bytes ``seconds`` after they arrive (the answer to what this
        link just passed on), and what follows them until then."""

    def release_replies(self) -> None:
        """Let held bytes of the other direction through now."""


class Toxic:
    """Base of every toxic: pass-through.  Subclasses are dataclasses of int (or str) attributes."""

    type_name: ClassVar[str] = ""
    streams: ClassVar[tuple[str, ...]] = STREAMS  # the streams it may be added to
    request_toxicity: ClassVar[bool] = False  # toxicity drawn per request by the toxic, not per link

    def validate(self) -> None:
        """Raise ValueError naming the bad attribute."""

    async def pipe(self, chunk: Chunk, out: Emit, ctx: ToxicContext) -> None:
        await out(chunk)

    def start(self, ctx: ToxicContext) -> None:
        """The toxic starts affecting a link (connection accepted, toxic added, or updated)."""

    def removed(self, ctx: ToxicContext) -> None:
        """The toxic was deleted while this link was open and affected by it."""

    async def at_eof(self, ctx: ToxicContext) -> None:
        """The link's source closed; the close goes on when this returns."""

    def attributes(self) -> dict[str, int | str]:
        return dataclasses.asdict(self)  # type: ignore[call-overload, no-any-return]


TOXIC_TYPES: dict[str, type[Toxic]] = {}


def register(cls: type[Toxic]) -> type[Toxic]:
    TOXIC_TYPES[cls.type_name] = cls
    return cls


class UnknownToxicType(LookupError):
    """No toxic of that type is registered."""


def build_toxic(type_name: str, attributes: object, base: Toxic | None = None) -> Toxic:
    """A toxic of ``type_name`` from a JSON ``attributes`` value, over ``base``'s values when updating.

    Unknown attribute names are ignored, as Go's JSON decoding does; values must be non-negative integers
    (strings for ``str`` fields).  Raises UnknownToxicType, or ValueError with a precise message.
    """
    cls = TOXIC_TYPES.get(type_name)
    if cls is None:
        raise UnknownToxicType(type_name)
    if attributes is None:
        attributes = {}
    if not isinstance(attributes, dict):
        raise ValueError(f"attributes must be an object, got {attributes!r}")
    values: dict[str, int | str] = base.attributes() if base is not None else {}
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        if field.name not in attributes:
            continue
        value = attributes[field.name]
        if field.type in ("str", str):
            if not isinstance(value, str):
                raise ValueError(f"attribute {field.name!r} of {type_name} must be a string, got {value!r}")
            values[field.name] = value
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"attribute {field.name!r} of {type_name} must be an integer, got {value!r}")
        if not 0 <= value <= MAX_ATTRIBUTE:
            raise ValueError(f"attribute {field.name!r} of {type_name} must be >= 0 and fit in int64")
        values[field.name] = value
    toxic = cls(**values)
    toxic.validate()
    return toxic


@dataclass
class ProxyToxic:
    """A toxic as configured on a proxy (Toxiproxy's ToxicWrapper): what the API shows."""

    name: str
    type: str
    stream: str
    toxicity: float
    toxic: Toxic
    generation: int = 0  # bumped on every update, so an updated toxic draws its toxicity afresh

    def to_json(self) -> dict[str, Any]:
        return {
            "attributes": self.toxic.attributes(),
            "name": self.name,
            "type": self.type,
            "stream": self.stream,
            "toxicity": self.toxicity,
        }


@register
@dataclass
class Latency(Toxic):
    """Delays every chunk by ``latency`` +/- ``jitter`` ms after it was read (pipelined: no accumulation)."""

    type_name: ClassVar[str] = "latency"
    latency: int = 0
    jitter: int = 0

    async def pipe(self, chunk: Chunk, out: Emit, ctx: ToxicContext) -> None:
        delay_ms = self.latency
        if self.jitter > 0:
            delay_ms += ctx.rng.randrange(-self.jitter, self.jitter)
        await ctx.sleep_until(chunk.t + delay_ms / 1000.0)
        await out(Chunk(chunk.data, ctx.now()))


@register
@dataclass
class Bandwidth(Toxic):
    """Limits the link to ``rate`` KB/s (1 KB = 1000 bytes, as Toxiproxy); 0 means no limit."""

    type_name: ClassVar[str] = "bandwidth"
    rate: int = 0

    async def pipe(self, chunk: Chunk, out: Emit, ctx: ToxicContext) -> None:
        if self.rate <= 0:
            await out(chunk)
            return
        piece_size = self.rate * 100  # what 100 ms carries: large chunks go out in 100 ms pieces
        data = chunk.data
        for offset in range(0, len(data), piece_size):
            piece = data[offset : offset + piece_size]
            due = max(ctx.now(), ctx.state.get("due", 0.0)) + len(piece) / (self.rate * 1000.0)
            ctx.state["due"] = due
            await ctx.sleep_until(due)
            await out(Chunk(piece, chunk.t))


@register
@dataclass
class SlowClose(Toxic):
    """Holds the close of the link for ``delay`` ms after its source closed."""

    type_name: ClassVar[str] = "slow_close"
    delay: int = 0

    async def at_eof(self, ctx: ToxicContext) -> None:
        await ctx.sleep_until(ctx.now() + self.delay / 1000.0)


@register
@dataclass
class Timeout(Toxic):
    """Drops all data; closes the connection after ``timeout`` ms, or never when 0 (a black hole).

    As in Toxiproxy, removing the toxic closes the connections it affected: the bytes it dropped are gone,
    so the stream cannot go on.  New connections flow normally once it is removed.
    """

    type_name: ClassVar[str] = "timeout"
    timeout: int = 0

    async def pipe(self, chunk: Chunk, out: Emit, ctx: ToxicContext) -> None:
        return  # dropped on the floor

    def start(self, ctx: ToxicContext) -> None:
        if self.timeout > 0:
            ctx.call_later(self.timeout / 1000.0, ctx.close)

    def removed(self, ctx: ToxicContext) -> None:
        ctx.close()


@register
@dataclass
class ResetPeer(Toxic):
    """On the first data after it applies, waits ``timeout`` ms, then resets the connection (TCP RST)."""

    type_name: ClassVar[str] = "reset_peer"
    timeout: int = 0

    async def pipe(self, chunk: Chunk, out: Emit, ctx: ToxicContext) -> None:
        deadline = ctx.now() + self.timeout / 1000.0
        await ctx.sleep_until(deadline)
        if ctx.now() >= deadline:
            ctx.reset()
        else:  # removed while waiting: let the data through
            await out(chunk)


@register
@dataclass
class Slicer(Toxic):
    """Cuts chunks into pieces of ``average_size`` +/- ``size_variation`` bytes, ``delay`` us apart."""

    type_name: ClassVar[str] = "slicer"
    average_size: int = 0
    size_variation: int = 0
    delay: int = 0

    def validate(self) -> None:
        if self.average_size < 1:
            raise ValueError("attribute 'average_size' of slicer must be at least 1")

    def _cuts(self, start: int, end: int, rng: random.Random, cuts: list[int]) -> None:
        """Append the end offsets of the pieces of data[start:end], halving around the middle with noise."""
        if (end - start) - self.average_size <= self.size_variation:
            cuts.append(end)
            return
        noise = rng.randrange(-self.size_variation, self.size_variation) if self.size_variation else 0
        middle = min(max(start + (end - start) // 2 + noise, start + 1), end - 1)
        self._cuts(start, middle, rng, cuts)
        self._cuts(middle, end, rng, cuts)

    async def pipe(self, chunk: Chunk, out: Emit, ctx: ToxicContext) -> None:
        cuts: list[int] = []
        self._cuts(0, len(chunk.data), ctx.rng, cuts)
        start = 0
        for end in cuts:
            await out(Chunk(chunk.data[start:end], chunk.t))
            start = end
            await ctx.sleep_until(ctx.now() + self.delay / 1_000_000.0)


@register
@dataclass
class LimitData(Toxic):
    """Lets ``bytes`` bytes through on this link, then closes the connection."""

    type_name: ClassVar[str] = "limit_data"
    bytes: int = 0

    async def pipe(self, chunk: Chunk, out: Emit, ctx: ToxicContext) -> None:
        sent: int = ctx.state.get("sent", 0)
        allowed = chunk.data[: max(self.bytes - sent, 0)]
        if allowed:
            await out(Chunk(allowed, chunk.t))
            sent += len(allowed)
            ctx.state["sent"] = sent
        if sent >= self.bytes:
            ctx.close()
