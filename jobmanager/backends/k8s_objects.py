"""Checked reads of the Kubernetes client's optional fields.

The client types every field of an object as optional, while the API server always sets
an object's metadata, name and uid. These accessors return them typed, or raise
``IncompleteObject`` naming what is missing, rather than an ``AttributeError`` on None.
"""

from __future__ import annotations

from typing import Protocol

from kubernetes import client


class IncompleteObject(ValueError):
    """An object from the API server lacks a field the server always sets."""


class HasMetadata(Protocol):
    @property
    def metadata(self) -> client.V1ObjectMeta | None: ...


def metadata_of(obj: HasMetadata) -> client.V1ObjectMeta:
    if obj.metadata is None:
        raise IncompleteObject(f"a {type(obj).__name__} without metadata")
    return obj.metadata


def name_of(obj: HasMetadata) -> str:
    name = metadata_of(obj).name
    if name is None:
        raise IncompleteObject(f"a {type(obj).__name__} without a name")
    return name


def uid_of(obj: HasMetadata) -> str:
    uid = metadata_of(obj).uid
    if uid is None:
        raise IncompleteObject(f"{type(obj).__name__} {metadata_of(obj).name} without a uid")
    return uid


def labels_of(obj: HasMetadata) -> dict[str, str]:
    return metadata_of(obj).labels or {}


def annotations_of(obj: HasMetadata) -> dict[str, str]:
    return metadata_of(obj).annotations or {}


def node_name_of(pod: client.V1Pod) -> str | None:
    """The node the pod is bound to; None while it is not scheduled."""
    return pod.spec.node_name if pod.spec is not None else None
