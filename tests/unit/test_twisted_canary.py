"""Every private name of a library the gateway relies on exists in the installed versions.

The gateway goes past public APIs where speed or correctness needed it, only in the
adapter packages (``gateway/twisted_ext`` for Twisted and the pyOpenSSL under its TLS,
``gateway/adapters`` for the other libraries). Each adapter module declares the names
it relies on: ``RELIES_ON`` (module, object path or "", names), each looked up on the
object, and ``RELIES_ON_INSTANCE`` (module, class, names), attributes the library sets
on its instances, looked for in the source of the class and its bases.
``tests/unit/test_private_names.py`` makes every private name an adapter uses appear in
its declarations, so this list is built from the uses and cannot miss one.

A release of one of these libraries may rename what it never promised to keep; this
test names the name and the adapter that needs it, instead of an AttributeError on the
hot path in production.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

import gateway.adapters
import gateway.twisted_ext

Declaration = tuple[str, str, tuple[str, ...], str]  # module, path, names, adapter


def adapter_modules() -> Iterator[ModuleType]:
    for package in (gateway.twisted_ext, gateway.adapters):
        yield package
        for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
            yield importlib.import_module(info.name)


def declared(kind: str) -> list[Declaration]:
    return [(module, path, names, adapter.__name__)
            for adapter in adapter_modules()
            for module, path, names in getattr(adapter, kind, ())]


ATTRIBUTES = declared("RELIES_ON")
INSTANCE_ATTRIBUTES = declared("RELIES_ON_INSTANCE")


def resolve(module: str, path: str) -> Any:
    obj: Any = importlib.import_module(module)
    for part in filter(None, path.split(".")):
        obj = getattr(obj, part)
    return obj


def test_the_adapters_declare_something() -> None:
    """The lists are gathered from the adapters: an empty one means the gathering broke."""
    users = {adapter for *_, adapter in ATTRIBUTES + INSTANCE_ATTRIBUTES}
    assert {"gateway.twisted_ext.tlsio", "gateway.adapters.hpack_tables",
            "gateway.adapters.txredis"} <= users


@pytest.mark.parametrize(("module", "path", "names", "user"), ATTRIBUTES,
                         ids=[f"{m}:{p}" for m, p, _, _ in ATTRIBUTES])
def test_attributes_exist(module: str, path: str, names: tuple[str, ...], user: str) -> None:
    obj = resolve(module, path)
    missing = [name for name in names if not hasattr(obj, name)]
    assert not missing, f"{module}.{path} lacks {missing}, which {user} relies on"


@pytest.mark.parametrize(("module", "path", "names", "user"),
                         INSTANCE_ATTRIBUTES,
                         ids=[f"{m}:{p}" for m, p, _, _ in INSTANCE_ATTRIBUTES])
def test_instance_attributes_are_set(module: str, path: str, names: tuple[str, ...],
                                     user: str) -> None:
    cls = resolve(module, path)
    source = "".join(inspect.getsource(k) for k in cls.__mro__
                     if k.__module__.split(".")[0] == module.split(".")[0])
    missing = [name for name in names if name not in source]
    assert not missing, f"{module}.{path} no longer mentions {missing} ({user})"
