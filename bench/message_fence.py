"""What the server-side fence on message writes costs, and the window it leaves where there are no
transactions.

For each DynamoDB engine of the embedded backend (dynalite: conditional PutItem per message; moto:
one TransactWriteItems per batch), ``--messages`` messages are stored in batches of 25 through the
worker's own write path (``ConnectionRunner.persist``), then the same messages as unfenced BatchWriteItem
requests (the write before the fence) for comparison.  Reported per engine: DynamoDB requests per
message, client CPU per message (this process only: the servers run in their own), wall time per batch.

The window (dynalite only): a superseded writer's message for a sequence the new owner has not stored yet
is accepted; it stays only if it lands between the new owner's acquire and its resume query (after that,
the new owner writes the sequence itself and replaces it).  ``--takeovers`` times measure that interval
as the worker runs it: acquire answered, then the resume query (``LeaseStore.contiguous_seq``) answered.

Usage: ``python -m bench.message_fence [--messages 2000] [--takeovers 200]`` from the repository root; one
line per engine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import uuid

from fleet.aws import AwsClients
from fleet.clock import LeaseClock
from fleet.config import FleetConfig
from fleet.connection import BATCH_MAX, ConnectionRunner, HeldConnection
from fleet.history import HistoryWriter
from fleet.lease import STARTED, ConnectionRecord, HardenedRules, Holder, Lease
from fleet.profiles import HardenedProfile
from fleet.store import LeaseStore, to_wire
from fleet.upstream import UpstreamMessage
from harness.backends import start_embedded

OLD, NEW = Holder("old-owner", "gen-old"), Holder("new-owner", "gen-new")


async def never_gives_up(held: HeldConnection, reason: str) -> None:
    raise RuntimeError(f"gave up {held.pk}: {reason}")


async def new_connection(store: LeaseStore, holder: Holder) -> Lease:
    pk = f"CONN#bench-{uuid.uuid4().hex[:10]}"
    item = {"pk": pk, "desired_state": STARTED, "ws_url": "ws://bench", "lease_owner": holder.worker_id,
            "owner_gen": holder.gen, "epoch": 1, "last_seq": 0}
    await store.aws.ddb.put_item(TableName=store.config.connections_table, Item=to_wire(item))
    return Lease.granted(item)


async def fenced_writes(store: LeaseStore, config: FleetConfig, count: int) -> tuple[float, float, float]:
    """Requests and client CPU ms per message, wall ms per batch, through the worker's write path."""
    runner = ConnectionRunner(config, HardenedRules(config), OLD, store, HistoryWriter(None, "bench"), LeaseClock(),
                              never_gives_up, reconnect_policy=HardenedProfile(config).reconnect_policy)
    held = HeldConnection(lease=await new_connection(store, OLD))
    await store.transactions()  # the probe is not a message write
    before = store.aws.requests["messages"]
    cpu, wall = time.process_time(), time.perf_counter()
    for start in range(1, count + 1, BATCH_MAX):
        last = min(count, start + BATCH_MAX - 1)
        batch = [UpstreamMessage(seq, f"payload-{seq:08d}", 0.0) for seq in range(start, last + 1)]
        await runner.persist(held, batch)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    batches = -(-count // BATCH_MAX)
    return (store.aws.requests["messages"] - before) / count, cpu * 1000 / count, wall * 1000 / batches


async def unfenced_writes(store: LeaseStore, count: int) -> tuple[float, float, float]:
    """The same measures for plain BatchWriteItem (what message writes were before the fence)."""
    pk = f"CONN#bench-{uuid.uuid4().hex[:10]}"
    table = store.config.messages_table
    requests = 0
    cpu, wall = time.process_time(), time.perf_counter()
    for start in range(1, count + 1, BATCH_MAX):
        pending = [{"PutRequest": {"Item": to_wire({"pk": pk, "sk": seq, "message_data": f"payload-{seq:08d}",
                                                    "epoch": 1, "sent_ms": int(time.time() * 1000)})}}
                   for seq in range(start, min(count + 1, start + BATCH_MAX))]
        while pending:
            requests += 1
            answer = await store.aws.ddb.batch_write_item(RequestItems={table: pending})
            pending = answer.get("UnprocessedItems", {}).get(table, [])
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return requests / count, cpu * 1000 / count, wall * 1000 / -(-count // BATCH_MAX)


async def takeover_window(store: LeaseStore, rules: HardenedRules, count: int) -> list[float]:
    """ms from the moment an acquire's answer arrives to the moment the resume query's answer arrives."""
    windows = []
    for _ in range(count):
        lease = await new_connection(store, OLD)
        seen = ConnectionRecord(pk=lease.pk, desired_state=STARTED, ws_url=lease.ws_url, lease_owner=OLD.worker_id,
                                owner_gen=OLD.gen, epoch=1)
        await store.execute(store.config.connections_table, rules.acquire(lease.pk, NEW, int(time.time() * 1000), seen))
        acquired = time.perf_counter()
        await store.contiguous_seq(lease.pk, 0)
        windows.append((time.perf_counter() - acquired) * 1000)
    return windows


async def measure(engine: str, args: argparse.Namespace) -> None:
    with start_embedded(dynamodb=engine) as backend:
        os.environ.update(backend.env())
        config = FleetConfig.from_env().with_changes(profile="hardened", timescale=args.timescale)
        async with AwsClients(config) as aws:
            store = LeaseStore(aws)
            mode = "TransactWriteItems per batch" if await store.transactions() else "conditional PutItem per message"
            fenced = await fenced_writes(store, config, args.messages)
            unfenced = await unfenced_writes(store, args.messages)
            line = (f"{engine} ({mode}): fenced {fenced[0]:.3f} requests/message, {fenced[1]:.3f} ms client CPU"
                    f"/message, {fenced[2]:.1f} ms/batch of {BATCH_MAX}; unfenced BatchWriteItem {unfenced[0]:.3f}, "
                    f"{unfenced[1]:.3f} ms, {unfenced[2]:.1f} ms")
            if not await store.transactions():
                windows = sorted(await takeover_window(store, HardenedRules(config), args.takeovers))
                line += (f"; acquire-to-resume-query window over {len(windows)} takeovers: p50 "
                         f"{statistics.median(windows):.1f} ms, p99 {windows[int(0.99 * (len(windows) - 1))]:.1f} ms, "
                         f"max {windows[-1]:.1f} ms")
            print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2000, help="messages written per engine and mode")
    parser.add_argument("--takeovers", type=int, default=200, help="takeovers timed (dynalite)")
    parser.add_argument("--timescale", type=float, default=1.0, help="request timeout scale (1: 3 s)")
    args = parser.parse_args()
    if args.messages < 1 or args.takeovers < 1:
        parser.error("--messages and --takeovers must be at least 1")
    for engine in ("dynalite", "moto"):
        asyncio.run(measure(engine, args))


if __name__ == "__main__":
    main()
