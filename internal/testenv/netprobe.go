package testenv

// NetProbe runs checks inside a sandbox (python3 -c NetProbe CHECKS, CHECKS
// a JSON list of [function, args...]) and prints one line per check: "ok
// <detail>" or "fail <error>". Each check fails fast (3 s) rather than
// hanging: a refused packet is answered (reset or ICMP) by the rules.
const NetProbe = `
import json, socket, ssl, sys, urllib.request
def http(url, host=None):
    req = urllib.request.Request(url, headers={"Host": host} if host else {})
    with urllib.request.urlopen(req, timeout=3) as r:
        return r.read().decode().strip()
def https(addr, sni):
    ctx = ssl._create_unverified_context()
    with socket.create_connection((addr, 443), timeout=3) as s:
        with ctx.wrap_socket(s, server_hostname=sni) as t:
            t.sendall(("GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % sni).encode())
            return t.recv(4096).decode().split("\r\n\r\n", 1)[-1].strip()
def tcp(addr, port):
    # Reached means answered: under a policy with names the proxy takes
    # every connection first and drops the refused ones unanswered.
    with socket.create_connection((addr, port), timeout=3) as s:
        s.settimeout(3)
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        line = s.recv(64).decode(errors="replace").split("\r\n")[0]
        if " 200 " not in line:
            raise ConnectionError("not the host's answer: %r" % line)
        return "answered " + line
def resolve(name):
    return socket.gethostbyname(name)
def udpdns(server, name):
    q = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00" + b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\x00\x00\x01\x00\x01"
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(2)
    s.sendto(q, (server, 53))
    return "answered %d bytes" % len(s.recvfrom(512)[0])
def recvall(s, n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c: raise ConnectionError("closed")
        b += c
    return b
def dnsq(server, name, qtype, proto="udp", port=53):
    # One query, raw: "rcode=N" and each answer record (an A's address,
    # another's type number), so a test sees every record that passed.
    q = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00" + b"".join(bytes([len(p)]) + p.encode() for p in name.split(".") if p) + b"\x00" + qtype.to_bytes(2, "big") + b"\x00\x01"
    if proto == "udp":
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(3)
        s.sendto(q, (server, port))
        r = s.recvfrom(65535)[0]
    else:
        s = socket.create_connection((server, port), timeout=3)
        s.settimeout(3)
        s.sendall(len(q).to_bytes(2, "big") + q)
        r = recvall(s, int.from_bytes(recvall(s, 2), "big"))
    s.close()
    def skip(i):
        while True:
            if r[i] == 0: return i + 1
            if r[i] >= 192: return i + 2
            i += r[i] + 1
    i, out = skip(12) + 4, []
    for _ in range(int.from_bytes(r[6:8], "big")):
        i = skip(i)
        t, n = int.from_bytes(r[i:i+2], "big"), int.from_bytes(r[i+8:i+10], "big")
        out.append(socket.inet_ntoa(r[i+10:i+10+n]) if t == 1 else str(t))
        i += 10 + n
    return " ".join(["rcode=%d" % (r[3] & 15)] + out)
def myip():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect(("203.0.113.10", 80))
    return s.getsockname()[0]
for check in json.loads(sys.argv[1]):
    try:
        print("ok", globals()[check[0]](*check[1:]))
    except Exception as e:
        print("fail", type(e).__name__, e)
`
