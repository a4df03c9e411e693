"""Directory sync: users and their (transitive) groups from a directory service.

``provider_for(idp_service_account, reactor)`` returns the provider the service account
describes (LDAP in this version) or None; ``provider.fetch()`` returns a
:class:`~gateway.directory.model.Directory` snapshot.
"""

from gateway.directory.model import Directory, DirectoryError, DirectoryGroup, DirectoryUser
from gateway.directory.provider import DirectoryProvider, provider_for

__all__ = [
    "Directory",
    "DirectoryError",
    "DirectoryGroup",
    "DirectoryProvider",
    "DirectoryUser",
    "provider_for",
]
