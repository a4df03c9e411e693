"""``make_private_dirs``: the one way the gateway creates directories (recordings, the
audit file's, autocert's store, ``gateway tcp``'s token cache), each level it creates
0700 whatever the umask.

``os.makedirs(path, mode=0o700)`` is not that: the mode applies to the last level only
(the others get ``0o777 & ~umask``, 0755 under the usual umask) and is masked by the
umask as well. So each missing level is made here, one ``mkdir`` at a time, and set to
0700 through a descriptor opened without following a symbolic link (a name swapped for a
link between the two calls changes nothing of somebody else's). A directory that
already existed is the operator's: its mode is left alone, as is a level another process
made first.
"""

from __future__ import annotations

import errno
import os

PRIVATE = 0o700


def make_private_dirs(path: str | os.PathLike[str]) -> tuple[str, ...]:
    """Make ``path`` and its missing parents, each 0700; the levels made, outermost
    first (none when ``path`` is a directory already). Raises ``OSError`` as ``mkdir``
    does (a file in the way, no permission)."""
    target = os.path.abspath(os.fspath(path))
    missing: list[str] = []
    level = target
    while not os.path.lexists(level):  # (below a file, mkdir says "Not a directory")
        missing.append(level)
        level = os.path.dirname(level)
    if not missing and not os.path.isdir(target):
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), target)
    made: list[str] = []
    for level in reversed(missing):
        try:
            os.mkdir(level, PRIVATE)
        except FileExistsError:
            if os.path.isdir(level):
                continue  # made by another process (or thread) meanwhile: not ours
            raise
        fd = os.open(level, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.fchmod(fd, PRIVATE)  # mkdir's mode was masked by the umask
        finally:
            os.close(fd)
        made.append(level)
    return tuple(made)
