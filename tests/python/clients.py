"""Python's PostgreSQL drivers through `plbbench proxy` (docs/proxy.md).

Run by tests/proxy_real.rs (python_clients_through_the_proxy) with the
virtual environment scripts/install-pyclients.sh makes (psycopg 3,
psycopg-pool, asyncpg), against a five-replica local cluster behind the
proxy, which logs clients in with SCRAM-SHA-256 from its users file.

Each check prints `ok: <what>`; the first that fails raises, so the
script exits 1 with the reason. The checks:
- named prepared statements (psycopg's prepare=True, asyncpg's prepare),
  seen in the session's pg_prepared_statements;
- COPY FROM STDIN and COPY TO STDOUT, both drivers;
- a server-side cursor (psycopg's named cursor, asyncpg's cursor);
- cancels: statement_timeout (57014), psycopg's cancel() and asyncpg's
  timeout, both CancelRequests through the proxy, the session usable after;
- LISTEN through the proxy, NOTIFY sent straight to its replica;
- asyncpg with no application_name, naming itself late in its first
  statement;
- a psycopg pool (Premium) and an asyncpg pool (Freemium) with concurrent
  queries, every one on a replica of its class's role;
- a replica killed under a psycopg session and asyncpg connections: each
  gets SQLSTATE 08006 (or a closed connection) within seconds, and a
  reconnect lands on a survivor.

Usage: clients.py --port P --metrics-port M --user U --password PW --replicas PORT,...
       --cluster-password PW --plbbench BIN
"""

import argparse
import asyncio
import re
import subprocess
import threading
import time
import urllib.request

import asyncpg
import psycopg
import psycopg_pool
from psycopg import errors


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, required=True, help="the proxy's port on 127.0.0.1")
    p.add_argument("--user", required=True)
    p.add_argument("--password", required=True)
    p.add_argument("--metrics-port", type=int, required=True, help="the proxy's metrics port (replica roles)")
    p.add_argument("--replicas", required=True, help="the ports of r1..rK, comma-separated")
    p.add_argument("--cluster-password", required=True, help="the cluster's password (user plbbench), for NOTIFY")
    p.add_argument("--plbbench", required=True, help="the plbbench binary, for `cluster fault down rN`")
    a = p.parse_args()
    a.names = {int(port): f"r{i + 1}" for i, port in enumerate(a.replicas.split(","))}
    a.roles = {}
    return a


def read_roles(a):
    """Each replica's role (P, M or F) as the proxy's metrics say, by port."""
    with urllib.request.urlopen(f"http://127.0.0.1:{a.metrics_port}/metrics", timeout=5) as r:
        body = r.read().decode()
    found = dict(re.findall(r'^plbbench_router_role\{replica="(r\d+)",role="([PMF])"\} 1$', body, re.M))
    a.roles = {port: found.get(name, "-") for port, name in a.names.items()}
    return a.roles


def ok(what):
    print(f"ok: {what}", flush=True)


def conninfo(a, app):
    return (
        f"host=127.0.0.1 port={a.port} user={a.user} password={a.password} "
        f"dbname=plbbench application_name={app} connect_timeout=10"
    )


async def apg(a, app=None, **kw):
    settings = {"application_name": app} if app else {}
    return await asyncpg.connect(
        host="127.0.0.1",
        port=a.port,
        user=a.user,
        password=a.password,
        database="plbbench",
        server_settings=settings,
        timeout=10,
        **kw,
    )


def on_asyncpg(a, app, body):
    """Runs `await body(conn)` on one asyncpg connection through the proxy
    named `app`, closes the connection, and returns what body returned."""

    async def run():
        conn = await apg(a, app)
        try:
            return await body(conn)
        finally:
            await conn.close()

    return asyncio.run(run())


def port_of(conn):
    return conn.execute("SELECT inet_server_port()").fetchone()[0]


def prepared_statements(a):
    with psycopg.connect(conninfo(a, "premium-py-prepared")) as conn:
        for i in range(3):
            row = conn.execute("SELECT %s::int + 1", (i,), prepare=True).fetchone()
            assert row == (i + 1,), row
        names = [r[0] for r in conn.execute("SELECT name FROM pg_prepared_statements")]
        assert any(n.startswith("_pg3_") for n in names), f"psycopg's named statement not on the server: {names}"
    ok(f"psycopg named prepared statement {names}")

    async def run(conn):
        stmt = await conn.prepare("SELECT $1::int * 2")
        assert [await stmt.fetchval(i) for i in range(3)] == [0, 2, 4]
        names = [r[0] for r in await conn.fetch("SELECT name FROM pg_prepared_statements")]
        assert any(n.startswith("__asyncpg_stmt_") for n in names), names
        return names

    ok(f"asyncpg named prepared statements {on_asyncpg(a, 'premium-apg-prepared', run)}")


