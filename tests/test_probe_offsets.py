"""The client's schedule of requests at fixed offsets (recipectl/bench/probe.py run_offsets, what
benchmarks/sla_planner_accuracy.py --pair sends): each request leaves its offset after the first,
over a connection of its own opened beforehand, through a real socket."""

from __future__ import annotations

import time

from recipectl.bench.probe import run_offsets


def completion(req):
    if req.method == "GET":
        return 200, {"data": [{"id": "m"}]}
    time.sleep(0.05)  # a prefill's worth: the second request is sent while the first is served
    return 200, {"choices": [{"index": 0, "text": "x"}], "usage": {"completion_tokens": 1}}


def test_each_request_leaves_its_offset_after_the_first_on_its_own_connection(fake_server):
    server = fake_server(completion)
    r = run_offsets(server.url, "m", isl=8, osl=1, offsets_s=[0.0, 0.12], vocab_size=500, stream=False)
    assert not r.errors and len(r.samples) == 2
    first, second = r.samples
    assert 0.11 <= second.start_s - first.start_s < 0.3  # the offset (a loaded host may add to it, never take)
    assert [q.method for q in server.requests] == ["GET", "GET", "POST", "POST"]  # connected before the first
    posts = [q for q in server.requests if q.method == "POST"]
    assert posts[0].raw.client_address != posts[1].raw.client_address
    assert [len(q.body["prompt"]) for q in posts] == [8, 8] and posts[0].body["prompt"] != posts[1].body["prompt"]


def test_a_request_that_fails_is_an_error_and_the_others_are_kept(fake_server):
    def second_fails(req):
        if req.method == "POST" and sum(q.method == "POST" for q in server.requests) == 2:
            return 500, {"error": "boom"}
        return completion(req)

    server = fake_server(second_fails)
    r = run_offsets(server.url, "m", isl=8, osl=1, offsets_s=[0.0, 0.1], vocab_size=500, stream=False)
    assert len(r.samples) == 1 and len(r.errors) == 1 and "500" in r.errors[0]


def test_a_server_that_refuses_the_connections_is_an_error_per_request_not_a_traceback(fake_server):
    server = fake_server(completion)
    url = server.url
    server.close()  # nothing listens there now
    r = run_offsets(url, "m", isl=8, osl=1, offsets_s=[0.0, 0.1], vocab_size=500, stream=False)
    assert r.samples == [] and len(r.errors) == 2 and all("Connect" in e for e in r.errors)
