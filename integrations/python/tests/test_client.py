"""baton_login.BatonClient against a peer on loopback that answers with fixed bytes (harness.Peer): whatever the
HTTP layer or the JSON decoder makes of a broken answer is BatonUnavailable (a 4xx: BatonRefused), never an
exception of theirs, which a Django view would turn into a 500. No Django, no Baton: BATON_TEST_FRAMEWORK=client."""

import pytest

import harness
from baton_login import MIGRATED, BatonClient, BatonRefused, BatonUnavailable


def answer(status: str, body: bytes, *headers: str) -> bytes:
    head = [f"HTTP/1.1 {status}", "Content-Type: application/json", f"Content-Length: {len(body)}", "Connection: close", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def sign_in(raw: bytes):
    with harness.Peer(raw) as url:
        return BatonClient(url, timeout=5).sign_in("header.payload.signature")


MIGRATED_ANSWER = b'{"outcome": "migrated", "sub": "001.b.2", "transfer_sub": "t.1", "user": {"key": "7", "sub": "001.b.2", "email": null}}'


def test_a_whole_answer_is_read():
    signed_in = sign_in(answer("200 OK", MIGRATED_ANSWER))
    assert (signed_in.outcome, signed_in.sub, signed_in.user.key, signed_in.transfer_sub) == (MIGRATED, "001.b.2", "7", "t.1")


def test_a_merge_names_the_record_it_merged_from():
    merged = MIGRATED_ANSWER[:-1] + b', "merged_from": "12"}'
    assert sign_in(answer("200 OK", merged)).merged_from == "12"
    assert sign_in(answer("200 OK", MIGRATED_ANSWER)).merged_from is None


def test_a_whole_refusal_is_read():
    with pytest.raises(BatonRefused) as refused:
        sign_in(answer("401 Unauthorized", b'{"error": "invalid_token", "reason": "expired"}'))
    assert (refused.value.status, refused.value.error, refused.value.reason) == (401, "invalid_token", "expired")


BROKEN = {
    "truncated_body": harness.TRUNCATED_BODY,
    "garbage_status_line": harness.GARBAGE_STATUS_LINE,
    "status_not_a_number": b"HTTP/1.1 2OO OK\r\n\r\n",
    "closed_without_answer": b"",
    "bad_chunk_size": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\nzz\r\n",
    "chunked_cut_short": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n40\r\n{\"outcome\"",
    "header_line_too_long": b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * 70000 + b"\r\n\r\n",
    "too_many_headers": b"HTTP/1.1 200 OK\r\n" + b"X-Header: 1\r\n" * 101 + b"\r\n",
    "server_error": answer("503 Service Unavailable", b'{"error": "database_unavailable", "reason": "x"}'),
    "not_json": answer("200 OK", b"<html>proxy error</html>"),
    "not_utf8": answer("200 OK", b'{"outcome": "\xff"}'),
    "nested_past_the_recursion_limit": answer("200 OK", b"[" * 100000),
    "not_an_answer": answer("200 OK", b'{"outcome": "current"}'),
    "merged_from_not_text": answer("200 OK", MIGRATED_ANSWER[:-1] + b', "merged_from": 12}'),
    "merged_from_on_new": answer("200 OK", b'{"outcome": "new", "sub": "001.b.2", "merged_from": "12"}'),
}


@pytest.mark.parametrize("raw", BROKEN.values(), ids=BROKEN.keys())
def test_a_broken_answer_is_baton_unavailable(raw):
    with pytest.raises(BatonUnavailable):
        sign_in(raw)


BROKEN_REFUSALS = {
    "truncated_body": answer("401 Unauthorized", b'{"error": "invalid_token", "reason": "expired"}')[:-10],
    "nested_past_the_recursion_limit": answer("401 Unauthorized", b"[" * 100000),
    "not_json": answer("400 Bad Request", b"bad request"),
}


@pytest.mark.parametrize("raw", BROKEN_REFUSALS.values(), ids=BROKEN_REFUSALS.keys())
def test_a_4xx_whose_body_cannot_be_read_is_still_a_refusal(raw):
    with pytest.raises(BatonRefused) as refused:
        sign_in(raw)
    assert refused.value.error == "refused"