def copy_in_out(a):
    rows = [(i, f"row {i}\twith a tab") for i in range(1000)]
    with psycopg.connect(conninfo(a, "free-py-copy")) as conn:
        conn.execute("CREATE TEMP TABLE t (id int, note text)")
        with conn.cursor() as cur:
            with cur.copy("COPY t (id, note) FROM STDIN") as copy:
                for r in rows:
                    copy.write_row(r)
            back = []
            with cur.copy("COPY (SELECT id, note FROM t ORDER BY id) TO STDOUT") as copy:
                copy.set_types(["int4", "text"])
                back = list(copy.rows())
        assert back == rows, f"COPY out gave {len(back)} rows, not the {len(rows)} copied in"
    ok("psycopg COPY FROM STDIN and TO STDOUT, 1000 rows")

    async def run(conn):
        await conn.execute("CREATE TEMP TABLE t (id int, note text)")
        await conn.copy_records_to_table("t", records=rows, columns=["id", "note"])
        chunks = []

        async def sink(chunk):
            chunks.append(chunk)

        await conn.copy_from_query("SELECT id, note FROM t ORDER BY id", output=sink)
        text = b"".join(chunks).decode()
        assert text.count("\n") == len(rows) and text.startswith("0\trow 0\\twith a tab\n"), text[:80]

    on_asyncpg(a, "free-apg-copy", run)
    ok("asyncpg copy_records_to_table and copy_from_query, 1000 rows")


def server_side_cursor(a):
    with psycopg.connect(conninfo(a, "free-py-cursor")) as conn:
        with conn.transaction():
            with conn.cursor(name="big") as cur:
                cur.itersize = 100
                cur.execute("SELECT g FROM generate_series(1, 5000) g")
                total = sum(r[0] for r in cur)
                assert total == 5000 * 5001 // 2, total
                cursors = conn.execute("SELECT count(*) FROM pg_cursors WHERE name = 'big'").fetchone()[0]
                assert cursors == 1, "the named cursor lives on the server"
    ok("psycopg server-side cursor, 5000 rows in fetches of 100")

    async def run(conn):
        async with conn.transaction():
            total = 0
            async for r in conn.cursor("SELECT g FROM generate_series(1, 5000) g", prefetch=100):
                total += r[0]
            assert total == 5000 * 5001 // 2, total

    on_asyncpg(a, "free-apg-cursor", run)
    ok("asyncpg server-side cursor, 5000 rows in fetches of 100")


def cancels(a):
    with psycopg.connect(conninfo(a, "premium-py-cancel")) as conn:
        conn.autocommit = True
        conn.execute("SET statement_timeout = 300")
        began = time.monotonic()
        try:
            conn.execute("SELECT pg_sleep(10)")
            raise AssertionError("pg_sleep(10) ran past statement_timeout")
        except errors.QueryCanceled as e:
            assert e.sqlstate == "57014", e.sqlstate
        assert time.monotonic() - began < 5
        conn.execute("SET statement_timeout = 0")
        ok("psycopg statement_timeout cancels with 57014")
        timer = threading.Timer(0.5, conn.cancel)
        timer.start()
        began = time.monotonic()
        try:
            conn.execute("SELECT pg_sleep(10)")
            raise AssertionError("pg_sleep(10) was not cancelled")
        except errors.QueryCanceled as e:
            assert e.sqlstate == "57014", e.sqlstate
        finally:
            timer.cancel()
        assert time.monotonic() - began < 5, "the CancelRequest went through the proxy"
        assert conn.execute("SELECT 42").fetchone() == (42,)
    ok("psycopg cancel() through the proxy: 57014, the session goes on")

    async def run(conn):
        began = time.monotonic()
        try:
            await conn.fetch("SELECT pg_sleep(10)", timeout=0.5)
            raise AssertionError("pg_sleep(10) ran past the timeout")
        except asyncio.TimeoutError:
            pass
        assert await conn.fetchval("SELECT 42") == 42
        assert time.monotonic() - began < 5, "asyncpg's cancel went through the proxy"
        sleeping = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(10)' AND state = 'active'"
        )
        assert sleeping == 0, "the cancelled statement still runs on the server"

    on_asyncpg(a, "premium-apg-cancel", run)
    ok("asyncpg timeout: cancelled on the server through the proxy, the session goes on")


