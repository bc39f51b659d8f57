#!/usr/bin/env python3
"""Makes the fuzz targets' seed corpus (fuzz/corpus/<target>/) from real traffic (see
README.md): `seeds.py CAPTURE_DIR PORT [PORT...]`.

CAPTURE_DIR holds what record.py recorded of `cargo run --example family` through it; each
PORT is a running server (standalone) whose replies to HELLO (2 and 3), CLIENT LIST, INFO,
ROLE, SUBSCRIBE/PSUBSCRIBE/SSUBSCRIBE with PUBLISH of our messages and Redisson's, EVAL and
refusals are asked here. A port given as `cluster:PORT` is a node of a Cluster that serves
slots 0-8191 only, another node serving the rest (CLUSTER SLOTS and SHARDS, MOVED) and `sentinel:PORT` a Sentinel (SENTINEL GET-MASTER-ADDR-BY-NAME mymaster)."""
import glob, os, socket, sys, time

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
# A seed is at most this long: libFuzzer's inputs stay small, and the corpus too.
MAX_SEED = 4096


def save(target, name, data):
    os.makedirs(os.path.join(out, target), exist_ok=True)
    with open(os.path.join(out, target, name), "wb") as f:
        f.write(data[:MAX_SEED])


def command(*args):
    parts = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(parts)


def ask(port, *commands, wait=0.3):
    """The raw bytes a server sends back to `commands`, sent on one connection."""
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"".join(command(*c) for c in commands))
    time.sleep(wait)
    s.settimeout(0.2)
    got = b""
    try:
        while True:
            data = s.recv(65536)
            if not data:
                break
            got += data
    except socket.timeout:
        pass
    s.close()
    return got


def bulk_text(reply):
    """The text of a bulk string reply ($n\\r\\n...\\r\\n) or RESP3 verbatim one (=n\\r\\ntxt:...)."""
    head, _, rest = reply.partition(b"\r\n")
    n = int(head[1:])
    text = rest[:n]
    return text[4:] if head.startswith(b"=") else text


def from_capture(capture):
    """Each connection's server bytes: a pub/sub connection's to subscriber_resp, with its
    messages' payloads to pubsub_message; a link's to link_reply and hello (its first reply
    after SETNAME is HELLO's)."""
    subs = links = 0
    for path in sorted(glob.glob(os.path.join(capture, "conn-*.bin"))):
        data = open(path, "rb").read()
        name = os.path.basename(path)[:-4]
        if b"subscribe\r\n" in data:
            if subs < 6:
                save("subscriber_resp", f"family-{name}", data)
            subs += 1
            for payload in payloads(data):
                save("pubsub_message", "family-" + payload.split(b" ")[0].decode(), payload)
        else:
            if links < 8:
                save("link_reply", f"family-{name}", data)
            links += 1
            if b"$7\r\nversion\r\n" in data and links == 1:
                save("hello", "redis-7.0-resp2-family", data[data.index(b"*14\r\n"):])


def payloads(data):
    """The payloads of the `message` frames in a pub/sub connection's bytes."""
    found, at = [], 0
    marker = b"$7\r\nmessage\r\n"
    while (at := data.find(marker, at)) >= 0:
        at += len(marker)
        try:
            for _ in range(2):
                head_end = data.index(b"\r\n", at)
                n = int(data[at + 1 : head_end])
                item = data[head_end + 2 : head_end + 2 + n]
                at = head_end + 2 + n + 2
            found.append(item)
        except ValueError:
            break
    return found


