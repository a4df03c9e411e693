"""``ZipkinV2Encoder``: the OpenTelemetry Zipkin exporter's v2 JSON encoder without a
null span kind.

The SDK's encoder writes ``"kind": null`` for an internal span; the v2 model has no such
value (a local span has no kind), so it is left out. The encoder builds each span in
its private ``_encode_span``, the one place to change that.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.exporter.zipkin.json.v2 import JsonV2Encoder

RELIES_ON = (
    ("opentelemetry.exporter.zipkin.json.v2", "JsonV2Encoder", ("_encode_span",)),
)


class ZipkinV2Encoder(JsonV2Encoder):
    def _encode_span(self, span: Any, encoded_local_endpoint: Any) -> dict[str, Any]:
        encoded: dict[str, Any] = super()._encode_span(span, encoded_local_endpoint)
        if encoded.get("kind") is None:
            encoded.pop("kind", None)
        return encoded
