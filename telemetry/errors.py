"""Typed errors that carry the context a user needs to act on them."""

from __future__ import annotations


class FactoryFloorError(Exception):
    """Base of every error this package raises on purpose."""


class StoreLockedError(FactoryFloorError):
    """Another process holds the store file (DuckDB allows one writer per file)."""

    def __init__(self, path: str, holder: str) -> None:
        self.path = path
        self.holder = holder
        super().__init__(
            f"store {path} is in use by another process ({holder}); DuckDB lets one process own "
            "a store file. Stop that process, or point this command at another --store."
        )


class StoreError(FactoryFloorError):
    """The store could not be opened or written (bad path, read-only, disk full, corrupt)."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"store {path}: {reason}")


class UnknownScenarioError(FactoryFloorError):
    def __init__(self, name: str, known: list[str]) -> None:
        self.name = name
        super().__init__(f"unknown scenario {name!r}; known scenarios: {', '.join(known)}")


class DuplicateBatchError(FactoryFloorError):
    """A batch whose id is already stored: it was delivered before, so nothing is written."""

    def __init__(self, batch_id: str, stored_at: object) -> None:
        self.batch_id = batch_id
        self.stored_at = stored_at
        super().__init__(f"batch {batch_id} was already stored at {stored_at}")