def listen_notify(a, cluster_password):
    async def run(conn):
        port = await conn.fetchval("SELECT inet_server_port()")
        got = asyncio.get_running_loop().create_future()
        await conn.add_listener("plb_chan", lambda _c, _pid, chan, payload: got.done() or got.set_result(payload))
        with psycopg.connect(
            f"host=127.0.0.1 port={port} user=plbbench password={cluster_password} dbname=plbbench",
            autocommit=True,
        ) as direct:
            direct.execute("NOTIFY plb_chan, 'hello through the proxy'")
        payload = await asyncio.wait_for(got, 10)
        assert payload == "hello through the proxy", payload
        return port

    port = on_asyncpg(a, "free-apg-listen", run)
    with psycopg.connect(conninfo(a, "free-py-listen"), autocommit=True) as conn:
        conn.execute("LISTEN self_chan")
        conn.execute("NOTIFY self_chan, 'me'")
        got = [n.payload for n in conn.notifies(timeout=5, stop_after=1)]
        assert got == ["me"], got
    ok(f"LISTEN through the proxy (asyncpg, psycopg), NOTIFY delivered (replica port {port})")


def late_asyncpg(a):
    read_roles(a)

    async def run(conn):
        await conn.execute("SET application_name = 'premium-apg-late'")
        return await conn.fetchval("SELECT inet_server_port()"), await conn.fetchval("SHOW application_name")

    port, app = on_asyncpg(a, None, run)
    assert app == "premium-apg-late", app
    assert a.roles[port] == "P", f"asyncpg named late ran on {a.names[port]} ({a.roles[port]})"
    ok(f"asyncpg without application_name, named late, on {a.names[port]} (P)")


