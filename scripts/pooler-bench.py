#!/usr/bin/env python3
# What PgBouncer costs (docs/scaling.md#pgbouncer): the same sign-ins, same client, same run, through four
# `baton serve` processes on one database: straight to PostgreSQL; straight with database.pooler "transaction"
# (Baton's own cost of that mode); through PgBouncer in transaction mode (default_pool_size 4); in session mode.
# Migrating sign-ins: N per target, 8 Python threads with keep-alive. Current sign-ins: wrk -t2 -c8 -d5s, one
# token, twice per target, interleaved. Prints JSON. Needs the emulator's and serve's binary, pgbouncer and wrk.
#
#   swift build -c release && scripts/pg.sh run python3 scripts/pooler-bench.py .build/release/baton 500
import http.client, json, os, re, shutil, subprocess, sys, threading, time, uuid
baton, per_target = os.path.abspath(sys.argv[1]), int(sys.argv[2])
server = os.environ["BATON_TEST_DATABASE_URL"]
work = f"/tmp/poolbench-{uuid.uuid4().hex[:8]}"; os.makedirs(work)
procs = []
def start(args, marker):
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=open(f"{work}/{len(procs)}.log", "w"), text=True)
    procs.append(p)
    line = p.stdout.readline()
    return int(re.search(r":(\d+)", line.split(marker)[1]).group(1))
def post(port, path, body):
    c = http.client.HTTPConnection("127.0.0.1", port); c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse(); return json.loads(r.read() or b"{}")
def get(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port); c.request("GET", path); return json.loads(c.getresponse().read())
def psql(url, sql):
    return subprocess.run(["psql", "-X", "-qAt", "-v", "ON_ERROR_STOP=1", url], input=sql, check=True, capture_output=True, text=True).stdout.strip()