def standalone(port):
    info = ask(port, ("INFO", "server"))
    # Valkey says redis_version:7.2.4 too, for the clients that read it, and its own beside.
    field = b"valkey_version:" if b"valkey_version:" in info else b"redis_version:"
    version = info.split(field)[1].split(b"\r")[0]
    v = field.split(b"_")[0].decode() + "-" + version.decode()
    hello = ask(port, ("HELLO",))
    save("hello", f"{v}-resp2", hello)
    save("hello", f"{v}-resp3", ask(port, ("HELLO", "3")))
    save("hello", f"{v}-refused", ask(port, ("HELLO", "4")))
    client_list = ask(port, ("CLIENT", "SETNAME", "api@host-7:4e73c6e3-5b6f-4a8c-9d3e-0123456789ab"),
                      ("CLIENT", "LIST"))
    save("client_list", f"{v}", bulk_text(client_list[len(b"+OK\r\n"):]))
    save("link_reply", f"{v}-client-list", client_list)
    info = ask(port, ("INFO", "server"))
    save("link_reply", f"{v}-info", info)
    save("link_reply", f"{v}-role", ask(port, ("ROLE",)))
    save("topology", f"{v}-role", ask(port, ("ROLE",)))
    save("link_reply", f"{v}-eval", ask(
        port,
        ("EVAL", "return {1, 42, {3, 'x', false}, 'granted 7'}", 0),
        ("EVAL", "return redis.error_reply('WRONGTYPE lock')", 0),
        ("EVAL", "return redis.status_reply('QUEUED')", 0),
        ("EVALSHA", "0" * 40, 0),
        ("ZADD", "q", 1795548688566984, "c0ffee:1 30000 29800"),
        ("ZRANGE", "q", 0, -1, "WITHSCORES"),
        ("HGETALL", "nothing"),
        ("COMMAND", "INFO", "SPUBLISH", "NOSUCH"),
        ("MULTI",), ("PTTL", "q"), ("EXEC",),
        ("NOSUCHCOMMAND",),
    ))
    # A pub/sub connection with our messages and Redisson's published to it.
    sub = socket.create_connection(("127.0.0.1", port))
    sub.sendall(command("SUBSCRIBE", "redlatch:{invoice:42}:unlocked")
                + command("PSUBSCRIBE", "redisson_lock__channel:*")
                + command("SSUBSCRIBE", "redlatch:{x}:semaphore:unlocked"))
    time.sleep(0.2)
    messages = [b"grant 9 30000 c0ffee:1", b"grant 42 500 c:7 43 c:8 44 d:1", b"unlock",
                b"force", b"open 1795548688566984", b"open", b"free 3"]
    ask(port, *[("PUBLISH", "redlatch:{invoice:42}:unlocked", m) for m in messages],
        ("PUBLISH", "redisson_lock__channel:{invoice:42}", "0"),
        ("PUBLISH", "redisson_lock__channel:{invoice:42}", "1"),
        ("SPUBLISH", "redlatch:{x}:semaphore:unlocked", "free 2"), wait=0.1)
    sub.sendall(command("PING") + command("UNSUBSCRIBE") + command("GET", "x"))
    time.sleep(0.3)
    sub.settimeout(0.2)
    got = b""
    try:
        while data := sub.recv(65536):
            got += data
    except socket.timeout:
        pass
    save("subscriber_resp", f"{v}-pubsub", got)
    for m in messages:
        save("pubsub_message", m.split(b" ")[0].decode() + f"-{len(m)}", m)
    for m in (b"0", b"1", b"-1", b"3"):
        save("pubsub_message", f"redisson-{m.decode()}", m)
    # A queue member as a place's reader gets it: 8 bytes of score, then the member.
    save("pubsub_message", "place", (1795548688566984).to_bytes(8, "little") + b"c0ffee:1 30000 29800")


def cluster(port):
    v = "cluster"
    slots = ask(port, ("CLUSTER", "SLOTS"))
    save("topology", f"{v}-slots", slots)
    save("topology", f"{v}-shards", ask(port, ("CLUSTER", "SHARDS")))
    save("link_reply", f"{v}-slots", slots)
    save("hello", f"{v}-resp2", ask(port, ("HELLO",)))
    # "a" is in slot 15495, "b" in 3300: one MOVED, one OK; then the same for pub/sub.
    moved = ask(port, ("SET", "a", "1"), ("SET", "b", "1"), ("ASKING",), ("GET", "a"))
    save("link_reply", f"{v}-moved", moved)
    sub = ask(port, ("SSUBSCRIBE", "b"), ("SSUBSCRIBE", "a"), ("SUNSUBSCRIBE",))
    save("subscriber_resp", f"{v}-ssubscribe", sub)


def sentinel(port):
    save("topology", "sentinel-master-addr",
         ask(port, ("SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mymaster"),
             ("SENTINEL", "GET-MASTER-ADDR-BY-NAME", "nosuch")))
    save("hello", "sentinel-resp2", ask(port, ("HELLO",)))


from_capture(sys.argv[1])
for spec in sys.argv[2:]:
    kind, _, port = spec.rpartition(":")
    {"": standalone, "cluster": cluster, "sentinel": sentinel}[kind](int(port))