def pools(a):
    """A psycopg pool of 4 Premium and an asyncpg pool of 6 Freemium
    connections, 40 concurrent queries each; every query's replica has its
    class's role, and both pools were busy at once."""
    read_roles(a)
    seen = {"P": {}, "F": {}}
    overlap = threading.Event()
    busy = {"P": 0, "F": 0}
    lock = threading.Lock()

    def mark(cls, delta):
        with lock:
            busy[cls] += delta
            if busy["P"] > 0 and busy["F"] > 0:
                overlap.set()

    def premium_worker(pool):
        for _ in range(10):
            with pool.connection() as conn:
                mark("P", 1)
                port = conn.execute("SELECT inet_server_port() FROM pg_sleep(0.05)").fetchone()[0]
                mark("P", -1)
            seen["P"][port] = seen["P"].get(port, 0) + 1

    async def freemium(done):
        pool = await asyncpg.create_pool(
            host="127.0.0.1",
            port=a.port,
            user=a.user,
            password=a.password,
            database="plbbench",
            server_settings={"application_name": "free-apg-pool"},
            min_size=6,
            max_size=6,
            timeout=10,
        )
        try:

            async def one():
                async with pool.acquire() as conn:
                    mark("F", 1)
                    port = await conn.fetchval("SELECT inet_server_port() FROM pg_sleep(0.05)")
                    mark("F", -1)
                seen["F"][port] = seen["F"].get(port, 0) + 1

            while not done.is_set():
                await asyncio.gather(*(one() for _ in range(6)))
        finally:
            await pool.close()

    done = threading.Event()
    fthread = threading.Thread(target=lambda: asyncio.run(freemium(done)))
    fthread.start()
    try:
        with psycopg_pool.ConnectionPool(
            conninfo(a, "premium-py-pool"), min_size=4, max_size=4, timeout=10, open=True
        ) as pool:
            workers = [threading.Thread(target=premium_worker, args=(pool,)) for _ in range(4)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
    finally:
        done.set()
        fthread.join()
    assert sum(seen["P"].values()) == 40, seen
    assert overlap.is_set(), "the two pools never ran queries at the same time"
    for cls in "PF":
        wrong = {a.names[p]: a.roles[p] for p in seen[cls] if a.roles[p] != cls}
        assert not wrong, f"{cls} queries on replicas of another role: {wrong}; seen {seen}"
    named = {cls: {a.names[p]: n for p, n in seen[cls].items()} for cls in "PF"}
    ok(f"two pools at once, each class on its role's replicas: {named}")


def kill_replica(a):
    """A Freemium replica killed under a psycopg session and asyncpg
    connections running pg_sleep: each gets 08006 (or its connection is
    closed) within seconds, and a reconnect lands on a survivor."""
    read_roles(a)
    victim_conn = psycopg.connect(conninfo(a, "free-py-kill"), autocommit=True)
    victim = port_of(victim_conn)
    assert a.roles[victim] == "F", a.roles[victim]
    name = a.names[victim]

    async def open_some():
        conns = [await apg(a, "free-apg-kill") for _ in range(4)]
        ports = [await c.fetchval("SELECT inet_server_port()") for c in conns]
        return conns, ports

    loop = asyncio.new_event_loop()
    conns, ports = loop.run_until_complete(open_some())
    on_victim = [c for c, p in zip(conns, ports) if p == victim]
    assert on_victim, f"no asyncpg connection landed on {name}: {ports}"

    errs = {}

    def psycopg_sleeper():
        try:
            victim_conn.execute("SELECT pg_sleep(30)")
            errs["psycopg"] = None
        except psycopg.OperationalError as e:
            errs["psycopg"] = (e.sqlstate, str(e), time.monotonic())

    async def apg_sleepers():
        async def one(c):
            try:
                await c.fetch("SELECT pg_sleep(30)")
                return None
            except (asyncpg.PostgresError, asyncpg.InterfaceError, ConnectionError) as e:
                return (getattr(e, "sqlstate", None), f"{type(e).__name__}: {e}", time.monotonic())

        return await asyncio.gather(*(one(c) for c in on_victim))

    t = threading.Thread(target=psycopg_sleeper)
    t.start()
    task = loop.create_task(apg_sleepers())
    loop.run_until_complete(asyncio.sleep(1.0))
    killed = time.monotonic()
    subprocess.run([a.plbbench, "cluster", "fault", "down", name], check=True, capture_output=True, timeout=60)
    t.join(20)
    assert not t.is_alive(), "the psycopg session hangs after the kill"
    apg_errs = loop.run_until_complete(asyncio.wait_for(task, 20))
    sqlstate, said, when = errs["psycopg"]
    assert sqlstate == "08006" and f"replica {name} was lost" in said, f"psycopg: {sqlstate} {said}"
    assert when - killed < 10, f"psycopg's error came {when - killed:.1f} s after the kill"
    for e in apg_errs:
        assert e is not None, "an asyncpg pg_sleep(30) on the killed replica finished"
        state, msg, when = e
        assert state == "08006" or f"replica {name} was lost" in msg, f"asyncpg: {state} {msg}"
        assert when - killed < 10, f"asyncpg's error came {when - killed:.1f} s after the kill"
    apg_said = sorted({e[1].split(":")[0] + f" ({e[0]})" for e in apg_errs})
    ok(f"{name} killed: psycopg got 08006 ({said.splitlines()[0]}); asyncpg: {apg_said}")
    victim_conn.close()
    for c in conns:
        loop.run_until_complete(c.close(timeout=5)) if not c.is_closed() else None
    time.sleep(1.0)
    for i in range(4):
        with psycopg.connect(conninfo(a, "free-py-after")) as conn:
            port = port_of(conn)
        assert port != victim, f"reconnect {i} went to the dead {name}"

    async def again():
        c = await apg(a, "free-apg-after")
        try:
            return await c.fetchval("SELECT inet_server_port()")
        finally:
            await c.close()

    port = loop.run_until_complete(again())
    loop.close()
    assert port != victim, f"asyncpg's reconnect went to the dead {name}"
    ok(f"reconnects (psycopg x4, asyncpg) land on survivors, not {name}")


def main():
    a = parse_args()
    print(f"psycopg {psycopg.__version__} (libpq {psycopg.pq.version()}), asyncpg {asyncpg.__version__}", flush=True)
    prepared_statements(a)
    copy_in_out(a)
    server_side_cursor(a)
    cancels(a)
    listen_notify(a, a.cluster_password)
    late_asyncpg(a)
    pools(a)
    kill_replica(a)
    print("all checks passed", flush=True)


if __name__ == "__main__":
    main()