try:
    emu = start([baton, "emulator", "--port", "0", "--log-level", "warning"], "http://")
    cid = "com.example.app"
    sender = post(emu, "/emulator/teams", {}); recipient = post(emu, "/emulator/teams", {})
    post(emu, "/emulator/apps", {"client_id": cid, "team_id": sender["team_id"]})
    users = post(emu, "/emulator/users", {"client_id": cid, "count": 4 * per_target + 4, "private_email": True})["users"]
    post(emu, "/emulator/transfers", {"client_id": cid, "to_team_id": recipient["team_id"]})
    tids = get(emu, f"/emulator/transfer-identifiers?client_id={cid}")["transfer_subs"]
    post(emu, "/emulator/transfers/accept", {"client_id": cid})
    name = "poolbench_" + uuid.uuid4().hex[:8]
    psql(server, f"CREATE DATABASE {name}")
    url = f"{server}&dbname={name}"
    subprocess.run([baton, "db", "migrate", "--database-url", url], check=True, capture_output=True)
    subs = [u["user_identifier"] for u in users]
    psql(url, "CREATE TABLE public.users (id bigserial PRIMARY KEY, apple_sub text UNIQUE, email text); "
         f"INSERT INTO public.users (apple_sub, email) SELECT s, s || '@privaterelay.appleid.com' FROM unnest(ARRAY[{','.join(repr(s) for s in subs)}]) s; "
         f"INSERT INTO baton.transfers (old_sub, transfer_sub) SELECT * FROM unnest(ARRAY[{','.join(repr(k) for k in tids)}], ARRAY[{','.join(repr(v) for v in tids.values())}])")
    q = dict(p.split("=", 1) for p in server.split("?", 1)[1].split("&"))
    bouncers = {}
    for mode in ["transaction", "session"]:
        d = f"/tmp/poolbench-bouncer-{mode}-{uuid.uuid4().hex[:6]}"; os.makedirs(d)
        open(f"{d}/users.txt", "w").write('"postgres" ""\n')
        open(f"{d}/pgbouncer.ini", "w").write(f"""[databases]
* = host={q['host']} port={q['port']}
[pgbouncer]
listen_addr =
listen_port = 6432
unix_socket_dir = {d}
auth_type = trust
auth_file = {d}/users.txt
pool_mode = {mode}
default_pool_size = {4 if mode == 'transaction' else 40}
max_client_conn = 200
logfile = {d}/pgbouncer.log
pidfile = {d}/pgbouncer.pid
""")
        subprocess.run(["chown", "-R", "postgres:", d], check=True)
        subprocess.run(["runuser", "-u", "postgres", "--", "/usr/sbin/pgbouncer", "-d", f"{d}/pgbouncer.ini"], check=True)
        bouncers[mode] = d
    time.sleep(1)
    targets = {"direct": (url, "none"), "direct-as-transaction": (url, "transaction")}
    for mode, d in bouncers.items(): targets[f"pgbouncer-{mode}"] = (f"postgresql://postgres@/{name}?host={d}&port=6432", mode)
    ports = {}
    for i, (label, (durl, pooler)) in enumerate(targets.items()):
        cfg = {"listen": "127.0.0.1:0", "database": {"url": durl, "pooler": pooler, "pool_size": 8},
               "apple": {"base_url": f"http://127.0.0.1:{emu}", "client_ids": [cid]},
               "legacy": {"table": "public.users", "key_column": "id", "subject_column": "apple_sub", "email_column": "email"}}
        path = f"{work}/{label}.json"; json.dump(cfg, open(path, "w"))
        ports[label] = start([baton, "serve", "--config", path, "--log-level", "warning"], "http://")
    tokens = [post(emu, "/emulator/authorize", {"client_id": cid, "user": u["id"]})["id_token"] for u in users]
    def migrate(label, batch, threads=8):
        outcomes = []
        def worker(chunk):
            c = http.client.HTTPConnection("127.0.0.1", ports[label])
            for t in chunk:
                c.request("POST", "/v1/signin", json.dumps({"id_token": t}), {"Content-Type": "application/json"})
                r = c.getresponse(); outcomes.append((r.status, json.loads(r.read()).get("outcome")))
        ts = [threading.Thread(target=worker, args=(batch[i::threads],)) for i in range(threads)]
        start_t = time.monotonic(); [t.start() for t in ts]; [t.join() for t in ts]
        elapsed = time.monotonic() - start_t
        ok = sum(1 for s, o in outcomes if s == 200 and o == "migrated")
        return len(batch) / elapsed, ok
    results = {}
    labels = list(targets)
    for i, label in enumerate(labels):
        rate, ok = migrate(label, tokens[i * per_target:(i + 1) * per_target])
        results.setdefault(label, {})["migrating_per_s"] = round(rate, 1)
        results[label]["migrated_ok"] = ok
    # current sign-ins: wrk, one migrated user's token, twice per target, interleaved
    for round_ in range(2):
        for i, label in enumerate(labels):
            token = tokens[i * per_target]
            lua = f"{work}/post.lua"
            open(lua, "w").write('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\nwrk.body = \'' + json.dumps({"id_token": token}) + "'\n")
            out = subprocess.run(["wrk", "-t", "2", "-c", "8", "-d", "5s", "-s", lua, f"http://127.0.0.1:{ports[label]}/v1/signin"], capture_output=True, text=True).stdout
            rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
            non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
            results[label].setdefault("current_per_s", []).append(rps)
            results[label]["current_non_2xx"] = results[label].get("current_non_2xx", 0) + (int(non2xx.group(1)) if non2xx else 0)
    results["_check"] = {"migrated_events": psql(url, "SELECT count(*) FROM baton.events WHERE kind = 'migrated'"),
                         "distinct_old_subs": psql(url, "SELECT count(DISTINCT old_sub) FROM baton.events WHERE kind = 'migrated'")}
    print(json.dumps(results, indent=1))
finally:
    for p in procs: p.terminate()
    for p in procs: p.wait()
    for d in list(locals().get("bouncers", {}).values()):
        try: os.kill(int(open(f"{d}/pgbouncer.pid").read()), 15)
        except OSError: pass
        time.sleep(0.2)
        shutil.rmtree(d, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)
