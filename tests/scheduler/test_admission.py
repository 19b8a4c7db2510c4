from akka_training.scheduler.admission import PoolState, Waiting, admit, free_device_ids


def test_fifo_within_a_pool_without_backfill() -> None:
    pools = {"p": PoolState("p", (0, 1, 2))}
    queue = [Waiting(1, "a", "p", 2), Waiting(2, "b", "p", 2), Waiting(3, "c", "p", 1)]
    grants = admit(pools, queue, {}, {})
    # The second claim does not fit; the third, younger one waits behind it.
    assert [(g.claim_id, g.device_ids) for g in grants] == [(1, (0, 1))]


def test_a_claim_over_its_quota_does_not_block_other_projects() -> None:
    pools = {"p": PoolState("p", (0, 1))}
    queue = [Waiting(1, "small", "p", 1), Waiting(2, "big", "p", 1)]
    grants = admit(pools, queue, {"small": 1}, {"small": 1})
    assert [g.claim_id for g in grants] == [2]


def test_pools_are_independent() -> None:
    pools = {"a": PoolState("a", ()), "b": PoolState("b", (3,))}
    grants = admit(pools, [Waiting(1, "x", "a", 1), Waiting(2, "x", "b", 1)], {}, {})
    assert [(g.claim_id, g.device_ids) for g in grants] == [(2, (3,))]


def test_free_device_ids_skip_granted_ones() -> None:
    assert free_device_ids(4, [[1], [2]]) == (0, 3)
