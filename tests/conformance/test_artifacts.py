from __future__ import annotations

import pytest

from iterion_nb.errors import NotFoundError
from iterion_nb.runtime.ports import Store

from .conftest import make_run


async def test_artifacts_are_versioned(store: Store) -> None:
    await store.create_run(make_run())
    first = await store.put_artifact("r1", "writer", "draft", {"text": "v1 ✓"})
    second = await store.put_artifact("r1", "writer", "draft", {"text": "v2"})
    await store.put_artifact("r1", "planner", "plan", ["a", "b"])
    assert (first.version, second.version) == (1, 2)
    assert (await store.get_artifact("r1", "draft")).value == {"text": "v2"}
    assert await store.get_artifact("r1", "draft", 1) == first
    listed = await store.list_artifacts("r1")
    assert [(a.name, a.version, a.node_id) for a in listed] == [
        ("draft", 1, "writer"), ("draft", 2, "writer"), ("plan", 1, "planner")
    ]  # fmt: skip


async def test_missing_artifacts(store: Store) -> None:
    await store.create_run(make_run())
    with pytest.raises(NotFoundError) as info:
        await store.get_artifact("r1", "draft")
    assert info.value.kind == "artifact"
    await store.put_artifact("r1", "w", "draft", 1)
    with pytest.raises(NotFoundError):
        await store.get_artifact("r1", "draft", 5)
    with pytest.raises(NotFoundError):
        await store.put_artifact("ghost", "w", "draft", 1)
