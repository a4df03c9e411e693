"""prometheus-client's spelling of a number in the exposition (``floatToGoString``).

A histogram of ours must spell its ``le`` bounds exactly as the library's own
histograms do (``0.5``, ``1.0``, ``+Inf``, ``1e+06``), or one scrape would hold two
spellings of a bucket; the function that spells them is an undocumented helper of
``prometheus_client.utils``.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client.utils import floatToGoString

RELIES_ON = (
    ("prometheus_client.utils", "", ("floatToGoString",)),
)

float_to_go_string: Callable[[float], str] = floatToGoString
