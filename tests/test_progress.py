"""``onyxrt.progress.Progress``: a redrawn line on a terminal, sparse plain lines elsewhere."""

from __future__ import annotations

import io

import pytest

from onyxrt.progress import MIN_TOTAL, PROGRESS_ENV, Progress


class FakeTerminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def _progress_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PROGRESS_ENV, raising=False)


def test_terminal_redraws_one_line_with_bar_percentage_and_time() -> None:
    stream = FakeTerminal()
    with Progress(40, "bench", stream=stream) as progress:
        for _ in range(40):
            progress.advance()
    text = stream.getvalue()
    assert text.startswith("\rbench [")  # drawn at once, at 0 %
    assert text.endswith("\n") and text.count("\n") == 1  # one line, finished at the end
    final = text.rstrip("\n").rsplit("\r", 1)[-1]
    assert final.startswith("bench [" + "#" * 24 + "] 100% (40/40, ")
    assert final.endswith("s)")  # elapsed seconds
    assert "  0% (0/40" in text


def test_plain_stream_gets_a_line_per_tenth_at_most() -> None:
    stream = io.StringIO()
    with Progress(50, "runs", stream=stream) as progress:
        for _ in range(50):
            progress.advance()
    lines = stream.getvalue().splitlines()
    assert "\r" not in stream.getvalue()
    assert [line.split("%")[0] for line in lines] == [
        f"runs: {p:3d}" for p in range(10, 101, 10)
    ]
    assert lines[-1].startswith("runs: 100% (50/50, ")


def test_plain_lines_with_big_steps_skip_to_the_current_tenth() -> None:
    stream = io.StringIO()
    with Progress(100, "compile", stream=stream) as progress:
        progress.advance(35)
        progress.advance(65)
    lines = stream.getvalue().splitlines()
    assert [line.split("(")[0].strip() for line in lines] == ["compile:  35%", "compile: 100%"]


def test_count_never_passes_total() -> None:
    with Progress(10, "x", stream=io.StringIO()) as progress:
        progress.advance(25)
    assert progress.done == 10


@pytest.mark.parametrize("stream_type", [io.StringIO, FakeTerminal])
def test_nothing_for_tiny_totals(stream_type: type[io.StringIO]) -> None:
    stream = stream_type()
    with Progress(MIN_TOTAL - 1, "tiny", stream=stream) as progress:
        for _ in range(MIN_TOTAL - 1):
            progress.advance()
    assert not progress.enabled
    assert stream.getvalue() == ""


@pytest.mark.parametrize("stream_type", [io.StringIO, FakeTerminal])
def test_environment_turns_it_off(
    stream_type: type[io.StringIO], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PROGRESS_ENV, "0")
    stream = stream_type()
    with Progress(100, "off", stream=stream) as progress:
        progress.advance(100)
    assert stream.getvalue() == ""


def test_closed_stream_turns_it_off_without_raising() -> None:
    stream = FakeTerminal()
    with Progress(20, "closed", stream=stream) as progress:
        stream.close()
        progress.advance(20)
    assert not progress.enabled
