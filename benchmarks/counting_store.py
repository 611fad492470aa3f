"""A torch.distributed store that counts what is asked of it, for the
setup benchmark (bench_setup.py) and the store-operations test
(test/python/scenarios.py)."""

import torch.distributed as dist


class CountingStore(dist.Store):
    """Delegates to `inner` and counts operations by phase (`phase`, set by
    the caller), only those on keys containing `key_part` when given."""

    def __init__(self, inner, key_part: str | None = None):
        super().__init__()
        self.inner = inner
        self.key_part = key_part
        self.phase = "init"
        self.counts: dict[str, int] = {}
        # Bytes that gets returned, by phase; bytes set, by key (counted
        # keys only).
        self.bytes_read: dict[str, int] = {}
        self.bytes_set: dict[str, int] = {}

    def _count(self, key: str) -> None:
        if self._counted(key):
            self.counts[self.phase] = self.counts.get(self.phase, 0) + 1

    def _counted(self, key: str) -> bool:
        return self.key_part is None or self.key_part in key

    def set(self, key, value):
        self._count(key)
        if self._counted(key):
            self.bytes_set[key] = len(value)
        self.inner.set(key, value)

    def get(self, key):
        self._count(key)
        value = self.inner.get(key)
        if self._counted(key):
            self.bytes_read[self.phase] = self.bytes_read.get(self.phase, 0) + len(value)
        return value

    def add(self, key, value):
        self._count(key)
        return self.inner.add(key, value)

    def compare_set(self, key, expected, desired):
        self._count(key)
        return self.inner.compare_set(key, expected, desired)

    def check(self, keys):
        for key in keys:
            self._count(key)
        return self.inner.check(keys)

    def wait(self, keys, timeout=None):
        for key in keys:
            self._count(key)
        return self.inner.wait(keys) if timeout is None else self.inner.wait(keys, timeout)

    def delete_key(self, key):
        self._count(key)
        return self.inner.delete_key(key)

    def num_keys(self):
        return self.inner.num_keys()
