"""Image attachments reach vision models (issue 20, upstream's multimodal forwarding).

A user prompt that shows an ``image`` attachment (``{{attachments.logo}}``)
sends the image itself: on the in-process loop as an image block between the
prompt's text (base64 on the Messages API, a data URL on Chat Completions);
the claude CLI takes no image in its prompt, so its node gets a ``read_image``
tool that returns the image. Checked on what reached the loopback model server.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from .conftest import Harness

#: A 1x1 PNG: real bytes, so the run records image/png.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
ENCODED = base64.b64encode(PNG).decode()

FLOW = """\
attachments:
  logo: image

agent looker:
  model: "scripted"
  user: "Here is the logo: {{attachments.logo}} Which colour is it?"

workflow w:
  entry: looker
  looker -> done
"""


@pytest.fixture
def logo(tmp_path: Path) -> Path:
    path = tmp_path / "logo.png"
    path.write_bytes(PNG)
    return path


def _first_user_content(h: Harness) -> Any:
    return h.turns("looker")[0][-1]["content"]


@pytest.mark.parametrize("provider_kind", ["scripted", "anthropic", "anthropic-stream", "openai"])
async def test_the_loop_sends_the_image_between_the_prompts_text(
    harness_factory: Any, logo: Path
) -> None:
    h: Harness = harness_factory({"nodes": {"looker": [{"text": "Blue."}]}})
    run = await h.start(FLOW, attachments={"logo": logo})
    assert await run.wait(60) == "finished", run.error
    content = _first_user_content(h)
    kinds = [b["type"] for b in content]
    if h.kind == "openai":
        assert kinds == ["text", "image_url", "text"]
        assert content[1]["image_url"]["url"] == f"data:image/png;base64,{ENCODED}"
    elif h.kind == "scripted":  # the loop's own block: the file, read when sent
        assert kinds == ["text", "image", "text"]
        assert content[1] == {"type": "image", "path": str(logo), "media_type": "image/png"}
    else:
        assert kinds == ["text", "image", "text"]
        assert content[1]["source"] == {"type": "base64", "media_type": "image/png",
                                        "data": ENCODED}  # fmt: skip
    assert content[0]["text"] == "Here is the logo: "
    assert content[2]["text"] == " Which colour is it?"
    # what the run recorded stays small: the path, not the bytes
    asked = [e.data for e in await run.events() if e.type == "llm_request"]
    assert ENCODED not in str(asked)


@pytest.mark.parametrize("provider_kind", ["claude_code"])
async def test_the_claude_cli_looks_at_the_image_with_read_image(
    harness_factory: Any, logo: Path
) -> None:
    h: Harness = harness_factory({"nodes": {"looker": [
        {"tool_calls": [{"name": "mcp__iterion__read_image", "input": {"path": str(logo)}}]},
        {"tool_calls": [{"name": "mcp__iterion__read_image", "input": {"path": "/etc/passwd"}}]},
        {"text": "Blue."},
    ]}})  # fmt: skip
    run = await h.start(FLOW, attachments={"logo": logo})
    assert await run.wait(90) == "finished", run.error
    assert str(logo) in h.last_user_text("looker", 0)  # the prompt names the file
    seen = h.turns("looker")[1][-1]["content"]
    (result,) = [b for b in seen if b.get("type") == "tool_result"]
    images = [b for b in result["content"] if b.get("type") == "image"]
    assert images and images[0]["source"]["data"] == ENCODED
    # only the run's images: anything else is refused, naming them
    assert f"read_image shows this run's image attachments: {logo}" in h.last_user_text("looker", 2)


async def test_an_image_too_large_or_gone_reaches_the_model_as_a_note(tmp_path: Path) -> None:
    from iterion_nb.backends.providers.base import MAX_IMAGE_BYTES, image_data

    big = tmp_path / "big.png"
    big.write_bytes(b"\0" * (MAX_IMAGE_BYTES + 1))
    assert image_data({"path": str(big)}) == f"[image {big} not sent: 5.0 MB, over the 5 MB limit]"
    gone = tmp_path / "gone.png"
    assert image_data({"path": str(gone)}) == (
        f"[image {gone} could not be read: No such file or directory]"
    )


async def test_an_image_attachment_must_be_an_image(tmp_path: Path) -> None:
    import iterion_nb as it
    from iterion_nb.errors import VarsError
    from iterion_nb.session import Session
    from iterion_nb.store import MemoryStore

    notes = tmp_path / "notes.txt"
    notes.write_text("not a picture")
    session = Session(MemoryStore(), scenario={"nodes": {"looker": [{"text": "?"}]}})
    try:
        with pytest.raises(
            VarsError, match=r"attachment 'logo' is an image; notes.txt is text/plain"
        ):
            await session.start(it.compile(FLOW), attachments={"logo": notes})
    finally:
        await session.close()
