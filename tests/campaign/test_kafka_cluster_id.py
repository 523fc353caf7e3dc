"""Kafka cluster ids never start with "-": ``kafka-storage format
--cluster-id -...`` reads such an id as an option and every node's format
fails (it happened to the Kafka campaign test, one run in 64). No Kafka
needed."""

from __future__ import annotations

import base64

from jepsen_like.campaign.kafka import new_cluster_id


def test_an_id_that_would_start_with_a_dash_is_drawn_again():
    # 0xF8 is 111110 in its first six bits: URL-safe base64 character 62, "-".
    draws = iter([b"\xf8" + bytes(15), b"\x01" * 16])
    cluster_id = new_cluster_id(lambda count: next(draws))
    assert cluster_id == base64.urlsafe_b64encode(b"\x01" * 16).rstrip(b"=").decode()
    assert base64.urlsafe_b64encode(b"\xf8" + bytes(15)).decode().startswith("-")


def test_ids_are_22_url_safe_characters():
    for _ in range(200):
        cluster_id = new_cluster_id()
        assert len(cluster_id) == 22 and not cluster_id.startswith("-")
        assert set(cluster_id) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
