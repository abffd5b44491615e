"""An embedded server speaking the Toxiproxy v2 HTTP API (asyncio), for machines without the Go binary.

Layout: ``toxics`` (the toxic types and their registry), ``http`` (HTTP/1.1 request framing) and
``aws_toxics`` (our HTTP-aware toxics for AWS JSON-protocol traffic), ``link`` (the data path of one connection),
``proxy`` (a listener and its connections), ``collection`` (the API's state and request rules), ``api``
(HTTP routes), ``server`` (the whole server as an object), ``__main__`` (the CLI).  Import
``ToxiproxyServer`` from ``server``: this package stays light so the CLI rejects bad flags fast.

It follows Toxiproxy v2 (routes, JSON shapes, status codes and error messages, toxic attributes and
semantics; e.g. removing a ``timeout`` toxic closes the connections it held, as the real one does).
Where it deliberately differs:

- ``-seed`` makes every random draw reproducible: a draw is keyed by (seed, proxy, connection number,
  toxic, update count), whatever the timing.  The real server's ``-seed`` seeds Go's global generator,
  shared by every goroutine, so its draws depend on scheduling.
- A toxic's toxicity is drawn once per connection (again when the toxic is updated); the real server
  draws again whenever another toxic is added to the same stream of the link.
- Removing a ``timeout`` toxic closes only the connections it affected (the real one closes every link
  of that stream, even those its toxicity spared).
- ``reset_peer`` sends a TCP RST on connections opened before it was added too (the real one sets
  SO_LINGER 0 only on links started while it existed, so older links get a FIN); removed while it is
  waiting, it lets the data through instead of resetting.
- Bad values are refused with 400 where the real server misbehaves: negative attributes, toxicity
  outside 0..1, slicer ``average_size`` 0; bandwidth ``rate`` 0 means unlimited; duplicate names in
  ``/populate`` are 400 (real: 500).
- An empty ``listen`` means ``127.0.0.1:0`` (real: every interface), and the API listens on 127.0.0.1 by
  default (real: localhost).  ``/populate`` keeps an existing proxy when the requested listen port is 0
  and the host matches (the real one replaces it).
- The seven toxics Toxiproxy's README documents (latency, bandwidth, slow_close, timeout, reset_peer,
  slicer, limit_data); no ``/metrics`` endpoint.
- Three toxics of our own that the real server does not have (``aws_toxics``): ``aws_error``,
  ``aws_slow`` and ``aws_swallow`` parse the HTTP requests of AWS JSON-protocol traffic and answer, delay
  or swallow them; their toxicity is drawn per request, and some attributes are strings.
"""
