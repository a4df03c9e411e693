"""Where the authorization server gets its client directory (the ``Clients`` of
``client_types``): ``client_directory``, called per configuration snapshot with the
previous one. The directory of client ID metadata documents and registrations
(``clients.ClientDirectory``) lives as long as the process: a reload reconfigures it
(its cached documents and registration rate limits kept while what decides about them
is unchanged)."""

from __future__ import annotations

from typing import Any

from gateway.config.snapshot import Snapshot
from gateway.databroker.records import RecordStore
from gateway.mcp_oauth.client_types import Clients
from gateway.mcp_oauth.clients import ClientDirectory, Settings, directory_for


def client_directory(reactor: Any, snapshot: Snapshot, records: RecordStore,
                     previous: Clients | None) -> Clients:
    """The client directory for ``snapshot``."""
    if isinstance(previous, ClientDirectory):
        previous.reconfigure(Settings.of(snapshot))
        return previous
    return directory_for(reactor, snapshot, records)
