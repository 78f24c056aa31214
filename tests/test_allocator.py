"""The best-fit arena: growth strategies, best fit, coalescing, limits and statistics."""

from __future__ import annotations

import gc
import threading
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import onyxrt as ort
from onyxrt.allocator import Allocation, ArenaAllocator, HostMemory
from onyxrt.errors import InvalidProviderOption, OnyxError, OutOfMemory

KiB = 1024


def _arena(strategy: str = "kSameAsRequested", **kwargs: Any) -> ArenaAllocator:
    return ArenaAllocator(HostMemory(), strategy=strategy, **kwargs)


class RecordingMemory(HostMemory):
    """Host memory that records what the arena reserves and releases."""

    def __init__(self, refuse_above: int | None = None) -> None:
        self.reserved: list[int] = []
        self.released: list[int] = []
        self.refuse_above = refuse_above

    def reserve(self, nbytes: int) -> Any:
        if self.refuse_above is not None and nbytes > self.refuse_above:
            raise MemoryError(f"device has only {self.refuse_above} bytes free")
        self.reserved.append(nbytes)
        return super().reserve(nbytes)

    def release(self, handle: Any) -> None:
        self.released.append(len(handle))


# -- growth --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_bytes", "aligned"), [(1, 256), (256, 256), (257, 512), (1000, 1024), (4096, 4096)]
)
def test_same_as_requested_reserves_exactly_the_aligned_request(request_bytes, aligned):
    memory = RecordingMemory()
    arena = ArenaAllocator(memory, strategy="kSameAsRequested")
    block = arena.allocate(request_bytes)
    assert memory.reserved == [aligned]
    assert (block.size, block.requested) == (aligned, request_bytes)
    assert len(block.buffer) == aligned
    stats = arena.stats()
    assert (stats.reserved, stats.in_use, stats.regions) == (aligned, aligned, 1)


def test_same_as_requested_makes_one_region_per_request_that_does_not_fit():
    memory = RecordingMemory()
    arena = ArenaAllocator(memory, strategy="kSameAsRequested")
    for n in (1000, 300, 5000):
        arena.allocate(n)
    assert memory.reserved == [1024, 512, 5120]
    assert arena.stats().largest_free_block == 0  # no waste at all


def test_next_power_of_two_region_sizes_double():
    memory = RecordingMemory()
    arena = ArenaAllocator(memory, strategy="kNextPowerOfTwo", initial_region=256)
    for _ in range(15):
        arena.allocate(256)
    assert memory.reserved == [256, 512, 1024, 2048]
    assert arena.stats().reserved == 256 + 512 + 1024 + 2048
    assert arena.stats().in_use == 15 * 256


def test_next_power_of_two_default_first_region_is_one_mib():
    memory = RecordingMemory()
    arena = ArenaAllocator(memory, strategy="kNextPowerOfTwo")
    arena.allocate(10)
    arena.allocate(1 << 20)  # does not fit in what is left: next region is twice the first
    assert memory.reserved == [1 << 20, 2 << 20]


def test_next_power_of_two_request_larger_than_next_region_gets_its_own_size():
    memory = RecordingMemory()
    arena = ArenaAllocator(memory, strategy="kNextPowerOfTwo", initial_region=1 * KiB)
    arena.allocate(10 * KiB)  # larger than the 1 KiB first region: reserved as asked
    arena.allocate(1 * KiB)  # the next region is twice the big one
    assert memory.reserved == [10 * KiB, 20 * KiB]


def test_small_requests_reuse_existing_regions():
    memory = RecordingMemory()
    arena = ArenaAllocator(memory, strategy="kNextPowerOfTwo", initial_region=4 * KiB)
    blocks = [arena.allocate(256) for _ in range(16)]
    assert memory.reserved == [4 * KiB]
    assert len({(b.region, b.offset) for b in blocks}) == 16


def test_unknown_strategy_is_an_invalid_provider_option():
    with pytest.raises(InvalidProviderOption) as err:
        ArenaAllocator(HostMemory(), strategy="kDoubleIt")
    assert "'kDoubleIt'" in str(err.value)
    assert "kNextPowerOfTwo" in str(err.value) and "kSameAsRequested" in str(err.value)


