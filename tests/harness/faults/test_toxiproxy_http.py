"""HTTP/1.1 request framing (harness.faults.toxiproxy.http): whole requests out of arbitrary chunks, and
everything it cannot frame passed on untouched."""

from __future__ import annotations

from harness.faults.toxiproxy.http import MAX_HEAD, HttpRequest, RequestFramer

PUT = (b"POST / HTTP/1.1\r\nHost: x\r\nX-Amz-Target: DynamoDB_20120810.PutItem\r\n"
       b"Content-Length: 13\r\n\r\n{\"Item\": {}}\n")
CHUNKED = (b"POST /up HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
           b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n")


def feed_all(framer: RequestFramer, pieces: list[bytes]) -> list[HttpRequest | bytes]:
    items: list[HttpRequest | bytes] = []
    for piece in pieces:
        items += framer.feed(piece)
    return items


def test_a_request_split_anywhere_comes_out_whole_once_complete() -> None:
    for cut in range(1, len(PUT)):
        framer = RequestFramer()
        assert framer.feed(PUT[:cut]) == []
        assert framer.holding
        [request] = framer.feed(PUT[cut:])
        assert isinstance(request, HttpRequest)
        assert request.raw == PUT
        assert request.headers["x-amz-target"] == "DynamoDB_20120810.PutItem"
        assert request.body == b'{"Item": {}}\n'
        assert not framer.holding


def test_keep_alive_requests_in_one_chunk_are_cut_apart() -> None:
    items = RequestFramer().feed(PUT + CHUNKED + PUT[:20])
    assert [item.raw for item in items if isinstance(item, HttpRequest)] == [PUT, CHUNKED]
    assert len(items) == 2


def test_chunked_bodies_are_decoded_and_forwarded_as_sent() -> None:
    framer = RequestFramer()
    [request] = feed_all(framer, [CHUNKED[:60], CHUNKED[60:70], CHUNKED[70:]])
    assert isinstance(request, HttpRequest)
    assert request.body == b"hello world"
    assert request.raw == CHUNKED
    assert request.method == "POST" and request.path == "/up"


def test_bytes_that_do_not_start_a_request_pass_through() -> None:
    framer = RequestFramer()
    assert framer.feed(b'"rest of a body"}') == [b'"rest of a body"}']  # toxic added mid-request
    [request] = framer.feed(PUT)
    assert isinstance(request, HttpRequest)


def test_a_malformed_head_is_passed_on_and_framing_resumes_at_the_next_request() -> None:
    framer = RequestFramer()
    bad = b"POST / HTTP/1.1\r\nContent-Length: many\r\n\r\n"
    assert framer.feed(bad) == [bad]
    assert not framer.holding
    assert isinstance(framer.feed(PUT)[0], HttpRequest)


def test_a_head_that_never_ends_is_let_through() -> None:
    framer = RequestFramer()
    long_head = b"GET / HTTP/1.1\r\nX: " + b"a" * MAX_HEAD
    assert framer.feed(long_head) == [long_head]


def test_connection_close_is_noticed() -> None:
    [request] = RequestFramer().feed(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert isinstance(request, HttpRequest) and request.closes
