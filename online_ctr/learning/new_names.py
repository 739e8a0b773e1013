"""Feature names a process has just hashed for the first time, waiting to be recorded.

The hashers (:class:`~online_ctr.learning.features.FeatureHasher` and the API's compiled name
table) hash a name once and then remember its id, so a name reaches this buffer only on that
first hash: a request whose names were all seen before adds nothing and pays nothing. The
buffer is bounded: past ``most`` waiting names, further ones are dropped and counted, so a
burst of new names while the record is slow (or Redis down) costs bounded memory.

>>> names = NewNames(most=2)
>>> names.add(-1, "site=news")
>>> names.extend([7, 8], [b"os=ios", b"os=android"])
>>> names.dropped, names.drain()
(1, ([18446744073709551615, 7], [b'site=news', b'os=ios']))
>>> len(names)
0
"""

from __future__ import annotations

from collections.abc import Sequence


class NewNames:
    """(id, name) pairs waiting to be recorded, at most ``most``; ids as the hashers hold them
    (int64 bits), given back unsigned; names as UTF-8 bytes."""

    def __init__(self, most: int) -> None:
        self.most = most
        self.dropped = 0
        self._ids: list[int] = []
        self._names: list[bytes] = []

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, feature_id: int, name: str) -> None:
        """One name the hasher has just hashed."""
        if len(self._ids) >= self.most:
            self.dropped += 1
            return
        self._ids.append(feature_id)
        self._names.append(name.encode())

    def extend(self, ids: Sequence[int], names: Sequence[bytes]) -> None:
        """Names the compiled table has just hashed (bytes already), with their ids."""
        room = max(0, self.most - len(self._ids))
        self.dropped += max(0, len(ids) - room)
        self._ids.extend(ids[:room])
        self._names.extend(names[:room])

    def drain(self) -> tuple[list[int], list[bytes]]:
        """Every waiting pair, ids unsigned; the buffer is left empty."""
        ids, names = [i & 0xFFFFFFFFFFFFFFFF for i in self._ids], self._names
        self._ids, self._names = [], []
        return ids, names

    def take_dropped(self) -> int:
        """Names dropped since the last call."""
        dropped, self.dropped = self.dropped, 0
        return dropped