def test_negative_request_is_refused():
    with pytest.raises(ValueError, match="negative"):
        _arena().allocate(-1)


# -- best fit and coalescing ---------------------------------------------------------------


def _carve(arena: ArenaAllocator, sizes: list[int]) -> list[Allocation]:
    blocks = [arena.allocate(n) for n in sizes]
    assert len({b.region for b in blocks}) == 1
    return blocks


def test_best_fit_picks_the_smallest_free_block_that_fits():
    arena = _arena("kNextPowerOfTwo", initial_region=8 * KiB)
    #            big        sep  small sep  medium     sep  (tail: 2560 free)
    blocks = _carve(arena, [2048, 256, 512, 256, 1024, 256, 1280])
    big, small, medium = blocks[0], blocks[2], blocks[4]
    for b in (big, small, medium):
        arena.free(b)
    assert arena.allocate(500).offset == small.offset
    assert arena.allocate(1000).offset == medium.offset
    assert arena.allocate(1500).offset == big.offset
    assert arena.stats().regions == 1


def test_exact_fit_is_preferred_over_a_larger_earlier_block():
    arena = _arena("kNextPowerOfTwo", initial_region=4 * KiB)
    blocks = _carve(arena, [1024, 256, 512, 256])
    arena.free(blocks[0])
    arena.free(blocks[2])
    assert arena.allocate(512).offset == blocks[2].offset


def test_best_fit_looks_across_regions():
    arena = _arena("kSameAsRequested")
    large = arena.allocate(4 * KiB)
    small = arena.allocate(1 * KiB)
    arena.free(large)
    arena.free(small)
    got = arena.allocate(700)
    assert got.region == small.region
    assert arena.stats().regions == 2


@pytest.mark.parametrize("order", [(0, 1, 2, 3), (3, 2, 1, 0), (1, 3, 0, 2), (2, 0, 3, 1)])
def test_freeing_adjacent_blocks_coalesces_back_to_the_whole_region(order):
    arena = _arena("kNextPowerOfTwo", initial_region=4 * KiB)
    blocks = _carve(arena, [1024, 1024, 1024, 1024])
    assert arena.stats().largest_free_block == 0
    for i in order:
        arena.free(blocks[i])
    stats = arena.stats()
    assert stats.largest_free_block == 4 * KiB
    assert stats.in_use == 0
    whole = arena.allocate(4 * KiB)  # fits without growing: the blocks really merged
    assert (whole.offset, arena.stats().regions) == (0, 1)


def test_partial_coalescing_merges_only_neighbours():
    arena = _arena("kNextPowerOfTwo", initial_region=4 * KiB)
    blocks = _carve(arena, [1024, 1024, 1024, 1024])
    arena.free(blocks[0])
    arena.free(blocks[2])
    assert arena.stats().largest_free_block == 1024  # not adjacent
    arena.free(blocks[1])
    assert arena.stats().largest_free_block == 3 * 1024


def test_double_free_raises():
    arena = _arena()
    keep = arena.allocate(256)
    block = arena.allocate(256)
    arena.free(block)
    with pytest.raises(ValueError, match="freed twice"):
        arena.free(block)
    stats = arena.stats()
    assert stats.in_use == keep.size  # the bookkeeping was not corrupted
    assert stats.frees == 1


def test_double_free_of_a_coalesced_block_raises():
    arena = _arena("kNextPowerOfTwo", initial_region=4 * KiB)
    a, b, _ = _carve(arena, [1024, 1024, 1024])
    arena.free(a)
    arena.free(b)
    with pytest.raises(ValueError, match="freed twice"):
        arena.free(a)


def test_block_of_a_region_this_arena_does_not_have_is_refused():
    mine = _arena()
    theirs = _arena()
    theirs.allocate(256)
    foreign = theirs.allocate(256)  # region 2; `mine` has no region 2
    mine.allocate(256)
    with pytest.raises(ValueError, match="does not belong"):
        mine.free(foreign)


def test_block_from_another_arena_is_refused():
    mine = _arena("kNextPowerOfTwo", initial_region=4 * KiB)
    theirs = _arena("kNextPowerOfTwo", initial_region=4 * KiB)
    live = mine.allocate(256)
    foreign = theirs.allocate(256)
    with pytest.raises(ValueError):
        mine.free(foreign)
    assert mine.stats().in_use == live.size


