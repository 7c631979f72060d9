#!/usr/bin/env python3
"""The remote cache for a fleet, on loopback: a Redis Cluster (three masters) and an nginx with
WebDAV that this script starts, and N simulated hosts (separate cache folders, homes and
processes) compiling a mixed set of models against them at once.

Prints, and writes to bench/results/fleet.md (--out):
- compiles performed vs distinct module keys, remote hits, wall time, per store;
- the remote-hit latency of one module (p50/p99 of the `remote` phase and of the whole
  compile command) at 1, 8 and 32 concurrent clients, per store;
- bytes stored and moved with zstd and without (the same entries stored plain);
- kernel objects shared across models: a model host B never compiled, whose kernels host A
  compiled for another model, against its cold compile;
- the cost of a shard failure: a fresh host compiling the whole set with one master killed.

Nothing is asserted: numbers only. --smoke: two hosts, the example MLP and a variant, clients
1 and 2 (the test suite runs it).
"""
import argparse
import glob
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
ZOO = os.path.join(ROOT, "bench", "data", "zoo")
FULL_MODELS = ["resnet18", "resnet34", "mobilenet_v2", "squeezenet", "shufflenet_v2", "mnasnet",
               "efficientnet_b0", "vit_small", "gpt_decoder"]


def free_port(cluster=False):
    while True:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        if not cluster:
            return port
        if port > 55535:
            continue
        bus = socket.socket()
        try:
            bus.bind(("127.0.0.1", port + 10000))
            return port
        except OSError:
            continue
        finally:
            bus.close()


def wait_port(port, seconds=10):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def redis_cli(port, *args):
    return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True, text=True,
                          timeout=30).stdout


