"""The real API server refuses each invalid resource with a message naming the field."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from api.invalid_cases import INVALID, Invalid, valid_manifest
from operator_harness import GROUP, PLURAL, VERSION

pytestmark = pytest.mark.controlplane


def _create(admin: client.ApiClient, body: dict) -> None:  # type: ignore[type-arg]
    client.CustomObjectsApi(admin).create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, body, dry_run="All")


def test_valid_manifest_accepted_and_defaulted(admin: client.ApiClient) -> None:
    created = client.CustomObjectsApi(admin).create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, valid_manifest("valid"), dry_run="All")
    assert created["spec"]["kvConnector"] == {"type": "NixlConnector", "sideChannelPort": 5600}
    assert created["spec"]["router"]["policy"] == "kv_aware"
    assert created["spec"]["slo"]["attainment"] == 0.9


@pytest.mark.parametrize("case", INVALID, ids=[c.id for c in INVALID])
def test_invalid_refused_naming_field(admin: client.ApiClient, case: Invalid) -> None:
    with pytest.raises(ApiException) as err:
        _create(admin, case.manifest(f"bad-{case.id}"[:42]))
    assert err.value.status == 422, err.value.body
    message = json.loads(err.value.body)["message"]
    assert case.field in message, message


@pytest.mark.parametrize("name", ["x" * 43, "1-starts-with-digit", "has.dot"])
def test_bad_names_refused(admin: client.ApiClient, name: str) -> None:
    with pytest.raises(ApiException) as err:
        _create(admin, valid_manifest(name))
    assert err.value.status == 422
    assert "metadata.name" in json.loads(err.value.body)["message"]