def test_blocks_do_not_share_memory():
    arena = _arena("kNextPowerOfTwo", initial_region=4 * KiB)
    a, b, c = (arena.allocate(n) for n in (300, 1000, 256))
    a.buffer[:] = 1
    b.buffer[:] = 2
    c.buffer[:] = 3
    assert (a.buffer == 1).all() and (b.buffer == 2).all() and (c.buffer == 3).all()
    assert not np.shares_memory(a.buffer, b.buffer)


# -- limits --------------------------------------------------------------------------------


def test_limit_gives_out_of_memory_naming_request_and_limit():
    arena = _arena("kSameAsRequested", limit=4 * KiB, name="TestArena")
    arena.allocate(3 * KiB)
    with pytest.raises(OutOfMemory) as err:
        arena.allocate(1500)
    assert isinstance(err.value, MemoryError)
    message = str(err.value)
    assert "TestArena" in message
    assert "requested 1500 bytes" in message
    assert "limit 4096 bytes" in message
    assert "3072 in use" in message
    assert "release_cached()" in message  # what to do about it


def test_failed_allocation_changes_nothing():
    arena = _arena("kSameAsRequested", limit=4 * KiB)
    arena.allocate(3 * KiB)
    before = arena.stats()
    with pytest.raises(OutOfMemory):
        arena.allocate(2 * KiB)
    assert arena.stats() == before
    arena.allocate(1 * KiB)  # what does fit still works


def test_request_exactly_at_the_limit_succeeds():
    arena = _arena("kSameAsRequested", limit=4 * KiB)
    arena.allocate(4 * KiB)
    assert arena.stats().reserved == 4 * KiB


def test_zero_limit_means_no_limit():
    arena = _arena("kSameAsRequested", limit=0)
    arena.allocate(64 * KiB)
    assert arena.stats().limit is None


def test_next_power_of_two_near_the_limit_falls_back_to_the_exact_request():
    memory = RecordingMemory()
    arena = ArenaAllocator(memory, strategy="kNextPowerOfTwo", initial_region=1 * KiB, limit=2560)
    arena.allocate(1 * KiB)
    arena.allocate(1 * KiB)  # doubling would reserve 2 KiB, passing the 2.5 KiB limit
    assert memory.reserved == [1 * KiB, 1 * KiB]
    arena.allocate(512)  # exactly fills the limit
    assert memory.reserved == [1 * KiB, 1 * KiB, 512]
    assert arena.stats().reserved == 2560
    with pytest.raises(OutOfMemory, match="limit 2560 bytes"):
        arena.allocate(1)


def test_first_region_larger_than_the_limit_falls_back_to_the_request():
    memory = RecordingMemory()
    arena = ArenaAllocator(memory, strategy="kNextPowerOfTwo", limit=64 * KiB)
    arena.allocate(1000)  # the default first region (1 MiB) would pass the limit
    assert memory.reserved == [1024]


def test_device_refusing_memory_is_out_of_memory():
    arena = ArenaAllocator(RecordingMemory(refuse_above=8 * KiB), strategy="kSameAsRequested")
    arena.allocate(8 * KiB)
    with pytest.raises(OutOfMemory) as err:
        arena.allocate(16 * KiB)
    assert "16384" in str(err.value)
    assert "device has only 8192 bytes free" in str(err.value)
    assert isinstance(err.value.__cause__, MemoryError)


def test_cached_regions_count_against_the_limit_until_released():
    arena = _arena("kSameAsRequested", limit=4 * KiB)
    arena.free(arena.allocate(2 * KiB))
    with pytest.raises(OutOfMemory):
        arena.allocate(3 * KiB)  # 2 KiB cached + 3 KiB new > 4 KiB
    assert arena.release_cached() == 2 * KiB
    arena.allocate(3 * KiB)


# -- releasing cached memory ---------------------------------------------------------------


