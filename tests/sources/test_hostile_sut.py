"""A system under test cannot stall, bloat or leak a replay (issue 47, items 1-4), against real servers
on loopback: a server that trickles its answer a byte at a time is cut at the answer's deadline; a
redirect is never followed (the token stays with the service's own address); a reply larger than
``max_reply_bytes`` fails its case and is never kept; a NaN in a field the contract ignores, or a reply
nested past the readers' cap, is one quarantined case, never a traceback or a file the scorer refuses."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from ragspine_pipeline.sources.errors import SourceError
from ragspine_pipeline.sources.replay import replay
from ragspine_pipeline.sources.sut import HttpSut
from tests.conftest import Reply, ScriptedServer, load_factor

TOKEN = "tok-7c1e9a55d2"
TRACE = {"qid": "q1", "answer_json": {"claim": "16 weeks", "citations": ["hr#1"]}}


class Trickler:
    """An HTTP server on loopback that sends its headers, then its body one byte every ``pause`` s."""

    def __init__(self, pause: float = 0.3) -> None:
        self.pause = pause
        self.stop = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/answer"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        self.listener.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        body = json.dumps(TRACE).encode() * 100
        try:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
            conn.sendall(f"Content-Length: {len(body)}\r\n\r\n".encode())
            for byte in body:
                if self.stop.is_set():
                    break
                conn.sendall(bytes([byte]))
                time.sleep(self.pause)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.listener.close()


def test_a_server_that_trickles_its_answer_is_cut_at_the_answers_deadline():
    trickler = Trickler()
    try:
        client = HttpSut(url=trickler.url, timeout_s=1, retries=0).client()
        started = time.monotonic()
        with pytest.raises(SourceError, match=r"qid=q1: no whole answer within 2 s \(retries included\)$"):
            client.answer("q1", "?")
        took = time.monotonic() - started
    finally:
        trickler.close()
    assert took < 2 + 3 * load_factor()  # not the ~100 s the trickle would take


def test_a_redirect_is_never_followed_and_the_token_stays_home(http_server):
    elsewhere = ScriptedServer(default=lambda request: Reply(200, TRACE))
    elsewhere.start()
    try:
        for status in (301, 302, 307, 308):
            http_server.script(Reply(status, b"", headers={"Location": elsewhere.url + "/answer"}))
            sut = HttpSut(url=http_server.url + "/answer", headers={"X-Api-Key": TOKEN}, retries=0)
            with pytest.raises(SourceError, match=rf"HTTP {status} .*: a redirect, not followed"):
                sut.client().answer("q1", "?")
    finally:
        elsewhere.stop()
    assert elsewhere.requests == []  # the other origin never saw a request, nor the token


def test_a_reply_over_the_cap_fails_its_case_and_is_never_kept(http_server, tmp_path):
    big = {**TRACE, "padding": "x" * (2 << 20)}
    http_server.script(Reply(200, big), Reply(200, big, headers={"Transfer-Encoding": "chunked"}))
    client = HttpSut(url=http_server.url + "/answer", retries=0, max_reply_bytes=1 << 20).client()
    with pytest.raises(SourceError, match=r"the answer to qid=q1 is larger than 1,048,576 bytes"):
        client.answer("q1", "?")
    result = replay(
        [("q1", "?", None)],
        client.answer,
        out=tmp_path / "traces.jsonl",
        quarantine=tmp_path / "q.jsonl",
        max_failed_share=1.0,
    )
    assert result.answered == 0 and (tmp_path / "traces.jsonl").read_text() == ""


def test_a_nan_in_an_ignored_field_or_deep_nesting_is_one_cases_problem(http_server, tmp_path):
    deep = "[" * 80 + "]" * 80
    http_server.script(
        Reply(200, '{"qid": "q1", "answer": "x", "debug": {"score": NaN}}'),
        Reply(200, '{"qid": "q2", "answer": "x", "debug": ' + deep + "}"),
        Reply(200, '{"qid": "q3", "answer": "x", "debug": ' + "[" * 1500 + "]" * 1500 + "}"),
    )
    client = HttpSut(url=http_server.url + "/answer", retries=0, concurrency=1).client()
    result = replay(
        [("q1", "?", None), ("q2", "?", None), ("q3", "?", None)],
        client.answer,
        out=tmp_path / "traces.jsonl",
        quarantine=tmp_path / "q.jsonl",
        max_failed_share=1.0,
        concurrency=1,
    )
    assert (result.answered, result.quarantined, result.failed) == (0, 3, {})  # one quarantined case each
    quarantined = {
        record["qid"]: record for record in map(json.loads, (tmp_path / "q.jsonl").read_text().splitlines())
    }
    assert (
        quarantined["q1"]["field"] == "debug.score"
        and quarantined["q1"]["error"] == "a NaN or infinite number"
    )
    assert quarantined["q2"]["error"] == "JSON nested 81 levels deep; at most 64 are accepted"
    assert quarantined["q3"]["error"] == "JSON nested 1501 levels deep; at most 64 are accepted"
    assert (tmp_path / "traces.jsonl").read_text() == ""  # nothing the scorer would refuse
