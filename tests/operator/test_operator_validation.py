"""The real API server refuses each invalid resource with a message naming the field."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from api.invalid_cases import INVALID, VALID, Invalid, Valid, valid_manifest
from operator_harness import GROUP, PLURAL, VERSION

pytestmark = pytest.mark.controlplane


def _name(prefix: str, case_id: str) -> str:
    """A DNS-1035 name for the case, so only the spec can be what the server refuses."""
    return f"{prefix}-{case_id}".replace(".", "-")[:42].rstrip("-")


def _create(admin: client.ApiClient, body: dict) -> None:  # type: ignore[type-arg]
    client.CustomObjectsApi(admin).create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, body, dry_run="All")


def test_valid_manifest_accepted_and_defaulted(admin: client.ApiClient) -> None:
    created = client.CustomObjectsApi(admin).create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, valid_manifest("valid"), dry_run="All")
    assert created["spec"]["kvConnector"] == {"type": "NixlConnector", "sideChannelPort": 5600}
    assert created["spec"]["router"]["policy"] == "kv_aware"
    assert created["spec"]["slo"]["attainment"] == 0.9


@pytest.mark.parametrize("case", VALID, ids=[c.id for c in VALID])
def test_valid_accepted(admin: client.ApiClient, case: Valid) -> None:
    _create(admin, case.manifest(_name("good", case.id)))


def test_version_fields_defaulted(admin: client.ApiClient) -> None:
    created = client.CustomObjectsApi(admin).create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, valid_manifest("defaults"), dry_run="All")
    engine = created["spec"]["engine"]
    assert (engine["vllmVersion"], engine["blockSize"], engine["runAsRoot"]) == ("0.33.0", 16, False)
    assert created["spec"]["model"]["tokenizerMode"] == "auto"
    assert created["spec"]["rdma"]["enabled"] is False


@pytest.mark.parametrize("case", INVALID, ids=[c.id for c in INVALID])
def test_invalid_refused_naming_field(admin: client.ApiClient, case: Invalid) -> None:
    with pytest.raises(ApiException) as err:
        _create(admin, case.manifest(_name("bad", case.id)))
    assert err.value.status == 422, err.value.body
    message = json.loads(err.value.body)["message"]
    assert case.field in message, message


@pytest.mark.parametrize("name", ["x" * 43, "1-starts-with-digit", "has.dot"])
def test_bad_names_refused(admin: client.ApiClient, name: str) -> None:
    with pytest.raises(ApiException) as err:
        _create(admin, valid_manifest(name))
    assert err.value.status == 422
    assert "metadata.name" in json.loads(err.value.body)["message"]
