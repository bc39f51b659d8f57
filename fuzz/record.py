#!/usr/bin/env python3
"""A TCP proxy that records what a Redis server sends each client connection, for the fuzz
targets' seeds (see README.md): `record.py LISTEN_PORT SERVER_PORT OUT_DIR`. Each connection's
server-to-client bytes go to OUT_DIR/conn-<n>.bin, its client-to-server bytes to
OUT_DIR/conn-<n>.sent (to tell a pub/sub connection from a link)."""
import os, socket, sys, threading

listen_port, server_port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
os.makedirs(out, exist_ok=True)
count = 0

def pipe(src, dst, path):
    with open(path, "wb") as f:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            if not data:
                break
            f.write(data)
            f.flush()
            try:
                dst.sendall(data)
            except OSError:
                break
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", listen_port))
server.listen(128)
while True:
    client, _ = server.accept()
    upstream = socket.create_connection(("127.0.0.1", server_port))
    count += 1
    base = os.path.join(out, f"conn-{count}")
    threading.Thread(target=pipe, args=(upstream, client, base + ".bin"), daemon=True).start()
    threading.Thread(target=pipe, args=(client, upstream, base + ".sent"), daemon=True).start()
