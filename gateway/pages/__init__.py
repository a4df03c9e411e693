"""The pages people see from the gateway itself: who am I (``/.gateway/``), the error
family (401, 403, 404, ...), sign-out. Pure rendering, no I/O: the identity layer and the
data plane gather what a page shows and pass it in."""