class Servers:
    def __init__(self, work):
        self.procs = {}
        self.ports = []
        for i in range(3):
            port = free_port(cluster=True)
            d = os.path.join(work, f"redis{i}")
            os.makedirs(d)
            self.procs[port] = subprocess.Popen(
                ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--protected-mode", "no", "--cluster-enabled", "yes",
                 "--cluster-config-file", os.path.join(d, "nodes.conf"), "--dir", d,
                 "--cluster-node-timeout", "1000", "--cluster-require-full-coverage", "no",
                 "--maxmemory-policy", "allkeys-lru"], stdout=subprocess.DEVNULL)
            self.ports.append(port)
        for p in self.ports:
            if not wait_port(p):
                raise SystemExit(f"redis-server on port {p} did not start")
        out = subprocess.run(["redis-cli", "--cluster", "create",
                              *[f"127.0.0.1:{p}" for p in self.ports], "--cluster-yes"],
                             capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise SystemExit("redis-cli --cluster create failed:\n" + out.stdout + out.stderr)
        deadline = time.time() + 30
        while time.time() < deadline:
            infos = [redis_cli(p, "CLUSTER", "INFO") for p in self.ports]
            if all("cluster_state:ok" in i and "cluster_slots_ok:16384" in i for i in infos):
                break
            time.sleep(0.1)
        self.nginx_port = free_port()
        nd = os.path.join(work, "nginx")
        self.www = os.path.join(nd, "www")
        os.makedirs(os.path.join(self.www, "cache"))
        conf = os.path.join(nd, "nginx.conf")
        temps = "".join(f"  {k}_temp_path {nd}/{k};\n"
                        for k in ["client_body", "proxy", "fastcgi", "uwsgi", "scgi"])
        with open(conf, "w") as f:
            f.write(f"daemon off;\nmaster_process off;\npid {nd}/nginx.pid;\n"
                    f"error_log {nd}/error.log warn;\nevents {{ worker_connections 1024; }}\n"
                    f"http {{\n  access_log off;\n{temps}  client_max_body_size 512m;\n"
                    f"  server {{\n    listen 127.0.0.1:{self.nginx_port};\n"
                    f"    location /cache/ {{ root {self.www}; dav_methods PUT DELETE; "
                    f"create_full_put_path on; dav_access user:rw; }}\n  }}\n}}\n")
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        self.procs["nginx"] = subprocess.Popen(
            [nginx, "-p", nd, "-c", conf, "-e", os.path.join(nd, "error.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not wait_port(self.nginx_port):
            raise SystemExit("nginx did not start")

    def cluster_url(self):
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def http_url(self):
        return f"http://127.0.0.1:{self.nginx_port}/cache"

    def kill_master(self, port):
        self.procs[port].kill()
        self.procs[port].wait()

    def flush(self):
        for p in self.ports:
            if self.procs[p].poll() is None:
                redis_cli(p, "FLUSHALL")
        shutil.rmtree(os.path.join(self.www, "cache"), ignore_errors=True)
        os.makedirs(os.path.join(self.www, "cache"))

    def stop(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()


class Fleet:
    def __init__(self, kiln, work):
        self.kiln = kiln
        self.work = work
        keys = os.path.join(work, "keys")
        subprocess.run([kiln, "cache", "keygen", "builders", "--out", keys], check=True,
                       capture_output=True)
        with open(os.path.join(keys, "builders.public")) as f:
            self.public = f.read().split("\n")[0]
        self.secret = os.path.join(keys, "builders.secret")
        self.host_count = 0

    def new_host(self):
        self.host_count += 1
        h = os.path.join(self.work, f"host{self.host_count}")
        os.makedirs(os.path.join(h, "home"))
        return h

    def drop(self, *hosts):
        """A host's folders, once its numbers are read (a full run would fill /tmp)."""
        for h in hosts:
            shutil.rmtree(h, ignore_errors=True)

    def env(self, host, remote, writer=True, extra=None):
        e = dict(os.environ)
        e.update({"KILN_CACHE_DIR": os.path.join(host, "cache"), "HOME": os.path.join(host, "home"),
                  "XDG_CACHE_HOME": os.path.join(host, "home", ".cache"),
                  "KILN_CACHE_TRUSTED_KEYS": self.public, "KILN_REMOTE_TIMEOUT": "2"})
        if remote:
            e["KILN_REMOTE_CACHE"] = remote
        else:
            e.pop("KILN_REMOTE_CACHE", None)
        if writer:
            e["KILN_CACHE_SIGNING_KEY"] = self.secret
        e.update(extra or {})
        return e

    def compile(self, host, model, remote, writer=True, extra=None):
        t0 = time.perf_counter()
        p = subprocess.run([self.kiln, "compile", "-v", model], capture_output=True, text=True,
                           env=self.env(host, remote, writer, extra), timeout=1800)
        wall = (time.perf_counter() - t0) * 1000
        if p.returncode != 0:
            raise SystemExit(f"kiln compile {model} failed:\n{p.stderr[-3000:]}")
        err = p.stderr
        r = {"wall_ms": wall, "miss": "cache miss" in err, "remote_hit": "cache hit (remote)" in err,
             "key": re.search(r"key\s+([0-9a-f]{64})", p.stdout).group(1), "err": err}
        m = re.search(r"\| remote ([\d.]+) ms", err)
        r["remote_ms"] = float(m.group(1)) if m else 0.0
        m = re.search(r"\| compile ([\d.]+) ms", err)
        r["compile_ms"] = float(m.group(1)) if m else 0.0
        m = re.search(r"kernels (\d+) \((\d+) reused, (\d+) compiled.*?(?:, (\d+) of the reused "
                      r"from the remote)?\)", err)
        if m:
            r["kernels"], r["reused"], r["compiled"] = int(m[1]), int(m[2]), int(m[3])
            r["fetched"] = int(m[4] or 0)
        r["warnings"] = err.count("warning: remote cache")
        return r


def pct(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))]


UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def moved_bytes(fleet, host, remote):
    """The bytes a host's cache says its remote tier moved (`kiln cache stats`)."""
    p = subprocess.run([fleet.kiln, "cache", "stats"], capture_output=True, text=True,
                       env=fleet.env(host, remote))
    m = re.search(r"^remote .*?([\d.]+) (B|KiB|MiB|GiB|TiB) moved", p.stdout, re.M)
    return float(m.group(1)) * UNITS[m.group(2)] if m else 0.0


def fleet_round(fleet, remote, models, hosts, extra=None):
    """Every host compiles every model (each in its own order), all hosts at once."""
    def host_job(i):
        h = fleet.new_host()
        order = models[i % len(models):] + models[:i % len(models)]
        return h, [fleet.compile(h, m, remote, extra=extra) for m in order]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(hosts) as pool:
        done = list(pool.map(host_job, range(hosts)))
    wall = time.perf_counter() - t0
    results = [r for _, rs in done for r in rs]
    keys = {r["key"] for r in results}
    return {"compiles": sum(r["miss"] for r in results), "keys": len(keys),
            "hits": sum(r["remote_hit"] for r in results), "runs": len(results), "wall_s": wall,
            "moved": sum(moved_bytes(fleet, h, remote) for h, _ in done),
            "hosts": [h for h, _ in done]}


def latency(fleet, remote, model, clients):
    """`clients` fresh hosts fetch one module at once; the entry is on the remote already."""
    def job(_):
        h = fleet.new_host()
        r = fleet.compile(h, model, remote, writer=False)
        fleet.drop(h)
        return r
    with ThreadPoolExecutor(clients) as pool:
        rs = list(pool.map(job, range(clients)))
    hits = [r for r in rs if r["remote_hit"]]
    return {"clients": clients, "hits": len(hits),
            "p50": pct([r["remote_ms"] for r in hits], 0.5) if hits else float("nan"),
            "p99": pct([r["remote_ms"] for r in hits], 0.99) if hits else float("nan"),
            "wall50": pct([r["wall_ms"] for r in rs], 0.5),
            "wall99": pct([r["wall_ms"] for r in rs], 0.99)}


def stored_bytes(www, cache=None):
    """Bytes of the entries nginx stores and what they expand to, in all and per family (the
    family read from the writer's local cache, whose entry folders are named by key)."""
    families = {}
    if cache:
        for meta in glob.glob(os.path.join(cache, "objects", "*", "*", "meta.json")):
            with open(meta) as f:
                fam = json.load(f).get("family", "?")
            # A module's family is its graph's family key (hex); the others are named.
            families[os.path.basename(os.path.dirname(meta))] = (
                "module" if re.fullmatch(r"[0-9a-f]{64}", fam) else fam)
    total = {}
    for dirpath, _, files in os.walk(os.path.join(www, "cache")):
        for f in files:
            p = os.path.join(dirpath, f)
            with open(p, "rb") as fh:
                head = fh.read(64)
            n = os.path.getsize(p)
            m = re.match(rb"kiln-zstd 1\n(\d+)\n", head)
            for fam in ("all", families.get(f, "?") if cache else None):
                if fam:
                    s, e = total.get(fam, (0, 0))
                    total[fam] = (s + n, e + (int(m.group(1)) if m else n))
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "release", "cli", "kiln"))
    ap.add_argument("--hosts", type=int, default=8)
    ap.add_argument("--clients", default="1,8,32")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "fleet.md"))
    args = ap.parse_args()
    for tool in ["redis-server", "redis-cli"]:
        if not shutil.which(tool):
            print(f"skipped: no {tool} (scripts/setup installs it)")
            sys.exit(77)
    if not (shutil.which("nginx") or os.path.exists("/usr/sbin/nginx")):
        print("skipped: no nginx (scripts/setup installs nginx-light)")
        sys.exit(77)
    work = tempfile.mkdtemp(prefix="kiln-fleet-")
    if args.smoke:
        args.hosts, args.clients = 2, "1,2"
        mlp = os.path.join(ROOT, "examples", "mlp", "mlp.json")
        variant = os.path.join(work, "variant")
        os.makedirs(variant)
        for f in os.listdir(os.path.dirname(mlp)):
            if f.endswith(".npy"):
                shutil.copy(os.path.join(os.path.dirname(mlp), f), variant)
        text = open(mlp).read()
        text = re.sub(r',\n    \{"name": "probs"[^\n]*', "", text)
        text = text.replace('"outputs": ["y"]', '"outputs": ["logits"]')
        with open(os.path.join(variant, "mlp2.json"), "w") as f:
            f.write(text)
        models = [mlp, os.path.join(variant, "mlp2.json")]
        pair = (mlp, models[1])
        latency_model = mlp
        args.out = os.path.join(work, "fleet.md")
    else:
        models = [os.path.join(ZOO, m + ".onnx") for m in FULL_MODELS]
        missing = [m for m in models if not os.path.exists(m)]
        if missing:
            raise SystemExit("missing " + ", ".join(missing) +
                             ": bench/zoo/run (or bench/zoo/export.py) writes bench/data/zoo")
        pair = (os.path.join(ZOO, "resnet18.onnx"), os.path.join(ZOO, "resnet34.onnx"))
        latency_model = os.path.join(ZOO, "resnet18.onnx")
    clients = [int(c) for c in args.clients.split(",")]
    servers = Servers(work)
    lines = []

    def say(s=""):
        print(s, flush=True)
        lines.append(s)

    try:
        fleet = Fleet(args.kiln, work)
        stores = [("Redis Cluster (3 masters)", servers.cluster_url()),
                  ("nginx WebDAV", servers.http_url())]
        say("# Remote cache for a fleet\n")
        say(f"`bench/fleet/run.py{' --smoke' if args.smoke else ''}`: {args.hosts} hosts "
            f"(separate caches, homes, processes) x {len(models)} models, on loopback; 2-core "
            "machine; every host a writer with the same signing key.\n")
        say("## One compile per key\n")
        say("| store | runs | compiles | distinct keys | remote hits | hit rate | bytes moved | "
            "wall |")
        say("|---|---|---|---|---|---|---|---|")
        both = ("both, in a list (cluster first)", servers.cluster_url() + " " + servers.http_url())
        rounds = [(name, url, None) for name, url in stores + [both]]
        rounds.append((stores[0][0] + ", uncompressed", stores[0][1], {"KILN_REMOTE_COMPRESS": "off"}))
        for name, url, extra in rounds:
            servers.flush()
            r = fleet_round(fleet, url, models, args.hosts, extra)
            fleet.drop(*r["hosts"])
            say(f"| {name} | {r['runs']} | {r['compiles']} | {r['keys']} | {r['hits']} | "
                f"{r['hits'] / r['runs']:.0%} | {r['moved'] / 2**20:.1f} MiB | "
                f"{r['wall_s']:.1f} s |")
        say("\nHTTP has no atomic claim: without a Redis beside it in the list, two hosts meeting "
            "a key at once may both compile it. In a list, leases come from the cluster and every "
            "upload goes to both stores. Bytes moved: uploads and hits together, every entry "
            "family, as each host's `kiln cache stats` counts them.\n")

        say("## Remote-hit latency of one module\n")
        say(f"`{os.path.basename(latency_model)}`: a fresh host (empty cache) compiles it, C "
            "hosts at once. `remote`: the module's phase (fetch, verify, publish). `command`: the "
            "whole process, which also fetches, verifies and writes the imported model and the "
            "prepared weights (two entries of ~45 MB each) and starts a new host's toolchain "
            "probe.\n")
        say("| store | clients | hits | remote p50 | remote p99 | command p50 | command p99 |")
        say("|---|---|---|---|---|---|---|")
        for name, url in stores:
            seed = fleet.new_host()
            fleet.compile(seed, latency_model, url)  # the entry is there
            fleet.drop(seed)
            for c in clients:
                r = latency(fleet, url, latency_model, c)
                say(f"| {name} | {c} | {r['hits']}/{c} | {r['p50']:.1f} ms | {r['p99']:.1f} ms | "
                    f"{r['wall50']:.0f} ms | {r['wall99']:.0f} ms |")

        say("\n## Bytes\n")
        servers.flush()
        hz = fleet.new_host()
        for m in models:
            fleet.compile(hz, m, servers.http_url())
        zipped = stored_bytes(servers.www, os.path.join(hz, "cache"))
        fleet.drop(hz)
        servers.flush()
        h = fleet.new_host()
        for m in models:
            fleet.compile(h, m, servers.http_url(), extra={"KILN_REMOTE_COMPRESS": "off"})
        plain = stored_bytes(servers.www)["all"][0]
        fleet.drop(h)
        say("Every entry of the set on the HTTP store, by family: stored with zstd (level 3) and "
            "what it expands to. Stored plain (`KILN_REMOTE_COMPRESS=off`), the whole set is "
            f"{plain / 2**20:.2f} MiB. Each remote hit moves the stored bytes.\n")
        say("| family | entries' bytes, zstd | expanded | ratio |")
        say("|---|---|---|---|")
        for fam in sorted(zipped, key=lambda k: (k == "all", k)):
            z, e = zipped[fam]
            say(f"| {fam} | {z / 2**20:.2f} MiB | {e / 2**20:.2f} MiB | {e / max(z, 1):.2f} |")
        say("")

        say("## Kernels from other models\n")
        a, b = pair
        say(f"Host A compiles `{os.path.basename(a)}`; host B then compiles "
            f"`{os.path.basename(b)}`, which A never saw, with an empty cache.\n")
        say("B reads only (it uploads nothing, so both columns do the same work). `compile` is "
            "the phase that builds the module (kernels, binding, link); `command` is the whole "
            "process, which also imports the ONNX file and prepares the weights (A never saw "
            "this model, so those are not on the remote).\n")
        say("| store | B cold, no remote: compile / command | B with A's kernels remote: "
            "compile / command | ratio: compile / command | kernels fetched |")
        say("|---|---|---|---|---|")
        hb = fleet.new_host()
        cold = fleet.compile(hb, b, None, writer=False)
        fleet.drop(hb)
        for name, url in stores:
            servers.flush()
            ha, hb = fleet.new_host(), fleet.new_host()
            fleet.compile(ha, a, url)
            r = fleet.compile(hb, b, url, writer=False)
            fleet.drop(ha, hb)
            say(f"| {name} | {cold['compile_ms']:.0f} ms / {cold['wall_ms']:.0f} ms | "
                f"{r['compile_ms']:.0f} ms / {r['wall_ms']:.0f} ms | "
                f"{r['compile_ms'] / cold['compile_ms']:.2f} / {r['wall_ms'] / cold['wall_ms']:.2f} | "
                f"{r.get('fetched', 0)} of {r.get('kernels', 0)} |")
        say("\n## A shard fails\n")
        servers.flush()
        fleet.drop(*fleet_round(fleet, servers.cluster_url(), models, 1)["hosts"])
        h = fleet.new_host()
        before = [fleet.compile(h, m, servers.cluster_url(), writer=False) for m in models]
        fleet.drop(h)
        servers.kill_master(servers.ports[0])
        h = fleet.new_host()
        after = [fleet.compile(h, m, servers.cluster_url(), writer=False) for m in models]
        fleet.drop(h)
        say("A fresh host compiles the set; then one of the three masters is killed and another "
            "fresh host compiles it again (no replicas: that shard's keys are gone).\n")
        say("| | remote hits | local compiles | remote-cache warnings | total |")
        say("|---|---|---|---|---|")
        for label, rs in (("all shards up", before), ("one master killed", after)):
            say(f"| {label} | {sum(r['remote_hit'] for r in rs)} | {sum(r['miss'] for r in rs)} | "
                f"{sum(r['warnings'] for r in rs)} | {sum(r['wall_ms'] for r in rs) / 1000:.1f} s |")
    finally:
        servers.stop()
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"\nwrote {args.out}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