def test_release_cached_returns_wholly_free_regions_only():
    memory = RecordingMemory()
    arena = ArenaAllocator(memory, strategy="kSameAsRequested")
    a = arena.allocate(1 * KiB)
    b = arena.allocate(2 * KiB)
    c = arena.allocate(4 * KiB)
    arena.free(a)
    arena.free(c)
    assert arena.stats().reserved == 7 * KiB
    released = arena.release_cached()
    assert released == 5 * KiB
    assert sorted(memory.released) == [1 * KiB, 4 * KiB]
    stats = arena.stats()
    assert (stats.reserved, stats.regions, stats.in_use) == (2 * KiB, 1, 2 * KiB)
    assert b.buffer.size == 2 * KiB
    assert arena.release_cached() == 0  # nothing more to give back
    arena.free(b)
    assert arena.release_cached() == 2 * KiB
    assert arena.stats().reserved == 0


def test_region_with_one_live_block_is_kept():
    arena = _arena("kNextPowerOfTwo", initial_region=4 * KiB)
    blocks = _carve(arena, [256, 256, 256])
    for b in blocks[:2]:
        arena.free(b)
    assert arena.release_cached() == 0
    assert arena.stats().reserved == 4 * KiB


def test_arena_grows_again_after_release():
    arena = _arena("kSameAsRequested")
    arena.free(arena.allocate(1 * KiB))
    arena.release_cached()
    block = arena.allocate(2 * KiB)
    assert arena.stats().reserved == 2 * KiB
    arena.free(block)


# -- statistics ----------------------------------------------------------------------------


def test_statistics_track_in_use_peak_and_counts():
    arena = _arena("kSameAsRequested", limit=1 << 20)
    a = arena.allocate(1000)
    s = arena.stats()
    assert (s.in_use, s.peak_in_use, s.allocations, s.frees) == (1024, 1024, 1, 0)
    b = arena.allocate(3000)
    s = arena.stats()
    assert (s.in_use, s.peak_in_use, s.allocations, s.frees) == (4096, 4096, 2, 0)
    arena.free(a)
    s = arena.stats()
    assert (s.in_use, s.peak_in_use, s.allocations, s.frees) == (3072, 4096, 2, 1)
    c = arena.allocate(512)
    arena.free(b)
    arena.free(c)
    s = arena.stats()
    assert (s.in_use, s.peak_in_use, s.allocations, s.frees) == (0, 4096, 3, 3)
    assert s.limit == 1 << 20
    assert s.as_dict()["peak_in_use"] == 4096
    assert set(s.as_dict()) == {
        "in_use",
        "peak_in_use",
        "reserved",
        "regions",
        "allocations",
        "frees",
        "limit",
        "largest_free_block",
    }


def test_empty_arena_statistics():
    s = _arena().stats()
    assert (s.in_use, s.peak_in_use, s.reserved, s.regions, s.largest_free_block) == (0,) * 5


def test_threads_allocating_and_freeing_leave_nothing_in_use():
    arena = _arena("kNextPowerOfTwo", initial_region=16 * KiB)
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        live: list[Allocation] = []
        try:
            start.wait()
            for _ in range(300):
                if live and rng.random() < 0.45:
                    arena.free(live.pop(int(rng.integers(len(live)))))
                else:
                    block = arena.allocate(int(rng.integers(1, 4 * KiB)))
                    block.buffer[:] = seed  # our memory is ours alone
                    live.append(block)
                    assert (live[-1].buffer == seed).all()
            for block in live:
                assert (block.buffer == seed).all()
                arena.free(block)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    stats = arena.stats()
    assert stats.in_use == 0
    assert stats.allocations == stats.frees
    assert arena.release_cached() == stats.reserved


# -- property: any sequence of operations keeps the books straight -------------------------

