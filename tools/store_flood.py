"""Holds N idle TCP connections to a port on this machine for S seconds: the load that
docs/RELIABILITY.md measures the rendezvous store against (a job must run on at its speed).

    python3 tools/store_flood.py PORT [N=2000] [SECONDS=30]

Only 127.0.0.1 is ever connected to. Connections that are refused or dropped are counted.
"""
import socket
import sys
import time


def main():
    port = int(sys.argv[1])
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 30.0
    deadline = time.monotonic() + seconds
    held, refused = [], 0
    while len(held) + refused < n and time.monotonic() < deadline:
        s = socket.socket()
        s.settimeout(1.0)
        try:
            s.connect(("127.0.0.1", port))
            held.append(s)
        except OSError:
            refused += 1
            s.close()
            time.sleep(0.01)
    print(f"store_flood: {len(held)} connections open, {refused} refused", flush=True)
    while time.monotonic() < deadline:
        time.sleep(0.2)
    dropped = 0
    for s in held:
        s.setblocking(False)
        try:
            dropped += s.recv(1) == b""
        except BlockingIOError:
            pass
        except OSError:
            dropped += 1
        s.close()
    print(f"store_flood: {dropped} of {len(held)} were closed by the server", flush=True)


if __name__ == "__main__":
    main()
