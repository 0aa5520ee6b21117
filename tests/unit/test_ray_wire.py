"""The Ray executor's request and reply are typed (executors/spec.py NodeRequest, NodeReply):
pickled as Ray pickles them, they arrive equal, and each side validates what it received, so
a request or reply of the wrong shape fails where it crosses, naming the field."""

import pickle

import pytest
from pydantic import ValidationError

from orchestrator.executors.spec import NodeReply, NodeRequest, TrialSpec
from orchestrator.models import BaseImage, FailureMode, TrialResult, default_manifest
from orchestrator.services import Upstream
from orchestrator.tasks import StandIn
from orchestrator.trial import Published, TaskImages


def _request(**changes: object) -> NodeRequest:
    spec = TrialSpec(job="j", manifest=default_manifest("oracle").model_dump(mode="json"))
    images = TaskImages(task_image="orchestra/task/t:1", agent_image="orchestra/agent/t:1", built=2,
                        stand_ins=[StandIn("python:3.99", "orchestra/base:r1", "r1", "3.12", "not on the registry")],
                        bases=[BaseImage(reference="python:3.99", used_for="task", source="stand-in")])
    published = Published(images=images, refs={"orchestra/agent/t:1": "127.0.0.1:5000/p/a:1"})
    values: dict[str, object] = dict(spec=spec, task_name="ds/t", content_hash="abc", attempt=1,
                                     retries=["infra_error"], images=published)
    return NodeRequest(**{**values, **changes})


def test_a_request_crosses_pickled_and_arrives_equal_and_typed():
    request = _request()
    arrived = NodeRequest.received(pickle.loads(pickle.dumps(request)))
    assert arrived == request
    assert isinstance(arrived.images, Published) and arrived.images.task_images().agent_image == "orchestra/agent/t:1"
    assert arrived.spec.job == "j" and arrived.retries == ["infra_error"]
    assert NodeRequest.received(_request(images=None)).images is None


def test_the_images_and_endpoints_cross_typed_and_a_node_starts_from_none_built():
    spec = TrialSpec(job="j", manifest=default_manifest("oracle"),
                     upstreams={"up": Upstream("up", "http://10.0.0.1/v1", "m", "sk-1", {"A": "b"}, apis=("chat",))})
    arrived = NodeRequest.received(pickle.loads(pickle.dumps(_request(spec=spec))))
    assert arrived.images is not None
    images = arrived.images.task_images()
    assert isinstance(images, TaskImages) and images.built == 0 and images.pulled == []  # the driver built 2
    assert isinstance(images.stand_ins[0], StandIn) and images.stand_ins[0].stand_in == "orchestra/base:r1"
    assert isinstance(images.bases[0], BaseImage) and images.bases[0].source == "stand-in"
    assert arrived.images.images.built == 2  # the record itself is not changed by the node's copy
    up = arrived.spec.upstreams["up"]
    assert isinstance(up, Upstream) and (up.url, up.api_key, up.env) == ("http://10.0.0.1/v1", "sk-1", {"A": "b"})
    wire = dict(_request())
    with pytest.raises(ValidationError, match="images"):  # an untyped image record is refused on receipt
        NodeRequest.received({**wire, "images": {"images": {"task_image": "t"}, "refs": {}}})
    with pytest.raises(ValidationError, match="upstreams"):
        NodeRequest.received({**wire, "spec": {"job": "j", "manifest": default_manifest("oracle"),
                                                "upstreams": {"up": {"base_url": "http://x"}}}})


def test_a_request_of_the_wrong_shape_fails_on_receipt_naming_the_field():
    with pytest.raises(ValidationError, match="attempt"):
        NodeRequest.received({**dict(_request()), "attempt": -1})
    with pytest.raises(ValidationError, match="task_name"):
        NodeRequest.received({k: v for k, v in dict(_request()).items() if k != "task_name"})
    with pytest.raises(ValidationError, match="surprise"):
        NodeRequest.received({**dict(_request()), "surprise": 1})
    with pytest.raises(ValidationError):  # the old untyped payload is refused, not half-read
        NodeRequest.received({"job": "j", "manifest": {}, "task_name": "ds/t", "attempt": 0})


def test_a_reply_crosses_pickled_and_a_wrong_one_is_refused():
    result = TrialResult(trial_id="t__1", job="j", task="ds/t", task_path="/x", content_hash="h",
                         condition="c", condition_hash="c", agent="oracle", attempt=1,
                         failure_mode=FailureMode.NONE, reward={"reward": 1.0})
    reply = NodeReply(result=result, folder="t__1", tar=b"\x00" * 10)
    arrived = NodeReply.received(pickle.loads(pickle.dumps(reply)))
    assert arrived.result == result and arrived.tar == b"\x00" * 10
    with pytest.raises(ValidationError, match="folder"):  # a folder name, never a path
        NodeReply.received({"result": result, "folder": "../escape", "tar": b""})
    with pytest.raises(ValidationError, match="result"):
        NodeReply.received({"result": {"reward": "lots"}, "folder": "t__1", "tar": b""})


def test_the_manifest_crosses_typed_and_keeps_the_condition_hash_it_ran_with():
    manifest = default_manifest("nop").with_agent("oracle")  # a copy with a field updated
    request = _request(spec=TrialSpec(job="j", manifest=manifest))
    arrived = NodeRequest.received(pickle.loads(pickle.dumps(request)))
    assert arrived.spec.manifest.condition_hash() == manifest.condition_hash()
    assert arrived.spec.manifest.orchestrator.agent == "oracle"
    from_json = TrialSpec(job="j", manifest=manifest.model_dump(mode="json", exclude_unset=True))
    assert from_json.manifest.condition_hash() == manifest.condition_hash()  # its JSON form too
