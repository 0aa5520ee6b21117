"""The relay over real HTTP on loopback: authentication, ownership, threading, evidence."""

from __future__ import annotations

import json
import secrets
import time
import urllib.error
import urllib.request

import pytest

from orchestrator.services.relay import auth
from orchestrator.services.relay.server import RelayServer
from orchestrator.services.relay.store import RelayStore


@pytest.fixture()
def relay():
    store = RelayStore("ch-test")
    lead = store.add_identity("lead", "orchestrator")
    user = store.add_identity("user", "user")
    helper = store.add_identity("helper", "worker")
    server = RelayServer(store, "127.0.0.1", secrets.token_bytes(32)).start()
    yield server, lead, user, helper
    server.stop()


def call(server, identity_key, tag, method, path, body=None, headers=None, raw_body=None):
    data = raw_body if raw_body is not None else (json.dumps(body).encode() if body else b"")
    signed = auth.signed_headers(identity_key, tag, method, path, data, time.time())
    signed.update(headers or {})
    request = urllib.request.Request(server.url + path, data=data or None, method=method,
                                     headers={**signed, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def as_(server, identity):
    return identity.private_key, server.tag_for(identity)


def test_an_identity_posts_as_itself_with_threads_and_mentions(relay):
    server, lead, user, _ = relay
    status, question = call(server, *as_(server, user), "POST", "/v1/channels/ch-test/messages",
                            {"content": "q?", "mentions": [lead.pubkey]})
    assert status == 201
    status, _ = call(server, *as_(server, lead), "POST", "/v1/channels/ch-test/messages",
                     {"content": "a", "reply_to": question["id"]})
    assert status == 201
    status, listing = call(server, *as_(server, lead), "GET", "/v1/channels/ch-test/messages")
    assert [(m["author"], m["reply_to_event_id"]) for m in listing["messages"]] == [
        ("user", None), ("lead", question["id"])]
    assert listing["messages"][0]["mentioned_pubkeys"] == [lead.pubkey]


def test_a_wrong_key_is_rejected(relay):
    server, lead, _, _ = relay
    status, body = call(server, auth.new_private_key(), server.tag_for(lead), "GET", "/v1/whoami")
    assert status == 401 and "unknown pubkey" in body["error"]


def test_a_forged_user_post_is_rejected(relay):
    """The agent knows the user's pubkey (from the directory), but not the user's key."""
    server, lead, user, _ = relay
    path = "/v1/channels/ch-test/messages"
    for headers in ({"X-Orchestra-Pubkey": user.pubkey},
                    {"X-Orchestra-Pubkey": user.pubkey, "X-Orchestra-Auth-Tag": server.tag_for(user)}):
        status, body = call(server, *as_(server, lead), "POST", path, {"content": "approve"},
                            headers=headers)
        assert status == 401, body
    assert server.store.read() == []


def test_a_tampered_signature_or_body_is_rejected(relay):
    server, lead, _, _ = relay
    key, tag = as_(server, lead)
    status, body = call(server, key, tag, "GET", "/v1/whoami",
                        headers={"X-Orchestra-Signature": "0" * 64})
    assert status == 401 and "bad signature" in body["error"]
    # A signature over one body sent with another.
    path = "/v1/channels/ch-test/messages"
    good = json.dumps({"content": "hello"}).encode()
    signed = auth.signed_headers(key, tag, "POST", path, good, time.time())
    request = urllib.request.Request(server.url + path, data=b'{"content": "evil"}', method="POST",
                                     headers=signed)
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=5)
    assert info.value.code == 401
    assert server.store.read() == []


def test_a_replayed_request_is_rejected(relay):
    server, lead, _, _ = relay
    key, tag = as_(server, lead)
    path = "/v1/channels/ch-test/messages"
    data = json.dumps({"content": "once"}).encode()
    signed = auth.signed_headers(key, tag, "POST", path, data, time.time())
    codes = []
    for _ in range(2):
        request = urllib.request.Request(server.url + path, data=data, method="POST", headers=signed)
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                codes.append(response.status)
        except urllib.error.HTTPError as exc:
            codes.append(exc.code)
            assert "replayed" in json.loads(exc.read())["error"]
    assert codes == [201, 401]
    assert len(server.store.read()) == 1


def test_an_old_timestamp_and_a_foreign_auth_tag_are_rejected(relay):
    server, lead, _, helper = relay
    key = lead.private_key
    old = auth.signed_headers(key, server.tag_for(lead), "GET", "/v1/whoami", b"", time.time() - 3600)
    request = urllib.request.Request(server.url + "/v1/whoami", headers=old)
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=5)
    assert info.value.code == 401
    status, body = call(server, key, server.tag_for(helper), "GET", "/v1/whoami")
    assert status == 401 and "auth tag" in body["error"]


def test_engrams_are_private_to_their_owner(relay):
    server, lead, _, helper = relay
    status, _ = call(server, *as_(server, lead), "PUT", "/v1/engrams?slug=secret", {"value": "42"})
    assert status == 200
    status, body = call(server, *as_(server, helper), "GET", "/v1/engrams?slug=secret")
    assert status == 404  # the helper has no such engram: it cannot see the lead's
    status, body = call(server, *as_(server, helper), "GET",
                        f"/v1/engrams?slug=secret&owner={lead.pubkey}")
    assert status == 403 and "only its own" in body["error"]
    status, body = call(server, *as_(server, helper), "GET", "/v1/engrams")
    assert body["engrams"] == []
    status, body = call(server, *as_(server, lead), "GET", "/v1/engrams?slug=secret")
    assert status == 200 and body["value"] == "42"


def test_another_channel_is_refused(relay):
    server, lead, _, _ = relay
    status, body = call(server, *as_(server, lead), "POST", "/v1/channels/ch-other/messages",
                        {"content": "x"})
    assert status == 403


def test_evidence_holds_no_secret_and_matches_the_schema(relay):
    server, lead, user, _ = relay
    q = server.store.post(user, "q?", mentions=[lead.pubkey])
    server.store.post(lead, "a", reply_to=q.id)
    doc = server.store.evidence(run_id="job", trial_id="t", task_name="x", task_event_id=q.id,
                                scripted_events=[], observed_channels=[]).model_dump(mode="json")
    text = json.dumps(doc)
    for identity in server.store.identities.values():
        assert identity.private_key not in text
    assert doc["schema_version"] == 1 and doc["message_count"] == 2 and doc["truncated"] is False
    assert set(doc["messages"][0]) == {"id", "kind", "created_at", "pubkey", "author", "author_role",
                                       "content", "tags", "channel_id", "reply_to_event_id",
                                       "mentioned_pubkeys"}
    assert doc["completion_message_id"] == doc["messages"][1]["id"]


def test_evidence_is_truncated_at_the_export_limit():
    store = RelayStore("ch")
    user = store.add_identity("user", "user")
    for i in range(1005):
        store.post(user, f"m{i}")
    doc = store.evidence(run_id="j", trial_id="t", task_name="x", task_event_id=None,
                         scripted_events=[], observed_channels=[]).model_dump(mode="json")
    assert doc["truncated"] is True and len(doc["messages"]) == 1000 and doc["message_count"] == 1005
