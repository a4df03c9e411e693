from twisted.application.service import ServiceMaker

gateway = ServiceMaker(
    "gateway",
    "gateway.tap",
    "Identity-aware access proxy (single sign-on and per-route policy).",
    "gateway",
)
