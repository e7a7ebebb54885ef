#!/usr/bin/env python3
"""A minimal Tidemark publisher in Python (pyzmq), written from docs/contract.md.

It binds a ZeroMQ XPUB socket, waits until a subscriber (a shard, a proxy,
a profile process) has subscribed, then sends a synthetic market in event
time: a tick first, then per transaction a bid, an impression for some and
a click for some of those, ticking as it goes (every 250 ms of wall time
and at least every minute of event time) with its `sent` counts, and at
the end ticks on through every window so that shards on the event clock
sweep them and emit observations.

    python3 examples/publisher.py --bind tcp://127.0.0.1:5556 --transactions 200

With --record FILE it writes what it made, one JSON object per
transaction ({"txid", "impression", "click"}), so a test can check every
observation a shard emits.
"""

import argparse
import json
import secrets
import time

import zmq

MINUTE_MS = 60_000


def new_txid(created_ms: int) -> str:
    """80 random bits, then the creation time in ms as 12 hex digits."""
    return secrets.token_hex(10) + format(created_ms, "012x")


class Publisher:
    def __init__(self, sock: zmq.Socket, name: str):
        self.sock = sock
        self.name = name
        self.sent: dict[str, int] = {}
        self.last_tick_wall = 0.0

    def event(self, kind: str, txid: str, ts: int, **fields) -> None:
        payload = {"type": kind, "txid": txid, "ts": ts, **fields}
        self.sock.send_multipart(
            [f"{kind}-{txid}".encode(), json.dumps(payload).encode()]
        )
        key = f"{kind}-{txid[0]}"
        self.sent[key] = self.sent.get(key, 0) + 1

    def tick(self, through_ms: int) -> None:
        """Everything of ours stamped before `through_ms` has been sent."""
        payload = {
            "type": "tick",
            "publisher": self.name,
            "ts": through_ms,
            "sent": self.sent,
        }
        self.sock.send_multipart([b"tick", json.dumps(payload).encode()])
        self.last_tick_wall = time.monotonic()


def wait_for_subscribers(sock: zmq.Socket, seconds: float) -> None:
    """An XPUB socket hears subscriptions: publish only once someone listens
    (PUB/SUB drops what is sent before a subscription arrives)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if sock.poll(100) and sock.recv().startswith(b"\x01tick"):
            return
    raise SystemExit("no subscriber within the wait")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bind", default="tcp://127.0.0.1:5556")
    ap.add_argument("--name", default="example-py")
    ap.add_argument("--transactions", type=int, default=200)
    ap.add_argument("--start-ms", type=int, default=1_700_000_000_000)
    ap.add_argument("--step-ms", type=int, default=100, help="event time between transactions")
    ap.add_argument("--tick-past-ms", type=int, default=400_000, help="event time ticked after the last event")
    ap.add_argument("--record")
    args = ap.parse_args()

    ctx = zmq.Context()
    sock = ctx.socket(zmq.XPUB)
    sock.setsockopt(zmq.XPUB_VERBOSE, 1)
    sock.setsockopt(zmq.SNDHWM, 0)  # queue rather than drop
    sock.bind(args.bind)
    wait_for_subscribers(sock, 30)
    time.sleep(0.5)  # the other subscriptions of the same subscriber

    pub = Publisher(sock, args.name)
    t = args.start_ms
    pub.tick(t)  # before the first event
    made = []
    pending = []  # (ts, kind, txid): impressions and clicks come later
    for i in range(args.transactions):
        created = args.start_ms + i * args.step_ms
        txid = new_txid(created)
        impression, click = i % 2 == 0, i % 4 == 0
        pub.event("bid", txid, created, features={"app": f"app{i % 5}", "os": "ios" if i % 3 else "android"}, price=0.5)
        if impression:
            pending.append((created + 1_000, "impression", txid))
        if click:
            pending.append((created + 5_000, "click", txid))
        made.append({"txid": txid, "impression": impression, "click": click})
        # Send what is due by now, in event time order, then tick through it.
        pending.sort()
        while pending and pending[0][0] <= created:
            ts, kind, tx = pending.pop(0)
            pub.event(kind, tx, ts)
        t = created
        if time.monotonic() - pub.last_tick_wall >= 0.25:
            pub.tick(t)
    for ts, kind, tx in sorted(pending):
        if ts - t >= MINUTE_MS:
            pub.tick(t)
        pub.event(kind, tx, ts)
        t = max(t, ts)
    # Step through the windows a minute of event time at a time.
    end = t + args.tick_past_ms
    while t < end:
        t = min(t + MINUTE_MS, end)
        pub.tick(t)
        time.sleep(0.02)
    if args.record:
        with open(args.record, "w") as f:
            for m in made:
                f.write(json.dumps(m) + "\n")
    # Let ZeroMQ hand over what is queued before the socket closes.
    sock.close(linger=5_000)
    ctx.term()
    print(json.dumps({"transactions": len(made), "sent": pub.sent, "through_ms": t}))


if __name__ == "__main__":
    main()