_ops = st.lists(
    st.one_of(
        st.tuples(st.just("alloc"), st.integers(0, 6000)),
        st.tuples(st.just("free"), st.integers(0, 1000)),
        st.just(("release", 0)),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(ops=_ops, strategy=st.sampled_from(["kNextPowerOfTwo", "kSameAsRequested"]))
def test_any_sequence_keeps_in_use_exact_and_blocks_disjoint(ops, strategy):
    arena = _arena(strategy, initial_region=2 * KiB)
    live: list[Allocation] = []
    peak = 0
    for op, arg in ops:
        if op == "alloc":
            block = arena.allocate(arg)
            assert block.size >= max(arg, 1) and block.size % 256 == 0
            assert len(block.buffer) == block.size
            live.append(block)
        elif op == "free" and live:
            arena.free(live.pop(arg % len(live)))
        elif op == "release":
            arena.release_cached()
        in_use = sum(b.size for b in live)
        peak = max(peak, in_use)
        stats = arena.stats()
        assert stats.in_use == in_use
        assert stats.peak_in_use == peak
        assert stats.largest_free_block <= stats.reserved - in_use
        spans = sorted((b.region, b.offset, b.offset + b.size) for b in live)
        for (r1, _, end1), (r2, start2, _) in zip(spans, spans[1:]):
            assert r1 != r2 or end1 <= start2, "two live blocks overlap"
        for i, a in enumerate(live):
            for b in live[i + 1 :]:
                assert not np.shares_memory(a.buffer, b.buffer)
    for block in live:
        arena.free(block)
    stats = arena.stats()
    assert stats.in_use == 0
    assert arena.release_cached() == stats.reserved
    assert arena.stats().reserved == 0


# -- through a session: the toy device's arena ---------------------------------------------

CPU = "CPUExecutionProvider"
W_BLOCK = 256  # add_relu_model's weight w (3 float32) on the toy device, aligned


def _relu_x_plus_w(x: np.ndarray) -> np.ndarray:
    return np.maximum(x + np.array([1.0, -2.0, 3.0], np.float32), 0)


def test_session_reports_the_device_arena_and_releases_its_cache(toy_provider, add_relu_model):
    sess = ort.InferenceSession(add_relu_model, providers=[toy_provider, CPU])
    assert CPU not in sess.memory_stats()  # numpy allocates CPU values: no arena
    before = sess.memory_stats()[toy_provider]
    assert (before["in_use"], before["limit"]) == (W_BLOCK, None)  # the weight lives there
    x = np.ones((1000, 3), np.float32)  # 12000 bytes: more than the first 4 KiB region
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], _relu_x_plus_w(x))
    after = sess.memory_stats()[toy_provider]
    assert after["in_use"] == W_BLOCK  # every intermediate went back to the arena
    assert after["peak_in_use"] >= W_BLOCK + 2 * 12032  # x and x + w were live together
    assert after["allocations"] >= before["allocations"] + 3  # x, x + w and the result
    assert after["frees"] >= before["frees"] + 3
    assert after["reserved"] > before["reserved"]
    released = sess.release_cached_memory()
    assert released > 0
    cached = sess.memory_stats()[toy_provider]
    assert cached["reserved"] == after["reserved"] - released
    assert cached["in_use"] == W_BLOCK  # the weight's region is kept
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], _relu_x_plus_w(x))


@pytest.mark.parametrize("strategy", ["kNextPowerOfTwo", "kSameAsRequested"])
def test_memory_limit_of_a_device_provider_is_enforced(toy_provider, add_relu_model, strategy):
    limit = 2 * KiB
    sess = ort.InferenceSession(
        add_relu_model,
        providers=[
            (toy_provider, {"memory_limit": "2KiB", "arena_extend_strategy": strategy}),
            CPU,
        ],
    )
    assert sess.memory_stats()[toy_provider]["limit"] == limit
    # x (1200 bytes) fits beside w, but the intermediate x + w (1200 more) does not.
    big = np.ones((100, 3), np.float32)
    with pytest.raises(OnyxError) as err:  # OutOfMemory, possibly wrapped
        sess.run(None, {"x": big})
    chain, exc = [], err.value
    while exc is not None:
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    assert any(isinstance(e, OutOfMemory) for e in chain)
    message = str(err.value)
    assert "requested 1200 bytes" in message and f"limit {limit} bytes" in message
    failed = sess.memory_stats()[toy_provider]
    assert failed["reserved"] <= limit
    assert W_BLOCK + 1280 <= failed["peak_in_use"] <= limit
    del err, chain, exc
    gc.collect()
    assert sess.memory_stats()[toy_provider]["in_use"] == W_BLOCK  # the failed run leaked nothing
    small = np.ones((40, 3), np.float32)  # what fits still runs
    np.testing.assert_array_equal(sess.run(None, {"x": small})[0], _relu_x_plus_w(small))
    stats = sess.memory_stats()[toy_provider]
    assert stats["in_use"] == W_BLOCK
    assert stats["reserved"] <= limit and stats["peak_in_use"] <= limit
